"""A /proc that refuses or lacks what the host reading needs. A server's processes this user
may not read (/proc mounted hidepid=1, another user's server): the host reading stays, the
tree is what can be read, and the panel says what is missing. The kernel's refusal is
raised where it would be, in the read (the tests run as root, whom no mode bit refuses).
A meminfo without MemTotal: the reading fails naming the file, not with a KeyError."""

from __future__ import annotations

import io
from pathlib import Path

import psutil
import pytest
from rich.console import Console

import collectors.host as host
from collectors.host import HostCollector, ProcBackend
from collectors.readings import Reading, Status
from collectors.units import KIB
from engram_top.app.panels.host import host_panel
from engram_top.model.store import RunStore


class Tree(ProcBackend):
    """pid 100 and its children 101, 102, as the test wrote them."""

    def children(self, pid: int) -> list[int] | None:
        return [101, 102] if pid == 100 else []


def write(root: Path) -> Tree:
    proc = root / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 1048576 kB\nMemAvailable: 524288 kB\n"
                                  "MemFree: 262144 kB\n")
    (proc / "vmstat").write_text("pswpin 0\npswpout 0\n")
    for pid, rss in ((100, 1000), (101, 2000), (102, 4000)):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "status").write_text(f"VmRSS: {rss} kB\nRssAnon: {rss} kB\n")
    return Tree(proc=proc, sys=root / "sys")


def refuse(monkeypatch: pytest.MonkeyPatch, *pids: int) -> None:
    read = host.read_text

    def read_text(path: str, *args: object, **kwargs: object) -> str:
        if any(path.endswith(f"/{pid}/status") for pid in pids):
            raise PermissionError(13, "Permission denied", path)
        return read(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(host, "read_text", read_text)


def panel_text(data: object) -> str:
    store = RunStore()
    store.add("host", Reading("host", Status.OK, data))
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(host_panel(store, rows=30, cols=118))
    return out.getvalue()


async def test_a_member_refused_is_left_out_and_named(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    refuse(monkeypatch, 102)
    reading = await HostCollector(write(tmp_path), root_pid=100).poll()
    assert reading.status is Status.OK and reading.data is not None
    tree = reading.data.server_tree
    assert tree is not None and tree.pids == (100, 101) and tree.rss_bytes == 3000 * KIB
    assert reading.data.tree_problem == (
        "server: 1 of 3 processes not readable by this user (pid 102): their memory is not "
        "in the server's share")
    assert reading.data.total_bytes == 1024 * 1024 * KIB  # the rest of the reading stands
    assert "1 of 3 processes not readable by this user (pid 102)" in panel_text(reading.data)


async def test_a_tree_refused_whole_reads_as_no_tree(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    refuse(monkeypatch, 100, 101, 102)
    reading = await HostCollector(write(tmp_path), root_pid=100).poll()
    assert reading.status is Status.OK and reading.data is not None
    assert reading.data.server_tree is None
    assert reading.data.tree_problem.startswith(
        "server (pid 100): its /proc is not readable by this user")
    assert reading.data.used_bytes == 512 * 1024 * KIB
    assert "server (pid 100): its /proc is not readable" in panel_text(reading.data)


async def test_a_readable_tree_has_no_problem(tmp_path: Path) -> None:
    reading = await HostCollector(write(tmp_path), root_pid=100).poll()
    assert reading.data is not None and reading.data.tree_problem == ""
    assert reading.data.server_tree is not None
    assert reading.data.server_tree.rss_bytes == 7000 * KIB
    assert "not readable" not in panel_text(reading.data)


class Refusing:
    """psutil's Process where its listing reads another user's stat under hidepid=1."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def children(self, recursive: bool = False) -> list[object]:
        raise psutil.AccessDenied(999)


def write_tasks(proc: Path, kids: dict[int, str]) -> None:
    for pid, text in kids.items():
        (proc / str(pid) / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
        (proc / str(pid) / "task" / str(pid) / "children").write_text(text)


def test_a_refused_listing_walks_the_trees_own_children_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.psutil, "Process", Refusing)
    proc = tmp_path / "proc"
    write_tasks(proc, {100: "101 102 ", 101: "103", 102: "", 103: ""})
    (proc / "100" / "task" / "107").mkdir()  # a second thread of the root, with a child
    (proc / "100" / "task" / "107" / "children").write_text("104\n")
    write_tasks(proc, {104: ""})
    assert sorted(ProcBackend(proc=proc).children(100) or []) == [101, 102, 103, 104]
    assert ProcBackend(proc=proc).children(555) is None  # gone


async def test_a_refused_listing_of_the_root_reads_as_no_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host.psutil, "Process", Refusing)
    backend = ProcBackend(proc=write(tmp_path).proc, sys=tmp_path / "sys")
    listdir = host.os.listdir

    def refused(path: str | Path) -> list[str]:
        if str(path).endswith("/100/task"):
            raise PermissionError(13, "Permission denied", path)
        return listdir(path)

    monkeypatch.setattr(host.os, "listdir", refused)
    reading = await HostCollector(backend, root_pid=100).poll()
    assert reading.status is Status.OK and reading.data is not None
    assert reading.data.server_tree is None
    assert reading.data.tree_problem.startswith(
        "server (pid 100): its /proc is not readable by this user")


async def test_a_meminfo_without_memtotal_is_named_and_the_reading_fails_in_words(
        tmp_path: Path) -> None:
    backend = write(tmp_path)
    (backend.proc / "meminfo").write_text("MemFree: 262144 kB\nBuffers: 1 kB\n")
    reading = await HostCollector(backend, root_pid=100).poll()
    assert reading.status is Status.ERROR
    assert reading.message == f"ValueError: {backend.proc}/meminfo has no MemTotal line"
