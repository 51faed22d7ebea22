"""The host poll's settled parts (the cgroup, /dev/shm, a spawn in the tree) are read when the
host's free or available memory moved, when the server is another process, and at least
every settled.MAX_AGE_S; in between the reading keeps what they last said. The NUMA nodes
(the server's shared memory counted once) are read every poll. Over a /proc and /sys the
test writes, on the collector's clock."""

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
        self.current = 1 << 30  # the cgroup's memory.current, as the test moves it

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
        return CgroupMemory(f"/test-{pid}", 2, None, self.current)

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

    async def current() -> int | None:
        data = (await collector.poll()).data
        assert data is not None and data.cgroup is not None
        assert data.numa_nodes[1].free_bytes == node1[0] * KIB  # every poll, as it is
        return data.cgroup.current_bytes

    node1 = [2_000_000]
    assert await current() == 1 << 30
    assert backend.reads == {"node_meminfo": 1, "cgroup": 1, "shm_mount": 1,
                             "thread_children": 0}

    # Still: the cgroup's figure moved, the host's memory did not (by less than the step).
    backend.current = 2 << 30
    node1[0] = 1_000_000
    node_free(tmp_path, 1, node1[0])
    meminfo(tmp_path, 4_000_000 - settled.MOVE_BYTES // KIB + 1)
    clock.advance(settled.MAX_AGE_S - 1.0)
    assert await current() == 1 << 30  # as last read, from the kept parts
    assert backend.reads == {"node_meminfo": 2, "cgroup": 1, "shm_mount": 1,
                             "thread_children": 0}

    # The host's free memory moved by the step since they were read: read this poll.
    meminfo(tmp_path, 4_000_000 - settled.MOVE_BYTES // KIB)
    assert await current() == 2 << 30
    assert backend.reads == {"node_meminfo": 3, "cgroup": 2, "shm_mount": 2,
                             "thread_children": 1}  # the tree's spawns looked for too

    # Their age: at most MAX_AGE_S, the host standing still.
    backend.current = 3 << 30
    clock.advance(settled.MAX_AGE_S - 0.5)
    assert await current() == 2 << 30
    clock.advance(0.5)
    assert await current() == 3 << 30
    assert collector.settled.reads == 3

    # Another server: its own cgroup and /dev/shm at once.
    collector.root_pid = 200
    data = (await collector.poll()).data
    assert data is not None and data.cgroup is not None and data.cgroup.path == "/test-200"
    assert collector.settled.reads == 4


def test_a_poll_without_the_cadence_reads_everything(tmp_path: Path) -> None:
    """sample() alone (the supervisor's guards, the fit check) keeps nothing between calls."""
    from collectors.host import sample
    backend = write(tmp_path)
    for current in (1 << 30, 2 << 30):
        backend.current = current
        found = sample(backend, 100).cgroup
        assert found is not None and found.current_bytes == current
    assert backend.reads["cgroup"] == 2 and backend.reads["shm_mount"] == 2
