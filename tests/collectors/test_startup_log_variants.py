"""StartupLogParser on a 4-rank DeepSeek-V4.1-Flash start-up (written from the format strings
sglang-interfaces.md records) and on the variants of older builds.
"""

from __future__ import annotations

import pytest
from sglang_logs import feed_with_at, phase_changes

from collectors.sglang.startup_log import (
    StartupLogParser,
    parse_startup_log,
)
from collectors.startup_facts import (
    FAILED,
    PHASES,
)
from collectors.units import MIB

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
    assert phase_changes(events) == [f"phase:{p}" for p in PHASES[1:]]
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
    feed_with_at(parser, _tp4_log(), t0=0.0)
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
    assert phase_changes(events) == [
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
