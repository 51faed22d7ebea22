"""Shared memory a stopped server left in /dev/shm.

SGLang unlinks its load-snapshot segments (``sglang_loads_*``) and its pid-stamped ones
(``sgl_shm_*``) only on a clean Python exit. A stop that ends its processes by SIGKILL (ours
after the grace period, or its own kill_process_tree on the way down) leaves them behind for
good, in a tmpfs that is host RAM: a node that switches placements all day collects them.
After a stop we remove the ones created since that server's launch that no live process
holds open or mapped; anything else in /dev/shm is not ours to touch.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from collectors.shm import SHM_DIR, held

FAMILIES = ("sglang_loads_", "sgl_shm_")  # SGLang's segments: the names its own sweep knows


def sweep(since_wall: float, shm_dir: Path = SHM_DIR, proc: Path = Path("/proc"),
          slack_s: float = 1.0, owner: int | None = None) -> list[str]:
    """Remove SGLang's segments created at or after ``since_wall`` (less ``slack_s``: the
    kernel's file times run on a coarser clock) that nothing holds; return their names. A
    folder that cannot be read removes nothing. Only plain files of ``owner`` (this process'
    user, who launched the server): engram-top often runs as root, which may unlink any
    user's segment, and a symlink of the family's name is no segment at all."""
    owner = os.geteuid() if owner is None else owner
    try:
        found = [e for e in os.scandir(shm_dir) if e.name.startswith(FAMILIES)]
    except OSError:
        return []
    if not found:
        return []
    busy = held(shm_dir, proc)
    removed = []
    for entry in found:
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
                continue
            # ctime: when the segment was made (or last resized), not when it was written.
            if st.st_ctime < since_wall - slack_s or entry.path in busy:
                continue
            os.unlink(entry.path)
        except OSError:  # gone meanwhile, or not ours
            continue
        removed.append(entry.name)
    return sorted(removed)
