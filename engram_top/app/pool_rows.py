"""The KV panel's rows for what a server reports beyond its KV tokens: a hybrid model's
Mamba state pool (the log's slots and GB per GPU, the page's use of it), and the requests a
weight-sync pause holds and those aborted. Rows are (rank, line) for panel_text.fit; none
where the server reports none of it (a server without these figures shows no zeros)."""

from __future__ import annotations

from rich.text import Text

from engram_top.app.panel_text import LABEL_WIDTH, first_fitting, row
from engram_top.model.pool_state import MambaView, mamba_facts
from engram_top.model.store import RunStore
from engram_top.model.views import KvView

# A pause holds every running request: beside the requests row; the Mamba pool with the
# queue and the free tokens (a hybrid model's other pool); the aborted count with them.
PAUSED_RANK = 2
MAMBA_RANK = 3
ABORTED_RANK = 3


def kv_rows(store: RunStore, kv: KvView, cols: int | None = None) -> list[tuple[int, Text]]:
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
