"""The simulated host's two sockets: each NUMA node's memory and where the server's shared
memory sits, as /sys/devices/system/node and numa_maps would show them.

Assumption (the seed names no topology): a two-socket host, half its memory on each node,
NUMA node 0 on the side of GPUs 0-1 and node 1 on the side of GPUs 2-3. A process's memory
is on its GPU's node (a rank runs bound to its GPU's socket and faults its pages in there);
the launcher, which has no GPU, is on node 0.

The host tables' layout (`sim serve --engram-layout`): "shared" has rank 0 create the one
memfd every rank maps and fault the tables in, so they all sit on node 0 and GPUs 2-3 read
them across the socket link; "numa-replicated" puts a copy (~189 GiB) on each node, held by
the first rank there; "per-rank" a copy per rank, on its node. Another tenant's host memory
sits on the node it is bound to (ProcState.numa_node).
"""

from __future__ import annotations

from collections.abc import Iterable

from collectors.numa import Mappings
from collectors.units import GIB
from engram_top.sim.state import NodeSpec, ProcState

NODES = 2
CACHE_BYTES = 32 * GIB  # each node's half of the host's page cache (SimHostBackend: 64 GiB)
BASELINE_SHMEM_BYTES = 1 * GIB  # each node's half of the idle host's Shmem (2 GiB)


def node_of_gpu(gpu: int, gpus: int) -> int:
    return min(NODES - 1, gpu * NODES // max(1, gpus))


def node_of(proc: ProcState, gpus: int) -> int:
    if proc.numa_node is not None:  # bound there (a tenant's host memory, a table's copy)
        return min(NODES - 1, max(0, proc.numa_node))
    return node_of_gpu(min(proc.gpu_bytes), gpus) if proc.gpu_bytes else 0


def node_meminfo(spec: NodeSpec, procs: Iterable[ProcState]) -> dict[int, dict[str, int]]:
    """Each node's meminfo fields in bytes, consistent with SimHostBackend.meminfo: the
    nodes' totals, free and used memory add up to the host's."""
    held = {n: {"anon": 0, "shmem": 0, "huge": 0} for n in range(NODES)}
    for p in procs:
        h = held[node_of(p, spec.gpus)]
        h["anon"] += p.host_anon_bytes
        h["shmem"] += p.host_shmem_bytes
        h["huge"] += p.host_hugepage_bytes
    out = {}
    for n, h in held.items():
        last = n == NODES - 1  # the remainder of an odd split goes to the last node
        total = spec.host_total_bytes // NODES + (spec.host_total_bytes % NODES if last else 0)
        base = (spec.host_baseline_used_bytes // NODES
                + (spec.host_baseline_used_bytes % NODES if last else 0))
        used = base + h["anon"] + h["shmem"]  # the baseline's Shmem is in its used memory
        free = max(0, total - used - CACHE_BYTES)
        out[n] = {"MemTotal": total, "MemFree": free, "MemUsed": total - free,
                  "FilePages": CACHE_BYTES + BASELINE_SHMEM_BYTES + h["shmem"],
                  "Shmem": BASELINE_SHMEM_BYTES + h["shmem"], "ShmemHugePages": h["huge"],
                  "AnonHugePages": 0, "HugePages_Total": 0, "HugePages_Free": 0,
                  "HugePages_Surp": 0}
    return out


def process_nodes(proc: ProcState, spec: NodeSpec) -> dict[int, int]:
    """Where a process's modelled host memory sits: on its node, as much as that node
    holds past its idle use and page cache, the rest on the other (the kernel's fallback
    when a node is full)."""
    held = proc.host_anon_bytes + proc.host_shmem_bytes
    if not held:
        return {}
    home = node_of(proc, spec.gpus)
    room = max(0, (spec.host_total_bytes - spec.host_baseline_used_bytes) // NODES - CACHE_BYTES)
    out = {home: min(held, room)}
    if held > room:
        out[(home + 1) % NODES] = held - room
    return out


def shared_mappings(proc: ProcState, gpus: int) -> Mappings:
    """The process's shared memory as one mapping on its node. Only rank 0 holds the tables
    (the others' shares are their own pinned staging), so nothing is counted twice."""
    if not proc.host_shmem_bytes:
        return []
    return [(("simulated", proc.pid), {node_of(proc, gpus): proc.host_shmem_bytes})]
