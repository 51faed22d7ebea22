"""A folder of recordings kept within a retention (engram_top.settings.retention): whole
files removed oldest first, never the one being written. The agent's rotation holds to its
`--retain`, the dashboards' default folder to the config file's [recordings] retain."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from engram_top.settings.retention import DASHBOARD as DASHBOARD  # re-exported
from engram_top.settings.retention import Retention as Retention  # re-exported


def files(folder: Path, pattern: str) -> list[tuple[Path, os.stat_result]]:
    """The folder's files of ``pattern`` with their stat, oldest first; one gone meanwhile
    left out, an unreadable folder none."""
    out = []
    try:
        found = list(folder.glob(pattern))
    except OSError:
        return []
    for p in found:
        with contextlib.suppress(OSError):
            out.append((p, p.stat()))
    return sorted(out, key=lambda ps: (ps[1].st_mtime, ps[0].name))


def trim(folder: Path, pattern: str, retention: Retention, *, writing: Path | None = None,
         max_files: int | None = None, now: float | None = None) -> list[tuple[Path, int]]:
    """Remove the oldest files of ``pattern`` (never ``writing``, the one being written)
    while the folder holds more than ``retention``: older than its age, past its size
    altogether, or more than ``max_files``. Returns each removed file with its bytes."""
    now = time.time() if now is None else now
    found = files(folder, pattern)
    total = sum(st.st_size for _, st in found)
    count = len(found)
    gone: list[tuple[Path, int]] = []
    for p, st in found:  # oldest first
        if writing is not None and p == writing:
            continue
        too_old = retention.max_age_s is not None and now - st.st_mtime > retention.max_age_s
        too_big = retention.max_bytes is not None and total > retention.max_bytes
        too_many = max_files is not None and count > max_files
        if not (too_old or too_big or too_many):
            continue
        with contextlib.suppress(OSError):
            p.unlink()
            total -= st.st_size
            count -= 1
            gone.append((p, st.st_size))
    return gone


def said(gone: list[tuple[Path, int]], folder: Path, retention: Retention) -> str:
    """What a trim removed, in one line for the events."""
    n, size = len(gone), sum(b for _, b in gone)
    return (f"recordings: removed {n} older session{'s' if n != 1 else ''} "
            f"({size / 10**6:,.1f} MB) from {_home_relative(folder)}, past the retention "
            f"{retention} ([recordings] retain in the config file)")


def _home_relative(folder: Path) -> str:
    """~/.local/state/...: the folder as its owner knows it, shorter on an events line."""
    try:
        return "~/" + str(folder.relative_to(Path.home()))
    except (ValueError, RuntimeError):  # elsewhere, or no home to be had
        return str(folder)
