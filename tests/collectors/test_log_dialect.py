"""The start-up log parser on the patterns real logs of many SGLang eras show: DeepSeek-V4's
multi-pool KV sizing in each of its spellings, memory profiling, the ServerArgs dump,
prefixes of every era and of containers, logs that start part-way, failures without a
traceback, hybrid batch lines, Engram statistics, and a log of one launch repeated.

Every line here is written for this test from the formats SGLang prints (values made up).
"""

from __future__ import annotations

import tracemalloc

import pytest
from sglang_logs import STYLES, dress

from collectors.sglang.startup_log import (
    NOTE_AFTER_LAUNCH,
    StartupLogParser,
    parse_startup_log,
)
from collectors.startup_facts import FAILED

T = "2026-10-02 14:05"


def _feed(lines: list[str]) -> tuple[StartupLogParser, list[list[str]]]:
    parser = StartupLogParser()
    return parser, [parser.feed(line) for line in lines]


def _launch(rank_tag: str = "TP0 EP0") -> list[str]:
    """The first lines of a DSV4 launch, up to its weights' end."""
    return [
        f"[{T}:00] INFO server_args.py:1187: Setting swa_full_tokens_ratio to 0.1 for "
        "DeepseekV4ForCausalLM.",
        f"[{T}:00] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V4.1-Flash', "
        "tp_size=4, pp_size=1, dp_size=1, ep_size=4, mem_fraction_static=0.85)",
        f"[{T}:02 {rank_tag}] Init torch distributed begin.",
        f"[{T}:04 {rank_tag}] Init torch distributed ends. elapsed=2.10 s, mem usage=0.52 GB",
        f"[{T}:05 {rank_tag}] Load weight begin. avail mem=177.10 GB",
        f"[{T}:55 {rank_tag}] Load weight end. elapsed=50.00 s, type=DeepseekV4ForCausalLM, "
        "quant=fp8, fmt=e4m3, avail mem=58.06 GB, mem usage=119.04 GB.",
    ]


# --------------------------------------------------------------------------- KV sizing

CALC_SPELLINGS = [
    "DSV4 memory calculation: bytes_per_full_token=2210.40, available_bytes=12.10 GB, "
    "c128_state_fixed=0.00 GB, swa_fixed=0.41 GB, full_token=5875712",
    "DSv4 memory calculation: bytes_per_full_token=2210.40, available_bytes=12.10 GB, "
    "full_token=5875712",
    "DSV4 memory calculation: bytes_per_full_token=2210.40, available_bytes=12.10 GB, "
    "swa_fixed=0.41 GB, full_token=5875712",
    "SW KV memory calculation: bytes_per_full_token=2210.40, available_bytes=12.10 GB, "
    "full_token=5875712",
]


@pytest.mark.parametrize("calc", CALC_SPELLINGS)
def test_each_spelling_of_the_sizing_line_opens_the_kv_phase_and_gives_the_capacity(
        calc: str) -> None:
    parser, events = _feed([*_launch(), f"[{T}:56 TP0 EP0] {calc}"])
    assert "phase:kv_pool" in events[-1] and "kv_sizing" in events[-1]
    f = parser.facts()
    # No max_total_num_tokens line: the full pool is the capacity.
    assert f.max_total_num_tokens is None
    assert f.kv_capacity_tokens == 5_875_712 == f.ranks[0].kv_tokens
    sizing = f.ranks[0].kv_sizing
    assert sizing["line"] == calc.split(" memory calculation")[0]
    assert (sizing["bytes_per_full_token"], sizing["available_bytes_gb"]) == (2210.4, 12.1)
    assert f.ranks[0].kv_total_gb == 12.1  # what the pools take together
    assert ("swa_fixed_gb" in sizing) == ("swa_fixed" in calc)


@pytest.mark.parametrize("style", STYLES)
def test_the_memory_available_for_the_kv_cache_stands_in_for_the_pools_size(style: str) -> None:
    # "The available memory for KV cache is 9.19 GB.": the budget, where no line sizes the
    # pool itself; a pool line that follows has the last word.
    budget = ("TP0", "The available memory for KV cache is 9.19 GB.")
    launch = [("TP0", "Load weight end. elapsed=50.00 s, type=LlamaForCausalLM, avail mem=20.0 GB, "
               "mem usage=14.00 GB.")]
    f = parse_startup_log(dress([*launch, budget], style))
    assert f.ranks[0].kv_total_gb == 9.19 and f.phase == "kv_pool"
    pool = ("TP0", "KV Cache is allocated. #tokens: 81920, K size: 4.50 GB, V size: 4.50 GB")
    f = parse_startup_log(dress([*launch, budget, pool], style))
    assert f.ranks[0].kv_total_gb == 9.0 and f.kv_capacity_tokens == 81920


@pytest.mark.parametrize("line", [
    "DSV4 pool sizes: full=5875712, swa=20480, c4=1468928, c128=45904, c4_state=2048, "
    "c128_state=0",
    "Initialize DeepSeekV4TokenToKVPool with max_num_reqs=256, full_size=5875712, "
    "swa_size=20480, c4_size=1468928, c128_size=45904",
])
def test_pool_lines_alone_open_the_kv_phase_and_give_the_capacity(line: str) -> None:
    parser, events = _feed([*_launch(), f"[{T}:56 TP0 EP0] {line}"])
    assert "phase:kv_pool" in events[-1]
    f = parser.facts()
    assert f.kv_capacity_tokens == 5_875_712
    assert f.pool_sizes["full"] == 5_875_712
    assert (f.pool_sizes["swa"], f.pool_sizes["c4"], f.pool_sizes["c128"]) == \
        (20480, 1468928, 45904)


def test_the_whole_dsv4_sizing_with_a_draft_model_kept_apart() -> None:
    lines = [*_launch(), *[f"[{T}:56 TP{r} EP{r}] {msg}" for r in range(2) for msg in (
        "Memory profiling: available_gpu_memory=61.20 GB, total_gpu_memory=178.36 GB, "
        "mem_fraction_static=0.85, rest_memory=24.75 GB",
        "DSV4 SWA sizing: mode=cap, swa_tokens=20480, request_cap+headroom=20480, "
        "prefix_tails=16",
        CALC_SPELLINGS[0],
        "DSV4 pool sizes: full=5875712, swa=20480, c4=1468928, c128=45904, c4_state=2048, "
        "c128_state=0",
        # The draft (MTP) model's pools: kept apart, never the capacity.
        "DSV4 pool sizes: full=65536, swa=2048, c4=16384, c128=512, c4_state=256, "
        "c128_state=0",
        "Initialize DeepSeekV4TokenToKVPool with max_num_reqs=256 swa_size=2048 c4_size=16384 "
        "c128_size=512 c4_state_pool_size=256 c128_state_pool_size=257",
        "Memory pool end. avail mem=33.20 GB",
    )], f"[{T}:58 TP0 EP0] max_total_num_tokens=5875712, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=256, context_len=1048576, "
        "available_gpu_mem=33.20 GB"]
    parser, _ = _feed(lines)
    f = parser.facts()
    assert f.kv_capacity_tokens == f.max_total_num_tokens == 5_875_712
    assert f.pool_sizes == {"full": 5875712, "swa": 20480, "c4": 1468928, "c128": 45904,
                            "c4_state": 2048, "c128_state": 0}
    assert f.draft_pool_sizes["full"] == 65536
    assert f.draft_pool_sizes["c128_state"] == 0  # the sizes line wins; the pool adds none
    assert f.draft_pool_sizes["max_num_reqs"] == 256
    r1 = f.ranks[1]
    assert r1.memory_profile == {"available_gpu_memory_gb": 61.2, "total_gpu_memory_gb": 178.36,
                                 "mem_fraction_static": 0.85, "rest_memory_gb": 24.75}
    assert r1.swa_sizing == {"mode": "cap", "swa_tokens": 20480,
                             "request_cap+headroom": 20480, "prefix_tails": 16}
    assert r1.pool_end_avail_gb == 33.2
    assert f.phase == "kv_pool"


def test_a_pool_sized_below_zero_fails_the_start_in_the_kv_phase() -> None:
    parser, events = _feed([*_launch(), f"[{T}:56 TP0] DSV4 memory calculation: "
                            "bytes_per_full_token=2210.40, available_bytes=-3.20 GB, "
                            "full_token=-1554432"])
    assert "failed" in events[-1]
    f = parser.facts()
    assert (f.phase, f.failed_in) == (FAILED, "kv_pool")


# --------------------------------------------------------------------------- server args


def test_server_args_are_parsed_typed_and_secrets_redacted() -> None:
    line = (f"[{T}:00] server_args=ServerArgs(model_path='/models/DeepSeek-V4.1-Flash', "
            "tokenizer_path='/models/DeepSeek-V4.1-Flash', tp_size=8, pp_size=1, dp_size=8, "
            "ep_size=8, enable_dp_attention=True, mem_fraction_static=0.82, "
            "kv_cache_dtype='fp8_e4m3', page_size=256, attention_backend='dsv4', "
            "decode_attention_backend=None, speculative_algorithm='EAGLE', "
            "speculative_num_steps=3, speculative_num_draft_tokens=4, "
            "enable_hierarchical_cache=True, hicache_ratio=2.0, api_key='sk-very-secret', "
            "cuda_graph_bs=[1, 2, 4, 8], json_model_override_args='{\"a\": 1, \"b\": [2, 3]}', "
            "lora_paths={'x': '/l/x'}, moe_runner_backend=<MoeRunnerBackend.AUTO: 'auto'>, "
            "engram_config='{\"placement\": \"cpu\", \"replication\": \"per_node\"}')")
    parser, events = _feed([line])
    assert "server_args" in events[0]
    a = parser.facts().server_args
    assert a is not None
    assert (a.tp_size, a.pp_size, a.dp_size, a.ep_size) == (8, 1, 8, 8)
    assert (a.mem_fraction_static, a.kv_cache_dtype, a.page_size) == (0.82, "fp8_e4m3", 256)
    assert a.model_path == "/models/DeepSeek-V4.1-Flash"
    assert (a.attention_backend, a.decode_attention_backend) == ("dsv4", None)
    assert (a.speculative_algorithm, a.speculative_num_steps) == ("EAGLE", 3)
    assert a.enable_dp_attention is True and a.enable_hierarchical_cache is True
    assert a.engram_config == '{"placement": "cpu", "replication": "per_node"}'
    assert a.raw["cuda_graph_bs"] == [1, 2, 4, 8]
    assert a.raw["lora_paths"] == {"x": "/l/x"}
    assert a.raw["moe_runner_backend"] == "<MoeRunnerBackend.AUTO: 'auto'>"  # kept as text
    assert a.raw["api_key"] == "<redacted>"
    assert "sk-very-secret" not in str(parser.facts().to_dict())


def test_a_typo_in_a_server_args_value_is_kept_as_text_not_a_crash() -> None:
    parser, _ = _feed([f"[{T}:00] server_args=ServerArgs(tp_size=four, pp_size=1, "
                       "model_path='unterminated)"])
    a = parser.facts().server_args
    assert a is not None and a.tp_size is None and a.pp_size == 1
    assert a.raw["tp_size"] == "four"


def test_weights_per_gpu_come_from_avail_mem_when_mem_usage_is_not_printed() -> None:
    parser, _ = _feed([f"[{T}:05 TP0] Load weight begin. avail mem=177.10 GB",
                       f"[{T}:55 TP0] Load weight end. type=DeepseekV4ForCausalLM, "
                       "quant=fp8, avail mem=58.06 GB."])
    r = parser.facts().ranks[0]
    assert r.weights_gb == 119.04 and r.weight_loads[0].mem_usage_derived


# --------------------------------------------------------------------------- prefixes


@pytest.mark.parametrize(("prefix", "rank"), [
    (f"[{T}:05 TP3]", 3),
    (f"[{T}:05 DP1 TP3 EP3]", 3),
    (f"[{T}:05.123 TP3 EP3]", 3),
    ("[gpu_id=3]", 3),
])
def test_prefixes_of_every_era_give_the_rank(prefix: str, rank: int) -> None:
    parser, _ = _feed([f"{prefix} Load weight begin. avail mem=177.10 GB"])
    assert list(parser.facts().ranks) == [rank]


def test_time_only_prefixes_give_ranks_and_times_across_midnight() -> None:
    lines = ["[23:59:50 TP0] Init torch distributed begin.",
             "[23:59:51 TP1] Init torch distributed begin.",
             "[23:59:58 TP1] Load weight begin. avail mem=177.10 GB",
             "[00:00:10 TP1] Load weight end. elapsed=12.00 s, type=X, avail mem=58.06 GB, "
             "mem usage=119.04 GB.",
             "[00:00:20] The server is fired up and ready to roll!"]
    f = parse_startup_log("\n".join(lines))
    assert sorted(f.ranks) == [0, 1]
    assert f.phase_durations()["total"] == 30.0  # 23:59:50 to 00:00:20 the next day
    assert f.ranks[1].weights_gb == 119.04


@pytest.mark.parametrize("outer", [
    "sglang-1  | ",
    "\x1b[36msglang-server-1  |\x1b[0m ",
    "2026-10-02T14:05:00.123456789Z ",
    "2026-10-02 14:05:00 ",
    "sglang-1  | 2026-10-02T14:05:00.123Z ",
    "[pod/sglang-0/sglang] ",
    "Oct  2 14:05:00 gpu-node-07 sglang[4242]: ",
])
def test_container_prefixes_are_taken_off_and_the_launch_time_is_kept(outer: str) -> None:
    lines = [outer + line for line in (
        f"[{T}:00] server_args=ServerArgs(tp_size=1)",
        f"[{T}:02 TP0] Load weight begin. avail mem=177.10 GB",
        f"[{T}:40 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/srt/model_executor/model_runner.py", line 300, in init_memory_pool',
        "    self.token_to_kv_pool = DeepSeekV4TokenToKVPool(",
        "AssertionError: pool sizes must be positive",
    )]
    f = parse_startup_log("\n".join(lines))
    assert f.launch_at is not None and not f.log_starts_after_launch
    assert f.failed_at == f.launch_at + 40.0
    assert f.failed_in == "kv_pool"  # the frame under the container prefix was read
    assert f.errors[0].exception == "AssertionError: pool sizes must be positive"


def test_a_container_time_serves_lines_without_sglangs_own() -> None:
    f = parse_startup_log("2026-10-02T14:05:00Z Load weight begin. avail mem=10.00 GB\n"
                          "2026-10-02T14:05:30Z Load weight end. type=X, avail mem=4.00 GB\n")
    assert f.phase_durations()["weights"] == 30.0


# --------------------------------------------------------------------------- part-way


def test_a_log_that_starts_after_launch_says_so_and_counts_no_time_to_ready() -> None:
    lines = [
        f"[{T}:56 TP0] DSV4 pool sizes: full=5875712, swa=20480, c4=1468928, c128=45904, "
        "c4_state=2048, c128_state=0",
        f"[{T}:57 TP0] Memory pool end. avail mem=33.20 GB",
        f"[{T}:59 TP0] Capture cuda graph begin. avail mem=33.20 GB",
        f"[{T}:59 TP0] Capture cuda graph end. Time elapsed: 9.00 s. mem usage=2.30 GB. "
        "avail mem=30.90 GB.",
        f"[{T}:59] The server is fired up and ready to roll!",
    ]
    f = parse_startup_log("\n".join(lines))
    assert f.log_starts_after_launch and f.notes == (NOTE_AFTER_LAUNCH,)
    assert f.launch_at is None
    durations = f.phase_durations()
    assert "total" not in durations and "launching" not in durations
    assert [s.phase for s in f.timeline][0] == "kv_pool"
    assert f.ready and f.kv_capacity_tokens == 5_875_712
    d = f.to_dict()
    assert list(d["notes"]) == [NOTE_AFTER_LAUNCH] and "total" not in d["phase_durations"]


def test_a_log_of_serving_only_is_after_launch_too() -> None:
    f = parse_startup_log(f"[{T}:00 TP0] Decode batch, #running-req: 3, #token: 900, "
                          "token usage: 0.01, cuda graph: True, gen throughput (token/s): "
                          "40.00, #queue-req: 0\n")
    assert f.log_starts_after_launch and f.launch_at is None


def test_a_log_from_launch_is_not_after_launch() -> None:
    f = parse_startup_log("/x/y.py:3: UserWarning: noise\n  warn()\n" + "\n".join(_launch()))
    assert not f.log_starts_after_launch and f.notes == ()
    assert f.phase_durations(now=f.last_line_at)["total"] == 55.0


# --------------------------------------------------------------------------- phases


def test_phases_move_forward_on_ends_and_sizing_lines_alone() -> None:
    steps = [
        (f"[{T}:10 TP0] Load weight end. elapsed=50.00 s, type=X, avail mem=5.00 GB, "
         "mem usage=9.00 GB.", "weights"),
        (f"[{T}:11 TP0] Memory profiling: available_gpu_memory=5.00 GB, "
         "total_gpu_memory=20.00 GB, mem_fraction_static=0.8, rest_memory=2.00 GB", "kv_pool"),
        (f"[{T}:12 TP0] Capture cuda graph end. Time elapsed: 9.00 s. mem usage=0.30 GB. "
         "avail mem=1.00 GB.", "graphs"),
    ]
    parser = StartupLogParser()
    for line, phase in steps:
        parser.feed(line)
        assert parser.current_phase() == phase, line
    parser = StartupLogParser()
    parser.feed(f"[{T}:10 TP0] Load weight begin. avail mem=10.00 GB")
    parser.feed(f"[{T}:12 TP0] Memory pool end. avail mem=3.00 GB")  # no KV line of any kind
    assert parser.current_phase() == "kv_pool"


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(("line", "kind", "phase"), [
    ("RuntimeError: Loaded weights leave no GPU memory for the KV cache (available_bytes="
     "-3.20 GB); lower --mem-fraction-static or move the Engram tables to host memory",
     "oom", "kv_pool"),
    ("ValueError: DSV4 full_token must be positive, profiled value -1554432", "oom",
     "kv_pool"),
    ("AssertionError: page_size must divide the SWA window", "exception", "kv_pool"),
    ("CUDA Error: an illegal memory access was encountered "
     "/sgl-kernel/csrc/attention/dsv4.cu:211", "cuda", "kv_pool"),
    ("Received sigquit from a child process. It usually means the child failed.",
     "child_failed", "kv_pool"),
])
def test_failures_without_a_traceback(line: str, kind: str, phase: str) -> None:
    # The weights have ended: what fails now fails while the KV pool is set up.
    parser, events = _feed([*_launch(), f"[{T}:56 TP0] {line}"])
    assert events[-1][:2] == ["error", "failed"]
    f = parser.facts()
    assert (f.phase, f.failed_in) == (FAILED, phase)
    assert f.errors[0].kind == kind and f.errors[0].fatal


def test_a_kv_failure_while_weights_still_load_elsewhere_is_still_a_kv_failure() -> None:
    lines = [f"[{T}:05 TP{r}] Load weight begin. avail mem=177.10 GB" for r in range(2)]
    lines += [f"[{T}:55 TP0] RuntimeError: Not enough memory. Please try to increase "
              "--mem-fraction-static. Current value: mem_fraction_static=0.85"]
    f = parse_startup_log("\n".join(lines))
    assert f.failed_in == "kv_pool"


def test_a_traceback_names_the_model_runner_step_it_failed_in() -> None:
    lines = [f"[{T}:05 TP0] Load weight begin. avail mem=177.10 GB",
             f"[{T}:40 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/sgl/srt/managers/scheduler.py", line 2731, in run_scheduler_process',
             '  File "/sgl/srt/model_executor/model_runner.py", line 340, in initialize',
             '  File "/sgl/srt/model_executor/model_runner.py", line 612, in init_device_graphs',
             '  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 401, in capture',
             '  File "/sgl/srt/mem_cache/memory_pool.py", line 88, in set_kv_buffer',
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    f = parse_startup_log("\n".join(lines))
    # The capture's forward pass wrote KV: the failure is the capture's, not the pool's.
    assert f.failed_in == "graphs" and f.errors[0].kind == "oom"
    assert f.errors[0].phase == "graphs"


def test_a_bare_error_after_ready_is_recorded_not_fatal() -> None:
    parser, _ = _feed([*_launch(), f"[{T}:59] The server is fired up and ready to roll!",
                       f"[{T}:59 TP0] RuntimeError: something at runtime"])
    f = parser.facts()
    assert f.ready and f.failed_at is None
    assert [(e.kind, e.fatal) for e in f.errors] == [("exception", False)]


def test_lines_that_only_mention_errors_are_not_failures() -> None:
    parser, _ = _feed([*_launch(), f"[{T}:56 TP0] Ignore import error when loading "
                       "sglang.srt.models.foo: ModuleNotFoundError: No module named 'foo'",
                       f"[{T}:56 TP0] WARNING utils.py:12: retry after Error: busy"])
    assert parser.facts().errors == () and parser.current_phase() == "weights"


# --------------------------------------------------------------------------- batches


def test_hybrid_batch_lines_give_both_pools() -> None:
    parser, _ = _feed([
        f"[{T}:00 TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 256, #cached-token: 0, "
        "full token usage: 0.00, swa token usage: 0.02, #running-req: 0, #queue-req: 0, "
        "#pending-token: 0, cuda graph: False, input throughput (token/s): 5120.00",
        f"[{T}:01 TP0 EP0] Decode batch, #running-req: 3, #full token: 9000, full token "
        "usage: 0.12, #swa token: 1152, swa token usage: 0.40, cuda graph: True, "
        "gen throughput (token/s): 80.00, #queue-req: 2",
    ])
    f = parser.facts()
    assert f.prefill is not None and f.decode is not None
    assert (f.prefill.full_token_usage, f.prefill.swa_token_usage) == (0.0, 0.02)
    assert f.prefill.token_usage == 0.0
    d = f.decode
    assert (d.num_tokens, d.full_token_usage, d.swa_tokens, d.swa_token_usage) == \
        (9000, 0.12, 1152, 0.40)
    assert (d.token_usage, d.running_reqs, d.queue_reqs) == (0.12, 3, 2)


# --------------------------------------------------------------------------- Engram


def test_engram_layer_statistics_and_unknown_engram_lines() -> None:
    parser = StartupLogParser()
    for t, lookups in ((100.0, 7311), (110.0, 8000)):
        parser.feed(f"[{T}:00 TP0 EP0] Engram layer=14 lookups={lookups} hit_rate=12.5% "
                    "reads=6397 cache=1.0GiB(4-way) scales=0.2GiB threads=64 packed=True "
                    "prefetch_depth=2", at=t)
    parser.feed(f"[{T}:00 TP0] Engram row cache resized to 2.0GiB after 3 evictions", at=111.0)
    parser.feed(f"[{T}:00 TP0] engram: NUMA replica 1 bound to node 1", at=112.0)
    f = parser.facts()
    layer = f.engram_layers[14]
    assert (layer["lookups"], layer["hit_rate_pct"], layer["reads"]) == (8000, 12.5, 6397)
    assert (layer["cache_gib"], layer["cache_ways"], layer["scales_gib"]) == (1.0, 4, 0.2)
    assert (layer["threads"], layer["packed"], layer["prefetch_depth"]) == (64, True, 2)
    assert layer["interval_s"] == 10.0 and layer["lookups_total"] == 15311
    assert f.engram_messages == ("Engram row cache resized to 2.0GiB after 3 evictions",
                                 "engram: NUMA replica 1 bound to node 1")


# --------------------------------------------------------------------------- unbounded


def _one_launch(i: int) -> list[str]:
    day = f"2026-10-{1 + i // 1000:02d} {i // 60 % 24:02d}:{i % 60:02d}"
    return [f"[{day}:00] server_args=ServerArgs(tp_size=4)",
            *[f"[{day}:0{r} TP{r}] {msg}" for r in range(4) for msg in (
                "Init torch distributed begin.",
                "Load weight begin. avail mem=177.10 GB",
                "Load weight end. elapsed=50.00 s, type=DeepseekV4ForCausalLM, quant=fp8, "
                "avail mem=58.06 GB, mem usage=119.04 GB.",
                "DSV4 pool sizes: full=11840000, swa=112640, c4=2960000, c128=92500, "
                "c4_state=14080, c128_state=0",
                "Memory pool end. avail mem=33.20 GB")],
            f"[{day}:09 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, "
            "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",
            f"[{day}:09] RuntimeError: a runtime error of launch {i}",
            f"[{day}:09] The server is fired up and ready to roll!"]


@pytest.mark.slow
def test_a_log_of_one_launch_repeated_is_many_runs_and_memory_stays_bounded() -> None:
    parser = StartupLogParser()
    for i in range(40):
        for line in _one_launch(i):
            parser.feed(line)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(40, 1040):
        for line in _one_launch(i):
            parser.feed(line)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    f = parser.facts()
    assert f.launches == 1040
    assert len(f.ranks) == 4
    for r in f.ranks.values():
        assert len(r.weight_loads) == 1 and r.weights_gb == r.all_weights_gb == 119.04
    assert f.kv_capacity_tokens == 11_840_000
    assert [e.text for e in f.errors] == ["RuntimeError: a runtime error of launch 1039"]
    assert grown < 256 * 1024, grown  # a thousand launches later: no more memory held


@pytest.mark.slow
def test_inspect_log_prints_the_new_facts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import subprocess
    import sys

    log = tmp_path / "server.log"
    log.write_text("\n".join("sglang-1  | " + line for line in [
        *_launch(),
        f"[{T}:56 TP0 EP0] {CALC_SPELLINGS[0]}",
        f"[{T}:56 TP0 EP0] DSV4 pool sizes: full=5875712, swa=20480, c4=1468928, c128=45904, "
        "c4_state=2048, c128_state=0",
        f"[{T}:58 TP0 EP0] Engram layer=14 lookups=7311 hit_rate=12.5% reads=6397 "
        "cache=1.0GiB(4-way) scales=0.2GiB threads=64 packed=True",
    ]) + "\n")
    res = subprocess.run([sys.executable, "-m", "engram_top", "inspect-log", str(log)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["kv_capacity_tokens"] == 5_875_712 and out["pool_sizes"]["swa"] == 20480
    assert out["server_args"]["tp_size"] == 4 and out["server_args"]["ep_size"] == 4
    assert out["swa_full_tokens_ratio"] == 0.1
    assert out["engram_layers"]["14"]["hit_rate_pct"] == 12.5
    assert out["ranks"]["0"]["kv_sizing"]["line"] == "DSV4"
    assert out["log_starts_after_launch"] is False and out["launches"] == 1
    assert out["phase_durations"]["weights"] == 50.0
