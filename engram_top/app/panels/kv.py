"""The KV pool panel: capacity, use (each pool's on a hybrid model), free tokens, requests
and what the engine calls retracting them, the queue and cache hits, then what a server
reports beyond its KV tokens: SGLang's HiCache host tier (its pools, their use, their
traffic, what it drops for host pressure), a hybrid model's Mamba state pool (the log's slots
and GB per GPU, the page's use of it), and the requests a weight-sync pause holds and those
aborted. Rows are (rank, line) for drawing.fit; a server without a figure shows no zero. A
URL that serves a router's or LMCache's page gets that page's rows instead (stack.py)."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from collectors import byte_rate, decimal_bytes, percent, sglang_gb, tokens
from engram_top import model
from engram_top.app.panels.drawing import (
    LABEL_WIDTH,
    bar,
    first_fitting,
    fit,
    quantile,
    recent,
    row,
    source_rows,
    sparkline,
    unavailable,
    waiting,
)
from engram_top.app.panels.stack import stack_rows
from engram_top.model import (
    HiCacheView,
    KvView,
    MambaView,
    RunStore,
    SeriesName,
    SourceName,
    StoreTopic,
    mamba_facts,
)

# What it is drawn from: it is redrawn when one of these has a new version in the store.
SOURCES = (SourceName.SERVER, StoreTopic.RUN)


def kv_panel(store: RunStore, rows: int | None = None,
             cols: int | None = None) -> Group:
    """The KV pool; on a short panel the rows that matter most (capacity, use, requests,
    what is not a number) stay and the others go first."""
    out = [(0, w) for w in source_rows(store, SourceName.SERVER, model.engine_of(store))]
    room = None if cols is None else cols - LABEL_WIDTH - 1  # what a value may take
    stack = model.stack_page(store)
    if stack is not None:  # a router's or a cache's page: its own rows, no KV pool
        latency = model.latency_facts(store)
        per_s = latency.requests_per_s if latency is not None else None
        return Group(*fit(out + stack_rows(stack, per_s, room), rows))
    kv = model.kv_facts(store)
    if kv is None or kv.capacity_tokens is None:
        return waiting([w for _, w in out],
                        "KV pool not allocated yet (the server reports it once ready)")
    usage = kv.token_usage
    out.append((1, row("capacity", first_fitting(room, (
        f"{tokens(kv.capacity_tokens)} tokens"
        + ("" if kv.kv_cache_gb is None else f" · {sglang_gb(kv.kv_cache_gb)} GB/GPU"),
        f"{tokens(kv.capacity_tokens)} tokens")))))
    split = {name: u for name, u in (("full", kv.full_usage), ("swa", kv.swa_usage))
             if u is not None}
    # An engine that gives the usage as a fraction only: no token count made up.
    counted = not (kv.used_tokens is None and "num_used_tokens" in model.not_reported(store))
    width = 12 if room is None or room >= 44 else 8
    out.append((1, row("in use", Text.assemble(
        bar([(usage or 0.0, "magenta")], 1.0, width), (" ", "grey37"),
        first_fitting(None if room is None else room - width - 1,
                      _in_use(kv, split, counted))))))
    if kv.pools or split:  # a hybrid model's pools (DeepSeek-V4.x): the full one is the capacity
        sizes = kv.pools or {}
        each = [f"{name} {percent(split[name], 1)}" if name in split else None
                for name in ("full", "swa")]
        of = {name: f" of {tokens(sizes[name])}" for name in ("swa",) if sizes.get(name)}
        rest = [f"{name} {tokens(sizes[name])}" for name in ("c4", "c128") if sizes.get(name)]
        usage_part = " · ".join(f"{e}{of.get(n, '')}" for n, e in zip(("full", "swa"), each,
                                                                       strict=True) if e)
        sizes_part = " · ".join(f"{n} {tokens(sizes[n])}" for n in ("full", "swa", "c4", "c128")
                                if sizes.get(n))
        out.append((4, row("pools", first_fitting(room, tuple(v for v in (
            " · ".join(x for x in (usage_part, *rest) if x), usage_part, sizes_part) if v)))))
    if kv.available_tokens is not None or kv.evictable_tokens is not None:
        out.append((3, row("free", f"{tokens(kv.available_tokens)} available · "
                                   f"{tokens(kv.evictable_tokens)} evictable")))
    # The same pressure has each engine's own word (SGLang retracts, vLLM preempts).
    word = model.word(store, "retracted")
    retracted = "" if kv.retracted is None else f" · {kv.retracted} {word}"
    if kv.retracted_per_s:
        retracted += (f" ({kv.retracted_per_s:.2f}/s)" if retracted
                      else f" · {word} {kv.retracted_per_s:.2f}/s")
    out.append((1, row("requests", f"{kv.running if kv.running is not None else '–'} running · "
                                   f"{kv.queued if kv.queued is not None else '–'} queued"
                                   f"{retracted}")))
    # The window's hit rate; else, from one page's counters, the rate since the start, said so.
    hit, since = kv.cache_hit_rate, ""
    if hit is None and kv.cache_hit_since_start is not None:
        hit, since = kv.cache_hit_since_start, " since start"
    if kv.queue_time is not None or hit is not None:
        q = kv.queue_time
        wait = f"p50 {quantile(q, 'p50')} · p99 {quantile(q, 'p99')}"
        out.append((3, row("queue", first_fitting(room, (
            f"{wait} · cache hit {percent(hit, 1)}{since}",
            f"{wait} · hit {percent(hit, 0)}{since}", wait)))))
    out += hicache_rows(store, cols)  # the host tier, where the server has one
    out += pool_rows(store, kv, cols)  # Mamba state, paused and aborted, where reported
    out.append((5, row("trend", sparkline(recent(store, SeriesName.TOKEN_USAGE)))))
    out += [(2, line) for line in unavailable(kv.unavailable)]
    out += [(2 if i == 0 else 4, Text(problem, style="yellow", no_wrap=True,
                                      overflow="ellipsis"))
            for i, problem in enumerate(kv.page_problems[:3])]
    missing = model.not_reported(store)
    if missing:  # an engine without these figures: said once, not shown as zeros
        names = {"num_used_tokens": "tokens in use", "weight_gb": "weights",
                 "graph_gb": "graph memory"}
        said = ", ".join(names.get(k, k) for k in missing)
        out.append((6, Text(f"{model.engine_of(store)}'s metrics give no {said}",
                            style="dim", no_wrap=True, overflow="ellipsis")))
    if store.run is not None:
        out.append((6, Text(f"placement: {store.run.placement}", style="dim")))
    return Group(*fit(out, rows))


def _in_use(kv: KvView, split: dict[str, float], counted: bool) -> tuple[str, ...]:
    """The "in use" row's words, most first. The bar is the server's token usage, the
    fullest pool's (the bottleneck): with several pools it names that pool and its size,
    never reading as a share of the capacity above (the full pool's) when it is the sliding
    window's; the tokens in use are the full pool's, said beside it."""
    used = f"{tokens(kv.used_tokens)} tokens" if counted else ""
    pct = percent(kv.token_usage, 1)
    if not split:  # one pool: the capacity's
        return (f"{pct} · {used}" if used else pct,)
    worst = max(split, key=split.__getitem__)
    if worst == "full":
        return tuple(v for v in (f"full pool {pct} · {used}" if used else "",
                                 f"full pool {pct} · {used.removesuffix(' tokens')}"
                                 if used else "", f"full pool {pct}") if v)
    size = (kv.pools or {}).get(worst)
    of = f" of {tokens(size)}" if size else ""
    full = split.get("full")
    beside = ", ".join(x for x in (None if full is None else percent(full, 1),
                                   used or None) if x)
    return tuple(v for v in (f"{worst} pool {pct}{of} · full {beside}" if beside else "",
                             f"{worst} pool {pct}{of}", f"{worst} pool {pct}") if v)


# --------------------------------------------------------------------------- HiCache

# Beside the requests: on a 100x30 screen both rows stay, the pools' split and the queue go.
HICACHE_RANK = 2


def hicache_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """The HiCache rows of the KV panel: its pools, their use and the host-pressure drops
    (in bold yellow while it drops), then its traffic; none where the server has none."""
    view = model.hicache_facts(store)
    if view is None:
        return []
    room = None if cols is None else cols - LABEL_WIDTH - 1
    pool = Text(first_fitting(room, _pool_variants(view)))
    drops = view.dropped_host_pressure_per_s
    at = pool.plain.find("drop")
    if drops is not None and drops > 0 and at >= 0:
        pool.stylize("bold yellow", at)
    return [(HICACHE_RANK, row("HiCache", pool)),
            (HICACHE_RANK, row("", first_fitting(room, _traffic_variants(view))))]


def _pool_variants(view: HiCacheView) -> tuple[str, ...]:
    """"32.0 GB × 4 ranks = 128 GB · 12.3k/98.0k tokens (13%) · dropping 35 tok/s for host
    pressure", shorter where room is short. GB as SGLang's --hicache-size and its Allocating
    line count them (1e9 bytes)."""
    per = decimal_bytes(view.pool_bytes_per_rank, "? GB")
    ranks = "?" if view.ranks is None else f"{view.ranks}"
    whole = "" if view.pool_bytes is None else f" = {decimal_bytes(view.pool_bytes)}"
    used = f"{tokens(view.used_tokens)}/{tokens(view.total_tokens)}"
    share = ""
    if view.used_tokens is not None and view.total_tokens:
        share = f" ({view.used_tokens / view.total_tokens * 100:.0f}%)"
    drops = view.dropped_host_pressure_per_s
    dropped = "–" if drops is None else _count(drops)
    return (f"{per} × {ranks} ranks{whole} · {used} tokens{share} · dropping {dropped} "
            "tok/s for host pressure",
            f"{per} × {ranks} · {used} tokens{share} · drop {dropped} tok/s",
            f"{per} × {ranks} · {used} tokens · drop {dropped}/s",
            f"{per.replace(' ', '')}×{ranks} · {used} · drop {dropped}/s")


def _traffic_variants(view: HiCacheView) -> tuple[str, ...]:
    """Load-back (host -> GPU) and backup (GPU -> host), over the node's ranks."""
    load = byte_rate(view.load_back_bytes_per_s)
    backup = byte_rate(view.backup_bytes_per_s)
    return (f"load-back {load} (host→GPU) · backup {backup} (GPU→host)",
            f"load-back {load} · backup {backup}",
            f"load {load} · backup {backup}")


def _count(per_s: float) -> str:
    return f"{per_s:,.0f}" if per_s >= 10 or per_s == 0 else f"{per_s:.1f}"


# --------------------------------------------------------------------------- pools

# A pause holds every running request: beside the requests row; the Mamba pool with the
# queue and the free tokens (a hybrid model's other pool); the aborted count with them.
PAUSED_RANK = 2
MAMBA_RANK = 3
ABORTED_RANK = 3


def pool_rows(store: RunStore, kv: KvView, cols: int | None = None) -> list[tuple[int, Text]]:
    """A hybrid model's Mamba state pool, and paused and aborted requests, where the server
    reports them (none where it reports none of it: no zeros shown)."""
    room = None if cols is None else cols - LABEL_WIDTH - 1
    out: list[tuple[int, Text]] = []
    mamba = mamba_facts(store, kv.mamba_usage)
    if mamba is not None or kv.mamba_usage is not None:
        out.append((MAMBA_RANK, row("mamba", first_fitting(room, _mamba_variants(mamba, kv)))))
    held = _held(kv)
    if held is not None:
        rank, text = held
        out.append((rank, row("held", first_fitting(room, text))))
    return out


def _mamba_variants(view: MambaView | None, kv: KvView) -> tuple[str, ...]:
    """"257 slots · 2.52 GB/GPU (conv 0.16 + ssm 2.37) · 12.5% in use", shorter where room
    is short; GB as SGLang says it (GiB)."""
    usage = kv.mamba_usage
    used = "" if usage is None else f" · {usage * 100:.1f}% in use"
    if view is None:  # the page reports its use; the log said nothing of its size
        return (f"state pool{used}",)
    slots = "? slots" if view.slots is None else f"{view.slots:,} slots"
    total = "?" if view.total_gb is None else f"{view.total_gb:.2f}"
    parts = ""
    if view.conv_gb is not None and view.ssm_gb is not None:
        parts = f" (conv {view.conv_gb:.2f} + ssm {view.ssm_gb:.2f})"
    return (f"{slots} · {total} GB/GPU{parts}{used}",
            f"{slots} · {total} GB/GPU{used}",
            f"{slots} · {total} GB{used.replace(' in use', '')}")


def _held(kv: KvView) -> tuple[int, tuple[str, ...]] | None:
    """Paused and aborted requests, where the page counts them: "2 paused (weight sync) ·
    13 aborted (0.20/s)". A pause that holds requests ranks with the requests row."""
    if kv.paused is None and kv.aborted_total is None:
        return None
    paused = "–" if kv.paused is None else f"{kv.paused}"
    aborted = "–" if kv.aborted_total is None else f"{kv.aborted_total:,}"
    rate = "" if not kv.aborted_per_s else f" ({kv.aborted_per_s:.2f}/s)"
    rank = PAUSED_RANK if kv.paused else ABORTED_RANK
    return rank, (f"{paused} paused (weight sync) · {aborted} aborted{rate}",
                  f"{paused} paused · {aborted} aborted{rate}",
                  f"{paused} paused · {aborted} aborted")
