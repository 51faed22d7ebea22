"""Temporary folders that say whose they are, so that one left by a killed process is found
and removed by the next start.

A process killed with SIGKILL runs no cleanup: its temporary folder (a fleet demo's
Prometheus data, its config, its logs) stays in the temp dir for good. So each such folder
holds `owner.json`: the pid and start time of the process it belongs to, and of each process
it started. A new folder of the same prefix first sweeps the old ones: a folder whose owner
is gone (no process of that pid and start time) has what it started stopped, if anything of
it still runs, and is removed. Only folders of this user, named with the prefix, directly in
the temp dir, are touched; a folder still without its owner file (one being made this
moment) is left alone unless it is old.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from scenarios.private import write_private
from scenarios.proc_start import start_of, started_as
from scenarios.process import LaunchSpec, ManagedProcess

OWNER = "owner.json"
ORPHAN_AFTER_S = 600.0  # a folder with no owner file this old was never finished


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / OWNER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _alive(entry: Any) -> bool:
    """Whether the process an entry names (pid and start time) still runs."""
    if not isinstance(entry, dict):
        return False
    pid, started = entry.get("pid"), entry.get("started")
    if not isinstance(pid, int) or not isinstance(started, (int, float)) or pid <= 0:
        return False
    return started_as(pid, started)


def make(prefix: str) -> Path:
    """A new 0700 folder in the temp dir, named ``prefix`` + random, owned by this process;
    old ones of the same prefix whose owner is gone are swept first."""
    sweep(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    write_private(folder / OWNER, json.dumps({"pid": os.getpid(),
                                              "started": start_of(os.getpid()),
                                              "children": []}))
    return folder


def note_child(folder: Path, pid: int) -> None:
    """A process started for ``folder``: stopped by a later sweep if it outlives its owner."""
    data = _read(folder)
    if data is None:
        return
    children = data.get("children")
    data["children"] = [*(children if isinstance(children, list) else []),
                        {"pid": pid, "started": start_of(pid)}]
    write_private(folder / OWNER, json.dumps(data))


def sweep(prefix: str, base: Path | None = None) -> list[Path]:
    """Remove the folders ``prefix``* in ``base`` (the temp dir) whose owner is gone,
    stopping what they started first; returns those removed."""
    base = base or Path(tempfile.gettempdir())
    removed = []
    try:
        found = [p for p in base.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return []
    for folder in found:
        try:
            st = folder.lstat()
        except OSError:
            continue
        if not folder.is_dir() or folder.is_symlink() or st.st_uid != os.getuid():
            continue
        owner = _read(folder)
        if owner is None and time.time() - st.st_mtime < ORPHAN_AFTER_S:
            continue  # being made this moment, most likely
        if owner is not None and _alive(owner):
            continue
        children = owner.get("children") if owner is not None else None
        for child in children if isinstance(children, list) else ():
            if _alive(child):
                proc = ManagedProcess.adopt(LaunchSpec([], folder / "left.log"),
                                            child["pid"], child["started"])
                if proc is not None:
                    with contextlib.suppress(OSError, psutil.Error):
                        proc.stop_now(grace=2.0)
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed
