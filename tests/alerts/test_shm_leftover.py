"""/dev/shm's files that no live process holds (collectors.shm, over this machine's real
/proc and a folder of real files) and the `shm-leftover` alert that names them: a file held
open or mapped is no leftover, a small or sparse one is not worth naming, and the alert says
the sizes, the ages and what to remove, then clears once they are gone."""

from __future__ import annotations

import dataclasses
import mmap
import os
from pathlib import Path

import pytest
from scene import snapshot_host

from collectors.readings import Reading, ShmFile, Status
from collectors.shm import unheld
from collectors.units import GIB, MIB
from engram_top.alerts.monitor import AlertMonitor
from engram_top.alerts.thresholds import Thresholds
from engram_top.model.store import RunStore


def test_only_files_nothing_holds_and_of_some_size_are_leftovers(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    left = shm / "sgl_shm_kv_4242_deadbeef"
    left.write_bytes(b"x" * (3 * MIB))
    opened = shm / "nccl-open"
    opened.write_bytes(b"x" * (2 * MIB))
    mapped = shm / "psm_mapped"
    mapped.write_bytes(b"x" * (2 * MIB))
    (shm / "sem.lock").write_bytes(b"x" * 4096)  # under a MiB: a lock, not a leftover
    with (shm / "sparse").open("wb") as f:  # 1 GiB apparent, nothing written: no RAM
        f.truncate(GIB)
    with opened.open("rb") as held_open, mapped.open("r+b") as f:
        view = mmap.mmap(f.fileno(), 0)
        f.close()  # mapped, no longer open: still held
        try:
            found = unheld(shm)
        finally:
            view.close()
        assert not held_open.closed
    assert [(f.name, f.bytes) for f in found] == [("sgl_shm_kv_4242_deadbeef", 3 * MIB)]
    assert 0 <= found[0].age_s < 60
    assert unheld(tmp_path / "no such folder") == []


def host_with(files: tuple[ShmFile, ...]) -> Reading:
    data = dataclasses.replace(snapshot_host(400 * GIB), shm_unheld=files)
    return Reading("host", Status.OK, data, at=0.0)


def test_the_alert_names_the_largest_with_what_to_remove_and_clears() -> None:
    store, monitor = RunStore(), AlertMonitor(Thresholds())
    files = (ShmFile("sgl_shm_kv_4242_deadbeef", 40 * GIB, 3 * 3600),
             ShmFile("sglang_loads_abc_1.shm", 2 * GIB, 90),
             ShmFile("nccl-Xy12", 1 * GIB, 600), ShmFile("psm_q", GIB // 2, 30))
    store.add("host", host_with(files))
    (raised,) = monitor.evaluate(store, 1.0)
    assert (raised.change, raised.alert.id, raised.alert.severity) == \
        ("raised", "shm-leftover", "warning")
    assert raised.alert.message == (
        "/dev/shm holds 43.5 GiB that no live process has open or mapped (> 1 GiB): "
        "sgl_shm_kv_4242_deadbeef 40.0 GiB (3.0 h old), sglang_loads_abc_1.shm 2.0 GiB "
        "(90 s old), nccl-Xy12 1.0 GiB (10 min old) and 1 more; a killed engine's segments "
        "are host RAM until removed: once no server of theirs runs, rm "
        "/dev/shm/sgl_shm_kv_4242_deadbeef /dev/shm/sglang_loads_abc_1.shm "
        "/dev/shm/nccl-Xy12 ...")
    # Removed: it clears once clear for clear_after_s (5 s); under the threshold in all, it
    # stays clear.
    store.add("host", host_with(()))
    assert monitor.evaluate(store, 2.0) == []
    (cleared,) = monitor.evaluate(store, 7.5)
    assert (cleared.change, cleared.alert.id) == ("cleared", "shm-leftover")
    store.add("host", host_with((ShmFile("small", GIB // 2, 5),)))
    assert monitor.evaluate(store, 9.0) == []


def test_a_name_that_is_a_terminal_command_is_shown_as_text() -> None:
    store, monitor = RunStore(), AlertMonitor(Thresholds())
    store.add("host", host_with((ShmFile("x\x1b[2Jy", 2 * GIB, 5),)))
    (raised,) = monitor.evaluate(store, 1.0)
    assert "\x1b" not in raised.alert.message and "x\\x1b[2Jy 2.0 GiB" in raised.alert.message


def test_where_a_process_cannot_be_read_only_this_users_files_are_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: another user's processes' maps are refused, so what they hold is unknown,
    and a file of another user's may be theirs in use: only this user's are named."""
    shm = tmp_path / "shm"
    shm.mkdir()
    mine, theirs = shm / "mine", shm / "theirs"
    for f in (mine, theirs):
        f.write_bytes(b"x" * (2 * MIB))
    os.chown(theirs, 4242, 4242)
    proc = tmp_path / "proc"
    (proc / "7" / "fd").mkdir(parents=True)
    (proc / "7" / "maps").write_text("")
    real_open = open

    def refusing(path: object, *args: object, **kwargs: object) -> object:
        if str(path) == f"{proc}/7/maps":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", refusing)
    assert [f.name for f in unheld(shm, proc)] == ["mine"]
    monkeypatch.setattr("builtins.open", real_open)
    assert sorted(f.name for f in unheld(shm, proc)) == ["mine", "theirs"]
