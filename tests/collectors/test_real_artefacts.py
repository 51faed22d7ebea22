"""The parsers against the real SGLang 0.5.23 artefacts of tests/data/sglang-cpu/ (captured on
this CPU; see its README.md for how, and for the facts asserted here)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors import promread, promtext
from collectors.readings import ServerData
from collectors.sglang.collector import (
    HISTOGRAMS,
    memory_gb,
    merged_histogram,
    rank_constants,
    server_info_fields,
)
from collectors.sglang.startup_log import StartupLogParser
from collectors.startup_facts import STOPPED, StartupFacts

DATA = Path(__file__).parents[1] / "data" / "sglang-cpu"


def _ts(hms: str) -> float:
    """A prefix timestamp of the captured run as the parser reads it (UTC seconds)."""
    return datetime.strptime(f"2026-11-29 {hms}", "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=UTC).timestamp()


def _positive_zero(x: float | None) -> bool:
    return x == 0.0 and math.copysign(1.0, x) == 1.0


@pytest.fixture(scope="module")
def startup_text() -> str:
    return (DATA / "startup.log").read_text()


@pytest.fixture(scope="module")
def shutdown_text() -> str:
    return (DATA / "shutdown.log").read_text()


@pytest.fixture(scope="module")
def metrics_text() -> str:
    return (DATA / "metrics.txt").read_text()


def _parse(text: str) -> tuple[StartupFacts, list[str]]:
    parser = StartupLogParser()
    events = parser.feed_text(text)
    return parser.facts(), events


# --------------------------------------------------------------------------- startup.log


def test_startup_log_rank_facts(startup_text: str) -> None:
    f, _ = _parse(startup_text)
    assert list(f.ranks) == [0]
    r = f.ranks[0]
    # "Init parallel begin." / "Init parallel ends. elapsed=0.02 s" (no mem usage= any more).
    assert r.dist_init_elapsed_s == 0.02 and r.dist_init_mem_usage_gb is None
    assert _positive_zero(r.memory_baseline_gb)  # "Memory baseline taken. mem usage=0.00 GB"
    # "Load weight end. elapsed=0.01 s, type=LlamaForCausalLM, avail mem=21.71 GB,
    # mem usage=-0.00 GB.": no dtype= key, and the negative zero read as 0.0.
    assert r.weights_type == "LlamaForCausalLM"
    assert (r.weights_dtype, r.weights_quant) == (None, None)
    assert r.weights_elapsed_s == 0.01
    assert r.weights_begin_avail_gb == 21.71 and r.weights_avail_gb == 21.71
    assert _positive_zero(r.weights_gb) and _positive_zero(r.all_weights_gb)
    assert _positive_zero(r.weight_loads[0].mem_usage_gb)
    # "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 8192, K size: 0.00 GB, ..."
    assert r.kv_tokens == 8192
    assert r.kv_dtype == "torch.bfloat16"
    assert [p.dtype for p in r.kv_pools] == ["torch.bfloat16"]
    assert (r.k_size_gb, r.v_size_gb, r.kv_size_gb, r.kv_total_gb) == (0.0, 0.0, None, 0.0)
    assert r.pool_end_avail_gb == 21.70
    # CPU: no CUDA graphs ("Disable prefill CUDA graph because ..." is not a capture).
    assert r.graph_captures == () and r.graph_mem_usage_gb is None


def test_startup_log_summary_timings_http(startup_text: str) -> None:
    f, _ = _parse(startup_text)
    assert f.max_total_num_tokens == 8192
    assert f.chunked_prefill_size == 4096
    assert f.max_prefill_tokens == 16384
    assert f.max_running_requests == 2048
    assert f.context_len == 2048
    # "available_cpu_mem=21.70 GB": a number with its device kind, not an "extra" string.
    assert f.available_mem_gb == 21.70 and f.available_mem_device == "cpu"
    assert f.available_gpu_mem_gb is None
    assert f.scheduler_extra == {}
    assert f.startup_timings_s == {
        "load_weight": 0.01,
        "kv_cache_allocation": 0.31,
        "scheduler_e2e": 1.27,
        "cuda_graph.prefill": 0.0,
        "cuda_graph.decode": 0.0,
        "cuda_graph.target_verify": 0.0,
        "cuda_graph.draft_prefill": 0.0,
        "cuda_graph.draft_decode": 0.0,
        "cuda_graph.draft_extend": 0.0,
        "tokenizer_e2e": 8.73,
    }
    assert f.uvicorn_pid == 21120
    assert f.uvicorn_url == "http://127.0.0.1:31234"


def test_startup_log_timeline_and_outcome(startup_text: str) -> None:
    f, events = _parse(startup_text)
    assert f.lines_seen == 92
    # The first 7 lines are Python warnings without a timestamp: launch_at is the first
    # stamped line (19:49:38), and the warnings are neither errors nor anything else.
    assert f.launch_at == _ts("19:49:38")
    assert f.ready is True and f.ready_at == _ts("19:49:50")
    assert f.errors == () and f.failed_at is None and f.failed_in is None
    assert "error" not in events and "failed" not in events
    assert f.current_phase() == "ready"
    assert (f.stopping_at, f.stopped_at) == (None, None)
    assert [s.phase for s in f.timeline] == [
        "launching", "distributed_init", "weights", "kv_pool", "http", "warmup", "ready",
    ]
    assert f.phase_durations() == {
        "launching": 9.0,  # 19:49:38 -> "Init parallel begin." at 19:49:47
        "distributed_init": 0.0,
        "weights": 0.0,
        "kv_pool": 0.0,
        "http": 0.0,
        "warmup": 1.0,
        "total": 12.0,
    }
    for name in ("launch", "distributed_init_begin", "distributed_init_end", "memory_baseline",
                 "weights_begin", "weights_end", "kv_allocated", "kv_pool_end",
                 "scheduler_summary", "startup_timings", "http_started", "http_running",
                 "ready"):
        assert events.count(name) == 1, name
    assert [e for e in events if e.startswith("phase:")] == [
        "phase:distributed_init", "phase:weights", "phase:kv_pool", "phase:http",
        "phase:warmup", "phase:ready",
    ]
    # Latest batch lines (0.5.23: "cpu graph: False", a new "#pending-token" field).
    p, d = f.prefill, f.decode
    assert p is not None and d is not None
    assert (p.new_seqs, p.new_tokens, p.cached_tokens, p.running_reqs) == (1, 8, 0, 0)
    assert (p.input_throughput, p.graph) == (43.94, False)
    assert (d.running_reqs, d.num_tokens, d.gen_throughput, d.graph) == (1, 39, 253.21, False)
    json.dumps(f.to_dict())


def test_startup_log_with_at_never_mixes_clocks(startup_text: str) -> None:
    parser = StartupLogParser()
    lines = startup_text.splitlines()
    for i, line in enumerate(lines):
        parser.feed(line, at=1000.0 + i)
    f = parser.facts()
    assert f.launch_at == 1000.0  # the first line (a warning) has an `at`: it is the launch
    ready_line = next(i for i, line in enumerate(lines) if "ready to roll" in line)
    assert f.ready_at == 1000.0 + ready_line
    times = [f.launch_at, f.ready_at, f.last_line_at]
    times += [t for span in f.timeline for t in (span.start, span.end) if t is not None]
    assert all(1000.0 <= t < 1000.0 + len(lines) for t in times)  # no prefix time crept in
    assert f.phase_durations()["total"] == ready_line


# --------------------------------------------------------------------------- shutdown.log


def test_startup_then_shutdown(startup_text: str, shutdown_text: str) -> None:
    parser = StartupLogParser()
    parser.feed_text(startup_text)
    before = parser.facts().phase_durations()
    events = parser.feed_text(shutdown_text)
    f = parser.facts()
    assert events == ["stopping", "phase:stopping", "stopped", "phase:stopped"]
    assert f.stopping_at == _ts("19:50:06")  # "SIGTERM received. ... Draining requests"
    assert f.stopped_at == _ts("19:50:11")  # uvicorn's "Finished server process [21120]"
    assert f.current_phase() == STOPPED
    assert f.ready is True and f.ready_at == _ts("19:49:50")
    assert f.errors == () and f.failed_at is None  # nanobind's leak report is no error
    assert f.uvicorn_pid == 21120
    assert f.phase_durations() == before  # the stop is not a startup phase
    assert f.lines_seen == 92 + len(shutdown_text.splitlines())
    json.dumps(f.to_dict())


def test_shutdown_log_alone(shutdown_text: str) -> None:
    # A teardown after a server ran is no launch: the log began after its server's launch.
    f, events = _parse(shutdown_text)
    assert f.log_starts_after_launch is True and f.launch_at is None
    assert f.launches == 1 and "relaunch" not in events
    assert f.stopping_at == _ts("19:50:06")
    assert f.stopped_at == _ts("19:50:11")
    assert f.current_phase() == STOPPED and f.ready is False
    assert f.errors == () and f.failed_at is None
    assert "error" not in events


def test_glued_line_of_shutdown_log(shutdown_text: str) -> None:
    (glued,) = [line for line in shutdown_text.splitlines()
                if "refleaks.html[2026-11-29 19:50:11] kill_process_tree" in line]
    parser = StartupLogParser()
    parser.feed("[2026-11-29 19:50:06] SIGTERM received. signum=None frame=None.")
    assert parser.feed(glued) == []
    # The same glue in front of a line the parser does read: read from the glued prefix on.
    head = glued[: glued.index("[2026")]
    assert parser.feed(head + "[2026-11-29 19:50:12] INFO:     Finished server process [7]") == [
        "stopped", "phase:stopped",
    ]
    f = parser.facts()
    assert f.stopped_at == _ts("19:50:12") and f.errors == ()


# --------------------------------------------------------------------------- metrics.txt


def test_metrics_families_and_constants(metrics_text: str) -> None:
    fams = promtext.parse(metrics_text)  # raises PromTextError on any line it cannot read
    assert len(fams) == 83
    assert all(name.startswith("sglang:") for name in fams)
    assert {fam.type for fam in fams.values()} == {"counter", "gauge", "histogram"}
    assert sum(len(fam.samples) for fam in fams.values()) == 569
    ranks = rank_constants(fams)
    assert list(ranks) == [0]
    assert ranks[0]["max_total_num_tokens"] == 8192
    assert ranks[0]["kv_cache_gb"] == 0.003906726837158203
    # The page says -0.00229644775390625 (host RAM delta); memory figures clamp at 0.0.
    assert promread.gauge(fams, "sglang:weight_memory_usage_gb") == -0.00229644775390625
    assert _positive_zero(ranks[0]["weight_gb"])
    assert promread.gauge(fams, "sglang:max_total_num_tokens", tp_rank=0) == 8192
    assert promread.gauge(fams, "sglang:startup_available_gpu_memory_gb") == 21.70186996459961
    assert promread.gauge(fams, "sglang:startup_time_seconds",
                          phase="tokenizer_e2e") == 8.727876483000273


def test_metrics_counters(metrics_text: str) -> None:
    fams = promtext.parse(metrics_text)
    # Summed over is_streaming (false/true); the /health probes do not count as requests.
    assert promread.counter_total(fams, "sglang:prompt_tokens_total") == 83
    assert promread.counter_total(fams, "sglang:generation_tokens_total") == 191
    assert promread.counter_total(fams, "sglang:num_requests_total") == 10
    assert fams["sglang:num_requests_total"].type == "counter"


def test_metrics_histograms(metrics_text: str) -> None:
    fams = promtext.parse(metrics_text)
    names = {key: names[0] for key, names in HISTOGRAMS.items() if names[0] in fams}
    counts = {key: merged_histogram(fams[name]).count for key, name in names.items()}
    assert counts == {"ttft": 10, "itl": 149, "e2e": 10, "queue_time": 11}
    for name in names.values():
        fam = fams[name]
        series = promtext.histogram_series(fam)
        merged = merged_histogram(fam)
        bounds = [b for b, _ in merged.buckets]
        cumulative = [c for _, c in merged.buckets]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf
        assert cumulative == sorted(cumulative) and cumulative[-1] == merged.count
        assert merged.count == sum(h.count for h in series.values())
        sums = [s.value for s in fam.samples if s.name == name + "_sum"]
        assert merged.sum == pytest.approx(sum(sums))
    # TTFT and e2e have one series per is_streaming value; ITL only the streaming one.
    assert len(promtext.histogram_series(fams[names["ttft"]])) == 2
    assert len(promtext.histogram_series(fams[names["itl"]])) == 1


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_metrics_match_prometheus_client(metrics_text: str) -> None:
    ours = promtext.parse(metrics_text)
    theirs = list(text_string_to_metric_families(metrics_text))
    assert len(theirs) == len(ours)
    our_samples = [(fam.type, s.name, dict(s.labels), s.value, s.timestamp_ms)
                   for fam in ours.values() for s in fam.samples]
    their_samples = [(fam.type, s.name, s.labels, s.value, s.timestamp)
                     for fam in theirs for s in fam.samples]
    assert len(our_samples) == len(their_samples) == 569
    for mine, ref in zip(our_samples, their_samples, strict=True):
        assert mine[:3] == ref[:3], (mine, ref)
        assert _same(mine[3], ref[3]), (mine, ref)
        assert mine[4] is None and ref[4] is None
    # One NaN on the page (sglang:fwd_occupancy), the same in both.
    assert sum(math.isnan(s[3]) for s in our_samples) == 1


# --------------------------------------------------------------------------- server_info.json


def test_server_info_fields_on_the_real_body() -> None:
    info = json.loads((DATA / "server_info.json").read_text())
    usage = info["internal_states"][0]["memory_usage"]
    assert isinstance(usage["graph"], dict) and usage["weight"] == -0.002  # the raw body
    fields = server_info_fields(info)
    assert fields["version"] == "0.5.23"
    assert fields["model_path"] == "/tmp/tiny"
    assert fields["tp_size"] == 1
    assert fields["max_total_num_tokens"] == 8192
    assert isinstance(fields["graph_gb"], float) and _positive_zero(fields["graph_gb"])
    assert _positive_zero(fields["weight_gb"])  # -0.002 clamped
    assert fields["kv_cache_gb"] == 0.004
    # The server args a placement reading needs, never a key.
    args = fields["server_args"]
    assert args["attention_backend"] == "torch_native" and args["tp_size"] == 1
    assert (args["enable_dp_attention"], args["dp_size"]) == (False, 1)
    assert not any("key" in name for name in args)
    assert "api_key" not in json.dumps(fields)
    data = ServerData(url="http://127.0.0.1:31234", healthy=True, **fields)
    for name in ("weight_gb", "kv_cache_gb", "graph_gb"):
        assert isinstance(getattr(data, name), float)


def test_memory_gb_shapes() -> None:
    assert memory_gb({"prefill": 0.25, "decode": 1.0, "note": "x", "bad": None}) == 1.25
    assert memory_gb({}) is None and memory_gb({"a": "1.0"}) is None
    assert memory_gb({"nested": {"a": 1.0}}) is None
    assert memory_gb(-0.0023) == 0.0 and _positive_zero(memory_gb(-0.0))
    assert memory_gb(3) == 3.0 and isinstance(memory_gb(3), float)
    for bad in (None, True, "1.5", [1.0], math.nan, math.inf):
        assert memory_gb(bad) is None
    broken = server_info_fields({"internal_states": [{"memory_usage": {
        "weight": "lots", "kvcache": [1], "graph": {"decode": "?"}}}], "tp_size": "4",
        "max_total_num_tokens": 8192.0, "version": 5})
    assert broken["weight_gb"] is None and broken["kv_cache_gb"] is None
    assert broken["graph_gb"] is None and broken["tp_size"] is None
    assert broken["max_total_num_tokens"] == 8192 and broken["version"] is None
    for odd in ({}, {"internal_states": None}, {"internal_states": []},
                {"internal_states": ["x"]}, {"internal_states": [{"memory_usage": 3}]}):
        out = server_info_fields(odd)
        assert out["weight_gb"] is None and out["graph_gb"] is None
