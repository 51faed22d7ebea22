"""SGLang's HiCache host tier in the KV panel (its pools, their use, their traffic, what it
drops for host pressure) and the Engram share of PCIe receive in the HBM panel (receive less
HiCache's load-back: an estimate, said so). Rows are (rank, line) for panel_text.fit; with
HiCache off, none."""

from __future__ import annotations

from rich.text import Text

from collectors.units import byte_rate, decimal_bytes, tokens
from engram_top.app.panel_text import LABEL_WIDTH, first_fitting, row
from engram_top.model import facts
from engram_top.model.hicache import engram_rx_estimate
from engram_top.model.store import RunStore
from engram_top.model.views import GpuView, HiCacheView

# Beside the requests: on a 100x30 screen both rows stay, the pools' split and the queue go.
RANK = 2


def kv_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """The HiCache rows of the KV panel: its pools, their use and the host-pressure drops
    (in bold yellow while it drops), then its traffic; none where the server has none."""
    view = facts.hicache_facts(store)
    if view is None:
        return []
    room = None if cols is None else cols - LABEL_WIDTH - 1
    pool = Text(first_fitting(room, _pool_variants(view)))
    drops = view.dropped_host_pressure_per_s
    at = pool.plain.find("drop")
    if drops is not None and drops > 0 and at >= 0:
        pool.stylize("bold yellow", at)
    return [(RANK, row("HiCache", pool)),
            (RANK, row("", first_fitting(room, _traffic_variants(view))))]


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


def engram_rx_rows(store: RunStore, gpus: list[GpuView],
                   cols: int | None = None) -> list[tuple[int, Text]]:
    """Under the HBM table, where HiCache reports its load-back: each GPU's receive less its
    rank's load-back, "Engram ≈ 812 MB/s per GPU (est.)". Nothing where HiCache is off or
    says nothing of its load-back: the whole receive is not called Engram's."""
    view = facts.hicache_facts(store)
    if view is None or not view.load_back_by_rank:
        return []
    est = engram_rx_estimate({g.index: g.pcie_rx_bytes_per_s for g in gpus}, view)
    engram = facts.engram_facts(store)
    # With the tables in HBM no Engram row crosses the link: the rest is someone else's.
    name = "other rx" if engram is not None and engram.placement == "device" else "Engram"
    known = {i: v for i, v in est.items() if v is not None}
    text: tuple[str, ...]  # the variants, most detailed first (first_fitting)
    if not known:
        text = (f"{name} ≈ ? (est.: no PCIe receive reading to take HiCache's load-back from)",
                f"{name} ≈ ? (est.: no PCIe receive)")
    else:
        low, high = min(known.values()), max(known.values())
        span = byte_rate(low) if byte_rate(low) == byte_rate(high) else \
            f"{byte_rate(low, per_s=False)}–{byte_rate(high)}"
        unknown = [i for i, v in est.items() if v is None]
        missing = "" if not unknown else f", GPU {','.join(map(str, unknown))} ?"
        each = " · ".join(f"GPU{i} {byte_rate(v)}" if v is not None else f"GPU{i} ?"
                          for i, v in est.items())
        text = (f"{name} ≈ {each} (est.: PCIe rx less HiCache load-back)",
                f"{name} ≈ {span} per GPU{missing} (est.: rx less HiCache load-back)",
                f"{name} ≈ {span} per GPU{missing} (est.)",
                f"{name} ≈ {span}/GPU (est.)")
    return [(2, Text(first_fitting(cols, text), style="cyan", no_wrap=True,
                     overflow="ellipsis"))]
