"""StartupLogParser on the forms of SGLang 0.5.x lines, each alone (the real 0.5.23 log as a
whole is tested in test_real_artefacts.py).
"""

from __future__ import annotations

import json
import math

import pytest
from sglang_logs import LOGDOC, feed_with_at

from collectors.sglang.startup_log import (
    EVENTS,
    StartupLogParser,
    parse_startup_log,
)
from collectors.startup_facts import (
    FAILED,
    STOPPED,
    STOPPING,
    PhaseSpan,
)

# --------------------------------------------------------------------------- SGLang 0.5.x lines
# Forms seen in a real 0.5.23 log (tests/data/sglang-cpu/, tested as a whole in
# test_real_artefacts.py); here each one alone, next to the older forms.


def test_un_stamped_warnings_then_first_stamped_line_is_the_launch() -> None:
    log = """\
/venv/sglang/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' is still supported
  Example: sglang serve --model-path <model> [options]
  warnings.warn(
/venv/sglang/awq.py:53: UserWarning: CUDA out of memory? Traceback (not really)
  warnings.warn(f"Not enough memory, OutOfMemory")
[2026-11-29 19:49:38] The current platform does not support Intel AMX.
/venv/sglang/fla/utils.py:223: RuntimeWarning: Triton is not supported on current platform.
  warnings.warn(
[2026-11-29 19:49:47] Init parallel begin.
[2026-11-29 19:49:47] Init parallel ends. elapsed=0.02 s
[2026-11-29 19:49:50] The server is fired up and ready to roll!
"""
    parser = StartupLogParser()
    events = parser.feed_text(log)
    f = parser.facts()
    assert f.errors == () and "error" not in events and f.failed_at is None
    assert f.launch_at == pytest.approx(1795981778.0)  # 2026-11-29 19:49:38 as UTC
    assert f.ready and f.phase_durations()["total"] == 12.0
    assert f.phase_durations()["launching"] == 9.0
    assert f.ranks[0].dist_init_elapsed_s == 0.02
    # A real error after the warnings is still one.
    parser.feed("[2026-11-29 19:49:51] Health check failed. no heartbeat")
    assert [e.kind for e in parser.facts().errors] == ["health_check"]


def test_launch_at_keeps_the_clock_of_the_first_timed_line() -> None:
    # With `at`: the first line's `at` even though it is an un-stamped warning.
    parser = StartupLogParser()
    parser.feed("/x.py:1: UserWarning: hello", at=50.0)
    parser.feed("[2026-11-29 19:49:47] Init parallel begin.", at=51.0)
    assert parser.facts().launch_at == 50.0
    assert parser.facts().timeline[1] == PhaseSpan("distributed_init", 51.0, None)
    # Neither `at` nor a prefix on the first line: the first line with either sets it.
    later = StartupLogParser()
    later.feed("no time here")
    assert later.facts().launch_at is None
    later.feed("still none", at=None)
    later.feed("[2026-11-29 19:49:47] anything at all")
    later.feed("[2026-11-29 19:49:49] Load weight begin. avail mem=1.00 GB")
    f = later.facts()
    assert f.launch_at == pytest.approx(1795981787.0)
    assert f.phase_durations() == {"launching": 2.0}


def test_distributed_init_old_and_new_forms() -> None:
    for begin, end, elapsed, mem in (
        ("Init parallel begin.", "Init parallel ends. elapsed=0.02 s", 0.02, None),
        ("Init torch distributed begin.",
         "Init torch distributed ends. elapsed=0.26 s, mem usage=0.09 GB", 0.26, 0.09),
        ("Init torch distributed begin.", "Init torch distributed end.", None, None),
    ):
        parser = StartupLogParser()
        assert parser.feed(begin, at=0.0) == [
            "launch", "distributed_init_begin", "phase:distributed_init",
        ]
        assert parser.feed(end, at=2.0) == ["distributed_init_end"]
        r = parser.facts().ranks[0]
        assert (r.dist_init_elapsed_s, r.dist_init_mem_usage_gb) == (elapsed, mem)
        assert parser.phase_durations()["distributed_init"] == 2.0


def test_memory_baseline_line() -> None:
    parser = StartupLogParser()
    events = parser.feed("[2026-11-29 19:49:47 TP1] Memory baseline taken. mem usage=1.25 GB")
    assert events == ["launch", "memory_baseline"]
    assert parser.facts().ranks[1].memory_baseline_gb == 1.25
    assert parser.current_phase() == "launching"


def test_kv_dtype_inline_and_older_forms() -> None:
    new = StartupLogParser()
    new.feed("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 8192, "
             "K size: 0.00 GB, V size: 0.00 GB")
    r = new.facts().ranks[0]
    assert (r.kv_dtype, r.kv_tokens, r.kv_pools[0].dtype) == ("torch.bfloat16", 8192,
                                                               "torch.bfloat16")
    assert (r.k_size_gb, r.v_size_gb, r.kv_total_gb) == (0.0, 0.0, 0.0)
    # Older: a separate "Using KV cache dtype" line before the pool; the headline dtype is
    # the main pool's even when a draft pool with another dtype follows.
    old = StartupLogParser()
    old.feed("[2026-03-01 09:00:00 TP0] Using KV cache dtype: torch.float8_e4m3fn")
    old.feed("[2026-03-01 09:00:01 TP0] KV Cache is allocated. #tokens: 100, KV size: 1.00 GB")
    old.feed("[2026-03-01 09:00:02 TP0] KV Cache is allocated. dtype: torch.bfloat16, "
             "#tokens: 100, KV size: 0.10 GB")
    r = old.facts().ranks[0]
    assert [p.dtype for p in r.kv_pools] == ["torch.float8_e4m3fn", "torch.bfloat16"]
    assert r.kv_dtype == "torch.float8_e4m3fn" and r.all_kv_gb == 1.1


def test_available_mem_of_any_device() -> None:
    for line, value, device in (
        ("max_total_num_tokens=8192, context_len=2048, available_cpu_mem=21.70 GB", 21.7, "cpu"),
        ("max_total_num_tokens=8192, context_len=2048, available_gpu_mem=76.95 GB", 76.95, "gpu"),
        ("max_total_num_tokens=8192, available_npu_mem=30.00 GB, new_key=7", 30.0, "npu"),
        ("max_total_num_tokens=8192, context_len=2048", None, None),
    ):
        f = parse_startup_log(line)
        assert (f.available_mem_gb, f.available_mem_device) == (value, device)
        assert f.available_gpu_mem_gb == (value if device == "gpu" else None)
        assert not any(k.startswith("available_") for k in f.scheduler_extra)
        assert f.max_total_num_tokens == 8192
    assert parse_startup_log(
        "max_total_num_tokens=1, available_npu_mem=30.00 GB, new_key=7"
    ).scheduler_extra == {"new_key": "7"}


def test_negative_zero_is_zero_but_printed_values_are_kept() -> None:
    parser = StartupLogParser()
    parser.feed("Init torch distributed ends. elapsed=0.26 s, mem usage=-0.00 GB")
    parser.feed("Load weight begin. avail mem=21.71 GB")
    parser.feed("Load weight end. elapsed=0.01 s, type=LlamaForCausalLM, avail mem=21.71 GB, "
                "mem usage=-0.00 GB.")
    parser.feed("Load weight begin. avail mem=21.71 GB")
    parser.feed("Load weight end. elapsed=0.01 s, type=Draft, avail mem=21.96 GB, "
                "mem usage=-0.25 GB.")
    r = parser.facts().ranks[0]
    for value in (r.weights_gb, r.dist_init_mem_usage_gb):
        assert value == 0.0 and math.copysign(1.0, value) == 1.0  # type: ignore[arg-type]
    assert r.weight_loads[1].mem_usage_gb == -0.25  # as printed: no clamping, no rounding
    assert r.all_weights_gb == -0.25
    assert '"weights_gb": 0.0' in json.dumps(parser.facts().to_dict())


def test_engine_startup_timings() -> None:
    parser = StartupLogParser()
    events = parser.feed(
        "[2026-11-29 19:49:49] Engine startup timings (s): load_weight=0.01, "
        "kv_cache_allocation=0.31, scheduler_e2e=1.27, cuda_graph={prefill=0.00, "
        "decode=12.50, target_verify=0.00}, tokenizer_e2e=8.73, note=n/a, bad={x=nan}")
    assert events == ["launch", "startup_timings"]
    timings = parser.facts().startup_timings_s
    assert timings == {
        "load_weight": 0.01, "kv_cache_allocation": 0.31, "scheduler_e2e": 1.27,
        "cuda_graph.prefill": 0.0, "cuda_graph.decode": 12.5, "cuda_graph.target_verify": 0.0,
        "tokenizer_e2e": 8.73,
    }
    assert list(timings)[:3] == ["load_weight", "kv_cache_allocation", "scheduler_e2e"]
    assert all(type(v) is float for v in timings.values())


def test_stop_after_ready() -> None:
    parser = StartupLogParser()
    feed_with_at(parser, LOGDOC)
    durations = parser.phase_durations()
    assert parser.feed("[2026-11-29 19:50:06] SIGTERM received. signum=None frame=None. "
                       "Draining requests and shutting down...", at=2000.0) == [
        "stopping", "phase:stopping",
    ]
    assert parser.feed("Gracefully exiting... Remaining number of requests 0.", at=2004.0) == []
    # A traceback while stopping is recorded, never fatal.
    parser.feed("Traceback (most recent call last):", at=2004.5)
    parser.feed("KeyboardInterrupt", at=2004.6)
    for line in ("INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
                 "INFO:     Application shutdown complete."):
        assert parser.feed(line, at=2005.0) == []
    assert parser.feed("INFO:     Finished server process [1780921]", at=2005.5) == [
        "stopped", "phase:stopped",
    ]
    assert parser.feed("INFO:     Finished server process [1780921]", at=2009.0) == []
    parser.feed("The server is fired up and ready to roll!", at=2010.0)
    f = parser.facts()
    assert (f.stopping_at, f.stopped_at) == (2000.0, 2005.5)
    assert f.current_phase() == STOPPED
    assert f.ready and f.ready_at == 1022.0 and f.failed_at is None
    assert [(e.kind, e.fatal) for e in f.errors] == [("traceback", False)]
    assert f.phase_durations() == durations  # the stop adds no startup phase
    assert {"stopping", "stopped", "memory_baseline", "startup_timings"} <= set(EVENTS)
    # Weights loading once the server stopped: the same log, a new launch.
    assert "relaunch" in parser.feed("[2026-11-29 19:50:06] Load weight begin. avail mem=1.00 GB",
                                     at=2011.0)
    f = parser.facts()
    assert f.launches == 2 and f.current_phase() == "weights"
    assert (f.stopping_at, f.stopped_at, f.ready, f.errors) == (None, None, False, ())
    assert f.launch_at == 2011.0 and f.ranks[0].weights_begin_avail_gb == 1.0


def test_stop_during_startup_and_after_failure() -> None:
    parser = StartupLogParser()
    parser.feed("Load weight begin. avail mem=78.43 GB", at=0.0)
    parser.feed("[2026-11-29 19:50:06] SIGTERM received. Draining requests and shutting down.",
                at=3.0)
    assert parser.current_phase() == STOPPING
    parser.feed("Scheduler hit an exception: Traceback (most recent call last):", at=3.5)
    parser.feed("RuntimeError: interrupted", at=3.6)
    parser.feed("Load weight end. elapsed=4.00 s, type=X, avail mem=1.00 GB, mem usage=1.00 GB.",
                at=4.0)
    assert parser.current_phase() == STOPPING  # a late startup line does not move it back
    f = parser.facts()
    assert f.failed_at is None and f.errors[0].fatal is False
    assert f.ranks[0].weights_gb == 1.0  # still recorded
    # Only "Finished server process": it is both the start and the end of the stop.
    bare = StartupLogParser()
    assert bare.feed("INFO:     Finished server process [9]", at=7.0) == [
        "launch", "stopping", "stopped", "phase:stopped",
    ]
    assert (bare.facts().stopping_at, bare.facts().stopped_at) == (7.0, 7.0)
    # A failure stays the phase; the stop's times are still kept.
    failed = StartupLogParser()
    failed.feed("CUDA out of memory. Tried to allocate 2.00 GiB", at=1.0)
    failed.feed("SIGTERM received. signum=None frame=None.", at=2.0)
    failed.feed("INFO:     Finished server process [9]", at=3.0)
    f = failed.facts()
    assert f.current_phase() == FAILED and f.failed_in == "launching"
    assert (f.stopping_at, f.stopped_at) == (2.0, 3.0)


def test_glued_line_is_read_from_its_prefix() -> None:
    parser = StartupLogParser()
    parser.feed("[2026-11-29 19:50:00] Load weight begin. avail mem=5.00 GB")
    glue = "See https://nanobind.readthedocs.io/en/latest/refleaks.html"
    parser.feed(glue + "[2026-11-29 19:50:11 TP3] Memory pool end. avail mem=2.00 GB")
    parser.feed(glue + "[2026-11-29 19:50:11] kill_process_tree called: parent_pid=1")
    parser.feed("nanobind: leaked [not a prefix] Memory pool end. avail mem=3.00 GB")
    f = parser.facts()
    assert f.ranks[3].pool_end_avail_gb == 2.0
    assert f.ranks[0].pool_end_avail_gb == 3.0  # no glued prefix: the whole line, rank 0
    assert f.timeline[-1].phase == "kv_pool"
    assert f.timeline[-1].end is not None and f.launch_at is not None
    assert f.timeline[-1].end - f.launch_at == 11.0
    assert f.errors == ()
