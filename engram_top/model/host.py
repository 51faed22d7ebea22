"""The host's reading as a run shows it, and the server's processes: what the facts and the
host ledger both read (apart from the facts, so the ledger need not import them)."""

from __future__ import annotations

from collectors.readings import GpuDevice, HostData
from collectors.source import SourceName
from collectors.units import GIB
from engram_top.model.store import RunStore
from engram_top.model.views import HostView


def server_pids(store: RunStore) -> set[int]:
    host: HostData | None = store.data(SourceName.HOST)
    if host is None or host.server_tree is None:
        return set()
    return set(host.server_tree.pids)


def gpu_server_pids(dev: GpuDevice, pids: set[int], serves: bool) -> set[int]:
    """The pids NVML lists on ``dev`` that are the watched server's: those in its process
    tree (``pids``). Where none is, yet the server runs on this GPU (``serves``: its metrics
    or log name the rank) and NVML lists pids this host's /proc lacks, those are: the
    dashboard sees another PID namespace (it runs in the server's container while the driver
    answers with the host's pids). Counted as another tenant's, the server's own memory
    would be counted twice in the ledger and named as a stranger in the HBM alert."""
    mine = {p.pid for p in dev.processes if p.pid in pids}
    if mine or not serves or not pids:
        return mine
    return {p.pid for p in dev.processes if p.seen is False}


def host_facts(store: RunStore) -> HostView | None:
    host: HostData | None = store.data(SourceName.HOST)
    if host is None:
        return None
    run = store.run
    base = run.baseline_host_used if run else None
    delta = None if base is None else host.used_bytes - base
    tree = host.server_tree
    return HostView(
        total_bytes=host.total_bytes, used_bytes=host.used_bytes,
        available_bytes=host.available_bytes, shmem_bytes=host.shmem_bytes,
        baseline_used_bytes=base, delta_bytes=delta,
        delta_gib=None if delta is None else round(delta / GIB, 3),
        # Transparent huge pages and hugetlbfs pages in use: Engram tables may sit in either.
        hugepages_bytes=host.anon_hugepages_bytes + max(
            0, host.hugepages_total - host.hugepages_free) * host.hugepage_size_bytes,
        swap_used_bytes=host.swap_used_bytes,
        server_rss_bytes=tree.rss_bytes if tree else None,
        server_rss_shmem_bytes=tree.rss_shmem_bytes if tree else None,
        server_pids=tuple(tree.pids) if tree else (),
        numa_nodes=host.numa_nodes, numa_problem=host.numa_problem,
        tree_problem=host.tree_problem,
        cgroup=host.cgroup if host.cgroup is not None and host.cgroup.limit_bytes else None,
        # Without the server's tree the cgroup read is this process's own: not the server's.
        container=host.server_container,
        shm_mount=host.shm_mount,
    )
