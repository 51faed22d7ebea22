"""vLLM: `python -m vllm.entrypoints.openai.api_server`, its start-up log, /health,
/version and /metrics, and its Engram switch.

vLLM keeps DeepSeek-V4.1's Engram tables in pinned host memory and reads them ahead on a
side CUDA stream by default (``EngramConfig.cpu_offload = True``);
``--engram-config.cpu_offload false`` keeps them in HBM. It has no documented way to keep
them in host memory and read them synchronously, so the "host" placement is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.engram_setting import EngramSetting
from collectors.vllm import FLEET, PAGE_PREFIXES, SOURCE, SPEAKS, WORDS
from scenarios.engines.base import (
    Engine,
    EngineError,
    LogFollower,
    LogParser,
    Mark,
    Readiness,
    ScenarioSpec,
)

if TYPE_CHECKING:
    from collectors.promtext import Family
    from collectors.startup_facts import StartupFacts
    from collectors.vllm.collector import VllmCollector

# The placement -> the --engram-config flags of vLLM's DeepSeek-V4.1 code.
ENGRAM_ARGS: dict[str, tuple[str, ...]] = {
    "device": ("--engram-config.cpu_offload", "false"),
    "host-prefetch": (),  # vLLM's default
}
PLACEMENTS = tuple(ENGRAM_ARGS)
# No call home, no downloads: a node under test talks to no one (set unless the file does).
QUIET_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
# A model in a local folder needs no hub: nothing is fetched behind the user's back.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
OWN_POLLS = ('"GET /health HTTP', '"GET /metrics HTTP', '"GET /version HTTP',
             '"GET /v1/models HTTP')
FAILURE_MARKERS = ("Traceback", "Error:", "EngineCore failed", "out of memory")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~"))


class VllmSpeaker(Engine):
    """What every server speaking vLLM's log, HTTP and metrics dialect shares."""

    speaks = SPEAKS
    own_polls = OWN_POLLS
    page_prefixes = PAGE_PREFIXES
    words = WORDS
    fleet = FLEET
    error_markers = FAILURE_MARKERS
    # vLLM opens its port only once the engine is up, and its /health is 200 from then
    # on: ready is /health 200 and a first /metrics page with vLLM's families on it.
    readiness = Readiness(health_only_after_s=0.0, probe_after_s=5.0, log_decides=False,
                          confirm_path="/metrics", confirm_text="vllm:")

    reading_source = SOURCE

    def parser(self) -> LogParser:
        from collectors.vllm.startup_log import VllmLogParser
        return VllmLogParser()

    def follower(self) -> LogFollower:
        return LogFollower(self.parser(), ("http_running",), ("ready",))

    def collector(self, url: str, api_key: str | None = None,
                  auth: tuple[str, str] | None = None) -> VllmCollector:
        from collectors.vllm.collector import VllmCollector
        return VllmCollector(url, api_key=api_key, auth=auth)

    def page_limit(self, path: str) -> int:
        from collectors.vllm.collector import PAGE_LIMITS
        return PAGE_LIMITS.get(path, super().page_limit(path))

    def mark_figures(self, families: dict[str, Family]) -> Mark:
        from collectors.vllm import collector as v
        fams = v.canonical(families)
        queue = v.find(fams, v.HISTOGRAMS["queue_time"])
        h = v.merged_histogram(queue) if queue is not None and queue.type == "histogram" else None
        return Mark.of(h, v.counter_figure(v.find(fams, v.COUNTERS["retracted"])))

    def inspect_metrics(self, text: str) -> dict[str, object]:
        from collectors import page_kind
        from collectors.sglang import PAGE_PREFIXES as SGLANG_PREFIXES
        from collectors.vllm import PAGE_PREFIXES as VLLM_PREFIXES
        from collectors.vllm import collector as v
        from collectors.windowed import bucket_bounds, quantile_bound
        families, skipped = self.read_page(text)
        fams = v.canonical(families)
        if not v.is_vllm_page(fams):  # another part of the stack: what it is, with figures
            kind = page_kind.of_families(fams, (("vllm", VLLM_PREFIXES),
                                                ("sglang", SGLANG_PREFIXES)))
            return self.other_page(kind, "vllm", skipped, {
                "sglang": "an SGLang server's page: read it with --engine sglang"})
        figures = v.page_figures(fams)
        histograms: dict[str, dict[str, object]] = {}  # filled below, in out
        out: dict[str, object] = {
            "page": "vllm", "families": len(fams),
            "vllm_families": sorted(n for n in fams if n.startswith("vllm:")),
            "gauges": {k: figures[k] for k in v.GAUGES if figures[k] is not None},
            "capacity_tokens": figures["max_total_num_tokens"],
            "kv_cache_gb": figures["kv_cache_gb"],
            "cache_config": figures["extra"].get("cache_config", {}),
            "not_reported": v.NOT_REPORTED,
            "counters": {names[0]: v.counter_figure(v.find(fams, names))
                         for names in v.COUNTERS.values() if v.find(fams, names)},
            # Since the server started (a single page has no window): the prefix cache's
            # hit rate over every token looked up, the tokens it served, aborted requests.
            "since_start": {k: figures[k] for k in (
                "cache_hit_rate_since_start", "cached_tokens_total", "aborted_requests_total")
                if figures[k] is not None},
            "histograms": histograms, "unavailable": figures["unavailable"],
            "page_problems": skipped + list(figures["page_problems"]),
        }
        if lmcache := page_kind.lmcache_figures(fams):  # LMCache's tier, on vLLM's page
            out["lmcache"] = lmcache
        for key, names in v.HISTOGRAMS.items():
            fam = v.find(fams, names)
            if fam is None or fam.type != "histogram":
                continue
            h = v.merged_histogram(fam)
            p50, p99 = quantile_bound(0.5, h.buckets), quantile_bound(0.99, h.buckets)
            histograms[key] = {
                "family": fam.name, "count": h.count, "sum": h.sum,
                "mean": h.sum / h.count if h.count else None, "p50": p50.value,
                "p99": p99.value, "p50_bucket": bucket_bounds(p50),
                "p99_bucket": bucket_bounds(p99), "p50_coarse": p50.coarse,
                "p99_coarse": p99.coarse}
        return out

    def engram(self, sc: ScenarioSpec | None, *, env: Mapping[str, str],
               args: Mapping[str, Any], startup: StartupFacts,
               gpu_name: str | None) -> EngramSetting | None:
        """Device when the tables were kept on the GPU (cpu_offload false); host with its
        side-stream prefetch when the log says they were offloaded, or when an Engram model
        runs with vLLM's default; nothing for a model without Engram layers."""
        offload = engram_offload(self.argv(sc, None, None) if sc is not None else (), args)
        logged = startup.engram_config
        if logged.get("placement") == "cpu":
            layout = "shared" if logged.get("replication") == "shared" else "private"
            return EngramSetting("host-prefetch", layout, True, "log",
                                 "engaged (vLLM's side-stream prefetch)")
        if offload is False:
            return EngramSetting("device", None, None, "engram-config", "n/a")
        placement = sc.placement if sc is not None else None
        if offload is True or placement == "host-prefetch":
            return EngramSetting("host-prefetch", None, True,
                                 "engram-config" if offload else "scenario",
                                 "asked, not yet confirmed: the log's offload line unknown")
        return EngramSetting(None, None, None, "nothing", "n/a")


def engram_offload(argv: tuple[str, ...] | list[str], args: Mapping[str, Any]) -> bool | None:
    """What cpu_offload a launch asks for: the dotted flag, the JSON flag, or the log's
    non-default args; None when none says."""
    value: object = None
    items = list(argv)
    for i, item in enumerate(items):
        key, eq, inline = item.partition("=")
        nxt = inline if eq else (items[i + 1] if i + 1 < len(items) else "")
        if key == "--engram-config.cpu_offload":
            value = nxt
        elif key == "--engram-config":
            try:
                parsed = json.loads(nxt)
            except ValueError:
                continue
            if isinstance(parsed, dict) and "cpu_offload" in parsed:
                value = parsed["cpu_offload"]
    config = args.get("engram_config")
    if value is None and isinstance(config, Mapping):
        value = config.get("cpu_offload")
    if isinstance(value, bool) or value is None:
        return value
    text = str(value).strip().lower()
    return True if text in ("1", "true", "yes") else False if text in ("0", "false", "no") \
        else None


class Vllm(VllmSpeaker):
    kind = "vllm"
    label = "vLLM"
    article = "a"
    required = ("python", "model_path")
    key_in_env = True  # VLLM_API_KEY: in the process's environment, not on `ps`

    def problems(self, m: dict[str, Any]) -> list[tuple[str, str]]:
        if m.get("placement") == "host":
            return [("placement", "vLLM has no host placement without prefetch: its host "
                                  "placement reads ahead on a side stream (host-prefetch); "
                                  "use host-prefetch or device")]
        if m.get("engram_interface") not in (None, "none", "config"):
            return [("engram_interface", "vLLM takes its Engram switch as --engram-config: "
                                         "use config (or none)")]
        return []

    def argv(self, sc: ScenarioSpec, key_file: Path | None, node_dir: Path | None) -> list[str]:
        assert sc.python and sc.model_path
        argv = [sc.python, "-m", "vllm.entrypoints.openai.api_server", "--model",
                sc.model_path, "--host", sc.host, "--port", str(sc.port)]
        if sc.tp != 1:
            argv += ["--tensor-parallel-size", str(sc.tp)]
        if sc.engram_interface == "config":
            argv += ENGRAM_ARGS.get(sc.placement or "", ())
        return [*argv, *sc.args]

    def launch_env(self, sc: ScenarioSpec) -> dict[str, str]:
        env = dict(QUIET_ENV)
        if sc.model_path and _looks_local(sc.model_path):
            env.update(OFFLINE_ENV)
        if sc.host in LOOPBACK:
            # Else its engine's message queue binds the machine's own non-loopback address.
            env["VLLM_HOST_IP"] = "127.0.0.1"
        if sc.api_key:
            env["VLLM_API_KEY"] = sc.api_key
        env.update(sc.env)
        return env

    def scratch_env(self, folder: Path) -> dict[str, str]:
        # Its IPC sockets, the vllm_dist_* rendezvous file and torch's inductor files go to
        # the temporary folder, and a stop leaves them: one folder a run, removed after it.
        return {"TMPDIR": str(folder)}

    def check(self, sc: ScenarioSpec) -> None:
        assert sc.python and sc.model_path
        if not Path(sc.python).exists():
            raise EngineError(f"{sc.source}: python '{sc.python}' does not exist: set it to "
                              "your vLLM environment's interpreter")
        if _looks_local(sc.model_path) and not Path(sc.model_path).exists():
            raise EngineError(f"{sc.source}: model_path '{sc.model_path}' does not exist")


ENGINE = Vllm()
__all__ = ["ENGINE", "PLACEMENTS", "Vllm", "VllmSpeaker", "engram_offload"]
