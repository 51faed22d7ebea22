"""What a stopped server left in /dev/shm: SGLang's segments made since its launch that no
live process holds are removed; held ones, older ones and anyone else's files stay."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

from scenarios.shm_sweep import held, sweep


def test_a_sweep_removes_only_what_the_stopped_server_left(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    old = shm / "sglang_loads_old_1.shm"
    old.write_bytes(b"x" * 16)
    made = old.stat().st_ctime
    deadline = time.monotonic() + 5
    while time.time() < made + 0.1 and time.monotonic() < deadline:
        pass  # the launch comes after the old segment, on the kernel's clock too
    launched = made + 0.05
    left = shm / "sglang_loads_abc_123.shm"
    stamped = shm / "sgl_shm_kv_4242_deadbeef"
    mapped = shm / "sglang_loads_live_9.shm"
    opened = shm / "sgl_shm_meta_77_cafe"
    other = shm / "psm_someone_elses"
    for f in (left, stamped, mapped, opened, other):
        f.write_bytes(b"x" * 4096)
    keep_fd = os.open(opened, os.O_RDONLY)
    with open(mapped, "r+b") as m:
        view = mmap.mmap(m.fileno(), 0)
    try:
        removed = sweep(launched, shm_dir=shm, slack_s=0.0)
        assert removed == sorted([left.name, stamped.name])
        assert not left.exists() and not stamped.exists()
        assert mapped.exists() and opened.exists() and other.exists() and old.exists()
        assert {str(mapped), str(opened)} <= held(shm)
    finally:
        view.close()
        os.close(keep_fd)
    # Once nobody holds them, the next sweep takes them; the old one was made before.
    assert sweep(launched, shm_dir=shm, slack_s=0.0) == sorted([mapped.name, opened.name])
    assert old.exists() and other.exists()


def test_a_folder_that_cannot_be_read_removes_nothing(tmp_path: Path) -> None:
    assert sweep(0.0, shm_dir=tmp_path / "absent") == []


def test_another_users_segment_and_a_symlink_of_the_family_stay(tmp_path: Path) -> None:
    """engram-top often runs as root, which may unlink any user's file: a segment of the
    family's name owned by another user stays, and so does a symlink (its target too)."""
    shm = tmp_path / "shm"
    shm.mkdir()
    mine = shm / "sglang_loads_mine_1.shm"
    theirs = shm / "sglang_loads_theirs_2.shm"
    target = tmp_path / "precious"
    for f in (mine, theirs, target):
        f.write_bytes(b"x" * 64)
    link = shm / "sgl_shm_link_3"
    link.symlink_to(target)
    os.chown(theirs, 12345, 12345)  # the tests run as root, as CI does
    (tmp_path / "proc").mkdir()  # no process holds anything
    removed = sweep(0.0, shm, proc=tmp_path / "proc")
    assert removed == ["sglang_loads_mine_1.shm"]
    assert theirs.exists() and link.is_symlink() and target.read_bytes() == b"x" * 64
