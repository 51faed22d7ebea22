"""/dev/shm's files that no live process holds: a crashed engine's segments (SGLang's, NCCL's,
any engine's) stay in tmpfs, which is host RAM, until someone removes them, and a restart
that needs the room then fails. Which files a live process holds is read from every
process's maps and open files (``held``), a scan of /proc done only where /dev/shm holds a
file of note."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from collectors.readings import ShmFile

SHM_DIR = Path("/dev/shm")
MIN_BYTES = 1024 * 1024  # a file under a MiB is no leftover to name (locks, semaphores)
MAX_FILES = 10_000  # a /dev/shm of more is listed no further: the reading stays bounded


def held(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc")) -> set[str]:
    """The /dev/shm paths some live process has open or mapped (any we may read)."""
    return held_and_whole(shm_dir, proc)[0]


def held_and_whole(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc")
                   ) -> tuple[set[str], bool]:
    """``held``'s set, and whether every live process could be read (as root; a user
    cannot read another user's maps, so what they hold is not known)."""
    prefix = f"{shm_dir}/"
    out: set[str] = set()
    whole = True
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/maps", errors="replace") as maps:
                fields = (line.split(None, 5) for line in maps if prefix in line)
                out.update(f[5].strip() for f in fields if len(f) == 6)
            fds = os.scandir(f"{entry.path}/fd")
        except PermissionError:  # another user's: what it holds is not known
            whole = False
            continue
        except OSError:  # gone meanwhile
            continue
        with fds:
            for fd in fds:
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target.startswith(prefix):
                    out.add(target)
    return {p.removesuffix(" (deleted)") for p in out}, whole


def unheld(shm_dir: Path = SHM_DIR, proc: Path = Path("/proc"),
           min_bytes: int = MIN_BYTES) -> list[ShmFile]:
    """The plain files of at least ``min_bytes`` (allocated) in ``shm_dir`` that no live
    process holds, largest first; [] where the folder cannot be read. Where some process
    could not be read (not root), only this user's files: another user's may be held by a
    process of theirs."""
    found: list[tuple[str, int, float, int]] = []
    try:
        with os.scandir(shm_dir) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_FILES:
                    break
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:  # gone meanwhile
                    continue
                size = st.st_blocks * 512
                if stat.S_ISREG(st.st_mode) and size >= min_bytes:
                    found.append((entry.path, size, st.st_ctime, st.st_uid))
    except OSError:
        return []
    if not found:
        return []
    busy, whole = held_and_whole(shm_dir, proc)
    me = os.geteuid()
    now = time.time()
    out = [ShmFile(Path(path).name, size, max(0.0, now - made))
           for path, size, made, uid in found if path not in busy and (whole or uid == me)]
    return sorted(out, key=lambda f: (-f.bytes, f.name))
