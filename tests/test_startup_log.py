"""StartupLogParser against the log formats collected in sglang-interfaces.md §3 and §4.4.

(a) is the verbatim real sequence from the notes (LOGDOC); the other logs are written here
from the format strings and variants the notes record.
"""

from __future__ import annotations

import json
import math
import time

import pytest

from collectors.sglang.launch_state import MAX_ERRORS
from collectors.sglang.startup_log import (
    EVENTS,
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

# (a) Verbatim from the notes: LOGDOC, Qwen2.5-0.5B, 1 GPU, 2026-02-04 (no prefixes there).
LOGDOC = """\
Init torch distributed begin.
Init torch distributed ends. elapsed=0.26 s, mem usage=0.09 GB
Load weight begin. avail mem=78.43 GB
Loading safetensors checkpoint shards: 100% Completed | 1/1 [...]
Loading weights took 0.20 seconds
Load weight end. elapsed=0.38 s, type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=77.45 GB, mem usage=0.98 GB.
Using KV cache dtype: torch.bfloat16
KV Cache is allocated. #tokens: 20480, K size: 0.12 GB, V size: 0.12 GB
Memory pool end. avail mem=77.12 GB
Init attention backend begin.
Init attention backend end. elapsed=0.03 s
Capture cuda graph begin. This can take up to several minutes. avail mem=77.02 GB
Capture cuda graph bs [1, 2, 4]
Capture cuda graph end. Time elapsed: 1.01 s. mem usage=0.07 GB. avail mem=76.95 GB.
max_total_num_tokens=20480, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=128, context_len=32768, available_gpu_mem=76.95 GB
INFO:     Started server process [1780921]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
INFO:     Uvicorn running on http://127.0.0.1:33129 (Press CTRL+C to quit)
INFO:     127.0.0.1:55008 - "GET /model_info HTTP/1.1" 200 OK
Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, cuda graph: False
INFO:     127.0.0.1:55012 - "POST /generate HTTP/1.1" 200 OK
The server is fired up and ready to roll!
"""  # noqa: E501


def _feed_with_at(parser: StartupLogParser, text: str, t0: float = 1000.0) -> list[list[str]]:
    """Feed line i at monotonic time t0 + i; return the events of every line."""
    return [parser.feed(line, at=t0 + i) for i, line in enumerate(text.splitlines())]


def _phase_changes(events: list[list[str]]) -> list[str]:
    return [e for evs in events for e in evs if e.startswith("phase:")]


# --------------------------------------------------------------------------- (a) LOGDOC


def test_logdoc_values() -> None:
    parser = StartupLogParser()
    _feed_with_at(parser, LOGDOC)
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
    events = _feed_with_at(parser, LOGDOC)
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
    assert _phase_changes(events) == [f"phase:{p}" for p in PHASES[1:]]
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


# --------------------------------------------------------------------------- (b) DSV4, TP4

_T0 = "2026-03-01 09:"


def _tp4_log() -> str:
    """A 4-rank DeepSeek-V4.1-Flash startup with host Engram tables and MTP graphs."""
    out = [f"[{_T0}00:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V4.1-Flash', "
           "tp_size=4, max_total_tokens=None)"]
    dist_begin = {0: "00:05", 1: "00:05", 2: "00:06", 3: "00:06"}
    dist_end = {0: "00:07", 1: "00:07", 2: "00:08", 3: "00:08"}
    w_begin = {0: "00:09", 1: "00:09", 2: "00:10", 3: "00:09"}
    w_end = {0: "02:00", 1: "02:01", 2: "02:03", 3: "02:02"}
    for r in range(4):
        out.append(f"[{_T0}{dist_begin[r]} TP{r}] Init torch distributed begin.")
    for r in range(4):
        out.append(f"[{_T0}{dist_end[r]} TP{r}] Init torch distributed ends. "
                   f"elapsed={2.1 + r / 10:.2f} s, mem usage=0.52 GB")
    for r in range(4):
        out.append(f"[{_T0}{w_begin[r]} TP{r}] Load weight begin. avail mem={111.47 + r:.2f} GB")
    out.append("Loading safetensors checkpoint shards:  50% Completed | 24/48 [00:55<00:55]")
    for r in range(4):
        out.append(f"[{_T0}{w_end[r]} TP{r}] Load weight end. elapsed={111.0 + r:.2f} s, "
                   f"type=DeepseekV4ForCausalLM, quant=fp8, avail mem={17.47 + r:.2f} GB, "
                   f"mem usage=94.00 GB.")
    out += [
        f"[{_T0}02:04 TP0] engram host table L1: layout=private, 48384 MiB resident, "
        "48384 MiB in huge pages (100%), pinned",
        f"[{_T0}02:04 TP1] engram host table L1: layout=private, 48384 MiB resident, "
        "47104 MiB in huge pages (97.4%), unpinned (ATS)",
        f"[{_T0}02:04 TP2] WARNING engram.py:412: engram host table L14: layout=shared, "
        "193536 MiB resident, 0 MiB in huge pages (0%), pinned. No huge pages: expect ~10x "
        "slower lookups (one TLB miss per row); transparent_hugepage/shmem_enabled is 'never'",
        f"[{_T0}02:04 TP0] engram host table: dropped the page cache of 48 checkpoint files "
        "(152.10 GiB) before pre-faulting",
        f"[{_T0}02:05 TP0] DeepSeek-V4.1 Engram tables: placement=cpu, replication=per_node, "
        "lookup=collective",
        f"[{_T0}02:06 TP0] DSV4 memory calculation: bytes_per_full_token=12345, "
        "available_bytes=12.34 GB, full_token=1048576",
    ]
    kv_at = {0: "02:10", 1: "02:10", 2: "02:10", 3: "02:11"}
    pool_at = {0: "02:12", 1: "02:12", 2: "02:12", 3: "02:13"}
    for r in range(4):
        out.append(f"[{_T0}{kv_at[r]} TP{r}] Using KV cache dtype: torch.float8_e4m3fn")
        out.append(f"[{_T0}{kv_at[r]} TP{r}] KV Cache is allocated. #tokens: 1048576, "
                   f"KV size: {12.34 + r / 100:.2f} GB")
    for r in range(4):
        out.append(f"[{_T0}{pool_at[r]} TP{r}] Memory pool end. avail mem={4.9 + r:.2f} GB")
    dec_end = {0: "02:28", 1: "02:28", 2: "02:28", 3: "02:29"}
    for r in range(4):
        out.append(f"[{_T0}02:15 TP{r}] Capture target decode CUDA graph begin. "
                   f"avail mem={4.90 + r:.2f} GB")
    for r in range(4):
        out.append(f"[{_T0}{dec_end[r]} TP{r}] Capture target decode CUDA graph end. "
                   f"elapsed=12.47 s, mem usage=1.26 GB, avail mem={3.64 + r:.2f} GB.")
    for r in range(4):
        out.append(f"[{_T0}{dec_end[r]} TP{r}] Capture target verify CUDA graph begin. "
                   "backend=full, num_tokens_per_req=6, bs=[1, 2, 3, 4], "
                   f"avail mem={3.64 + r:.2f} GB")
    for r in range(4):
        out.append(f"[{_T0}02:31 TP{r}] Capture target verify CUDA graph end. "
                   f"elapsed=2.50 s, mem usage=0.50 GB, avail mem={3.14 + r:.2f} GB.")
    out += [
        f"[{_T0}02:32 TP0] max_total_num_tokens=1048576, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=256, context_len=1048576, "
        "available_gpu_mem=3.14 GB",
        f"[{_T0}02:40] INFO:     Started server process [4242]",
        f"[{_T0}02:40] INFO:     Waiting for application startup.",
        f"[{_T0}02:40] INFO:     Application startup complete.",
        f"[{_T0}02:41] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f'[{_T0}02:49] INFO:     127.0.0.1:40022 - "POST /generate HTTP/1.1" 200 OK',
        f"[{_T0}02:50] The server is fired up and ready to roll!",
    ]
    return "\n".join(out) + "\n"


def test_tp4_per_rank_facts() -> None:
    f = parse_startup_log(_tp4_log())
    assert sorted(f.ranks) == [0, 1, 2, 3]
    for r, rf in f.ranks.items():
        assert rf.rank == r
        assert rf.dist_init_elapsed_s == pytest.approx(2.1 + r / 10)
        assert rf.dist_init_mem_usage_gb == 0.52
        assert rf.weights_begin_avail_gb == pytest.approx(111.47 + r)
        assert rf.weights_elapsed_s == 111.0 + r
        assert rf.weights_type == "DeepseekV4ForCausalLM"
        assert rf.weights_quant == "fp8"
        assert rf.weights_dtype is None
        assert rf.weights_avail_gb == pytest.approx(17.47 + r)
        assert rf.weights_gb == 94.0
        assert rf.kv_dtype == "torch.float8_e4m3fn"
        assert rf.kv_tokens == 1048576
        # MLA: one KV figure, no K/V split.
        assert (rf.k_size_gb, rf.v_size_gb) == (None, None)
        assert rf.kv_size_gb == pytest.approx(12.34 + r / 100)
        assert rf.kv_total_gb == rf.kv_size_gb
        assert rf.pool_end_avail_gb == pytest.approx(4.9 + r)
        assert [g.kind for g in rf.graph_captures] == ["target decode", "target verify"]
        assert rf.graph_begin_avail_gb == pytest.approx(4.90 + r)
        assert rf.graph_mem_usage_gb == pytest.approx(1.76)
        assert rf.graph_elapsed_s == pytest.approx(14.97)
        assert rf.graph_avail_gb == pytest.approx(3.14 + r)
        assert rf.graph_captures[1].begin_avail_gb == pytest.approx(3.64 + r)
    assert f.max_total_num_tokens == 1048576
    assert f.max_running_requests == 256
    assert f.context_len == 1048576
    assert f.available_gpu_mem_gb == 3.14
    assert f.uvicorn_pid == 4242
    assert f.uvicorn_url == "http://0.0.0.0:30000"
    assert f.ready and f.errors == ()


def test_tp4_engram_lines() -> None:
    f = parse_startup_log(_tp4_log())
    pinned, ats, no_huge = f.engram_tables
    assert (pinned.label, pinned.layout, pinned.rank) == ("L1", "private", 0)
    assert (pinned.resident_mib, pinned.huge_mib, pinned.huge_pct) == (48384.0, 48384.0, 100.0)
    assert pinned.pinned is True and pinned.no_huge_pages_warning is None
    assert pinned.resident_bytes == 48384 * MIB
    assert (ats.label, ats.rank, ats.huge_mib, ats.huge_pct) == ("L1", 1, 47104.0, 97.4)
    assert ats.pinned is False and ats.no_huge_pages_warning is None
    assert (no_huge.label, no_huge.layout, no_huge.rank) == ("L14", "shared", 2)
    assert (no_huge.resident_mib, no_huge.huge_mib, no_huge.huge_pct) == (193536.0, 0.0, 0.0)
    assert no_huge.pinned is True
    assert no_huge.no_huge_pages_warning == (
        "No huge pages: expect ~10x slower lookups (one TLB miss per row); "
        "transparent_hugepage/shmem_enabled is 'never'"
    )
    assert f.engram_config_text == (
        "DeepSeek-V4.1 Engram tables: placement=cpu, replication=per_node, lookup=collective"
    )
    assert f.engram_config == {
        "placement": "cpu", "replication": "per_node", "lookup": "collective",
    }
    assert f.engram_messages == (
        "engram host table: dropped the page cache of 48 checkpoint files (152.10 GiB) "
        "before pre-faulting",
    )


def test_engram_config_json_form() -> None:
    parser = StartupLogParser()
    events = parser.feed('[2026-03-01 09:02:05 TP0] DeepSeek-V4.1 Engram tables: '
                         '{"placement": "gpu", "replication": "none", "lookup": "peer_read"}')
    assert "engram_config" in events
    f = parser.facts()
    assert f.engram_config == {"placement": "gpu", "replication": "none", "lookup": "peer_read"}
    assert f.engram_config_text == (
        'DeepSeek-V4.1 Engram tables: {"placement": "gpu", "replication": "none", '
        '"lookup": "peer_read"}'
    )


def test_engram_memfd_error_is_fatal() -> None:
    parser = StartupLogParser()
    parser.feed("[2026-03-01 09:02:04 TP1] engram host table: cannot open rank 0's memfd "
                "through /proc; the TP ranks must share a PID namespace", at=7.0)
    f = parser.facts()
    assert [(e.kind, e.rank, e.fatal, e.at) for e in f.errors] == [("engram", 1, True, 7.0)]
    assert f.current_phase() == FAILED and f.engram_tables == ()


def test_tp4_timeline_earliest_begin_latest_end() -> None:
    parser = StartupLogParser()
    events = [parser.feed(line) for line in _tp4_log().splitlines()]
    assert _phase_changes(events) == [f"phase:{p}" for p in PHASES[1:]]
    f = parser.facts()
    base = f.launch_at
    assert base is not None
    rel = [(s.phase, s.start - base if s.start is not None else None,
            s.end - base if s.end is not None else None) for s in f.timeline]
    assert rel == [
        ("launching", 0.0, 5.0),
        ("distributed_init", 5.0, 8.0),
        ("weights", 9.0, 123.0),  # earliest begin (TP0 00:09) .. latest end (TP2 02:03)
        ("kv_pool", 126.0, 133.0),  # the DSV4 memory calculation opens it (TP0 02:06)
        ("graphs", 135.0, 149.0),  # target decode, TP3 ends last
        ("graphs", 148.0, 151.0),  # target verify
        ("http", 160.0, 161.0),
        ("warmup", 161.0, 170.0),
        ("ready", 170.0, 170.0),
    ]
    assert f.phase_durations() == {
        "launching": 5.0,
        "distributed_init": 3.0,
        "weights": 114.0,
        "kv_pool": 7.0,
        "graphs": 17.0,
        "http": 1.0,
        "warmup": 9.0,
        "total": 170.0,
    }


def test_tp4_with_at_overrides_prefix_times() -> None:
    parser = StartupLogParser()
    _feed_with_at(parser, _tp4_log(), t0=0.0)
    f = parser.facts()
    assert f.launch_at == 0.0
    assert f.ready_at == float(len(_tp4_log().splitlines()) - 1)
    assert f.phase_durations()["total"] == f.ready_at


def test_rank_tags_and_level_prefix() -> None:
    parser = StartupLogParser()
    parser.feed("[2026-03-01 09:00:00 DP1 TP5 EP5] Load weight begin. avail mem=100.00 GB")
    parser.feed("[2026-03-01 09:00:00 TP6 EP6] Load weight begin. avail mem=101.00 GB")
    parser.feed("[2026-03-01 09:00:00 PP0 TP7] Load weight begin. avail mem=102.00 GB")
    parser.feed("[2026-03-01 09:00:01] INFO model_runner.py:123: "
                "Load weight begin. avail mem=99.00 GB")
    parser.feed("[2026-03-01 09:00:02.250 TP1] Memory pool end. avail mem=1.50 GB")
    f = parser.facts()
    assert {r: rf.weights_begin_avail_gb for r, rf in f.ranks.items()} == {
        0: 99.0, 1: None, 5: 100.0, 6: 101.0, 7: 102.0,
    }
    assert f.ranks[1].pool_end_avail_gb == 1.5
    assert f.timeline[-1].end is not None and f.launch_at is not None
    assert f.timeline[-1].end - f.launch_at == 2.25  # fractional seconds when printed


# --------------------------------------------------------------------------- old variants


def test_very_old_variants() -> None:
    log = """\
[2024-08-01 10:00:00] [gpu_id=0] Init torch distributed begin.
[2024-08-01 10:00:02] [gpu_id=0] Init torch distributed ends. mem usage=0.10 GB
[2024-08-01 10:00:02] [gpu_id=0] Load weight begin. avail mem=78.50 GB
[2024-08-01 10:00:30] [gpu_id=0] Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=65.53 GB
[2024-08-01 10:00:31] [gpu_id=0] KV Cache is allocated. K size: 2.82 GB, V size: 2.82 GB.
[2024-08-01 10:00:31] [gpu_id=0] Memory pool end. avail mem=8.94 GB
[2024-08-01 10:00:31] [gpu_id=1] KV Cache is allocated. K size: 2.82 GB, V size: 2.82 GB.
[2024-08-01 10:00:40] [gpu_id=0] max_total_num_tokens=46080, max_prefill_tokens=16384, max_running_requests=2049, context_len=8192
[2024-08-01 10:05:00] [gpu_id=0] Decode batch. #running-req: 3, #token: 1234, token usage: 0.03, gen throughput (token/s): 45.67, #queue-req: 1
"""  # noqa: E501
    f = parse_startup_log(log)
    r = f.ranks[0]
    assert r.dist_init_elapsed_s is None and r.dist_init_mem_usage_gb == 0.10
    assert r.weights_begin_avail_gb == 78.5
    assert r.weights_elapsed_s is None
    assert (r.weights_type, r.weights_dtype) == ("LlamaForCausalLM", "torch.float16")
    # No "mem usage=" printed: the weights are the free memory the load took.
    assert r.weights_avail_gb == 65.53 and r.weights_gb == 12.97
    assert r.weight_loads[0].mem_usage_derived is True
    assert r.kv_tokens is None
    assert (r.k_size_gb, r.v_size_gb, r.kv_total_gb) == (2.82, 2.82, 5.64)
    assert r.pool_end_avail_gb == 8.94
    assert f.ranks[1].k_size_gb == 2.82  # [gpu_id=1] is rank 1 when there is no TP tag
    assert f.max_total_num_tokens == 46080
    assert f.chunked_prefill_size is None and f.available_gpu_mem_gb is None
    assert f.max_prefill_tokens == 16384 and f.max_running_requests == 2049
    assert f.context_len == 8192
    d = f.decode
    assert d is not None
    assert (d.running_reqs, d.num_tokens, d.token_usage) == (3, 1234, 0.03)
    assert (d.gen_throughput, d.queue_reqs, d.graph, d.rank) == (45.67, 1, None, 0)
    assert f.phase_durations() == {
        "launching": 0.0, "distributed_init": 2.0, "weights": 28.0, "kv_pool": 0.0,
    }
    assert f.current_phase() == "kv_pool"  # no graphs, no uvicorn line in this log


def test_decode_and_prefill_variants_keep_latest() -> None:
    parser = StartupLogParser()
    parser.feed("[2026-03-01 10:00:00 TP0] Decode batch, #running-req: 12, #token: 8000, "
                "token usage: 0.41, accept len: 2.31, accept rate: 0.77, cuda graph: True, "
                "gen throughput (token/s): 1234.56, #queue-req: 3")
    d = parser.facts().decode
    assert d is not None
    assert (d.running_reqs, d.num_tokens, d.token_usage, d.accept_len) == (12, 8000, 0.41, 2.31)
    assert (d.graph, d.gen_throughput, d.queue_reqs) == (True, 1234.56, 3)
    # Hybrid (SWA) model, CPU build, SGLANG_LOG_FORWARD_ITERS tag: the latest line wins.
    parser.feed("[2026-03-01 10:00:05 DP1 TP1 EP1] Decode batch [812], #running-req: 4, "
                "#token: 900, full token usage: 0.12, swa token usage: 0.30, cpu graph: False, "
                "gen throughput (token/s): 99.00, #queue-req: 0")
    d = parser.facts().decode
    assert d is not None
    assert (d.rank, d.running_reqs, d.token_usage, d.graph) == (1, 4, 0.12, False)
    assert (d.gen_throughput, d.queue_reqs, d.accept_len) == (99.0, 0, None)
    parser.feed("Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 128, "
                "full token usage: 0.20, swa token usage: 0.10, #running-req: 5, "
                "#prealloc-req: 0, #inflight-req: 1, #queue-req: 7, "
                "input throughput (token/s): 8192.00, npu graph: False")
    p = parser.facts().prefill
    assert p is not None
    assert (p.new_seqs, p.new_tokens, p.cached_tokens, p.token_usage) == (2, 4096, 128, 0.2)
    assert (p.running_reqs, p.queue_reqs, p.input_throughput, p.graph) == (5, 7, 8192.0, False)
    assert parser.current_phase() == "launching"  # runtime lines are not phase events


def test_draft_model_second_pass() -> None:
    log = """\
[2026-03-01 09:00:00 TP0] Load weight begin. avail mem=120.00 GB
[2026-03-01 09:01:00 TP0] Load weight end. elapsed=60.00 s, type=DeepseekV4ForCausalLM, quant=fp8, avail mem=26.00 GB, mem usage=94.00 GB.
[2026-03-01 09:01:05 TP0] KV Cache is allocated. #tokens: 500000, KV size: 10.00 GB
[2026-03-01 09:01:06 TP0] Memory pool end. avail mem=15.00 GB
[2026-03-01 09:01:10 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=15.00 GB
[2026-03-01 09:01:20 TP0] Capture cuda graph end. Time elapsed: 10.00 s. mem usage=1.00 GB. avail mem=14.00 GB.
[2026-03-01 09:01:21 TP0] Load weight begin. avail mem=14.00 GB
[2026-03-01 09:01:25 TP0] Load weight end. elapsed=4.00 s, type=DeepseekV4ForCausalLMDSpark, quant=fp8, avail mem=11.00 GB, mem usage=3.00 GB.
[2026-03-01 09:01:26 TP0] KV Cache is allocated. #tokens: 500000, KV size: 1.50 GB
[2026-03-01 09:01:27 TP0] Memory pool end. avail mem=9.50 GB
[2026-03-01 09:01:28 TP0] Capture draft decode CUDA graph begin. avail mem=9.50 GB
[2026-03-01 09:01:31 TP0] Capture draft decode CUDA graph end. elapsed=3.00 s, mem usage=0.25 GB, avail mem=9.25 GB.
"""  # noqa: E501
    parser = StartupLogParser()
    events = [parser.feed(line) for line in log.splitlines()]
    assert _phase_changes(events) == [
        "phase:weights", "phase:kv_pool", "phase:graphs",
        "phase:weights", "phase:kv_pool", "phase:graphs",
    ]
    r = parser.facts().ranks[0]
    assert r.weights_type == "DeepseekV4ForCausalLM" and r.weights_gb == 94.0
    assert [w.model_type for w in r.weight_loads] == [
        "DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMDSpark",
    ]
    assert r.all_weights_gb == 97.0
    assert r.kv_total_gb == 10.0 and r.all_kv_gb == 11.5
    assert r.pool_end_avail_gb == 9.5
    assert r.graph_mem_usage_gb == 1.25 and r.graph_elapsed_s == 13.0
    assert r.graph_avail_gb == 9.25
    assert parser.phase_durations() == {
        "launching": 0.0, "weights": 64.0, "kv_pool": 2.0, "graphs": 13.0,
    }


def test_graph_begin_and_end_worded_differently() -> None:
    parser = StartupLogParser()
    parser.feed("Capture cuda graph begin. This can take up to several minutes. "
                "avail mem=20.00 GB", at=0.0)
    parser.feed("Capture piecewise CUDA graph end. Time elapsed: 7.50 s", at=8.0)
    r = parser.facts().ranks[0]
    assert len(r.graph_captures) == 1
    g = r.graph_captures[0]
    assert (g.begin_avail_gb, g.elapsed_s, g.mem_usage_gb) == (20.0, 7.5, None)
    assert parser.phase_durations()["graphs"] == 8.0


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
    _feed_with_at(parser, "\n".join(LOGDOC.splitlines()[:19]))  # up to "Uvicorn running"
    events = parser.feed("[2026-02-04 10:11:40] Initialization failed. warmup error: "
                         "ReadTimeout('timed out')", at=2000.0)
    assert events == ["error", "failed", "phase:failed"]
    f = parser.facts()
    assert (f.current_phase(), f.failed_in, f.failed_at) == (FAILED, "warmup", 2000.0)
    assert f.errors[0].kind == "warmup_failed"
    assert f.errors[0].text == "Initialization failed. warmup error: ReadTimeout('timed out')"

    ready = StartupLogParser()
    _feed_with_at(ready, LOGDOC)
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


def test_busy_server_lines_are_cheap() -> None:
    parser = StartupLogParser()
    parser.feed_text(LOGDOC)
    access = 'INFO:     127.0.0.1:55012 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    decode = ("[2026-02-04 10:12:00 TP0] Decode batch, #running-req: 64, #token: 40000, "
              "token usage: 0.51, cuda graph: True, gen throughput (token/s): 3012.44, "
              "#queue-req: 2")
    lines = [access] * 9 + [decode]
    start = time.perf_counter()
    for _ in range(5000):
        for line in lines:
            parser.feed(line)
    per_line = (time.perf_counter() - start) / 50_000
    # Generous bound (shared CI machines); a regex-per-line parser would be far slower.
    assert per_line < 50e-6
    d = parser.facts().decode
    assert d is not None and d.gen_throughput == 3012.44
    assert parser.current_phase() == "ready"


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
    _feed_with_at(parser, LOGDOC)
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
