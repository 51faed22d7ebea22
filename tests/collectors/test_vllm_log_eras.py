"""vLLM's start-up log by era and by pattern: V0's worker lines (weights in GB, the memory
profile in one line or several, blocks), the fatal "max seq len .. can be stored in KV cache
(N)" (an error, and N the capacity as stated), v0.21+'s estimated CUDA graph memory, the
maximum concurrency as a field, ranks by every parallel dimension the prefix names, a
launch's sizes from its args dump, config line or a pasted command, failures placed by their
words and frames, teardown, and time that never runs backwards.

Lines are written here in each era's wording, then dressed as a log reaches a reader: bare,
with vLLM's own date and time, a time of day only, behind a Kubernetes or CRI timestamp, a
docker compose name, a shipper's ``time | ``, or as docker's JSON records.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.readings import Reading, ServerData, Status
from collectors.source import SourceName
from collectors.startup_facts import PHASES, KvShortfall, StartupFacts
from collectors.vllm.startup_log import VllmLogParser
from engram_top.cli.commands import main as engram_top_main
from engram_top.model.facts import kv_facts
from engram_top.model.store import RunFacts, RunStore

OUTER = ("none", "k8s", "cri", "compose", "shipper", "json")
OWN = ("date", "tod", "old", "bare")


def line(msg: str, i: int, proc: str | None = None, level: str = "INFO", own: str = "date",
         outer: str = "none", where: str = "worker.py:1") -> str:
    """One vLLM line, written as its process and era print it, then wrapped."""
    m, s = divmod(i, 60)
    tag = f"({proc}) " if proc else ""
    if own == "date":
        text = f"{tag}{level} 07-12 02:{m:02d}:{s:02d} [{where}] {msg}"
    elif own == "tod":  # a handler that prints the time of day first
        text = f"02:{m:02d}:{s:02d} {tag}{level} {msg}"
    elif own == "old":  # before 0.6: no opening bracket before the file
        text = f"{tag}{level} 07-12 02:{m:02d}:{s:02d} {where}] {msg}"
    else:
        text = f"{tag}{msg}" if proc else msg
    return wrap(text, i, outer)


def wrap(text: str, i: int, outer: str) -> str:
    m, s = divmod(i, 60)
    iso = f"2026-07-12T02:{m:02d}:{s:02d}.{i:06d}Z"
    return {"none": text, "k8s": f"{iso} {text}", "cri": f"{iso} stdout F {text}",
            "compose": f"vllm-1  | {text}",
            "shipper": f"2026-07-12 02:{m:02d}:{s:02d}.350 | {text}",
            "json": json.dumps({"log": text + "\n", "stream": "stdout", "time": iso})}[outer]


def read(lines: list[str]) -> StartupFacts:
    p = VllmLogParser()
    for text in lines:
        p.feed(text)
    return p.facts()


def raw(text: str, outer: str = "none", i: int = 0) -> str:
    """A line without vLLM's prefix (a traceback's, a wrapped message's), as wrapped."""
    return wrap(text, i, outer)


# --------------------------------------------------------------------------- V0's workers


@pytest.mark.parametrize("outer", OUTER)
@pytest.mark.parametrize("own", OWN)
def test_v0_weights_profile_and_blocks_in_every_dress(own: str, outer: str) -> None:
    kw = {"own": own, "outer": outer}
    f = read([
        line("Initializing an LLM engine (v0.6.4.post1) with config: model='m', "
             "speculative_config=None, tensor_parallel_size=1, pipeline_parallel_size=1, "
             "max_seq_len=32768, block_size=16, seed=0", 0, **kw),
        line("Starting to load model m...", 1, **kw),
        line("Loading model weights took 14.9888 GB", 9, where="model_runner.py:1072", **kw),
        line("Memory profiling takes 5.35 seconds", 12, **kw),
        line("the current vLLM instance can use total_gpu_memory (79.15GiB) x "
             "gpu_memory_utilization (0.90) = 71.24GiB", 12, **kw),
        line("model weights take 14.99GiB; non_torch_memory takes 0.09GiB; PyTorch activation "
             "peak memory takes 1.16GiB; the rest of the memory reserved for KV Cache is "
             "55.00GiB.", 12, **kw),
        line("# cuda blocks: 28160, # CPU blocks: 2048", 13, where="executor_base.py:111", **kw),
        line("Maximum concurrency for 32768 tokens per request: 13.75x", 13, **kw),
        line("Graph capturing finished in 15 secs.", 30, **kw),
    ])
    r = f.ranks[0]
    assert r.weights_gb == pytest.approx(14.9888)  # the loading line, not the profile's 14.99
    assert r.kv_total_gb == pytest.approx(55.0)
    assert r.memory_profile == pytest.approx({
        "total_gpu_memory_gb": 79.15, "gpu_memory_utilization": 0.9, "usable_gb": 71.24,
        "weights_gb": 14.99, "non_torch_gb": 0.09, "activation_peak_gb": 1.16,
        "kv_cache_gb": 55.0})
    assert r.graph_elapsed_s == 15.0 and r.graph_mem_usage_gb is None  # V0 states no GiB
    # No token count: the blocks x the block size the config line states, said so.
    assert f.kv_capacity_tokens == 28160 * 16
    assert "28160 x 16" in f.derived["kv_capacity_tokens"]
    assert (f.max_concurrency, f.max_concurrency_tokens) == (13.75, 32768)
    assert f.scheduler_extra["version"] == "0.6.4.post1"
    assert f.scheduler_extra["num_gpu_blocks"] == "28160"
    assert f.context_len == 32768 or f.server_args.context_length == 32768
    assert f.server_args.tp_size == 1 and f.server_args.model_path == "m"


@pytest.mark.parametrize("outer", ["none", "k8s", "json"])
def test_v0_profile_split_over_lines_and_the_results_form(outer: str) -> None:
    f = read([
        line("Memory profiling takes 11.85 seconds", 0, where="gpu_worker.py:227", outer=outer),
        raw("the current vLLM instance can use total_gpu_memory (79.11GiB) x "
            "gpu_memory_utilization (0.90) = 71.20GiB", outer, 0),
        raw("model weights take 14.99GiB; non_torch_memory takes 0.35GiB; PyTorch activation "
            "peak memory takes 1.24GiB;", outer, 0),
        raw("the rest of the memory reserved for KV Cache is 54.62GiB.", outer, 0),
    ])
    r = f.ranks[0]
    assert r.kv_total_gb == pytest.approx(54.62)
    assert r.weights_gb == pytest.approx(14.99)  # only the profile says it here: said so
    assert "ranks.weights_gb" in f.derived
    assert r.memory_profile["activation_peak_gb"] == pytest.approx(1.24)
    g = read([line("Memory profiling results: duration=12.34 seconds, total_gpu_memory=44.35GiB,"
                   " initial_memory_usage=0.52GiB, peak_torch_memory=9.52GiB, "
                   "memory_usage_post_profile=0.68Gib, non_torch_memory=0.34GiB, "
                   "kv_cache_size=8.77GiB, gpu_memory_utilization=0.42.", 0, outer=outer)])
    assert g.ranks[0].kv_total_gb == pytest.approx(8.77)
    assert g.ranks[0].memory_profile["peak_torch_memory_gb"] == pytest.approx(9.52)
    assert g.ranks[0].memory_profile["gpu_memory_utilization"] == pytest.approx(0.42)


def test_nothing_left_for_the_kv_cache_is_a_negative_figure_and_a_failure() -> None:
    f = read([
        line("Model loading took 6.5935 GiB and 7.243515 seconds", 0, own="tod"),
        line("model weights take 6.59GiB; non_torch_memory takes 8.29GiB; PyTorch activation "
             "peak memory takes 4.93GiB; the rest of the memory reserved for KV Cache is "
             "-7.83GiB.", 5, own="tod"),
        line("# GPU blocks: 0, # CPU blocks: 0", 5, own="tod"),
        raw("ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."),
    ])
    assert f.ranks[0].kv_total_gb == pytest.approx(-7.83)
    assert f.ranks[0].weights_elapsed_s == pytest.approx(7.243515)
    assert f.phase == "failed" and f.failed_in == "kv_pool"
    assert f.failure_cause.startswith("ValueError: No available memory for the cache blocks")


# --------------------------------------------------------------------------- the KV cache's fit

TOO_LONG = ("ValueError: The model's max seq len (163840) is larger than the maximum number of "
            "tokens that can be stored in KV cache (63040). Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.")


@pytest.mark.parametrize("shape", ["torch_rank", "bare", "worker_error", "ray", "json", "k8s"])
def test_a_max_seq_len_over_the_kv_cache_fails_and_states_the_capacity(shape: str) -> None:
    head = [line("Starting to load model deepseek-ai/DeepSeek-Coder-V2-Lite-Instruct...", 0),
            line("Loading model weights took 29.3 GB", 20),
            line("# GPU blocks: 3940, # CPU blocks: 4096", 30),
            line("Maximum concurrency for 163840 tokens per request: 0.38x", 30)]
    fatal = {"torch_rank": f"[rank0]: {TOO_LONG}", "bare": TOO_LONG,
             "worker_error": line(TOO_LONG, 31, "VllmWorkerProcess pid=7", "ERROR"),
             "ray": line(TOO_LONG, 31, "RayWorkerWrapper pid=3918397, ip=10.0.0.2", "ERROR"),
             "json": wrap(f"[rank0]: {TOO_LONG}", 31, "json"),
             "k8s": wrap(TOO_LONG, 31, "k8s")}[shape]
    tail = [raw("[rank0]: Traceback (most recent call last):") if shape == "torch_rank" else
            raw("Traceback (most recent call last):"), fatal]
    f = read(head + tail)
    assert f.phase == "failed" and f.failed_in == "kv_pool" and not f.ready
    assert f.errors and f.errors[-1].fatal and "163840" in f.errors[-1].text
    assert f.failure_cause.startswith("ValueError: The model's max seq len (163840)")
    # The log states N: the capacity, as stated (not 3940 x 16, not 163840 x 0.38).
    assert f.kv_capacity_tokens == 63040 and "kv_capacity_tokens" not in f.derived
    assert f.scheduler_extra["max_seq_len"] == "163840"


def test_v1_says_the_kv_cache_needed_and_the_length_that_would_fit() -> None:
    f = read([
        line("Available KV cache memory: 3.24 GiB", 0, "EngineCore_DP0 pid=3"),
        line("EngineCore failed to start.", 1, "EngineCore_DP0 pid=3", "ERROR",
             where="core.py:708"),
        line("Traceback (most recent call last):", 1, "EngineCore_DP0 pid=3", "ERROR"),
        line('  File "/v/vllm/v1/core/kv_cache_utils.py", line 700, in check_enough_kv_cache_'
             'memory', 1, "EngineCore_DP0 pid=3", "ERROR"),
        line("ValueError: To serve at least one request with the models's max seq len (131072),"
             " (8.00 GiB KV cache is needed, which is larger than the available KV cache memory"
             " (3.24 GiB). Based on the available memory, the estimated maximum model length is"
             " 53024. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
             "when initializing the engine.", 1, "EngineCore_DP0 pid=3", "ERROR"),
        raw("RuntimeError: Engine core initialization failed. See root cause above. Failed "
            "core proc(s): {}"),
    ])
    assert f.phase == "failed" and f.failed_in == "kv_pool"
    assert f.failure_cause.startswith("ValueError: To serve at least one request")
    # The figures typed: what one request needs, what there is, and the length that fits.
    assert f.kv_shortfall == KvShortfall(needed_gb=8.0, available_gb=3.24, max_seq_len=131072,
                                         fits_len=53024)
    assert f.kv_capacity_tokens is None  # no token count anywhere: none made up


@pytest.mark.parametrize("outer", OUTER)
def test_the_memory_report_of_later_builds_in_every_dress(outer: str) -> None:
    # 0.10+'s gpu_worker after the graphs, the stats line's prefix-cache hit rate, and the
    # chunked-prefill budget the config prints: as a 2026 node writes them, wrapped.
    tp0 = "Worker_TP0 pid=770"
    f = read([
        line("Model loading took 55.19 GiB memory and 48.502592 seconds", 0, tp0,
             where="gpu_model_runner.py:5405", outer=outer),
        line("Chunked prefill is enabled with max_num_batched_tokens=8192.", 1,
             "EngineCore pid=558", where="scheduler.py:216", outer=outer),
        line("Free memory on device (94.05/95.01 GiB) on startup. Desired GPU memory "
             "utilization is (0.9, 85.51 GiB). Actual usage is 56.89 GiB for consumed memory "
             "(weights + non-torch), 0.76 GiB for peak activation, and 0.32 GiB for CUDAGraph "
             "memory. Replace gpu_memory_utilization config with `--kv-cache-memory="
             "29407858586` (27.39 GiB) to fit into requested memory, or `--kv-cache-memory="
             "38581581312` (35.93 GiB) to fully utilize gpu memory. Current kv cache memory in "
             "use is 27.85 GiB.", 5, tp0, where="gpu_worker.py:789", outer=outer),
        line("Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation throughput: "
             "40.2 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.5%, "
             "Prefix cache hit rate: 45.2%", 9, "APIServer pid=1", where="loggers.py:123",
             outer=outer),
    ])
    rank = f.ranks[0]
    assert rank.kv_total_gb == 27.85 and rank.weights_gb == 55.19  # the loading line's
    assert rank.memory_profile == {
        "initial_free_gb": 94.05, "total_gpu_memory_gb": 95.01,
        "gpu_memory_utilization": 0.9, "usable_gb": 85.51, "weights_and_non_torch_gb": 56.89,
        "activation_peak_gb": 0.76, "cuda_graph_gb": 0.32}
    assert "ranks.weights_gb" not in f.derived
    assert f.decode is not None and f.decode.cache_hit_rate == pytest.approx(0.452)
    assert f.decode.token_usage == pytest.approx(0.125) and f.decode.queue_reqs == 1
    assert f.server_args is not None and f.server_args.chunked_prefill_size == 8192


def test_the_kv_panel_takes_the_hit_rate_from_the_stats_line_where_the_page_has_none() -> None:
    facts = read([line("Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
                       "throughput: 9.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
                       "usage: 1.0%, Prefix cache hit rate: 45.2%", 0, "APIServer pid=1")])
    store = RunStore()
    store.set_run(RunFacts(scenario="v", placement="device", node="n", time_scale=1.0,
                           launched_wall=1.7e9, launched_at=0.0, state="ready", ready_at=0.0,
                           startup=facts))
    store.add(SourceName.SERVER, Reading("vllm", Status.OK, ServerData(url="u", healthy=True)))
    kv = kv_facts(store)
    assert kv is not None and kv.cache_hit_rate == pytest.approx(0.452)
    store.add(SourceName.SERVER, Reading("vllm", Status.OK, ServerData(
        url="u", healthy=True, cache_hit_rate=0.1)))
    kv = kv_facts(store)
    assert kv is not None and kv.cache_hit_rate == 0.1  # the page's own figure first


def test_the_kv_cache_in_bytes_and_the_weights_from_the_report_alone() -> None:
    # No loading line in the paste: the report's weights stand in, said to be derived.
    f = read([line("Free memory on device (78.66/79.19 GiB) on startup. Desired GPU memory "
                   "utilization is (0.9, 71.27 GiB). Actual usage is 14.08 GiB for weight, "
                   "1.97 GiB for peak activation, 0.07 GiB for non-torch memory, and 0.67 GiB "
                   "for CUDAGraph memory. Replace gpu_memory_utilization config with "
                   "`--kv-cache-memory=58333988249` to fit into requested memory, or "
                   "`--kv-cache-memory=66273897472` to fully utilize gpu memory. Current kv "
                   "cache memory in use is 59212694937 bytes.", 0, "EngineCore_DP0 pid=3021",
                   where="gpu_worker.py:391")])
    rank = f.ranks[0]
    assert rank.kv_total_gb == pytest.approx(59212694937 / 2**30)
    assert rank.weights_gb == 14.08 and rank.memory_profile["non_torch_gb"] == 0.07
    assert f.derived["ranks.weights_gb"].startswith("derived: the memory profile's weights")


def test_a_kv_cache_reserved_by_kv_cache_memory_bytes() -> None:
    f = read([line("Initial free memory 77.91 GiB, reserved 5.32 GiB memory for KV Cache as "
                   "specified by kv_cache_memory_bytes config and skipped memory profiling. "
                   "This does not respect the gpu_memory_utilization config.", 0,
                   "EngineCore pid=29655", where="gpu_worker.py:361"),
              line("GPU KV cache size: 38,736 tokens", 1, "EngineCore pid=29655",
                   where="kv_cache_utils.py:1319")])
    assert f.ranks[0].kv_total_gb == 5.32 and f.kv_capacity_tokens == 38736
    assert f.ranks[0].memory_profile["initial_free_gb"] == 77.91


def test_the_later_wording_of_the_kv_shortfall() -> None:
    # 2026's check words it without the parenthesis, and "Estimated" with a capital.
    f = read([line("ValueError: To serve at least one request with the model's max seq len "
                   "(1000000), 3.09 GiB KV cache is needed, which is larger than the available "
                   "KV cache memory (0.24 GiB). Estimated maximum model length is 57344.", 0,
                   "EngineCore pid=7", "ERROR", where="core.py:1385")])
    assert f.kv_shortfall == KvShortfall(needed_gb=3.09, available_gb=0.24,
                                         max_seq_len=1000000, fits_len=57344)


# --------------------------------------------------------------------------- graphs, concurrency


@pytest.mark.parametrize("outer", ["none", "json", "compose"])
def test_the_estimated_cuda_graph_memory_is_graph_memory_until_a_capture_says(outer: str) -> None:
    est = [line("Estimated CUDA graph memory: 1.58 GiB total", 10, f"Worker_TP{r} pid=51{r}",
                where="gpu_model_runner.py:6639", outer=outer) for r in range(2)]
    f = read(est)
    for r in range(2):
        assert f.ranks[r].graph_estimate_gb == pytest.approx(1.58)
        assert f.ranks[r].graph_mem_usage_gb == pytest.approx(1.58)
        assert f.ranks[r].coords == {"TP": r} and f.ranks[r].label == f"TP{r}"
    assert "Estimated CUDA graph memory" in f.derived["ranks.graph_mem_usage_gb"]
    captured = read([*est, line("Graph capturing finished in 4 secs, took 0.45 GiB", 20,
                                "Worker_TP0 pid=510", outer=outer),
                     line("CUDA graph pool memory: 0.52 GiB (actual), 1.58 GiB (estimated)",
                          21, "Worker_TP1 pid=511", outer=outer)])
    assert captured.ranks[0].graph_mem_usage_gb == pytest.approx(0.45)  # what it took
    assert captured.ranks[1].graph_mem_usage_gb == pytest.approx(0.52)  # the pool's actual
    assert captured.ranks[0].graph_estimate_gb == pytest.approx(1.58)
    assert "ranks.graph_mem_usage_gb" not in captured.derived


@pytest.mark.parametrize(("text", "tokens", "x"), [
    ("Maximum concurrency for 65,536 tokens per request: 18.23x", 65536, 18.23),
    ("Maximum concurrency for 2048 tokens per request: 85.16x", 2048, 85.16),
    ("Maximum concurrency for 4096 tokens per request: 0.00x", 4096, 0.0),
])
def test_the_maximum_concurrency_is_a_field_and_a_stated_token_count_wins(
        text: str, tokens: int, x: float) -> None:
    f = read([line(text, 0, "EngineCore pid=75", own="tod")])
    assert (f.max_concurrency_tokens, f.max_concurrency) == (tokens, x)
    assert f.kv_capacity_tokens == round(tokens * x)
    assert "concurrency" in f.derived["kv_capacity_tokens"]
    g = read([line("GPU KV cache size: 331,584 tokens", 0, "EngineCore pid=75"),
              line(text, 0, "EngineCore pid=75")])
    assert g.kv_capacity_tokens == 331584 and "kv_capacity_tokens" not in g.derived


# --------------------------------------------------------------------------- ranks


def test_workers_named_by_tp_pp_and_dp_are_ranks_of_their_own() -> None:
    lines = [line("Model loading took 10.0 GiB and 5.0 seconds", i, f"Worker_PP{pp}_TP{tp} pid={i}")
             for i, (pp, tp) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)])]
    f = read(lines)
    assert sorted(f.ranks) == [0, 1, 2, 3]  # PP0 TP0 and PP1 TP0 are two ranks
    assert f.ranks[2].coords == {"PP": 1, "TP": 0} and f.ranks[2].label == "PP1 TP0"
    assert f.parallel == {"tp_size": 2, "pp_size": 2}
    assert f.parallel_from == {"tp_size": "rank prefixes", "pp_size": "rank prefixes"}
    assert "parallel.pp_size" in f.derived and "parallel.tp_size" in f.derived
    dp = read([line("Model loading took 9.0 GiB and 4 s", i, f"Worker_DP{d}_TP{t}_EP{d * 2 + t} "
                    f"pid={i}") for i, (d, t) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)])])
    assert sorted(dp.ranks) == [0, 1, 2, 3]
    assert dp.ranks[3].coords == {"DP": 1, "TP": 1, "EP": 3}
    assert dp.parallel == {"tp_size": 2, "dp_size": 2, "ep_size": 4}


@pytest.mark.parametrize("outer", ["none", "k8s", "json"])
def test_v0_and_ray_workers_are_placed_by_rank_or_by_what_their_pid_said(outer: str) -> None:
    f = read([
        line("Loading model weights took 15.6 GB", 1, outer=outer),  # the driver: rank 0
        line("world_size=4 rank=1 local_rank=1 distributed_init_method=tcp://127.0.0.1:1 "
             "backend=nccl", 0, "VllmWorkerProcess pid=71", outer=outer),
        line("Loading model weights took 15.7 GB", 2, "VllmWorkerProcess pid=71", outer=outer),
        line("Loading model weights took 15.8 GB", 2, "VllmWorker rank=2 pid=72", outer=outer),
        raw("[rank3]: Loading model weights took 15.9 GB", outer, 3),
    ])
    assert {r: round(x.weights_gb, 1) for r, x in f.ranks.items()} == {
        0: 15.6, 1: 15.7, 2: 15.8, 3: 15.9}
    ray = read([line("rank 1 in world size 2 is assigned as DP rank 0, PP rank 0, TP rank 1, "
                     "EP rank 1", 0, "Worker pid=9", outer=outer),
                line("Model loading took 8.1 GiB and 3 seconds", 1, "Worker pid=9", outer=outer),
                line("Model loading took 8.0 GiB and 3 seconds", 1, "Worker_TP0 pid=8",
                     outer=outer),
                line("model weights take 15.63GiB; non_torch_memory takes 0.81GiB; PyTorch "
                     "activation peak memory takes 3.52GiB; the rest of the memory reserved for"
                     " KV Cache is 11.57GiB.The engine can allocate 12225 GPU blocks, 4228 CPU "
                     "blocks on PP Rank 1 TP Rank 0.", 2, "RayWorkerWrapper pid=3918397",
                     outer=outer)])
    assert ray.ranks[1].weights_gb == pytest.approx(8.1)
    assert ray.ranks[1].coords == {"DP": 0, "PP": 0, "TP": 1, "EP": 1}
    assert ray.ranks[2].kv_total_gb == pytest.approx(11.57)
    assert ray.ranks[2].coords == {"PP": 1, "TP": 0}


@pytest.mark.parametrize("outer", ["none", "k8s", "json"])
def test_v0_workers_that_never_say_their_rank_are_ranks_of_their_own(outer: str) -> None:
    # V0's multiprocessing workers, no rank line in the paste: each a rank of its own, in
    # the order of their pids (they start one rank after another), not rank 0's lines.
    f = read([
        line("Loading model weights took 15.6 GB", 1, outer=outer),  # the driver: rank 0
        line("Loading model weights took 15.7 GB", 2, "VllmWorkerProcess pid=1073",
             outer=outer),
        line("Loading model weights took 15.8 GB", 3, "VllmWorkerProcess pid=972", outer=outer),
        raw("torch.OutOfMemoryError: CUDA out of memory.", outer, 4),  # pid 972's, raw
    ])
    assert {r: round(x.weights_gb, 1) for r, x in f.ranks.items()} == {
        0: 15.6, 1: 15.8, 2: 15.7}
    assert f.parallel == {"tp_size": 3}
    assert f.derived["parallel.tp_size"].startswith("derived, at least: the driver and the 2 "
                                                    "worker process(es)")
    assert f.errors[-1].rank == 1


@pytest.mark.parametrize(("launch", "sizes", "source", "derived"), [
    ("non-default args: {'model': 'm', 'tensor_parallel_size': 4, 'data_parallel_size': 2}",
     {"tp_size": 4, "dp_size": 2}, "server_args", set()),
    ("args: Namespace(host=None, port=8000, model='m', tensor_parallel_size=2, "
     "pipeline_parallel_size=2, api_key=None, middleware=[], disable_log_stats=False)",
     {"tp_size": 2, "pp_size": 2}, "server_args", set()),
    ("$ vllm serve deepseek-ai/DeepSeek-V4.1-Flash --tensor-parallel-size 8 -dp 2 "
     "--enable-expert-parallel --max-model-len 65536",
     {"tp_size": 8, "dp_size": 2, "ep_size": 16}, "launch command", {"parallel.ep_size"}),
    ("+ python3 -m vllm.entrypoints.openai.api_server --model m --pipeline-parallel-size=2 "
     "-tp 4", {"tp_size": 4, "pp_size": 2}, "launch command", set()),
])
def test_the_parallel_sizes_a_launch_states(launch: str, sizes: dict[str, int], source: str,
                                            derived: set[str]) -> None:
    f = read([line(launch, 0, "APIServer pid=1"), line("Starting to load model m...", 1)])
    assert f.parallel == sizes
    assert set(f.parallel_from.values()) == {source}
    assert {k for k in f.derived if k.startswith("parallel")} == derived
    assert f.server_args is not None and f.server_args.tp_size == sizes["tp_size"]


# --------------------------------------------------------------------------- failures


def test_an_oom_traceback_without_times_is_placed_by_its_frames() -> None:
    head = [line("Starting to load model m...", 0, "EngineCore_DP0 pid=3"),
            line("Model loading took 60.1 GiB and 30 seconds", 30, "EngineCore_DP0 pid=3")]
    frames = ['  File "/v/vllm/v1/engine/core.py", line 83, in __init__',
              '  File "/v/vllm/v1/engine/core.py", line 180, in _initialize_kv_caches',
              '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 2900, in initialize_kv_cache',
              '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 2800, in '
              '_allocate_kv_cache_tensors',
              "    tensor = torch.zeros(size, dtype=torch.int8, device=self.device)"]
    f = read([*head, "Traceback (most recent call last):", *frames,
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 GiB. GPU 0 "
              "has a total capacity of 79.19 GiB of which 10.1 GiB is free."])
    assert f.phase == "failed" and f.failed_in == "kv_pool"  # not "weights", where the log was
    assert f.errors[-1].kind == "oom" and f.failure_cause.startswith("torch.OutOfMemoryError")
    w = read([line("Starting to load model m...", 0), "Traceback (most recent call last):",
              '  File "/v/vllm/model_executor/model_loader/loader.py", line 9, in load_model',
              '  File "/v/vllm/model_executor/models/deepseek_v2.py", line 9, in load_weights',
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB."])
    assert w.failed_in == "weights"


@pytest.mark.parametrize("outer", ["none", "k8s", "json"])
def test_an_nccl_watchdog_timeout_before_ready_fails_the_start_up(outer: str) -> None:
    f = read([line("Starting to load model m...", 0, "Worker_TP3 pid=4", outer=outer),
              raw("[rank3]:[E227 09:12:34.567891 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog "
                  "caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) "
                  "ran for 600000 milliseconds before timing out.", outer, 600),
              raw("[rank3]:[E227 09:12:34.600000 ProcessGroupNCCL.cpp:1785] [PG 0 Rank 3] "
                  "Timeout at NCCL work: 5, last enqueued NCCL work: 5, last completed NCCL "
                  "work: 4.", outer, 600)])
    assert f.phase == "failed" and f.failed_in == "weights"
    assert f.errors[0].kind == "nccl_timeout" and f.errors[0].rank == 3
    assert f.errors[0].rank_label == "TP3"
    assert "Watchdog caught collective operation timeout" in f.failure_cause


def test_no_kernel_image_during_graph_capture_fails_in_graphs() -> None:
    f = read([line("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 10%", 0,
                   "EngineCore_DP0 pid=3"),
              line("EngineCore failed to start.", 1, "EngineCore_DP0 pid=3", "ERROR"),
              raw("RuntimeError: CUDA error: no kernel image is available for execution on the "
                  "device")])
    assert f.phase == "failed" and f.failed_in == "graphs"
    assert f.failure_cause.startswith("RuntimeError: CUDA error: no kernel image")


def test_warnings_with_an_exception_name_do_not_fail_a_start_up() -> None:
    f = read([line("Starting to load model m...", 0),
              line("ImportError: cannot import flash_attn, falling back", 1, level="WARNING"),
              line("Model loading took 1.0 GiB and 1 seconds", 2)])
    assert f.phase == "weights" and f.errors == ()


# --------------------------------------------------------------------------- time and teardown


def test_teardown_after_a_server_ran_is_no_new_launch() -> None:
    lines = [line("non-default args: {'model': 'm'}", 0, "APIServer pid=1"),
             line("Starting vLLM API server 0 on http://0.0.0.0:8000", 40, "APIServer pid=1"),
             raw("INFO:     Application startup complete."),
             line("[shutdown] Received SIGTERM: shutting down the engine", 500, "APIServer pid=1"),
             raw("INFO:     Shutting down"),
             raw("INFO:     Waiting for application shutdown."),
             raw("INFO:     Application shutdown complete."),
             raw("INFO:     Finished server process [1]"),
             line("EngineCore exiting.", 501, "EngineCore_DP0 pid=2", level="INFO")]
    f = read(lines)
    assert f.launches == 1 and f.ready and f.phase == "stopped" and f.errors == ()


@pytest.mark.parametrize("outer", ["none", "k8s", "json"])
def test_lines_out_of_order_never_run_the_timeline_backwards(outer: str) -> None:
    order = [(0, "Starting to load model m..."), (30, "Model loading took 5 GiB and 30 s"),
             (25, "Available KV cache memory: 20 GiB"), (40, "GPU KV cache size: 100 tokens"),
             (35, "Capturing CUDA graphs (decode, FULL): 100%"),
             (50, "Starting vLLM API server 0 on http://0.0.0.0:8000")]
    f = read([line(msg, i, "EngineCore_DP0 pid=3", outer=outer) for i, msg in order])
    starts = [s.start for s in f.timeline]
    assert starts == sorted(starts)
    assert all(s.end is None or s.end >= s.start for s in f.timeline)
    assert all(v >= 0 for v in f.phase_durations().values())


def test_inspect_log_prints_every_new_field(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([
        line("Estimated CUDA graph memory: 0.94 GiB total", 0, "Worker_PP1_TP0 pid=5"),
        line("Maximum concurrency for 8,192 tokens per request: 3.50x", 1, "EngineCore pid=2"),
        f"[rank0]: {TOO_LONG}"]) + "\n")
    assert engram_top_main(["inspect-log", "--engine", "vllm", str(log)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_concurrency"] == 3.5 and out["max_concurrency_tokens"] == 8192
    assert out["kv_capacity_tokens"] == 63040 and out["failed_in"] == "kv_pool"
    assert out["failure_cause"].startswith("ValueError: The model's max seq len")
    rank = out["ranks"]["1"]  # PP1 TP0 with a TP size of 1
    assert rank["graph_estimate_gb"] == 0.94 and rank["label"] == "PP1 TP0"
    assert out["parallel"] == {"tp_size": 1, "pp_size": 2}
    assert "ranks.graph_mem_usage_gb" in out["derived"]
    assert out["kv_capacity_from"] == "max seq len .. can be stored in KV cache (N)"


@pytest.mark.parametrize("hostile", [
    "python" * 20000, "vllm serve " * 10000, "-m vllm.entrypoints. --tp" * 4000,
    "model weights take " * 5000, "x=1GiB " * 20000, "(" + "a" * 100000,
    "(a pid=1" + ", b=c" * 20000, "12:00:00 " * 10000, "[rank1]:[E" + "1" * 100000,
    "rank 1 in world size 2 is assigned as " + "DP rank 99999999999, " * 5000,
    '{"log": ' * 5000, '{"log": 5, "time": "2026-99-99T99:99:99Z"}', "\x00\x1b[31m\udcff",
    "INFO 13-45 25:61:61 [x.py:1] GPU KV cache size: 12 tokens",
    "Maximum concurrency for " + "9" * 5000 + " tokens per request: 1e400x",
    "1" * 100000 + " GiB KV cache is needed", "Actual usage is 1 GiB for weight, " + "9" * 100000,
    "Current kv cache memory in use is " + "9" * 100000 + " bytes.",
], ids=lambda text: repr(text[:24]))
def test_hostile_lines_neither_raise_nor_make_up_figures(hostile: str) -> None:
    p = VllmLogParser()
    for _ in range(3):
        p.feed(hostile)
    f = p.facts()
    assert f.phase in PHASES and f.errors == ()
    assert all(r.weights_gb is None for r in f.ranks.values())
    assert all(v > 0 for v in f.parallel.values())


def test_a_worker_and_its_engine_core_are_one_rank_and_a_zero_stays_zero() -> None:
    f = read([line("Model loading took 0.0 GiB and 1 seconds", 0, "Worker_TP0 pid=10"),
              line("Model loading took 7.5 GiB and 1 seconds", 0, "Worker_TP1 pid=11"),
              line("Available KV cache memory: 0.0 GiB", 1, "Worker_TP0 pid=10"),
              line("GPU KV cache size: 1,024 tokens", 2, "EngineCore_DP0 pid=9"),
              line("Model loading took 3.0 GiB and 1 seconds", 3, "EngineCore_DP0 pid=9")])
    # The engine core's lines are rank 0's (DP0, no TP named): its weights line does not
    # overwrite the worker's stated 0.0, and the token count joins the worker's figures.
    assert f.ranks[0].weights_gb == 0.0 and f.ranks[0].kv_total_gb == 0.0
    assert f.ranks[0].kv_tokens == 1024 and f.kv_capacity_tokens == 1024
    assert f.ranks[1].weights_gb == 7.5 and f.ranks[1].kv_tokens is None


@pytest.mark.parametrize("record", [
    {"log": "{line}\n", "stream": "stderr", "time": "2026-07-12T02:00:05.5Z"},
    {"message": "{line}", "timestamp": "2026-07-12T02:00:05.500+00:00", "level": "info"},
    {"MESSAGE": "{line}", "__REALTIME_TIMESTAMP": "1783821605500000", "_PID": "7"},
    {"jsonPayload": {"message": "{line}"}, "timestamp": "2026-07-12T02:00:05.5Z"},
    {"textPayload": "{line}", "timestamp": "2026-07-12T02:00:05.5Z"},
    {"msg": "{line}", "ts": 1783821605.5},
], ids=["docker", "shipper", "journald", "cloud-json", "cloud-text", "epoch"])
def test_json_records_of_every_shipper_are_read_with_their_time(record: dict) -> None:
    def as_json(msg: str, second: int) -> str:
        r = json.loads(json.dumps(record).replace("{line}", msg.replace('"', '\\"')))
        return json.dumps(r).replace("05.5", f"{second:02d}.5").replace(
            "1783821605", str(1783821600 + second))
    f = read([as_json("(Worker_TP1 pid=9) INFO 07-12 02:00:05 [w.py:1] Starting to load "
                      "model m...", 5),
              as_json("(Worker_TP1 pid=9) INFO 07-12 02:00:35 [w.py:1] Model loading took "
                      "4.25 GiB and 30 seconds", 35)])
    assert f.ranks[1].weights_gb == 4.25 and f.ranks[1].label == "TP1"
    assert f.timeline[0].phase == "weights"
    assert f.launch_at is not None and f.last_line_at - f.launch_at == pytest.approx(30)
    # A JSON object that is no shipper's record is the line itself.
    g = read(['{"model": "m", "tensor_parallel_size": 2}'])
    assert g.errors == () and g.ranks == {}
