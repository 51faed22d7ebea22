"""Host memory per NUMA node: the reader on a /sys and /proc tree the test writes, the
simulated two-socket host, and the host panel's node lines."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import GIB, StaticSession, until
from scene import NOW, scene_store

from collectors import numa
from collectors.host import ProcBackend, sample
from collectors.readings import NumaNode, Reading, Status
from collectors.units import KIB, MIB
from engram_top.app.main import EngramTopApp
from engram_top.app.panels import host_panel
from engram_top.model import facts
from engram_top.seed.reference import default as reference
from engram_top.sim import memory, sockets, state
from engram_top.sim.backends import SimHostBackend
from scenarios.proc_start import start_of

NODE0 = """\
Node 0 MemTotal:       1073741824 kB
Node 0 MemFree:         536870912 kB
Node 0 MemUsed:         536870912 kB
Node 0 FilePages:       209715200 kB
Node 0 Shmem:           196083712 kB
Node 0 AnonHugePages:     2097152 kB
Node 0 ShmemHugePages:  195035136 kB
Node 0 HugePages_Total:   100
Node 0 HugePages_Free:     40
Node 0 HugePages_Surp:      0
"""
# No MemUsed line (used is then total - free), and lines that do not read.
NODE1 = """\
Node 1 MemTotal:       1073741824 kB
Node 1 MemFree:        1048576000 kB
garbage
Node 1 Active:
Node 1 Inactive:       lots kB
Node 1 Dirty           12 kB
Node 1 FilePages:        10485760 kB
Node 1 Shmem:             4194304 kB
"""
MEMFD = "/memfd:engram (deleted)"
# pid 100, rank 0: the tables' memfd (hugetlb, mostly on N0), a /dev/shm staging buffer on
# N1, and what is not shared memory: a weights file mapped shared, the heap.
MAPS_100 = f"""\
55d000000000-55d000400000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f2f00000000 rw-s 00000000 00:01 4001                       {MEMFD}
7f4000000000-7f4000100000 r--s 00000000 103:02 5555                      /models/w.safetensors
7f5000000000-7f5040000000 rw-s 00000000 00:1a 777                        /dev/shm/staging
7f6000000000-7f6000001000 rw-s 00000000 00:01 4002                       /memfd:x
"""
NUMA_MAPS_100 = """\
55d000000000 default heap anon=1024 dirty=1024 N0=1024 kernelpagesize_kB=4
7f0000000000 default file=/memfd:engram\\040(deleted) huge N0=95744 N1=256 kernelpagesize_kB=2048
7f4000000000 default file=/models/w.safetensors mapped=256 N0=256 kernelpagesize_kB=4
7f5000000000 default file=/dev/shm/staging dirty=262144 N1=262144 kernelpagesize_kB=4
zzzz default N0=5 kernelpagesize_kB=4
7f6000000000 default file=/memfd:x N0=abc kernelpagesize_kB=4
7f7000000000 default file=/memfd:y N0=10 kernelpagesize_kB=4
"""
# pid 101, rank 2: the same memfd at another address (counted once), a private hugetlb
# mapping and a shared anonymous one, both on N1.
MAPS_101 = f"""\
7e0000000000-7e2f00000000 rw-s 00000000 00:01 4001                       {MEMFD}
7e5000000000-7e5000400000 rw-p 00000000 00:0f 999                        /anon_hugepage (deleted)
7e6000000000-7e6000200000 rw-s 00000000 00:01 4100                       /dev/zero (deleted)
"""
NUMA_MAPS_101 = """\
7e0000000000 default file=/memfd:engram\\040(deleted) huge N0=95744 N1=256 kernelpagesize_kB=2048
7e5000000000 default file=/anon_hugepage\\040(deleted) huge anon=2 N1=2 kernelpagesize_kB=2048
7e6000000000 default file=/dev/zero\\040(deleted) dirty=512 N1=512 kernelpagesize_kB=4
"""
SERVER_N0 = 95744 * 2 * MIB  # 187 GiB of tables
SERVER_N1 = 256 * 2 * MIB + 262144 * 4 * KIB + 2 * 2 * MIB + 512 * 4 * KIB


class FakeTree(ProcBackend):
    """The machine's /proc and /sys as the test wrote them; pid 100's child is 101."""

    def children(self, pid: int) -> list[int] | None:
        return [101] if pid == 100 else []


def write_tree(root: Path, nodes: dict[str, str] | None = None) -> FakeTree:
    for name, text in (nodes if nodes is not None else {"node0": NODE0, "node1": NODE1}).items():
        (root / "sys" / numa.NODE_DIR / name).mkdir(parents=True)
        (root / "sys" / numa.NODE_DIR / name / "meminfo").write_text(text)
    (root / "sys" / numa.NODE_DIR / "possible").write_text("0-1\n")  # not a node
    proc = root / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 2147483648 kB\nMemAvailable: 2000000000 kB\n"
                                  "MemFree: 1500000000 kB\nShmem: 200278016 kB\n"
                                  "Hugepagesize: 2048 kB\n")
    (proc / "vmstat").write_text("pswpin 0\npswpout 0\n")
    for pid, maps, numa_maps in ((100, MAPS_100, NUMA_MAPS_100), (101, MAPS_101, NUMA_MAPS_101)):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "status").write_text("VmRSS: 1024 kB\nRssAnon: 1024 kB\n")
        (proc / str(pid) / "maps").write_text(maps)
        (proc / str(pid) / "numa_maps").write_text(numa_maps)
    return FakeTree(proc=proc, sys=root / "sys")


def test_each_node_in_bytes_and_the_server_share_from_numa_maps(tmp_path: Path) -> None:
    data = sample(write_tree(tmp_path), 100, numa.ServerShare())
    assert data.numa_problem == ""
    assert data.numa_nodes == (
        NumaNode(node=0, total_bytes=1024 * GIB, free_bytes=512 * GIB,
                 used_bytes=(512 - (200 - 187)) * GIB,  # page cache is not used memory
                 shmem_bytes=187 * GIB, hugepages_total_bytes=200 * MIB,
                 hugepages_free_bytes=80 * MIB, thp_bytes=188 * GIB,
                 server_shared_bytes=SERVER_N0),
        NumaNode(node=1, total_bytes=1024 * GIB, free_bytes=1000 * GIB,
                 used_bytes=(24 - (10 - 4)) * GIB, shmem_bytes=4 * GIB,
                 hugepages_total_bytes=0, hugepages_free_bytes=0, thp_bytes=0,
                 server_shared_bytes=SERVER_N1))
    assert SERVER_N0 == 187 * GIB and SERVER_N1 == 1540 * MIB + 2 * MIB
    # Without a server (the supervisor's guards) the nodes' own figures alone.
    assert [n.server_shared_bytes for n in sample(write_tree(tmp_path / "b"), None).numa_nodes] \
        == [None, None]


def test_only_shared_memory_counts_and_each_object_once() -> None:
    assert numa.shared_of(MAPS_100, NUMA_MAPS_100) == [
        (("00:01", 4001, 0, 0x2F00000000), {0: SERVER_N0, 1: 512 * MIB}),
        (("00:1a", 777, 0, 0x40000000), {1: GIB})]
    assert numa.parse_node_meminfo(NODE1) == {
        "MemTotal": 1024 * GIB, "MemFree": 1000 * GIB, "FilePages": 10 * GIB,
        "Shmem": 4 * GIB}


def test_one_node_reads_no_numa_maps(tmp_path: Path) -> None:
    backend = write_tree(tmp_path, {"node0": NODE0})
    (backend.proc / "100" / "numa_maps").write_text("")  # would say 0 if it were read
    data = sample(backend, 100, numa.ServerShare())
    assert [(n.node, n.server_shared_bytes) for n in data.numa_nodes] == [(0, None)]


def test_missing_folders_and_files_are_a_problem_line_never_an_exception(tmp_path: Path) -> None:
    backend = write_tree(tmp_path, {"node0": NODE0, "node1": NODE1, "node2": "Node 2 x\n"})
    data = sample(backend, 100, numa.ServerShare())
    assert [n.node for n in data.numa_nodes] == [0, 1]
    assert data.numa_problem == "NUMA node 2: no MemTotal in its meminfo"
    # No NUMA folder at all (a container hiding /sys): no nodes, nothing wrong.
    bare = FakeTree(proc=backend.proc, sys=tmp_path / "no-sys")
    assert numa.read_node_meminfo(tmp_path / "no-sys") is None
    assert (sample(bare, 100).numa_nodes, sample(bare, 100).numa_problem) == ((), "")
    # The server's processes gone: its share is unknown, not zero.
    gone = write_tree(tmp_path / "gone")
    for pid in ("100", "101"):
        for name in ("maps", "numa_maps"):
            (gone.proc / pid / name).unlink()
    assert numa.ServerShare().get(gone, [100, 101]) == (None, "")


def test_an_unreadable_numa_maps_and_a_failing_backend_say_why(tmp_path: Path) -> None:
    class Refused(FakeTree):
        def shared_mappings(self, pid: int) -> numa.Mappings | None:
            if pid == 101:
                raise PermissionError(13, "Permission denied")
            return super().shared_mappings(pid)

    backend = write_tree(tmp_path)
    refused = Refused(proc=backend.proc, sys=backend.sys)
    share, problem = numa.ServerShare().get(refused, [100, 101])
    assert problem == "numa_maps of pid 101: Permission denied"
    assert share == {0: SERVER_N0, 1: 512 * MIB + GIB}  # pid 100's part is still read

    class Broken(FakeTree):
        def node_meminfo(self) -> dict[int, dict[str, int]] | None:
            raise RuntimeError("sysfs went away")

    data = sample(Broken(proc=backend.proc, sys=backend.sys), 100, numa.ServerShare())
    assert data.total_bytes == 2048 * GIB  # the rest of the host reading stands
    assert (data.numa_nodes, data.numa_problem) == ((), "NUMA: RuntimeError: sysfs went away")


def test_numa_maps_is_read_at_most_every_interval(tmp_path: Path) -> None:
    backend = write_tree(tmp_path)
    now = [0.0]
    share = numa.ServerShare(interval_s=5.0, clock=lambda: now[0])
    assert share.get(backend, [100, 101])[0] == {0: SERVER_N0, 1: SERVER_N1}
    (backend.proc / "101" / "numa_maps").write_text("")
    (backend.proc / "100" / "numa_maps").write_text("")
    now[0] = 4.0
    assert share.get(backend, [100, 101])[0] == {0: SERVER_N0, 1: SERVER_N1}  # kept
    now[0] = 5.0
    assert share.get(backend, [100, 101])[0] == {}
    # Another server is read at once.
    (backend.proc / "101" / "numa_maps").write_text(NUMA_MAPS_101)
    assert share.get(backend, [101])[0] == {0: SERVER_N0, 1: SERVER_N1 - GIB}


def test_numa_maps_is_read_again_once_the_trees_shared_memory_moved(tmp_path: Path) -> None:
    # A server read as it launched holds none of its tables yet; once they are faulted in
    # (its RssShmem grows), they are read at the next poll, not an interval later (a quick
    # bench's run is over by then, and read its share as the anonymous memory alone).
    backend = write_tree(tmp_path)
    now = [0.0]
    share = numa.ServerShare(interval_s=5.0, clock=lambda: now[0])
    maps = {pid: (backend.proc / str(pid) / "numa_maps").read_text() for pid in (100, 101)}
    for pid in maps:
        (backend.proc / str(pid) / "numa_maps").write_text("")
    assert share.get(backend, [100, 101], 0)[0] == {}
    for pid, text in maps.items():
        (backend.proc / str(pid) / "numa_maps").write_text(text)
    now[0] = 1.0
    assert share.get(backend, [100, 101], 10 * 1024**2)[0] == {}  # a small move: kept
    assert share.get(backend, [100, 101], 189 * GIB)[0] == {0: SERVER_N0, 1: SERVER_N1}
    # The last small steps of a load are read once the memory settles at its figure.
    (backend.proc / "100" / "numa_maps").write_text("")
    assert share.get(backend, [100, 101], 189 * GIB + 2**20)[0] == \
        {0: SERVER_N0, 1: SERVER_N1}  # still moving: kept
    assert share.get(backend, [100, 101], 189 * GIB + 2**20)[0] != \
        {0: SERVER_N0, 1: SERVER_N1}  # settled: read
    now[0] = 2.0  # and then as before: the same tree, the same memory, every interval
    (backend.proc / "100" / "numa_maps").write_text(maps[100])
    assert share.get(backend, [100, 101], 189 * GIB + 2**20)[0] != \
        {0: SERVER_N0, 1: SERVER_N1}
    # A rank come or gone is another tree: read at once.
    assert share.get(backend, [101], 189 * GIB)[0] != {0: SERVER_N0, 1: SERVER_N1}


# --------------------------------------------------------------------------- simulated node


@pytest.fixture
def sim_node(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The simulated host-prefetch server at ready: this process as the launcher, four
    sleeping children as its ranks, their state files as the ranks write them."""
    ref = reference()
    node_dir = tmp_path / "node"
    spec = state.ensure_node(node_dir, ref)
    mem = memory.plan(ref, "host-prefetch")
    me = os.getpid()
    state.write_proc(node_dir, state.ProcState(me, start_of(me) or 0.0, "sglang::main",
                                               host_anon_bytes=2 * GIB))
    ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
             for _ in range(spec.gpus)]
    try:  # the stand-in ranks go on every path, a failed set-up included
        extra = mem.host_pinned_extra_bytes // spec.gpus
        for r, proc in enumerate(ranks):
            shmem = extra + (mem.host_table_bytes if r == 0 else 0)
            state.write_proc(node_dir, state.ProcState(
                proc.pid, start_of(proc.pid) or 0.0, f"sglang::scheduler_TP{r}",
                gpu_bytes={r: 100 * GIB}, host_anon_bytes=GIB, host_shmem_bytes=shmem,
                host_hugepage_bytes=mem.host_table_bytes if r == 0 else 0))
        yield node_dir, mem, spec
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_the_simulated_host_has_two_sockets_and_the_shared_tables_on_node_0(sim_node) -> None:
    node_dir, mem, spec = sim_node
    data = sample(SimHostBackend(node_dir), os.getpid(), numa.ServerShare())
    n0, n1 = data.numa_nodes
    extra = mem.host_pinned_extra_bytes // spec.gpus
    # Rank 0's memfd holds the tables on node 0; GPUs 2-3 (node 1) read them remotely.
    assert n0.server_shared_bytes == mem.host_table_bytes + 2 * extra
    assert n1.server_shared_bytes == 2 * extra
    assert 187 * GIB < mem.host_table_bytes < 188 * GIB
    assert n0.thp_bytes == mem.host_table_bytes and n1.thp_bytes == 0
    # The nodes add up to the host: half its memory each; their free and used memory.
    assert n0.total_bytes == n1.total_bytes == data.total_bytes // 2
    assert n0.free_bytes + n1.free_bytes == data.free_bytes
    assert n0.used_bytes + n1.used_bytes == data.used_bytes
    assert n0.used_bytes - n1.used_bytes == mem.host_table_bytes + 2 * GIB  # + the launcher
    assert data.numa_problem == ""


def test_the_simulated_ranks_sit_on_their_gpus_socket() -> None:
    assert [sockets.node_of_gpu(g, 4) for g in range(4)] == [0, 0, 1, 1]
    launcher = state.ProcState(1, 0.0, "sglang::main", host_shmem_bytes=GIB)
    assert sockets.shared_mappings(launcher, 4) == [(("simulated", 1), {0: GIB})]


# --------------------------------------------------------------------------- the panel


def two_socket_store():  # type: ignore[no-untyped-def]
    """The scene with a two-socket host reading: the tables on node 0."""
    store = scene_store()
    host = store.data("host")
    nodes = (NumaNode(0, 1024 * GIB, 700 * GIB, 220 * GIB, 190 * GIB, 0, 0, 190 * GIB,
                      190 * GIB),
             NumaNode(1, 1024 * GIB, 980 * GIB, 22 * GIB, 6 * GIB, 0, 0, 0, 6 * GIB))
    store.add("host", Reading("host", Status.OK, dataclasses.replace(host, numa_nodes=nodes),
                              at=NOW))
    return store


def panel_lines(app: EngramTopApp) -> list[str]:
    panel = app.query_one("#host")
    size = panel.content_size
    return [t.plain for t in host_panel(app.session.store, rows=size.height,
                                        cols=size.width).renderables]


N_LINES = ["N0     220/1,024 GiB · server 190 GiB", "N1     22/1,024 GiB · server 6 GiB"]
ONE_LINE = ["NUMA   server N0 190 · N1 6 GiB"]


@pytest.mark.parametrize(("size", "numa_lines"), [((100, 30), []), ((120, 36), N_LINES),
                                                  ((180, 50), ONE_LINE)])
async def test_the_host_panel_shows_the_nodes_without_pushing_rows_out(size, numa_lines) -> None:
    plain = EngramTopApp(StaticSession(scene_store()), clock=lambda: NOW)
    async with plain.run_test(size=size) as pilot:
        await until(pilot, lambda: plain.query_one("#host").content_size.height > 0)
        before = panel_lines(plain)
    app = EngramTopApp(StaticSession(two_socket_store()), clock=lambda: NOW)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.query_one("#host").content_size.height > 0)
        after = panel_lines(app)
    # At 100x30 no room is left; else the nodes come after the ledger's rows, in place of an
    # empty swap's line, and in one line where there is no room for one each.
    rest = [line for line in before if line != "swap   0.0 GiB used" or not numa_lines]
    at = rest.index(next(line for line in rest if line.startswith("others"))) + 1
    expected = rest[:at] + numa_lines + rest[at:]
    if len(expected) > len(after):  # the Shmem row (the ledger says whose) gives way first
        expected = [line for line in expected if not line.startswith("Shmem")]
    assert after == expected


def test_one_node_adds_nothing_to_the_panel() -> None:
    store = scene_store()
    host = store.data("host")
    one = (NumaNode(0, 2048 * GIB, 1800 * GIB, 241 * GIB, 196 * GIB, 0, 0, 0, None),)
    before = [t.plain for t in host_panel(store).renderables]
    store.add("host", Reading("host", Status.OK, dataclasses.replace(host, numa_nodes=one),
                              at=NOW))
    assert [t.plain for t in host_panel(store).renderables] == before
    assert facts.host_facts(store).numa_nodes == one


# --------------------------------------------------------------------------- exports


def test_the_nodes_round_trip_in_recordings_and_reach_snapshot_json() -> None:
    import json

    from engram_top.export import snapshot
    from engram_top.record.file_format import decode_reading, encode_reading

    store = two_socket_store()
    reading = store.latest["host"]
    back = decode_reading(json.loads(json.dumps(encode_reading(reading))))
    assert back.data == reading.data and back.data.numa_nodes[0].server_shared_bytes == 190 * GIB
    # A recording made before the field reads back with no nodes.
    old = encode_reading(scene_store().latest["host"])
    del old["data"]["numa_nodes"], old["data"]["numa_problem"]
    assert decode_reading(old).data.numa_nodes == ()
    snap = snapshot.build(store, reference())
    assert [n["server_shared_bytes"] for n in snap["host"]["numa_nodes"]] == [190 * GIB, 6 * GIB]
    assert snap["readings"]["host"]["data"]["numa_nodes"][1]["node"] == 1


def test_where_a_whole_process_sits_per_node_from_its_numa_maps(tmp_path: Path) -> None:
    """Every mapping's pages, shared or not (a tenant's heap too), summed per node; the
    lines numa_maps cannot give a figure for (no address, N0=abc) left out."""
    backend = write_tree(tmp_path)
    n0 = 1024 * 4 * KIB + 95744 * 2 * MIB + 256 * 4 * KIB + 10 * 4 * KIB
    n1 = 256 * 2 * MIB + 262144 * 4 * KIB
    assert backend.process_nodes(100) == {0: n0, 1: n1}
    assert backend.process_nodes(999) is None  # gone


def test_the_largest_others_say_where_they_sit_only_on_a_host_of_several_nodes(
        tmp_path: Path) -> None:
    from collectors.host import Largest

    backend = write_tree(tmp_path)
    per_node = Largest(n=2).get(backend, frozenset(), per_node=True)
    assert {p.pid: dict(p.numa_bytes) for p in per_node}[100][0] > 180 * GIB
    assert all(p.numa_bytes == () for p in Largest(n=2).get(backend, frozenset()))
