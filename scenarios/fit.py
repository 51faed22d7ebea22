"""Will it fit: a scenario's memory need against the node's free memory, said before every start
and switch, so a switch that does not fit is found here rather than when the kernel kills a
rank or SGLang stops with "Not enough memory".

Pure: predict() reads a scenario, the node's free memory (NodeFree, built by node_free() from
the GPU and host readings) and the model's figures (scenarios.fit_figures), and gives a
verdict (ok, warn or refuse) with one line per place it looked (each GPU, the host, each NUMA
node), every line with its figures: what is needed, of what, and what is free.

HBM, as SGLang sizes it: --mem-fraction-static (its automatic choice where not given) is the
share of the GPU that everything but the last (1 - fraction) may take; the KV pool gets what
the GPU has free at start-up after the context and the weights, less that reserve. So memory
another process holds shrinks the KV pool (warn), and where nothing is left for it SGLang
stops at start-up (refuse).

Host RAM: the Engram tables in host memory (one copy per node with the shared layout, one per
NUMA node when NUMA-replicated, one per rank when per-rank), the HiCache host pool of every
TP rank (--hicache-size, GB of 1e9 bytes as SGLang reads it; --hicache-ratio; or sized by
SGLang to what the rest leaves: scenarios.hicache_size), the server's own memory and its
pinned staging, against MemAvailable, and per NUMA node where each rank's share lands.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from collectors.figure_bounds import index
from collectors.readings import GpuData, HostData
from collectors.units import GIB, gib_text
from scenarios.engines.engram import LAYOUT
from scenarios.fit_figures import ModelFigures, describes, seed_figures
from scenarios.hicache_size import HiCacheSize, hicache_size
from scenarios.scenario_file import Scenario

OK, WARN, REFUSE, UNKNOWN = "ok", "warn", "refuse", "unknown"
_RANK = {OK: 0, UNKNOWN: 0, WARN: 1, REFUSE: 2}
# Host memory left after the start below this share of the host warns: the kernel has only
# page cache left to give back, and the OOM killer picks the largest process (a rank).
HOST_HEADROOM = 0.05
# A KV pool this much smaller than planned is noise (the fraction's rounding), not a warning.
KV_SLACK_BYTES = 1 * GIB
# Layouts of the host tables, by what they copy; the words SGLang, the engram-config and the
# simulated node use for each.
SHARED, NUMA_REPLICATED, PER_RANK = "shared", "numa-replicated", "per-rank"
_LAYOUTS = {
    "shared": SHARED, "auto": SHARED, "per_node": SHARED, "per-node": SHARED, "node": SHARED,
    "numa-replicated": NUMA_REPLICATED, "numa_replicated": NUMA_REPLICATED,
    "numa": NUMA_REPLICATED, "per_numa": NUMA_REPLICATED, "per-numa": NUMA_REPLICATED,
    "per_numa_node": NUMA_REPLICATED, "replicated": NUMA_REPLICATED,
    "private": PER_RANK, "per-rank": PER_RANK, "per_rank": PER_RANK, "rank": PER_RANK,
}
_LAYOUT_FLAGS = ("--engram-layout", "--host-table-layout", "--engram-host-layout")


@dataclass(frozen=True)
class GpuFree:
    index: int
    total_bytes: int
    reserved_bytes: int
    free_bytes: int  # NVML free, with what the stopping server holds given back
    others: tuple[tuple[str, int], ...] = ()  # (who, bytes) of the other processes on it
    numa_node: int | None = None  # the host NUMA node next to it, where known


@dataclass(frozen=True)
class NumaFree:
    node: int
    total_bytes: int
    available_bytes: int  # free plus reclaimable page cache, with the stopping server's share


@dataclass(frozen=True)
class NodeFree:
    """The node's free memory for the next server: after the one being replaced stops."""

    gpus: tuple[GpuFree, ...] = ()
    host_total_bytes: int | None = None
    host_available_bytes: int | None = None  # MemAvailable
    numa: tuple[NumaFree, ...] = ()
    gpu_problem: str = ""  # why no GPU figures ("" when read)
    host_problem: str = ""
    source: str = ""  # "NVML and /proc", "the simulated node"
    # What bounds the host figure where it is not MemAvailable: the memory cgroup the server
    # would run in, where its limit leaves less than the host has ("" otherwise).
    host_bound: str = ""


@dataclass(frozen=True)
class FitLine:
    level: str  # ok, warn, refuse or unknown
    where: str  # "GPU 2", "host", "NUMA node 1"
    need_bytes: float | None
    free_bytes: float | None
    text: str  # the whole line, with its figures


@dataclass(frozen=True)
class FitVerdict:
    scenario: str
    level: str  # ok, warn or refuse
    lines: tuple[FitLine, ...] = field(default_factory=tuple)

    @property
    def refused(self) -> bool:
        return self.level == REFUSE

    @property
    def warned(self) -> bool:
        return self.level == WARN

    @property
    def headline(self) -> str:
        if self.level == REFUSE:
            return f"'{self.scenario}' does not fit on this node"
        if self.level == WARN:
            return f"'{self.scenario}' fits only in part"
        return f"'{self.scenario}' fits"

    def report(self) -> list[str]:
        """The headline, then each line that is not plainly ok, most serious first (every
        line where all are ok)."""
        shown = [ln for ln in self.lines if ln.level != OK] or list(self.lines)
        shown.sort(key=lambda ln: -_RANK[ln.level])
        return [self.headline + ":", *(f"  {ln.level}: {ln.text}" for ln in shown)]


# --------------------------------------------------------------------------- the node


def node_free(gpu: GpuData | None, host: HostData | None, *,
              server_pids: Collection[int] = (), gpu_problem: str = "",
              host_problem: str = "", source: str = "") -> NodeFree:
    """NodeFree from the collectors' readings. ``server_pids``: the processes of the server
    that stops before the next starts (a switch); what they hold counts as free."""
    gpus = []
    for d in gpu.devices if gpu is not None else ():
        mine = sum(p.used_bytes or 0 for p in d.processes if p.pid in server_pids)
        # A pid this host cannot see (another PID namespace) is said so: the server itself
        # when the dashboard runs in its container, which --force then overrides.
        others = tuple((f"{p.name or ('another PID namespace' if p.seen is False else 'pid')}"
                        f" (pid {p.pid})", p.used_bytes or 0)
                       for p in d.processes if p.pid not in server_pids)
        gpus.append(GpuFree(d.index, d.total_bytes, d.reserved_bytes, d.free_bytes + mine,
                            others))
    total = available = None
    bound = ""
    numa: list[NumaFree] = []
    if host is not None:
        total, available = host.total_bytes, host.available_bytes
        tree = host.server_tree
        back = tree.rss_anon_bytes + tree.rss_shmem_bytes \
            if tree is not None and server_pids else 0
        available += back
        cg = host.cgroup
        left = cg.available_bytes if cg is not None else None
        if cg is not None and left is not None and left + back < available:
            # A container's limit leaves less than the host: the kernel kills at the limit.
            total, available = cg.limit_bytes, left + back
            bound = f"memory cgroup {cg.path}: its limit less what it holds"
        for n in host.numa_nodes:
            back = (n.server_shared_bytes or 0) if server_pids else 0
            numa.append(NumaFree(n.node, n.total_bytes,
                                 max(0, n.total_bytes - n.used_bytes) + back))
    if gpu is None and not gpu_problem:
        gpu_problem = "no GPU reading"
    if host is None and not host_problem:
        host_problem = "no host reading"
    return NodeFree(tuple(gpus), total, available, tuple(numa), gpu_problem, host_problem,
                    source, bound)


# --------------------------------------------------------------------------- the need


@dataclass(frozen=True)
class Need:
    """What the scenario's server will hold, from its placement, layout, TP, HiCache size and
    mem fraction, and the model's figures."""

    placement: str
    tp: int
    gpu_indices: tuple[int, ...] | None  # CUDA_VISIBLE_DEVICES where the scenario sets it
    context_bytes: int
    weights_bytes: int  # per GPU
    graphs_bytes: int
    mem_fraction: float
    mem_fraction_source: str
    layout: str | None  # of the host tables; None with the tables in HBM
    layout_source: str
    table_bytes: int  # one copy
    hicache: HiCacheSize  # each TP rank's host pool: fixed, or sized by SGLang at start
    process_bytes: int  # whole server
    staging_bytes: int  # whole server
    source: str


def _arg(args: Sequence[str], *flags: str) -> str | None:
    """The last value given for any of ``flags`` (``--x v`` or ``--x=v``), as argparse."""
    out = None
    for i, item in enumerate(args):
        key, eq, inline = item.partition("=")
        if key in flags:
            out = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
    return out


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value == value and abs(value) != float("inf") \
        else None


def _layout(sc: Scenario) -> tuple[str, str]:
    env = sc.launch_env()
    for flag in _LAYOUT_FLAGS:
        given = _arg(sc.args, flag)
        if given is not None:
            return _LAYOUTS.get(given.strip().lower(), PER_RANK), flag
    config = _arg(sc.args, "--engram-config")
    if config and "replication" in config:
        for word, layout in sorted(_LAYOUTS.items(), key=lambda kv: -len(kv[0])):
            if f'"{word}"' in config:
                return layout, "--engram-config"
    if env.get(LAYOUT):
        return _LAYOUTS.get(env[LAYOUT].strip().lower(), PER_RANK), LAYOUT
    return SHARED, "the default layout"


def need_of(sc: Scenario, figures: ModelFigures | None) -> Need | None:
    """The scenario's need, or None where the model's figures are unknown."""
    if figures is None or sc.placement not in figures.weights_bytes:
        return None
    follows = sc.engine.follows_reference
    tp = figures.tp if follows else sc.tp
    tp_arg = _number(_arg(sc.args, "--tp-size", "--tp", "--tensor-parallel-size"))
    if tp_arg is not None and tp_arg >= 1 and not follows:
        tp = int(tp_arg)
    placement = sc.placement
    # The weights spread over the ranks: the seed's per-GPU figure at its own TP, rescaled.
    weights = int(figures.weights_bytes[placement] * figures.tp / tp)
    auto = ((figures.gpu_reserved_bytes + figures.context_bytes
             + figures.weights_bytes["device"] + figures.kv_bytes["device"])
            / figures.gpu_total_bytes)
    given = _number(_arg(sc.args, "--mem-fraction-static"))
    frac, frac_source = ((given, "--mem-fraction-static") if given is not None and 0 < given <= 1
                         else (round(auto, 3), "auto"))
    hicache = hicache_size(
        enabled="--enable-hierarchical-cache" in sc.args,
        size_gb=_number(_arg(sc.args, "--hicache-size")),
        ratio=_number(_arg(sc.args, "--hicache-ratio")),
        fraction=_number(_arg(sc.args, "--hicache-host-memory-fraction")),
        kv_bytes_per_rank=figures.kv_bytes[placement])
    visible = sc.launch_env().get("CUDA_VISIBLE_DEVICES")
    indices = None
    listed = [index(p) for p in visible.split(",")] if visible else []
    if listed and all(i is not None for i in listed):  # else UUIDs or MIG names
        indices = tuple(i for i in listed if i is not None)
    on_host = placement != "device"
    layout, layout_source = _layout(sc) if on_host else (None, "")
    return Need(placement, tp, indices, figures.context_bytes, weights, figures.graphs_bytes,
                frac, frac_source, layout, layout_source,
                figures.table_bytes if on_host else 0, hicache,
                figures.process_bytes, figures.staging_bytes.get(placement, 0), figures.source)


# --------------------------------------------------------------------------- the verdict


def predict(scenario: Scenario, node: NodeFree,
            figures: ModelFigures | None = None) -> FitVerdict:
    """Will ``scenario`` fit on ``node``: ok, warn (it starts, with less than it plans:
    a smaller KV pool, tables spilling to the far NUMA node, little host memory left) or
    refuse (it would fail at start-up, or push the host into the OOM killer)."""
    if figures is None and describes(scenario.model_path, scenario.engine.follows_reference):
        figures = seed_figures()
    need = need_of(scenario, figures)
    if need is None:
        model = scenario.model_path or scenario.kind
        return FitVerdict(scenario.name, OK, (FitLine(
            UNKNOWN, "model", None, None,
            f"no memory figures for {model} ({scenario.placement or 'no placement'}): its "
            "need is not predicted"),))
    lines = [*_hbm_lines(need, node), *_host_lines(need, node)]
    level = max((ln.level for ln in lines), key=lambda lv: _RANK[lv], default=OK)
    return FitVerdict(scenario.name, OK if level == UNKNOWN else level, tuple(lines))


def _g(nbytes: float) -> str:
    return f"{gib_text(nbytes)} GiB"


def _gpus_used(need: Need, node: NodeFree) -> list[GpuFree] | str:
    by_index = {g.index: g for g in node.gpus}
    if need.gpu_indices is not None:
        missing = [i for i in need.gpu_indices if i not in by_index]
        if missing:
            return f"CUDA_VISIBLE_DEVICES names GPU {missing[0]}, which the node has not"
        chosen = [by_index[i] for i in need.gpu_indices[:need.tp]]
    else:
        chosen = sorted(node.gpus, key=lambda g: g.index)[:need.tp]
    if len(chosen) < need.tp:
        return f"TP {need.tp} needs {need.tp} GPUs; the node has {len(chosen)}"
    return chosen


def _hbm_lines(need: Need, node: NodeFree) -> list[FitLine]:
    if not node.gpus:
        return [FitLine(UNKNOWN, "GPUs", None, None,
                        f"HBM not checked: {node.gpu_problem or 'no GPUs read'}")]
    gpus = _gpus_used(need, node)
    if isinstance(gpus, str):
        return [FitLine(REFUSE, "GPUs", None, None, gpus)]
    out = []
    for g in gpus:
        reserve = (1 - need.mem_fraction) * g.total_bytes
        floor = need.context_bytes + need.weights_bytes + reserve
        plan_kv = need.mem_fraction * g.total_bytes - g.reserved_bytes - floor + reserve
        kv = g.free_bytes - floor
        parts = (f"context {gib_text(need.context_bytes)} + weights "
                 f"{gib_text(need.weights_bytes)} + KV {gib_text(max(0.0, plan_kv))} + reserve "
                 f"{gib_text(reserve)} at mem fraction {need.mem_fraction:g} "
                 f"({need.mem_fraction_source})")
        others = ", ".join(f"{who} {_g(b)}" for who, b in sorted(g.others, key=lambda o: -o[1]))
        held = f"; other processes hold {others}" if others else ""
        base = (f"GPU {g.index}: needs {_g(floor + max(0.0, plan_kv))} ({parts}), free "
                f"{_g(g.free_bytes)}{held}")
        if plan_kv <= 0:
            out.append(FitLine(REFUSE, f"GPU {g.index}", floor, g.free_bytes,
                               f"{base}: mem fraction {need.mem_fraction:g} leaves no KV pool "
                               "after the weights"))
        elif kv <= 0:
            out.append(FitLine(REFUSE, f"GPU {g.index}", floor, g.free_bytes,
                               f"{base}: short of {_g(-kv)} before any KV pool; SGLang would "
                               "stop at start-up (Not enough memory)"))
        elif kv < plan_kv - KV_SLACK_BYTES:
            out.append(FitLine(WARN, f"GPU {g.index}", floor + plan_kv, g.free_bytes,
                               f"{base}: the KV pool would be {_g(kv)} instead of "
                               f"{_g(plan_kv)} ({(kv / plan_kv - 1) * 100:.0f}%)"))
        else:
            out.append(FitLine(OK, f"GPU {g.index}", floor + plan_kv, g.free_bytes, base))
    return out


def _rank_nodes(need: Need, node: NodeFree) -> list[int]:
    """The NUMA node of each rank: its GPU's where known, else the GPUs spread evenly over
    the nodes in order (GPUs 0-1 on node 0, 2-3 on node 1 of a two-socket host)."""
    ids = sorted(n.node for n in node.numa)
    count = max(1, len(ids))
    gpus = _gpus_used(need, node)
    indices = [g.index for g in gpus] if isinstance(gpus, list) else list(range(need.tp))
    total = max(len(node.gpus), need.tp, 1)
    known = {g.index: g.numa_node for g in node.gpus}
    out = []
    for i in indices:
        at = known.get(i)
        out.append(at if at is not None else (ids[min(count - 1, i * count // total)]
                                              if ids else 0))
    return out


def _host_items(need: Need, node: NodeFree) -> list[tuple[str, float, int | None]]:
    """(what, bytes, NUMA node or None) for each share the server takes of host memory."""
    ranks = _rank_nodes(need, node)
    ids = sorted(n.node for n in node.numa) or [0]
    items: list[tuple[str, float, int | None]] = []
    if need.table_bytes:
        label = f"Engram tables ({need.layout})"
        if need.layout == NUMA_REPLICATED:
            items += [(label, need.table_bytes, n) for n in ids]
        elif need.layout == PER_RANK:
            items += [(label, need.table_bytes, n) for n in ranks]
        else:  # one copy, faulted in by the first rank: on its node
            items.append((label, need.table_bytes, ranks[0] if ranks else None))
    for what, nbytes in (("server processes", need.process_bytes),
                         ("pinned staging", need.staging_bytes)):
        if nbytes:
            items += [(what, nbytes / len(ranks), n) for n in ranks] if ranks else \
                [(what, nbytes, None)]
    # Last: sized by SGLang, the pool takes a share of what the rest leaves.
    pool = need.hicache.per_rank(node.host_available_bytes, sum(b for _, b, _ in items),
                                 len(ranks) or need.tp)
    if pool:
        label = "HiCache host pools (auto)" if need.hicache.auto else "HiCache host pools"
        items += [(label, pool, n) for n in ranks]
    return items


def _sum_by(items: list[tuple[str, float, int | None]]) -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    for what, nbytes, _ in items:
        total, count = out.get(what, (0.0, 0))
        out[what] = (total + nbytes, count + 1)
    return out


def _parts(items: list[tuple[str, float, int | None]]) -> str:
    words = []
    for what, (total, count) in _sum_by(items).items():
        copies = f" ({count} x {gib_text(total / count)})" if count > 1 and \
            what.startswith(("Engram", "HiCache")) else ""
        words.append(f"{what} {gib_text(total)}{copies}")
    return " + ".join(words)


def _host_lines(need: Need, node: NodeFree) -> list[FitLine]:
    items = _host_items(need, node)
    if not items:
        return []
    total_need = sum(b for _, b, _ in items)
    if node.host_available_bytes is None:
        return [FitLine(UNKNOWN, "host", total_need, None,
                        f"host RAM not checked: {node.host_problem or 'no host reading'}")]
    free = node.host_available_bytes
    base = (f"host: needs {_g(total_need)} ({_parts(items)}), free {_g(free)}"
            + (f" of {_g(node.host_total_bytes)}" if node.host_total_bytes else "")
            + f" ({node.host_bound or 'MemAvailable'})")
    left = free - total_need
    headroom = HOST_HEADROOM * (node.host_total_bytes or 0)
    if left < 0:
        out = [FitLine(REFUSE, "host", total_need, free,
                       f"{base}: short of {_g(-left)}; the kernel would kill a rank (OOM)")]
    elif left < headroom:
        out = [FitLine(WARN, "host", total_need, free,
                       f"{base}: only {_g(left)} would be left (under "
                       f"{HOST_HEADROOM * 100:.0f}% of the host)")]
    else:
        out = [FitLine(OK, "host", total_need, free, base)]
    bound = need.layout == NUMA_REPLICATED
    for n in sorted(node.numa, key=lambda x: x.node):
        mine = [it for it in items if it[2] == n.node]
        if not mine:
            continue
        want = sum(b for _, b, _ in mine)
        text = (f"NUMA node {n.node}: needs {_g(want)} ({_parts(mine)}), free "
                f"{_g(n.available_bytes)} of {_g(n.total_bytes)}")
        if want <= n.available_bytes:
            out.append(FitLine(OK, f"NUMA node {n.node}", want, n.available_bytes, text))
        elif bound:
            out.append(FitLine(REFUSE, f"NUMA node {n.node}", want, n.available_bytes,
                               f"{text}: short of {_g(want - n.available_bytes)}; a "
                               "NUMA-replicated copy must sit on its own node"))
        else:
            out.append(FitLine(WARN, f"NUMA node {n.node}", want, n.available_bytes,
                               f"{text}: {_g(want - n.available_bytes)} would spill to another "
                               "node (its reads cross the socket link)"))
    return out


def with_numa(node: NodeFree, gpu_nodes: dict[int, int]) -> NodeFree:
    """The node with each GPU's NUMA node set (where a backend knows it)."""
    return replace(node, gpus=tuple(replace(g, numa_node=gpu_nodes.get(g.index, g.numa_node))
                                    for g in node.gpus))
