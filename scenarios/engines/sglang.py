"""SGLang: `python -m sglang.launch_server`, its start-up log, /health, /server_info and
/metrics, and the Engram switches of its DeepSeek-V4.1 code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from collectors import promtext
from collectors.log_markers import FAILURE_MARKERS
from collectors.sglang import (
    GAUGES,
    HISTOGRAMS,
    PAGE_LIMITS,
    SglangCollector,
    finite_gauge,
    merged_histogram,
    rank_constants,
)
from collectors.startup_log import StartupLogParser
from collectors.windowed import histogram_quantile
from scenarios.engines.base import PLACEMENTS, Engine, EngineError, LogParser, ServerCollector

if TYPE_CHECKING:
    from scenarios.config import Scenario

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

    def parser(self) -> LogParser:
        return StartupLogParser()

    def collector(self, url: str, api_key: str | None = None,
                  auth: tuple[str, str] | None = None) -> ServerCollector:
        return SglangCollector(url, api_key=api_key, auth=auth)

    def page_limit(self, path: str) -> int:
        return PAGE_LIMITS.get(path, super().page_limit(path))

    def inspect_metrics(self, text: str) -> dict[str, object]:
        fams = promtext.parse(text)  # PromTextError (a ValueError): the caller says it
        out: dict[str, object] = {
            "families": len(fams),
            "sglang_families": sorted(n for n in fams if n.startswith("sglang:")),
            "gauges": {k: finite_gauge(fams, name)[0] for k, name in GAUGES.items()},
            "unavailable": {k: why for k, name in GAUGES.items()
                            if (why := finite_gauge(fams, name)[1])},
            "ranks": rank_constants(fams),
            "counters": {name: promtext.counter_total(fams, name) for name in
                         ("sglang:prompt_tokens_total", "sglang:generation_tokens_total",
                          "sglang:num_requests_total")},
            # Since the server started (a single page has no window).
            "histograms": {},
        }
        for key, name in HISTOGRAMS.items():
            fam = fams.get(name)
            if fam is None:
                continue
            h = merged_histogram(fam)
            out["histograms"][key] = {  # type: ignore[index]
                "count": h.count, "sum": h.sum,
                "mean": h.sum / h.count if h.count else None,
                "p50": histogram_quantile(0.5, h.buckets),
                "p99": histogram_quantile(0.99, h.buckets)}
        return out


class SGLang(SGLangSpeaker):
    kind = "sglang"
    label = "SGLang"
    article = "an"
    required = ("python", "model_path")

    def argv(self, sc: Scenario, key_file: Path | None, node_dir: Path | None) -> list[str]:
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

    def launch_env(self, sc: Scenario) -> dict[str, str]:
        env: dict[str, str] = {}
        if sc.engram_interface == "env" and sc.placement in ENGRAM_ENV:
            env.update(ENGRAM_ENV[sc.placement])
        if sc.engram_interface == "config" and sc.placement == "host-prefetch":
            env["SGLANG_ENABLE_DSV41_ENGRAM_KV_PREFETCH"] = "1"
        env.update(sc.env)
        return env

    def key_file_text(self, sc: Scenario) -> str | None:
        # SGLang reads the key from a --config YAML file (since 0.5), unless the scenario's
        # own args already give one: then the key can only go on the argv.
        if not sc.api_key or "--config" in sc.args:
            return None
        return f"api-key: {json.dumps(sc.api_key)}\n"  # a JSON string is a YAML string

    def check(self, sc: Scenario) -> None:
        assert sc.python and sc.model_path
        if not Path(sc.python).exists():
            raise EngineError(f"{sc.source}: python '{sc.python}' does not exist: set it to "
                              "your SGLang environment's interpreter")
        if _looks_local(sc.model_path) and not Path(sc.model_path).exists():
            raise EngineError(f"{sc.source}: model_path '{sc.model_path}' does not exist")


ENGINE = SGLang()
__all__ = ["ENGINE", "PLACEMENTS", "SGLang", "SGLangSpeaker"]
