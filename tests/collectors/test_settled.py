"""The host poll's settled parts (NUMA nodes, cgroup, /dev/shm, a spawn in the tree) are read
when the host's free or available memory moved, when the server is another process, and at
least every settled.MAX_AGE_S; in between the reading keeps what they last said. Over a /proc
and /sys the test writes, on the collector's clock."""

from __future__ import annotations

from pathlib import Path

from corpus import ManualClock

from collectors import settled
from collectors.host import HostCollector, ProcBackend
from collectors.readings import CgroupMemory
from collectors.units import KIB


class Counted(ProcBackend):
    """pid 100 (and 200) without children; counts the reads the cadence is for."""

    def __init__(self, root: Path) -> None:
        super().__init__(proc=root / "proc", sys=root / "sys")
        self.reads = {"node_meminfo": 0, "cgroup": 0, "shm_mount": 0, "thread_children": 0}

    def children(self, pid: int) -> list[int] | None:
        return []

    def thread_children(self, pid: int) -> list[int] | None:
        self.reads["thread_children"] += 1
        return []

    def node_meminfo(self) -> dict[int, dict[str, int]] | None:
        self.reads["node_meminfo"] += 1
        return super().node_meminfo()

    def cgroup(self, pid: int | None) -> CgroupMemory | None:
        self.reads["cgroup"] += 1
        return None

    def shm_mount(self, pid: int | None) -> tuple[int, int] | None:
        self.reads["shm_mount"] += 1
        return None


def meminfo(root: Path, free_kib: int) -> None:
    (root / "proc" / "meminfo").write_text(
        f"MemTotal: 16777216 kB\nMemFree: {free_kib} kB\nMemAvailable: {free_kib + 1024} kB\n")


def node_free(root: Path, node: int, free_kib: int) -> None:
    folder = root / "sys" / "devices" / "system" / "node" / f"node{node}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meminfo").write_text(f"Node {node} MemTotal:  8388608 kB\n"
                                    f"Node {node} MemFree:   {free_kib} kB\n")


def write(root: Path) -> Counted:
    (root / "proc").mkdir()
    meminfo(root, 4_000_000)
    (root / "proc" / "vmstat").write_text("pswpin 0\npswpout 0\n")
    for pid in (100, 200):
        (root / "proc" / str(pid)).mkdir()
        (root / "proc" / str(pid) / "status").write_text("VmRSS: 1000 kB\nRssAnon: 1000 kB\n")
    for node in (0, 1):
        node_free(root, node, 2_000_000)
    return Counted(root)


async def test_settled_parts_are_read_as_often_as_the_hosts_memory_moves(
        tmp_path: Path) -> None:
    backend = write(tmp_path)
    clock = ManualClock()
    collector = HostCollector(backend, root_pid=100, clock=clock)

    async def node1_free() -> int:
        data = (await collector.poll()).data
        assert data is not None
        return data.numa_nodes[1].free_bytes

    assert await node1_free() == 2_000_000 * KIB
    first = dict(backend.reads)
    assert first == {"node_meminfo": 1, "cgroup": 1, "shm_mount": 1, "thread_children": 0}

    # Still: the node's own file moved, the host's memory did not (by less than the step).
    node_free(tmp_path, 1, 1_000_000)
    meminfo(tmp_path, 4_000_000 - settled.MOVE_BYTES // KIB + 1)
    clock.advance(settled.MAX_AGE_S - 1.0)
    assert await node1_free() == 2_000_000 * KIB  # as last read, from the kept parts
    assert backend.reads == first

    # The host's free memory moved by the step since they were read: read this poll.
    meminfo(tmp_path, 4_000_000 - settled.MOVE_BYTES // KIB)
    assert await node1_free() == 1_000_000 * KIB
    assert backend.reads == {"node_meminfo": 2, "cgroup": 2, "shm_mount": 2,
                             "thread_children": 1}  # the tree's spawns looked for too

    # Their age: at most MAX_AGE_S, the host standing still.
    node_free(tmp_path, 1, 500_000)
    clock.advance(settled.MAX_AGE_S - 0.5)
    assert await node1_free() == 1_000_000 * KIB
    clock.advance(0.5)
    assert await node1_free() == 500_000 * KIB
    assert collector.settled.reads == 3

    # Another server: its own cgroup and /dev/shm at once.
    node_free(tmp_path, 1, 250_000)
    collector.root_pid = 200
    assert await node1_free() == 250_000 * KIB
    assert collector.settled.reads == 4


def test_a_poll_without_the_cadence_reads_everything(tmp_path: Path) -> None:
    """sample() alone (the supervisor's guards, the fit check) keeps nothing between calls."""
    from collectors.host import sample
    backend = write(tmp_path)
    for free in (2_000_000, 1_000_000):
        node_free(tmp_path, 0, free)
        assert sample(backend, 100).numa_nodes[0].free_bytes == free * KIB
    assert backend.reads["node_meminfo"] == 2
