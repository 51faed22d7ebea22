"""StartupLogParser against the log formats collected in sglang-interfaces.md §3 and §4.4:
the verbatim real sequence from the notes (LOGDOC), errors, and lines that must never
break it. The 4-rank DeepSeek log and older builds' variants are in
test_startup_log_variants.py, SGLang 0.5.x's forms in test_startup_log_05x.py.
"""

from __future__ import annotations

import json

import pytest
from sglang_logs import LOGDOC, feed_with_at, phase_changes

from collectors.sglang.launch_state import MAX_CAPTURES, MAX_ERRORS, MAX_LOADS
from collectors.sglang.startup_log import (
    StartupLogParser,
    parse_startup_log,
)
from collectors.startup_facts import (
    FAILED,
    PHASES,
    STOPPED,
    STOPPING,
    PhaseSpan,
)
from collectors.units import GIB, MIB, gib_to_bytes, mib_to_bytes

# --------------------------------------------------------------------------- (a) LOGDOC


def test_logdoc_values() -> None:
    parser = StartupLogParser()
    feed_with_at(parser, LOGDOC)
    f = parser.facts()
    assert list(f.ranks) == [0]
    r = f.ranks[0]
    assert r.dist_init_elapsed_s == 0.26
    assert r.dist_init_mem_usage_gb == 0.09
    assert r.weights_begin_avail_gb == 78.43
    assert r.weights_elapsed_s == 0.38
    assert r.weights_type == "Qwen2ForCausalLM"
    assert r.weights_dtype == "torch.bfloat16"
    assert r.weights_quant is None
    assert r.weights_avail_gb == 77.45
    assert r.weights_gb == 0.98
    assert r.all_weights_gb == 0.98
    assert r.kv_dtype == "torch.bfloat16"
    assert r.kv_tokens == 20480
    assert (r.k_size_gb, r.v_size_gb, r.kv_size_gb) == (0.12, 0.12, None)
    assert r.kv_total_gb == 0.24
    assert r.pool_end_avail_gb == 77.12
    assert r.graph_begin_avail_gb == 77.02
    assert r.graph_mem_usage_gb == 0.07
    assert r.graph_elapsed_s == 1.01
    assert r.graph_avail_gb == 76.95
    assert len(r.graph_captures) == 1 and r.graph_captures[0].kind == "default"
    assert f.max_total_num_tokens == 20480
    assert f.chunked_prefill_size == 8192
    assert f.max_prefill_tokens == 16384
    assert f.max_running_requests == 128
    assert f.context_len == 32768
    assert f.available_gpu_mem_gb == 76.95
    assert f.scheduler_extra == {}
    assert f.uvicorn_pid == 1780921
    assert f.uvicorn_url == "http://127.0.0.1:33129"
    assert f.ready is True
    assert f.ready_at == 1022.0
    assert f.errors == ()
    assert f.failed_at is None
    assert f.lines_seen == 23
    assert f.prefill is not None
    assert (f.prefill.new_seqs, f.prefill.new_tokens, f.prefill.cached_tokens) == (1, 6, 0)
    assert (f.prefill.running_reqs, f.prefill.queue_reqs) == (0, 0)
    assert f.prefill.token_usage == 0.0 and f.prefill.input_throughput == 0.0
    assert f.prefill.graph is False
    assert f.decode is None
    # Bytes helpers: SGLang's "GB" is GiB.
    assert r.weights_bytes == round(0.98 * GIB)
    assert r.kv_total_bytes == round(0.24 * GIB)
    assert r.graph_bytes == round(0.07 * GIB)


def test_logdoc_events_phases_and_durations() -> None:
    parser = StartupLogParser()
    assert parser.current_phase() == "launching"
    events = feed_with_at(parser, LOGDOC)
    assert events[0] == ["launch", "distributed_init_begin", "phase:distributed_init"]
    assert events[1] == ["distributed_init_end"]
    assert events[2] == ["weights_begin", "phase:weights"]
    assert events[5] == ["weights_end"]
    assert events[7] == ["kv_allocated", "phase:kv_pool"]
    assert events[8] == ["kv_pool_end"]
    assert events[11] == ["graphs_begin", "phase:graphs"]
    assert events[12] == []  # "Capture cuda graph bs [..]" is progress, not a phase event
    assert events[13] == ["graphs_end"]
    assert events[14] == ["scheduler_summary"]
    assert events[15] == ["http_started", "phase:http"]
    assert events[18] == ["http_running", "phase:warmup"]
    assert events[19] == events[20] == events[21] == []  # access lines, prefill batch
    assert events[22] == ["ready", "phase:ready"]
    assert phase_changes(events) == [f"phase:{p}" for p in PHASES[1:]]
    assert parser.current_phase() == "ready"

    f = parser.facts()
    assert f.launch_at == 1000.0
    assert f.timeline == (
        PhaseSpan("launching", 1000.0, 1000.0),
        PhaseSpan("distributed_init", 1000.0, 1001.0),
        PhaseSpan("weights", 1002.0, 1005.0),
        PhaseSpan("kv_pool", 1007.0, 1008.0),
        PhaseSpan("graphs", 1011.0, 1013.0),
        PhaseSpan("http", 1015.0, 1018.0),
        PhaseSpan("warmup", 1018.0, 1022.0),
        PhaseSpan("ready", 1022.0, 1022.0),
    )
    assert parser.phase_durations() == {
        "launching": 0.0,
        "distributed_init": 1.0,
        "weights": 3.0,
        "kv_pool": 1.0,
        "graphs": 2.0,
        "http": 3.0,
        "warmup": 4.0,
        "total": 22.0,
    }
    assert f.current_phase() == "ready"


def test_logdoc_phase_while_in_progress() -> None:
    parser = StartupLogParser()
    lines = LOGDOC.splitlines()
    seen: dict[int, str] = {}
    for i, line in enumerate(lines):
        parser.feed(line, at=float(i))
        seen[i] = parser.current_phase()
    assert [seen[i] for i in (0, 1, 2, 5, 6, 7, 8, 11, 13, 14, 15, 18, 21, 22)] == [
        "distributed_init", "distributed_init", "weights", "weights", "weights", "kv_pool",
        "kv_pool", "graphs", "graphs", "graphs", "http", "warmup", "warmup", "ready",
    ]
    # Mid-warm-up, open spans count up to "now" only when asked.
    partial = StartupLogParser()
    for i, line in enumerate(lines[:19]):
        partial.feed(line, at=float(i))
    assert "warmup" not in partial.phase_durations()
    d = partial.phase_durations(now=30.0)
    assert d["warmup"] == 12.0 and d["total"] == 30.0


def test_logdoc_from_prefix_timestamps() -> None:
    # Same lines with "[ts]" prefixes and no `at`: times come from the prefix.
    stamps = [0, 0, 1, 1, 2, 2, 2, 4, 4, 4, 4, 5, 5, 9, 9, 10, 10, 10, 11, 11, 12, 14, 15]
    text = "\n".join(
        f"[2026-02-04 10:11:{12 + s:02d}] {line}"
        for s, line in zip(stamps, LOGDOC.splitlines(), strict=True)
    )
    f = parse_startup_log(text)
    assert f.ready and f.max_total_num_tokens == 20480
    assert f.ranks[0].weights_gb == 0.98
    assert f.phase_durations() == {
        "launching": 0.0,
        "distributed_init": 0.0,
        "weights": 1.0,
        "kv_pool": 0.0,
        "graphs": 4.0,
        "http": 1.0,
        "warmup": 4.0,
        "total": 15.0,
    }
    assert f.launch_at == pytest.approx(1770199872.0)  # 2026-02-04 10:11:12 read as UTC


def test_to_dict_is_json() -> None:
    parser = StartupLogParser()
    parser.feed_text(LOGDOC)
    d = parser.facts().to_dict()
    back = json.loads(json.dumps(d))
    assert back["ranks"]["0"]["weights_gb"] == 0.98
    assert back["current_phase"] == "ready"
    assert back["timeline"][0] == {"phase": "launching", "start": None, "end": None}
    assert back["phase_durations"] == {}  # no prefixes and no `at`: no times at all



# --------------------------------------------------------------------------- errors


def test_oom_traceback_fails_startup() -> None:
    log = """\
[2026-03-01 09:00:00 TP2] Load weight begin. avail mem=111.47 GB
[2026-03-01 09:01:00 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2731, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/sgl/python/sglang/srt/mem_cache/memory_pool.py", line 512, in _create_buffers
    raise_if("out of memory")  # a source line in a frame: never scanned

torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a total capacity of 139.72 GiB of which 1.02 GiB is free.
[2026-03-01 09:01:01] Received sigquit from a child process. It usually means the child failed.
"""  # noqa: E501
    parser = StartupLogParser()
    events = [parser.feed(line) for line in log.splitlines()]
    assert events[1] == ["error", "failed", "phase:failed"]
    assert all(e == [] for e in events[2:-1])
    assert events[-1] == ["error"]  # the parent's sigquit: recorded, the failure stays the first
    f = parser.facts()
    assert f.current_phase() == FAILED
    # Its frames say where: the KV pool's buffers, though TP2 never printed its weights' end.
    assert f.failed_in == "kv_pool"
    assert f.failed_at == f.launch_at + 60.0  # type: ignore[operator]
    err, sigquit = f.errors
    assert (err.kind, err.rank, err.fatal, err.phase) == ("oom", 2, True, "kv_pool")
    assert sigquit.kind == "child_failed"
    assert err.text == "Scheduler hit an exception: Traceback (most recent call last):"
    assert err.exception == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a "
        "total capacity of 139.72 GiB of which 1.02 GiB is free."
    )
    assert f.phase_durations() == {"launching": 0.0}  # weights never ended


def test_bare_oom_and_not_enough_memory() -> None:
    parser = StartupLogParser()
    parser.feed("[2026-03-01 09:00:00 TP1] Traceback (most recent call last):")
    parser.feed('  File "model_runner.py", line 1, in init_memory_pool')
    parser.feed("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    (err,) = parser.facts().errors
    assert err.kind == "oom" and err.exception is not None and err.exception.startswith("Runtime")
    other = StartupLogParser()
    other.feed("[2026-03-01 09:00:00 TP3] CUDA out of memory. Tried to allocate 20.00 MiB")
    f = other.facts()
    assert [(e.kind, e.rank, e.fatal) for e in f.errors] == [("oom", 3, True)]
    assert f.current_phase() == FAILED


def test_warmup_failure_and_runtime_errors() -> None:
    parser = StartupLogParser()
    feed_with_at(parser, "\n".join(LOGDOC.splitlines()[:19]))  # up to "Uvicorn running"
    events = parser.feed("[2026-02-04 10:11:40] Initialization failed. warmup error: "
                         "ReadTimeout('timed out')", at=2000.0)
    assert events == ["error", "failed", "phase:failed"]
    f = parser.facts()
    assert (f.current_phase(), f.failed_in, f.failed_at) == (FAILED, "warmup", 2000.0)
    assert f.errors[0].kind == "warmup_failed"
    assert f.errors[0].text == "Initialization failed. warmup error: ReadTimeout('timed out')"

    ready = StartupLogParser()
    feed_with_at(ready, LOGDOC)
    ready.feed("[2026-02-04 10:20:00] Health check failed. Server couldn't get a response from "
               "detokenizer for last 20 seconds. tic start time: 10:19:40. last_heartbeat "
               "time: 10:19:38", at=3000.0)
    ready.feed("[2026-02-04 10:20:01 TP0] Decode out of memory happened. #retracted_reqs: 2, "
               "#new_token_ratio: 0.7000 -> 0.9000", at=3001.0)
    f = ready.facts()
    assert f.current_phase() == "ready" and f.failed_at is None
    assert [(e.kind, e.fatal, e.at) for e in f.errors] == [
        ("health_check", False, 3000.0), ("retract", False, 3001.0),
    ]


def test_errors_are_bounded_and_texts_truncated() -> None:
    parser = StartupLogParser()
    for i in range(MAX_ERRORS + 50):
        parser.feed(f"Health check failed. attempt {i} " + "x" * 5000, at=float(i))
    errors = parser.facts().errors
    assert len(errors) == MAX_ERRORS
    assert errors[-1].at == float(MAX_ERRORS + 49)
    assert errors[0].at == 50.0
    assert all(len(e.text) <= 1000 for e in errors)


def test_ready_clears_a_false_alarm() -> None:
    parser = StartupLogParser()
    parser.feed("Traceback (most recent call last):", at=0.0)
    parser.feed("ImportError: optional kernel not found", at=1.0)
    assert parser.current_phase() == FAILED
    parser.feed("The server is fired up and ready to roll!", at=5.0)
    f = parser.facts()
    assert f.current_phase() == "ready" and f.failed_at is None
    assert f.errors[0].fatal is False and f.errors[0].exception is not None


# --------------------------------------------------------------------------- bounds
# A log that repeats itself (a crash loop, a server capturing again) keeps a bounded parser.

_T = "2026-10-02 14:05"


def test_repeated_loads_within_one_launch_are_capped() -> None:
    parser = StartupLogParser()
    for _ in range(500):
        parser.feed(f"[{_T}:05 TP0] Load weight begin. avail mem=177.10 GB")
        parser.feed(f"[{_T}:06 TP0] Load weight end. type=X, avail mem=58.06 GB, "
                    "mem usage=119.04 GB.")
    parser.feed(f"[{_T}:09] The server is fired up and ready to roll!")
    for _ in range(500):  # after ready: recorded, not fatal, so no launch ends
        parser.feed(f"[{_T}:10 TP0] Traceback (most recent call last):")
        parser.feed("ValueError: again")
    f = parser.facts()
    assert f.launches == 1
    assert len(f.ranks[0].weight_loads) == MAX_LOADS
    assert len(f.errors) == MAX_ERRORS
    assert len(f.timeline) < 40



def test_repeated_captures_within_one_launch_are_capped() -> None:
    parser = StartupLogParser()
    for i in range(500):
        parser.feed(f"[{_T}:05 TP0] Capture cuda graph begin. This can take up to several "
                    "minutes. avail mem=50.00 GB")
        parser.feed(f"[{_T}:06 TP0] Capture cuda graph end. Time elapsed: 2.00 s. "
                    f"mem usage=0.{i % 10}0 GB. avail mem=49.00 GB.")
    for _ in range(500):  # ends whose begins the log lacks
        parser.feed(f"[{_T}:07 TP1] Capture draft cuda graph end. Time elapsed: 1.00 s.")
    parser.feed(f"[{_T}:09] The server is fired up and ready to roll!")
    f = parser.facts()
    assert f.launches == 1 and f.phase == "ready"
    for rank in (0, 1):
        captures = f.ranks[rank].graph_captures
        assert len(captures) == MAX_CAPTURES
        assert all(c.end_at is not None for c in captures)
    # The captures kept are the first ones: their figures, not the repeats'.
    assert f.ranks[0].graph_elapsed_s == 2.0 * MAX_CAPTURES
    assert len(f.timeline) < 40


# --------------------------------------------------------------------------- robustness


@pytest.mark.parametrize("line", [
    "",
    "\n",
    "[",
    "[2026-13-45 99:99:99 TP0] Load weight begin. avail mem=abc GB",
    "[2026-02-04 10:11:12 TPx] Load weight end. elapsed=, type=, avail mem=GB, mem usage=",
    "KV Cache is allocated. #tokens: , K size: GB",
    "Capture  CUDA graph end. elapsed=s",
    "max_total_num_tokens=, context_len=None, available_gpu_mem=nan GB",
    "engram host table X: layout=, 1 MiB resident",
    "engram host table X: layout=shared, 1,024 MiB resident, 1.5e3 MiB in huge pages (x%)",
    "Decode batch, #running-req: many, token usage: , gen throughput (token/s)",
    "INFO:     Started server process [not-a-pid]",
    "\x00\xff\ufffd binary junk Traceback",
    "\x1b[32m[2026-02-04 10:11:12 TP0] Memory pool end. avail mem=1.00 GB\x1b[0m",
    "progress\r[2026-02-04 10:11:12] Memory pool end. avail mem=2.00 GB\r\n",
    "x" * 100_000,
    "Init parallel ends. elapsed=",
    "Init parallel",
    "Memory baseline taken. mem usage=",
    "KV Cache is allocated. dtype: , #tokens: x, K size: -0.00 GB",
    "Engine startup timings (s): a={b={c={d={e={f=1}}}}}, g=, h=nan, =3, {}, i=}{",
    "Engine startup timings",
    "max_total_num_tokens=1, available__mem=1 GB, available_xpu_mem=",
    "junk[2026-02-04 10:11:12] INFO:     Finished server process [x]",
    "x.py:1: UserWarning: Traceback out of memory",
])
def test_weird_lines_never_raise(line: str) -> None:
    parser = StartupLogParser()
    assert isinstance(parser.feed(line), list)
    assert isinstance(parser.feed(line, at=1.0), list)
    f = parser.facts()
    json.dumps(f.to_dict())
    assert f.current_phase() in (*PHASES, FAILED, STOPPING, STOPPED)


def test_non_string_input_never_raises() -> None:
    parser = StartupLogParser()
    assert parser.feed(None) == []  # type: ignore[arg-type]
    assert parser.feed(b"Load weight begin. avail mem=1.00 GB") == []  # type: ignore[arg-type]


def test_ansi_and_carriage_return_lines() -> None:
    parser = StartupLogParser()
    parser.feed("\x1b[32m[2026-02-04 10:11:12 TP1] Memory pool end. avail mem=1.00 GB\x1b[0m")
    parser.feed("Capturing batches (bs=4 avail_mem=2.9 GB)\r[2026-02-04 10:11:13 TP2] "
                "Memory pool end. avail mem=2.00 GB")
    f = parser.facts()
    assert f.ranks[1].pool_end_avail_gb == 1.0 and f.ranks[2].pool_end_avail_gb == 2.0


def test_bytes_helpers() -> None:
    assert gib_to_bytes(None) is None and mib_to_bytes(None) is None
    assert gib_to_bytes(1.5) == 1536 * MIB
    assert mib_to_bytes(2) == 2 * 1024 * 1024


def test_a_busy_servers_lines_after_ready_keep_its_figures() -> None:
    """Fifty thousand lines of a busy server (nine access lines to a decode line) after a
    whole start-up: the latest decode figures are read and it stays ready. What a line costs
    is a benchmark's figure (benchmarks/bench_log_lines.py), not a bound here."""
    parser = StartupLogParser()
    parser.feed_text(LOGDOC)
    access = 'INFO:     127.0.0.1:55012 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    decode = ("[2026-02-04 10:12:00 TP0] Decode batch, #running-req: 64, #token: 40000, "
              "token usage: 0.51, cuda graph: True, gen throughput (token/s): 3012.44, "
              "#queue-req: 2")
    lines = [access] * 9 + [decode]
    for _ in range(5000):
        for line in lines:
            parser.feed(line)
    d = parser.facts().decode
    assert d is not None and d.gen_throughput == 3012.44
    assert (d.running_reqs, d.num_tokens, d.queue_reqs) == (64, 40000, 2)
    assert parser.current_phase() == "ready"

