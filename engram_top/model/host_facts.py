"""The host's reading as a run shows it, and the server's processes: what the facts and the
host ledger both read (apart from the facts, so the ledger need not import them)."""

from __future__ import annotations

from collectors.readings import HostData
from collectors.units import GIB
from engram_top.model.store import RunStore
from engram_top.model.views import HostView


def server_pids(store: RunStore) -> set[int]:
    host: HostData | None = store.data("host")
    if host is None or host.server_tree is None:
        return set()
    return set(host.server_tree.pids)


def host_facts(store: RunStore) -> HostView | None:
    host: HostData | None = store.data("host")
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
    )
