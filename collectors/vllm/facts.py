"""A vLLM launch's state frozen into StartupFacts: its ranks keyed GPU-wide with their place
in each dimension, the KV capacity as the log states it (or worked out, and said so), the
parallel sizes, the failure's phase and cause.

The capacity, most direct first: the ``KV cache size: N tokens`` line; the fatal ``.. can be
stored in KV cache (N)``; V0's GPU blocks x the block size the launch states (derived); the
maximum concurrency x its tokens per request (derived; rounded to the line's two places);
the GPU blocks x vLLM's default block size (derived). Graph memory: what the captures took, else
the pool's actual, else v0.21+'s estimate (derived: an estimate before capture).
"""

from __future__ import annotations

from collectors.startup_facts import KvShortfall, RankFacts, StartupFacts
from collectors.vllm.log_figures import RankFigures
from collectors.vllm.log_state import LogState
from collectors.vllm.ranks import ARGS_SOURCE, Place, RankBook, coords, label
from collectors.vllm.server_args import merged, parallel_stated, server_args

DEFAULT_BLOCK_SIZE = 16  # vLLM's on CUDA when no block size is given


def freeze(s: LogState, book: RankBook, launches: int, lines: int,
           last_at: float | None) -> StartupFacts:
    sizes, source, how = book.sizes(parallel_stated(s), parallel_stated(s, command=True))
    derived = {f"parallel.{dim}_size": why for dim, why in how.items()}
    args = merged(s)
    if "ep" not in sizes and args.get("enable_expert_parallel") is True:
        sizes["ep"] = sizes.get("tp", 1) * sizes.get("dp", 1)
        source["ep"] = source.get("tp", ARGS_SOURCE)
        derived["parallel.ep_size"] = ("derived: expert parallel on, so TP size x DP size, as "
                                       "vLLM sets it")
    tp, pp = sizes.get("tp", 1), sizes.get("pp", 1)
    ranks = _ranks(s, book, tp, pp, derived)
    capacity, capacity_from, note = _capacity(s, ranks, args, derived)
    extra: dict[str, str] = {}
    if s.version:
        extra["version"] = s.version
    e = s.engine
    for key, value in (("kv_device", e.kv_device), ("num_gpu_blocks", e.gpu_blocks),
                       ("num_cpu_blocks", e.cpu_blocks), ("max_seq_len", e.too_long_seq_len)):
        if value is not None:
            extra[key] = str(value)
    shortfall = None
    if e.kv_needed_gb is not None and e.kv_available_gb is not None:
        shortfall = KvShortfall(e.kv_needed_gb, e.kv_available_gb, e.too_long_seq_len,
                                e.estimated_max_len)
    context = s.context_len
    if context is None and isinstance(stated := args.get("max_model_len"), int):
        context = stated
    max_running = args.get("max_num_seqs")
    return StartupFacts(
        ranks=ranks, max_total_num_tokens=capacity, kv_capacity_tokens=capacity,
        context_len=context,
        max_running_requests=max_running if isinstance(max_running, int)
        and not isinstance(max_running, bool) else None,
        server_args=server_args(s), startup_timings_s=dict(s.timings),
        engram_config=dict(s.engram), engram_messages=tuple(s.engram_messages),
        engram_config_text=s.engram_messages[0] if s.engram_messages else None,
        uvicorn_pid=s.uvicorn_pid, uvicorn_url=s.url,
        ready=s.ready_at is not None, ready_at=s.ready_at, failed_at=s.failed_at,
        failed_in=s.failed_in, failure_cause=s.cause, errors=tuple(s.errors),
        stopping_at=s.stopping_at, stopped_at=s.stopped_at,
        log_starts_after_launch=bool(s.after_launch), launches=launches,
        notes=(note,) if note else (), derived=derived, kv_capacity_from=capacity_from,
        parallel={f"{dim}_size": n for dim, n in sizes.items()},
        parallel_from={f"{dim}_size": where for dim, where in source.items()},
        max_concurrency=e.concurrency, max_concurrency_tokens=e.concurrency_tokens,
        launch_at=s.launch_at, last_line_at=last_at, lines_seen=lines, phase=s.phase,
        timeline=tuple(s.spans), decode=s.decode, scheduler_extra=extra,
        kv_shortfall=shortfall)


def _ranks(s: LogState, book: RankBook, tp: int, pp: int,
           derived: dict[str, str]) -> dict[int, RankFacts]:
    merged_by: dict[int, RankFigures] = {}
    places: dict[int, Place] = {}
    for pid_place, figures in s.ranks.items():
        place = book.resolve(pid_place)
        key = place.index(tp, pp)
        if key in merged_by:  # two names of one worker (its pid's, then its tag's)
            _fill(merged_by[key], figures)
        else:
            merged_by[key] = figures
            places[key] = place
    out: dict[int, RankFacts] = {}
    for key in sorted(merged_by):
        r, p = merged_by[key], places[key]
        graph = r.graph_gb if r.graph_gb is not None else r.graph_pool_gb
        if graph is None and r.graph_estimate_gb is not None:
            graph = r.graph_estimate_gb
            derived.setdefault("ranks.graph_mem_usage_gb",
                               "derived: vLLM's estimate before capture ('Estimated CUDA "
                               "graph memory'): no capture line states it")
        if r.weights_from_profile:
            derived.setdefault("ranks.weights_gb", "derived: the memory profile's weights "
                               "('model weights take', 'Actual usage is X GiB for weight'; no "
                               "loading line)")
        at = coords(p, book.ep.get(p), tp, pp)
        out[key] = RankFacts(
            rank=key, weights_gb=r.weights_gb, all_weights_gb=r.weights_gb,
            weights_elapsed_s=r.weights_s, kv_total_gb=r.kv_gb, all_kv_gb=r.kv_gb,
            kv_tokens=r.kv_tokens, graph_mem_usage_gb=graph, graph_elapsed_s=r.graph_s,
            graph_estimate_gb=r.graph_estimate_gb, memory_profile=dict(r.profile),
            coords=at, label=label(at))
    return out


def _fill(into: RankFigures, other: RankFigures) -> None:
    for name in RankFigures.__dataclass_fields__:
        value = getattr(into, name)  # unset: None, an empty profile, a False flag (not 0.0)
        if value is None or value is False or (isinstance(value, dict) and not value):
            setattr(into, name, getattr(other, name))


def _capacity(s: LogState, ranks: dict[int, RankFacts], args: dict[str, object],
              derived: dict[str, str]) -> tuple[int | None, str | None, str | None]:
    """(the capacity in tokens, the line it came from, a note for a derived one)."""
    tokens = next((r.kv_tokens for r in ranks.values() if r.kv_tokens is not None), None)
    if tokens is not None:
        return tokens, "KV cache size: N tokens", None
    e = s.engine
    if e.stated_capacity is not None:
        return e.stated_capacity, "max seq len .. can be stored in KV cache (N)", None
    block = args.get("block_size")
    said = (block if isinstance(block, int) and not isinstance(block, bool)
            and 0 < block < 1 << 20 else None)
    how = None
    if e.gpu_blocks is not None and (said is not None or e.concurrency is None):
        size = DEFAULT_BLOCK_SIZE if said is None else said
        how = (f"GPU blocks x block size ({e.gpu_blocks} x {size}"
               + ("" if said is not None else ", vLLM's default")
               + "): this build prints no token count")
        tokens = e.gpu_blocks * size
    elif e.concurrency is not None and e.concurrency_tokens is not None:
        how = ("the maximum concurrency line (tokens per request x concurrency): this build "
               "prints no token count")
        tokens = round(e.concurrency_tokens * e.concurrency)
    if how is None:
        return None, None, None
    derived["kv_capacity_tokens"] = "derived: " + how
    return tokens, "derived: " + how, "KV capacity from " + how
