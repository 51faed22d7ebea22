"""SGLang: `python -m sglang.launch_server`, its start-up log, /health, /server_info and
/metrics, and the Engram switches of its DeepSeek-V4.1 code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collectors import promtext
from collectors.log_markers import FAILURE_MARKERS
from collectors.sglang import FLEET, PAGE_PREFIXES, WORDS, hicache_metrics
from collectors.sglang.collector import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    PAGE_LIMITS,
    SglangCollector,
    canonical,
    counter_figure,
    find,
    merged_histogram,
    page_figures,
)
from collectors.startup_facts import StartupFacts
from collectors.windowed import bucket_bounds, quantile_bound
from scenarios.engines import engram
from scenarios.engines.base import (
    PLACEMENTS,
    Engine,
    EngineError,
    LogParser,
    Mark,
    ScenarioSpec,
    ServerCollector,
)

# The Engram switches of SGLang's DeepSeek-V4.1 code (its environ.py and --engram-config).
ENGRAM_ENV: dict[str, dict[str, str]] = {
    "device": {"SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "0"},
    "host": {"SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "1",
             "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT": "shared",
             "SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN": "1"},
    "host-prefetch": {"SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "1",
                      "SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT": "shared",
                      "SGLANG_DSV41_ENGRAM_HOST_TABLE_PIN": "1",
                      "SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH": "1"},
}
# The --engram-config JSON of later builds. Its documented keys cover placement only; a
# prefetch switch is not documented there, so host-prefetch keeps the env switch as well.
ENGRAM_CONFIG: dict[str, dict[str, str]] = {
    "device": {"placement": "gpu"},
    "host": {"placement": "cpu", "replication": "per_node"},
    "host-prefetch": {"placement": "cpu", "replication": "per_node"},
}
# uvicorn's access lines for the dashboard's own requests.
OWN_POLLS = ('"GET /health HTTP', '"GET /metrics HTTP', '"GET /server_info HTTP',
             '"GET /get_server_info HTTP')


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~"))


class SGLangSpeaker(Engine):
    """What every server that speaks SGLang's log, HTTP and metrics dialect shares."""

    own_polls = OWN_POLLS
    error_markers = FAILURE_MARKERS  # the same words the log pane marks
    page_prefixes = PAGE_PREFIXES
    env_prefixes = ("SGLANG_",)
    reading_source = SglangCollector.SOURCE
    words = WORDS
    fleet = FLEET

    def parser(self) -> LogParser:
        # Loaded with the first log to read: attach without a log never needs it.
        from collectors.sglang.startup_log import StartupLogParser
        return StartupLogParser()

    def collector(self, url: str, api_key: str | None = None,
                  auth: tuple[str, str] | None = None) -> ServerCollector:
        return SglangCollector(url, api_key=api_key, auth=auth)

    def page_limit(self, path: str) -> int:
        return PAGE_LIMITS.get(path, super().page_limit(path))

    def mark_figures(self, families: dict[str, promtext.Family]) -> Mark:
        fams = canonical(families)
        queue = find(fams, HISTOGRAMS["queue_time"])
        h = merged_histogram(queue) if queue is not None and queue.type == "histogram" else None
        return Mark.of(h, counter_figure(find(fams, COUNTERS["retracted"])))

    def inspect_metrics(self, text: str) -> dict[str, object]:
        from collectors import page_kind  # a command's, not a dashboard's
        families, skipped = self.read_page(text)
        fams = canonical(families)
        from collectors import vllm  # its names, to say a page is vLLM's
        kind = page_kind.of_families(fams, ((self.kind, PAGE_PREFIXES),
                                            ("vllm", vllm.PAGE_PREFIXES)))
        if kind.kind != "sglang":  # another exporter's page: what it is, not a list of nulls
            return self.other_page(kind, "sglang", skipped, {
                "vllm": "a vLLM server's page: read it with --engine vllm"})
        figures = page_figures(fams)
        histograms: dict[str, dict[str, object]] = {}  # filled below, in out
        out: dict[str, object] = {
            "page": "sglang",
            "families": len(fams),
            "sglang_families": sorted(n for n in fams if n.startswith("sglang:")),
            "gauges": {k: figures[k] for k in GAUGES if figures[k] is not None},
            "missing": sorted(k for k in GAUGES if figures[k] is None
                              and k not in figures["unavailable"]),
            "unavailable": figures["unavailable"],
            "constants": {k: figures[k] for k in ("weight_gb", "kv_cache_gb",
                                                   "max_total_num_tokens") if k in figures},
            "ranks": figures["ranks"],
            "counters": {names[0]: counter_figure(find(fams, names))
                         for names in COUNTERS.values() if find(fams, names) is not None},
            # Since the server started (counters): cached prompt tokens (by cache_source),
            # aborted requests, and the cached share of prompt tokens (a hit rate since the
            # start, not the window's).
            "since_start": {k: figures[k] for k in (
                "cached_tokens_total", "cached_tokens_by_source", "aborted_requests_total",
                "cache_hit_rate_since_start", "transfer_failed_total")
                if figures[k] not in (None, {})},
            # HiCache's counters since the server started: bytes loaded back (host -> GPU)
            # and backed up, tokens dropped for host pressure and evicted; the page's
            # load-back per tp_rank where it labels it so. Absent: not on this page.
            "hicache": {k: v for k, v in hicache_metrics.totals(fams).items() if v is not None},
            "hicache_load_back_bytes_by_rank": hicache_metrics.by_rank(fams),
            # Since the server started (a single page has no window).
            "histograms": histograms,
            "page_problems": skipped + list(figures["page_problems"]),
        }
        for key, names in HISTOGRAMS.items():
            fam = find(fams, names)
            if fam is None or fam.type != "histogram":
                continue
            h = merged_histogram(fam)
            p50, p99 = quantile_bound(0.5, h.buckets), quantile_bound(0.99, h.buckets)
            histograms[key] = {
                "family": fam.name, "count": h.count, "sum": h.sum,
                "mean": h.sum / h.count if h.count else None,
                "p50": p50.value, "p99": p99.value,
                # A quantile in the +Inf bucket is only known to exceed its highest bound.
                "p50_is_lower_bound": p50.over, "p99_is_lower_bound": p99.over,
                # The bucket each lies in ([lower, upper], upper null for +Inf), and whether
                # it is too wide for the interpolated figure to be a measurement.
                "p50_bucket": bucket_bounds(p50), "p99_bucket": bucket_bounds(p99),
                "p50_coarse": p50.coarse, "p99_coarse": p99.coarse}
        return out

    def engram(self, sc: ScenarioSpec | None, *, env: Mapping[str, str],
               args: Mapping[str, Any], startup: StartupFacts,
               gpu_name: str | None) -> engram.EngramSetting | None:
        # What the scenario launches with first; what the server itself says wins.
        launch_env: dict[str, str] = {}
        launch_args: dict[str, Any] = {}
        placement = None
        if sc is not None:
            launch_env = self.launch_env(sc)
            launch_args = engram.argv_args(sc.args)
            if sc.engram_interface == "config" and sc.placement in ENGRAM_CONFIG:
                launch_args.setdefault("engram_config", ENGRAM_CONFIG[sc.placement])
            placement = sc.placement if sc.placement in PLACEMENTS else None
        return engram.infer({**launch_env, **env}, {**launch_args, **args}, startup,
                            placement=placement, gpu_name=gpu_name)


class SGLang(SGLangSpeaker):
    kind = "sglang"
    label = "SGLang"
    article = "an"
    required = ("python", "model_path")

    def argv(self, sc: ScenarioSpec, key_file: Path | None, node_dir: Path | None) -> list[str]:
        assert sc.python and sc.model_path
        argv = [sc.python, "-m", "sglang.launch_server", "--model-path", sc.model_path,
                "--host", sc.host, "--port", str(sc.port), "--tp-size", str(sc.tp)]
        if "--enable-metrics" not in sc.args:
            argv.append("--enable-metrics")  # the dashboard reads /metrics: always on
        if sc.engram_interface == "config" and sc.placement in ENGRAM_CONFIG:
            argv += ["--engram-config", json.dumps(ENGRAM_CONFIG[sc.placement])]
        if sc.api_key:
            argv += (["--config", str(key_file)] if key_file is not None
                     else ["--api-key", sc.api_key])
        return [*argv, *sc.args]

    def launch_env(self, sc: ScenarioSpec) -> dict[str, str]:
        env: dict[str, str] = {}
        if sc.engram_interface == "env" and sc.placement in ENGRAM_ENV:
            env.update(ENGRAM_ENV[sc.placement])
        if sc.engram_interface == "config" and sc.placement == "host-prefetch":
            env["SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH"] = "1"
        env.update(sc.env)
        return env

    def key_file_text(self, sc: ScenarioSpec) -> str | None:
        # SGLang reads the key from a --config YAML file (since 0.5), unless the scenario's
        # own args already give one: then the key can only go on the argv.
        if not sc.api_key or "--config" in sc.args:
            return None
        return f"api-key: {json.dumps(sc.api_key)}\n"  # a JSON string is a YAML string

    def check(self, sc: ScenarioSpec) -> None:
        assert sc.python and sc.model_path
        if not Path(sc.python).exists():
            raise EngineError(f"{sc.source}: python '{sc.python}' does not exist: set it to "
                              "your SGLang environment's interpreter")
        if _looks_local(sc.model_path) and not Path(sc.model_path).exists():
            raise EngineError(f"{sc.source}: model_path '{sc.model_path}' does not exist")


ENGINE = SGLang()
__all__ = ["ENGINE", "PLACEMENTS", "SGLang", "SGLangSpeaker"]
