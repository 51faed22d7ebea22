"""The Host RAM panel: used memory, the server's share of its growth and whose the rest is
(the host ledger's rows), Shmem and huge pages (where pinned host memory shows), the NUMA
nodes, swap, and the Engram row: where the tables are, what they hold of host memory, how
often the layers look rows up, whether the prefetch engages. Rows are (rank, line) for
drawing.fit: the lower the rank, the longer a short panel keeps it."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from collectors import GIB, MIB, gib, gib_change, rate, visible
from engram_top import model
from engram_top.app.panels.drawing import bar, figure, first_fitting, fit, row, source_rows, waiting
from engram_top.model import HostView, LedgerLine, RunStore, SourceName, StoreTopic

HOST_LABEL_WIDTH = 6  # the panel's longest row label ("server")


# What it is drawn from: it is redrawn when one of these has a new version in the store.
SOURCES = (SourceName.HOST, StoreTopic.RUN)


def host_panel(store: RunStore, rows: int | None = None,
               cols: int | None = None) -> Group:
    out = [(0, w) for w in source_rows(store, SourceName.HOST, "host")]
    h = model.host_facts(store)
    if h is None:
        return waiting([w for _, w in out], "waiting for the first host reading…")
    width = HOST_LABEL_WIDTH
    out.append((1, row("used", Text.assemble(bar([(h.used_bytes, "blue")], h.total_bytes, 12),
                                             " ", f"{gib(h.used_bytes)} of "
                                                  f"{gib(h.total_bytes, 0)} GiB"), width)))
    cg = h.cgroup
    if cg is not None and cg.limit_bytes and cg.current_bytes is not None:
        # A container's limit: where the kernel kills, however much the host has free.
        out.append((2, row("limit", Text.assemble(
            bar([(cg.current_bytes, "magenta")], cg.limit_bytes, 12), " ",
            f"{gib(cg.current_bytes)} of {gib(cg.limit_bytes, 0)} GiB · "
            f"{h.container or visible(cg.path)}"), width)))
    elif h.container:  # in a container without a limit of its own: whose the lines are
        out.append((4, row("in", h.container, width)))
    # Δ (the scenario list's figure, model.run_host_delta_bytes), then whose memory it is.
    out += host_rows(store, cols)
    if h.tree_problem:  # the ledger's server line lacks what this user may not read
        out.append((3, Text(h.tree_problem, style="yellow", no_wrap=True, overflow="ellipsis")))
    if (shm := shm_row(h)) is not None:
        out.append((6, row("/dev/shm", shm, width)))  # kept over Shmem, dropped before the ledger
    # Pinned host memory (the Engram tables) shows in Shmem and huge pages (the help says);
    # the ledger rows say whose it is, so a short panel drops this one first.
    out.append((7, row("Shmem", f"{gib(h.shmem_bytes)} GiB · huge pages "
                                f"{gib(h.hugepages_bytes)} GiB", width)))
    swap = (2 if h.swap_used_bytes else 5, row("swap", f"{gib(h.swap_used_bytes)} GiB used",
                                               width))
    engram = engram_rows(store, cols)
    # The lines fit() keeps before the NUMA ones; what is left decides how the nodes show.
    room = rows - sum(rank < NUMA_RANK for rank, _ in [*out, swap, *engram]) if rows else None
    out += [*numa_rows(h, room), swap, *engram]
    return Group(*fit(out, rows))


def shm_row(h: HostView) -> str | None:
    """The /dev/shm the server sees, where it is worth a line: a mount of its own smaller
    than a quarter of the host (a container's: Docker's 64 MiB default is too small for
    NCCL and SGLang's shared-memory transport), or one fuller than 80%; else None."""
    if h.shm_mount is None:
        return None
    size, free = h.shm_mount
    own = size < h.total_bytes / 4
    if not own and free > size / 5:
        return None
    used = size - free

    def shown(n: int) -> str:
        return f"{n / MIB:,.1f} MiB" if size < GIB else f"{gib(n)} GiB"
    return f"{shown(used)} used of {shown(size)}" + (" (a mount of its own)" if own else "")


def host_delta(delta_bytes: float | None) -> str:
    """Host memory taken since a launch, as the Host RAM panel and the scenario list both
    write it: "+195.4 GiB"."""
    return "–" if delta_bytes is None else f"{gib_change(delta_bytes)} GiB"


NUMA_RANK = 5  # below the Engram and Shmem rows; above a swap that holds nothing


def numa_rows(h: HostView, room: int | None = None) -> list[tuple[int, Text]]:
    """On a multi-socket host, one line per NUMA node (a single node says nothing new):
    where the server's shared memory sits shows which GPUs read the tables across the
    socket link. With ``room`` for fewer lines than nodes, one line for all the nodes: a
    node shown alone would hide what the others hold."""
    nodes = h.numa_nodes if len(h.numa_nodes) > 1 else ()
    out: list[tuple[int, Text]] = []
    if nodes and (room is None or room >= len(nodes)):
        for n in nodes:
            share = ("" if n.server_shared_bytes is None
                     else f" · server {gib(n.server_shared_bytes, 0)} GiB")
            out.append((NUMA_RANK, row(f"N{n.node}", f"{gib(n.used_bytes, 0)}/"
                                                     f"{gib(n.total_bytes, 0)} GiB{share}", 6)))
    elif nodes and room:
        known = all(n.server_shared_bytes is not None for n in nodes)
        what, key = ("server", "server_shared_bytes") if known else ("used", "used_bytes")
        each = " · ".join(f"N{n.node} {gib(getattr(n, key), 0)}" for n in nodes)
        out.append((NUMA_RANK, row("NUMA", f"{what} {each} GiB", 6)))
    if h.numa_problem:
        out.append((6, Text(h.numa_problem, style="dim", no_wrap=True, overflow="ellipsis")))
    return out


PINNED = {True: "pinned", False: "unpinned (ATS)", None: "pinning unknown"}


def engram_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """The Engram row, ranked for fit(): where the tables are, what they hold of host
    memory, how often the layers look rows up, and whether the prefetch engages (and why
    not)."""
    e = model.engram_facts(store)
    out: list[tuple[int, Text]] = []
    if e is not None and e.placement is not None:
        line = Text.assemble(("Engram ", "bold"), (f"{e.placement} ", "bold cyan"),
                             no_wrap=True, overflow="ellipsis")
        if e.layout:
            line.append(f"· {e.layout} layout")
        out.append((2, line))
        if e.resident_mib:
            held = f"  {gib(e.resident_mib * MIB)} GiB resident, {PINNED[e.pinned]}"
            huge = "" if e.huge_pct is None else f", {e.huge_pct:.0f}%"
            out.append((3, Text(first_fitting(cols, (f"{held}{huge} in huge pages",
                                                     f"{held}{huge} huge")),
                                no_wrap=True, overflow="ellipsis")))
        if e.lookups_per_s is not None or e.hit_rate_pct is not None:
            # The rate needs two statistics lines of a layer; the hit rate only one.
            looked = ("lookups –/s" if e.lookups_per_s is None
                      else rate(e.lookups_per_s, "lookups/s"))
            out.append((4, Text(f"  {looked}" + ("" if e.hit_rate_pct is None
                                                 else f" · row cache hit {e.hit_rate_pct:.1f}%"),
                                no_wrap=True, overflow="ellipsis")))
        if e.prefetch != "n/a":
            style = {"engaged": "green", "off": "dim"}.get(e.prefetch, "bold yellow")
            # The verdict may be long (every failing condition): it wraps rather than hides.
            out.append((2, Text(f"  {e.verdict}", style=style)))
    run = model.run_facts(store)
    for table in run.engram_host_tables if run else ():
        if table.no_huge_pages_warning:  # the tables' one warning: lookups ~10x slower
            out.append((2, Text(f"Engram {table.label}: {table.huge_pct:.0f}% huge: "
                                f"{table.no_huge_pages_warning}", style="bold yellow")))
    return out


# --------------------------------------------------------------------------- the ledger

# The host ledger's lines as a panel row names them, shortest first where room is short.
SHORT = {"Engram tables": "tables", "HiCache host pools": "HiCache",
         "other pinned/shared": "pinned", "server anonymous": "anon",
         "/dev/shm, tmpfs": "shm", "page cache": "cache", "other tenants": "tenants"}


def host_rows(store: RunStore, cols: int | None = None) -> list[tuple[int, Text]]:
    """The server's share of host growth with the other tenants' beside it (rank 1), then
    the server's lines (rank 2) and the rest of the host (rank 3)."""
    book = model.host_ledger(store)
    if book is None:
        return []
    out = [(1, delta_row(store))]
    room = None if cols is None else cols - HOST_LABEL_WIDTH - 1
    mine = [ln for ln in book.lines if ln.server]
    if mine:
        out.append((2, row("server", first_fitting(room, _variants(mine)), HOST_LABEL_WIDTH)))
    rest = [ln for ln in book.lines if not ln.server]
    out.append((3, row("others", first_fitting(room, _variants(rest)), HOST_LABEL_WIDTH)))
    return out


def _variants(lines: list[LedgerLine]) -> tuple[str, ...]:
    names = [SHORT.get(ln.name, ln.name) for ln in lines]
    full = " · ".join(f"{n} {figure(ln)}" for n, ln in zip(names, lines, strict=True))
    tight = "·".join(f"{n} {figure(ln, 0)}" for n, ln in zip(names, lines, strict=True))
    return f"{full} GiB", tight


def delta_row(store: RunStore) -> Text:
    """Host Δ: the server's share since its launch, other tenants' growth beside it."""
    server = model.run_server_delta_bytes(store, store.run)
    others = model.others_delta_bytes(store)
    text = Text(no_wrap=True, overflow="ellipsis")
    if server is not None and store.run is not None and store.run.state in model.ENDED:
        # Its figure from when it ran: no longer held, and not set against the others'.
        text.append(f"server {store.run.state} (had {gib_change(server)} GiB)", style="dim")
    else:
        text.append("–" if server is None else f"server {gib_change(server)} GiB",
                    style="bold green" if (server or 0) > 50 * GIB else "")
    if others is not None:
        text.append(f" · others {gib_change(others)}", style="dim")
    return row("Δ", text, HOST_LABEL_WIDTH)
