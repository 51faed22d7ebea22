"""The ledgers' rows in the Host RAM and HBM panels: whose memory it is, in one or two lines
each, a figure nobody reports as "?" (never 0). Rows are (rank, line) for panel_text.fit:
the lower the rank, the longer a short panel keeps it."""

from __future__ import annotations

from rich.text import Text

from collectors.safetext import visible
from collectors.units import GIB, gib, gib_change
from engram_top.app.panel_text import first_fitting, row
from engram_top.model import ledger
from engram_top.model.ledger import GpuLedger, LedgerLine
from engram_top.model.store import RunStore

# The host ledger's lines as a panel row names them, shortest first where room is short.
SHORT = {"Engram tables": "tables", "HiCache host pools": "HiCache",
         "other pinned/shared": "pinned", "server anonymous": "anon",
         "/dev/shm, tmpfs": "shm", "page cache": "cache", "other tenants": "tenants"}
LABEL_WIDTH = 6  # the Host RAM panel's ("server")


def figure(line: LedgerLine | None, digits: int = 1) -> str:
    return "?" if line is None or line.bytes is None else gib(line.bytes, digits)


def host_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """The server's share of host growth with the other tenants' beside it (rank 1), then
    the server's lines (rank 2) and the rest of the host (rank 3)."""
    book = ledger.host_ledger(store)
    if book is None:
        return []
    out = [(1, delta_row(store))]
    room = None if cols is None else cols - LABEL_WIDTH - 1
    mine = [ln for ln in book.lines if ln.server]
    if mine:
        out.append((2, row("server", first_fitting(room, _variants(mine)), LABEL_WIDTH)))
    rest = [ln for ln in book.lines if not ln.server]
    out.append((3, row("others", first_fitting(room, _variants(rest)), LABEL_WIDTH)))
    return out


def _variants(lines: list[LedgerLine]) -> tuple[str, ...]:
    names = [SHORT.get(ln.name, ln.name) for ln in lines]
    full = " · ".join(f"{n} {figure(ln)}" for n, ln in zip(names, lines, strict=True))
    tight = "·".join(f"{n} {figure(ln, 0)}" for n, ln in zip(names, lines, strict=True))
    return f"{full} GiB", tight


def delta_row(store: RunStore) -> Text:
    """Host Δ: the server's share since its launch, other tenants' growth beside it."""
    server = ledger.run_server_delta_bytes(store, store.run)
    others = ledger.others_delta_bytes(store)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("–" if server is None else f"server {gib_change(server)} GiB",
                style="bold green" if (server or 0) > 50 * GIB else "")
    if others is not None:
        text.append(f" · others {gib_change(others)}", style="dim")
    return row("Δ", text, LABEL_WIDTH)


def hbm_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """Each GPU's NVML used against what its holders account for: every GPU another process
    holds memory on or where a tenth of the used memory is unexplained (rank 2: on a short
    panel they stay before the legend), else the first GPU (ranks are alike; rank 3)."""
    books = ledger.hbm_ledger(store)
    notable = [b for b in books if _notable(b)]
    rows = [(2 if notable else 3, Text(first_fitting(cols, _hbm_variants(b)), no_wrap=True,
                                       overflow="ellipsis", style="dim"))
            for b in notable or books[:1]]
    noted = [str(b.index) for b in books if b.note]
    if noted:  # the ledger's reading of the node, said where its figures are
        where = f"GPU{'s' * (len(noted) > 1)} {','.join(noted)}"
        rows.append((2, Text(first_fitting(cols, (
            f"{where}: NVML's pids are not on this host (another PID namespace): taken as "
            "the server's",
            f"{where}: pids of another PID namespace, taken as the server's",
            f"{where}: other PID namespace")), no_wrap=True, overflow="ellipsis",
            style="dim")))
    return rows


def _notable(book: GpuLedger) -> bool:
    others = any(not ln.server and (ln.bytes or 0) > 0 for ln in book.lines)
    return others or abs(book.unexplained_bytes) > 0.1 * max(1, book.used_bytes)


def _hbm_variants(book: GpuLedger) -> tuple[str, ...]:
    engine = [ln for ln in book.lines if ln.server]
    unknown = [ln.name.split(" (")[0] for ln in engine if ln.bytes is None]
    known = sum(ln.bytes or 0.0 for ln in engine)
    others = [ln for ln in book.lines if not ln.server]
    # A process's name is another tenant's text: shown as what it is, never acting.
    other_text = " · ".join(f"{visible(ln.name)} {figure(ln)}" for ln in others)
    unexpl = gib(book.unexplained_bytes)
    head = f"GPU{book.index} used {gib(book.used_bytes)} = "
    parts = [f"engine {gib(known)}" + (f" ({', '.join(unknown)} ?)" if unknown else "")]
    if others:
        parts.append(other_text)
    parts.append(f"unexplained {unexpl} GiB")
    # Narrower: who else holds memory matters more than the sum (an on-call's next look).
    named = f"GPU{book.index} {other_text} · ? {unexpl}" if others else ""
    return (head + " + ".join(parts), *([named] if named else []),
            f"GPU{book.index} {gib(book.used_bytes)} = eng {gib(known)}"
            + (f" + others {gib(sum(ln.bytes or 0 for ln in others))}" if others else "")
            + f" + ? {unexpl}")
