"""Where the memory went: a host-RAM ledger (per NUMA node too) and an HBM ledger per GPU.

Each line says what holds the bytes, whether it is the watched server's, and where the figure
was read. A figure nobody reports is None (shown as unknown), never 0; what the known lines do
not explain is a line of its own ("other tenants" on the host, "unexplained" on a GPU), never
hidden. Pure, over a RunStore.

The host ledger splits what is in use (MemTotal - MemFree) into the server's share, measured
as its process tree's private memory (RssAnon) plus its shared memory counted once (numa_maps,
else RssShmem), and the rest: other processes' shared memory (/dev/shm, tmpfs), the page cache
(reclaimable; the checkpoint's files among it) and everything else (other tenants, the
kernel). A run's host delta is the server's share alone, so that another tenant's growth never
reads as the server's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collectors.readings import GpuData, HostData, ServerData
from collectors.source import SourceName
from collectors.startup_facts import RankFacts
from collectors.units import GIB, MIB
from engram_top.model.derived import once
from engram_top.model.hicache import hicache_facts
from engram_top.model.host import gpu_server_pids, host_facts, server_pids
from engram_top.model.store import RunFacts, RunStore
from scenarios.runstate import ENDED, LIVE

# At most this many other processes get a line of their own on a GPU; the rest are one line.
OTHER_PROCESS_LINES = 3
NO_RANK = RankFacts(rank=-1)


@dataclass(frozen=True)
class LedgerLine:
    name: str
    bytes: float | None  # None: nobody reports it (unknown, never 0)
    source: str  # where the figure was read, in a few words
    server: bool  # the watched server's memory (its share), else another holder's
    numa_node: int | None = None


@dataclass(frozen=True)
class HostLedger:
    total_bytes: int
    in_use_bytes: int  # MemTotal - MemFree: what the lines split
    free_bytes: int
    available_bytes: int
    lines: tuple[LedgerLine, ...]  # host-wide, the server's first
    per_node: dict[int, list[LedgerLine]] = field(default_factory=dict)
    server_bytes: float = 0.0  # the server's known lines summed
    others_bytes: float | None = None  # the "other tenants" line: nobody's ledger line
    container: str = ""  # what the server runs in (model.host.server_container)

    def line(self, name: str) -> LedgerLine | None:
        return next((ln for ln in self.lines if ln.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"total_bytes": self.total_bytes, "in_use_bytes": self.in_use_bytes,
                "free_bytes": self.free_bytes, "available_bytes": self.available_bytes,
                "server_bytes": self.server_bytes, "others_bytes": self.others_bytes,
                "container": self.container,
                "lines": [_line_json(ln) for ln in self.lines],
                "per_node": {str(n): [_line_json(ln) for ln in lines]
                             for n, lines in self.per_node.items()}}


@dataclass(frozen=True)
class GpuLedger:
    index: int
    total_bytes: int
    used_bytes: int  # NVML's
    lines: tuple[LedgerLine, ...]  # the engine's parts, then other processes
    # used minus every known line: CUDA contexts, allocator slack, parts the engine does not
    # report (a line whose figure is unknown lands here too). Negative: the lines over-count.
    unexplained_bytes: float
    server_bytes: int  # what NVML attributes to the server's processes
    # NVML's pids this host cannot see, taken as the server's (model.host.
    # gpu_server_pids): said, since it is a reading of the node, not a figure.
    note: str = ""

    def line(self, name: str) -> LedgerLine | None:
        return next((ln for ln in self.lines if ln.name.startswith(name)), None)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "total_bytes": self.total_bytes,
                "used_bytes": self.used_bytes, "server_bytes": self.server_bytes,
                "unexplained_bytes": self.unexplained_bytes,
                "lines": [_line_json(ln) for ln in self.lines],
                **({"note": self.note} if self.note else {})}


def _line_json(line: LedgerLine) -> dict[str, Any]:
    return {"name": line.name, "bytes": line.bytes, "source": line.source,
            "server": line.server, "numa_node": line.numa_node}


# --------------------------------------------------------------------------- host


def host_ledger(store: RunStore) -> HostLedger | None:
    """The host's memory split into the server's parts and the rest (computed once a
    reading: the Host RAM panel, the headline figures and the alerts each read it)."""
    run = store.run
    inputs = (store.data(SourceName.HOST), store.data(SourceName.SERVER), run,
              run.startup if run else None, run.engram if run else None)
    return once(store, "host_ledger", inputs, lambda: _host_ledger(store))


def _host_ledger(store: RunStore) -> HostLedger | None:
    host: HostData | None = store.data(SourceName.HOST)
    if host is None:
        return None
    tree = host.server_tree
    tables, tables_source = engram_table_bytes(store)
    hicache = hicache_facts(store)
    pools = hicache.pool_bytes if hicache is not None else None
    lines: list[LedgerLine] = []
    server_total = 0.0
    shared: float | None = None
    if tree is not None:
        shared, shared_source = _server_shared(host)
        # HiCache's host pools are the ranks' own pinned buffers: private (anonymous) memory.
        pool_part = min(pools, tree.rss_anon_bytes) if pools is not None else 0.0
        table_part = min(tables, shared) if tables is not None else 0.0
        if tables is not None or _host_placement(store):
            lines.append(LedgerLine("Engram tables", table_part if tables is not None else None,
                                    tables_source, True))
        if hicache is not None:
            lines.append(LedgerLine("HiCache host pools", pool_part if pools is not None
                                    else None, hicache.source, True))
        pinned = "" if tree.pinned_bytes is None else \
            f"; VmPin+VmLck {tree.pinned_bytes / GIB:,.1f} GiB"
        lines.append(LedgerLine("other pinned/shared", max(0.0, shared - table_part),
                                f"{shared_source} - tables{pinned}", True))
        lines.append(LedgerLine("server anonymous", max(0.0, tree.rss_anon_bytes - pool_part),
                                f"RssAnon of {len(tree.pids)} processes", True))
        server_total = tree.rss_anon_bytes + shared
    in_use = host.total_bytes - host.free_bytes
    shm_others = max(0.0, host.shmem_bytes - (shared or 0.0))
    cache = max(0.0, host.cached_bytes + host.buffers_bytes - host.shmem_bytes)
    others = max(0.0, in_use - server_total - shm_others - cache)
    lines += [
        LedgerLine("/dev/shm, tmpfs", shm_others,
                   "meminfo Shmem - the server's" if tree else "meminfo Shmem", False),
        LedgerLine("page cache", cache, "meminfo Cached + Buffers - Shmem (reclaimable)", False),
        LedgerLine("other tenants", others, "in use - the lines above", False),
    ]
    return HostLedger(
        total_bytes=host.total_bytes, in_use_bytes=in_use, free_bytes=host.free_bytes,
        available_bytes=host.available_bytes, lines=tuple(lines), per_node=_per_node(host),
        server_bytes=sum(ln.bytes or 0.0 for ln in lines if ln.server), others_bytes=others,
        container=host.server_container)


def _server_shared(host: HostData) -> tuple[float, str]:
    """The server's shared memory counted once: numa_maps (each mapping once, however many
    ranks map it) where read, else the tree's RssShmem (which counts a mapping once per
    process that maps it, so it may over-count)."""
    per_node = [n.server_shared_bytes for n in host.numa_nodes]
    if per_node and all(b is not None for b in per_node):
        return float(sum(b or 0 for b in per_node)), "numa_maps"
    tree = host.server_tree
    return float(tree.rss_shmem_bytes if tree else 0), "RssShmem"


def _per_node(host: HostData) -> dict[int, list[LedgerLine]]:
    out: dict[int, list[LedgerLine]] = {}
    for n in host.numa_nodes:
        cache = max(0, n.total_bytes - n.free_bytes - n.used_bytes)
        server = n.server_shared_bytes
        lines = [LedgerLine("server shared (Engram tables)", server, "numa_maps", True, n.node),
                 LedgerLine("/dev/shm, tmpfs", max(0, n.shmem_bytes - (server or 0)),
                            "node Shmem - the server's", False, n.node),
                 LedgerLine("page cache", cache, "node FilePages - Shmem", False, n.node),
                 # A node has no per-process figures: private memory is everyone's here.
                 LedgerLine("anonymous, all processes", max(0, n.used_bytes - n.shmem_bytes),
                            "node used - Shmem", False, n.node),
                 LedgerLine("free", n.free_bytes, "node MemFree", False, n.node)]
        out[n.node] = lines
    return out


def _host_placement(store: RunStore) -> bool:
    run = store.run
    placement = run.engram.placement if run is not None and run.engram is not None else None
    return isinstance(placement, str) and placement.startswith("host")


def engram_table_bytes(store: RunStore) -> tuple[float | None, str]:
    """The host tables' resident bytes as the server's log states them, each copy once: a
    shared table is one copy whichever ranks print it; any other layout (private, per-rank,
    numa-replicated) is one copy per rank that prints it."""
    run = store.run
    tables = run.startup.engram_tables if run is not None else ()
    copies: dict[tuple[Any, ...], float] = {}
    layouts: dict[str, set[Any]] = {}
    for t in tables:
        layout = t.layout or "shared"
        key = (t.label,) if layout == "shared" else (t.label, t.rank)
        copies[key] = t.resident_mib * MIB
        layouts.setdefault(layout, set()).add(key[1] if len(key) > 1 else None)
    if not copies:
        return None, "not in the server's log"
    how = ", ".join(f"{name} x{len(ranks)}" for name, ranks in sorted(layouts.items()))
    return sum(copies.values()), f"server log ({how})"


def run_server_delta_bytes(store: RunStore, run: RunFacts | None) -> float | None:
    """The server's share of host memory growth since its run started: while it is the
    store's live run, what its processes hold now (none of it was there before its launch),
    else the figure kept with the run. Other tenants' growth never counts."""
    if run is not None and run is store.run and run.state in LIVE:
        ledger = host_ledger(store)
        host: HostData | None = store.data(SourceName.HOST)
        if ledger is not None and host is not None and host.server_tree is not None:
            return ledger.server_bytes
    kept = run.results.host_delta_gib if run is not None else None
    return None if kept is None else kept * GIB


def others_delta_bytes(store: RunStore) -> float | None:
    """What the rest of the node took since the watched run's launch: the node's growth
    (used now minus used at launch) less what the server holds now. A run that ended holds
    nothing: its figure kept from when it ran is never set against the node now (after a
    kill that read "server +211.4 GiB · others -211.4")."""
    h = host_facts(store)
    run = store.run
    if h is None or h.delta_bytes is None or run is None:
        return None
    if run.state in ENDED:
        return h.delta_bytes
    server = run_server_delta_bytes(store, run)
    return None if server is None else h.delta_bytes - server


# --------------------------------------------------------------------------- HBM


def hbm_ledger(store: RunStore) -> list[GpuLedger]:
    gpus: GpuData | None = store.data(SourceName.GPU)
    if gpus is None:
        return []
    server: ServerData | None = store.data(SourceName.SERVER)
    run = store.run
    pids = server_pids(store)
    log_ranks = run.startup.ranks if run is not None else {}
    device_tables = run is not None and run.engram is not None \
        and run.engram.placement == "device"
    # A server that stopped answering, or whose run ended: its last figures are of a
    # server that may be gone. On a GPU where none of its processes is left they are left
    # out, never set against what NVML says now (after a kill: "engine 141.8 +
    # unexplained -141.8 GiB").
    latest = store.latest.get(SourceName.SERVER)
    silent = (latest is not None and not latest.ok) or (run is not None and run.state in ENDED)
    out = []
    for dev in gpus.devices:
        metrics = (server.ranks.get(dev.index) if server else None) or {}
        rank_log = log_ranks.get(dev.index)
        mine = gpu_server_pids(dev, pids, bool(metrics) or rank_log is not None)
        gone = silent and not mine
        if gone:
            metrics, rank_log = {}, None
        logged = rank_log or NO_RANK  # a rank the log says nothing of: its figures None
        serving = bool(mine) or bool(metrics) or rank_log is not None
        lines: list[LedgerLine] = []
        if serving:
            name = "weights (Engram tables in them)" if device_tables else "weights"
            lines += [
                _gb_line(name, [("metrics", metrics.get("weight_gb")),
                                ("log", logged.all_weights_gb),
                                ("log", logged.weights_gb)]),
                _gb_line("KV pool", [("metrics", metrics.get("kv_cache_gb")),
                                     ("log", logged.all_kv_gb),
                                     ("log", logged.kv_total_gb)],
                         # A zero from a server that has a pool is a known-wrong gauge
                         # (SGLang's kv_cache_memory_usage_gb on DeepSeek-V4's pools).
                         zero_is_unknown=True),
                _gb_line("CUDA graphs", [("log", logged.graph_mem_usage_gb),
                                         ("/server_info", server.graph_gb if server
                                          and dev.index == 0 else None)]),
            ]
        # An attached server's own process not found yet (the first second): its ranks
        # would read as other tenants beside its own weights and KV pool, counted twice.
        finding = run is not None and run.finding_processes and not pids and serving
        if not finding:
            lines += _other_processes(dev.processes, mine)
        known = sum(ln.bytes or 0.0 for ln in lines)
        unseen = sorted(pid for pid in mine if pid not in pids)
        note = "" if not unseen else (
            f"NVML's pid{'s' * (len(unseen) > 1)} {', '.join(map(str, unseen))} not on this "
            "host (another PID namespace: a container): taken as the server's")
        if finding:
            note = "the server's processes not found on this host yet: other processes not " \
                   "told apart"
        elif gone and (server is not None or dev.index in log_ranks):
            note = "the server is not answering and holds nothing here: its last figures " \
                   "left out"
        out.append(GpuLedger(
            index=dev.index, total_bytes=dev.total_bytes, used_bytes=dev.used_bytes,
            lines=tuple(lines), unexplained_bytes=dev.used_bytes - known,
            server_bytes=sum(p.used_bytes or 0 for p in dev.processes if p.pid in mine),
            note=note))
    return out


def _gb_line(name: str, tries: list[tuple[str, Any]], zero_is_unknown: bool = False) -> LedgerLine:
    """The first figure that is a number (SGLang's "GB" are GiB); a zero where zero cannot be
    true is passed over, and said so if nothing else is found."""
    zero = ""
    for source, value in tries:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            continue
        if value <= 0 and zero_is_unknown:
            zero = f"{source} says 0 (known wrong): unknown"
            continue
        return LedgerLine(name, float(value) * GIB, source, True)
    return LedgerLine(name, None, zero or "not reported", True)


def process_name(p: Any) -> str:
    """A GPU process as a line names it: its command, or where it lives when unnamed."""
    if p.name:
        return str(p.name)
    return "another PID namespace's process" if getattr(p, "seen", None) is False \
        else "process"


def pid_label(pid: int, container: str = "", *more: str) -> str:
    """A process as a line names it beside its name: "(pid 4242)", or with what it runs in
    "(pid 4242, docker 3f2a1b4c5d6e)" (and any ``more`` words after)."""
    return f"({', '.join(w for w in (f'pid {pid}', container, *more) if w)})"


def _other_processes(processes: Any, pids: set[int]) -> list[LedgerLine]:
    others = sorted((p for p in processes if p.pid not in pids),
                    key=lambda p: -(p.used_bytes or 0))
    lines = [LedgerLine(f"{process_name(p)} {pid_label(p.pid, p.container)}", p.used_bytes,
                        "NVML processes", False) for p in others[:OTHER_PROCESS_LINES]]
    rest = others[OTHER_PROCESS_LINES:]
    if rest:
        known = [p.used_bytes for p in rest if p.used_bytes is not None]
        lines.append(LedgerLine(f"{len(rest)} more processes", sum(known) if known else None,
                                "NVML processes", False))
    return lines
