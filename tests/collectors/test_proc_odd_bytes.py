"""/proc's text is the kernel's bytes: a process's name (status) and the paths it maps (maps,
numa_maps) are whatever the process chose, and not always UTF-8 (prctl(PR_SET_NAME) takes any
15 bytes, a file name any bytes but "/"). One such process anywhere on the node failed the
whole host poll ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff"), every 30 s
when it was outside the server's tree and every poll when in it. Its figures are read and
its name shown with the bytes that are no text replaced."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus import HOST, RecordedProc, kib

from collectors import numa
from collectors.host import HostCollector, ProcBackend
from collectors.readings import Status
from collectors.units import MIB

ODD = b"srv\xff\xfe-rank"  # 10 bytes, 2 of them no UTF-8
SHOWN = "srv\ufffd\ufffd-rank"


def renamed(status: Path, name: bytes) -> None:
    lines = status.read_bytes().split(b"\n")
    status.write_bytes(b"\n".join(b"Name:\t" + name if ln.startswith(b"Name:") else ln
                                  for ln in lines))


async def test_odd_names_in_the_tree_and_outside_it_read_from_a_recorded_proc(
        tmp_path: Path) -> None:
    shutil.copytree(HOST, tmp_path / "host")
    proc, sys_root = tmp_path / "host" / "proc", tmp_path / "host" / "sys"
    ids = json.loads((tmp_path / "host" / "tree.json").read_text())
    root, child = ids["root"], ids["child"]
    renamed(proc / str(child) / "status", ODD)  # a rank of the server's tree
    other = proc / "777"  # a process outside it, the node's largest
    other.mkdir()
    (other / "status").write_bytes(b"Name:\tbig\xe9tenant\nVmRSS:\t99999999 kB\n")

    reading = await HostCollector(RecordedProc(proc, sys_root), root_pid=root).poll()
    assert reading.status is Status.OK, reading.message
    tree = reading.data.server_tree
    assert tree is not None and tree.pids == (root, child)
    status = [(proc / str(p) / "status").read_text(errors="replace") for p in (root, child)]
    assert tree.rss_bytes == sum(kib(s, "VmRSS") for s in status) > 0
    (top, *_) = reading.data.largest_others
    assert (top.pid, top.name, top.rss_bytes) == (777, "big\ufffdtenant", 99999999 * 1024)


CHILD = r"""
import ctypes, mmap, os, sys
path = sys.argv[1].encode("utf-8", "surrogateescape")
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 4 * 1024 * 1024)
held = mmap.mmap(fd, 4 * 1024 * 1024, mmap.MAP_SHARED)
held.write(b"x" * (4 * 1024 * 1024))  # its pages touched: resident, counted per node
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(sys.argv[2])), 0, 0, 0)
print("ready", flush=True)
sys.stdin.read()  # until the test closes it
"""


@pytest.fixture
def odd_process(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """A real process named ODD, holding a 4 MiB shared file in /dev/shm whose name is no
    UTF-8: (its pid, the file's path). Stopped and the file removed on every exit."""
    shm = b"/dev/shm/engram-top-test-\xff%d" % os.getpid()
    with subprocess.Popen([sys.executable, "-c", CHILD, shm.decode("utf-8", "surrogateescape"),
                           ODD.hex()], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready and proc.stdout.readline() == b"ready\n", "the process never came"
            yield proc.pid, shm
        finally:
            proc.kill()  # and the with waits for it
            if os.path.exists(shm):
                os.remove(shm)


@pytest.mark.slow  # starts a process
async def test_a_real_process_with_an_odd_name_and_mapping_is_read(
        odd_process: tuple[int, bytes]) -> None:
    pid, shm = odd_process
    assert Path(f"/proc/{pid}/comm").read_bytes() == ODD + b"\n"  # what the kernel keeps
    backend = ProcBackend()
    reading = await HostCollector(backend, root_pid=pid).poll()
    assert reading.status is Status.OK, reading.message
    tree = reading.data.server_tree
    assert tree is not None and tree.pids == (pid,) and tree.rss_shmem_bytes >= 4 * MIB
    named = {p.pid: p.name for p in backend.largest(100_000, frozenset())}
    assert named[pid] == SHOWN
    # Its shared mapping is read, the file's name and all, where the kernel has numa_maps.
    if Path(f"/proc/{pid}/numa_maps").exists():
        mappings = numa.read_shared_mappings(Path("/proc"), pid)
        assert mappings is not None
        assert sum(sum(per_node.values()) for _, per_node in mappings) >= 4 * MIB
