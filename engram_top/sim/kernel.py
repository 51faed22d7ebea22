"""The simulated node's kernel: what a real kernel says when it kills a process for memory,
in its own files and words, so the death forensics read the simulated node as a real one.

- ``<node>/kernel/kmsg``: the kernel log, one record a line in /dev/kmsg's format
  (``PRIORITY,SEQUENCE,MICROSECONDS,-;MESSAGE``).
- ``<node>/kernel/vmstat``: the counters of /proc/vmstat the readers use (``oom_kill N``).
- ``<node>/kernel/shm/``: its /dev/shm, a file per segment (below).

A real node's are /dev/kmsg and /proc/vmstat (collectors.kernel_log, collectors.host).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

KIB = 1024


def kernel_dir(node_dir: Path) -> Path:
    return node_dir / "kernel"


def kmsg_path(node_dir: Path) -> Path:
    return kernel_dir(node_dir) / "kmsg"


def vmstat_path(node_dir: Path) -> Path:
    return kernel_dir(node_dir) / "vmstat"


def read_oom_kills(node_dir: Path) -> int:
    """The node's oom_kill counter (0 where the kernel never killed anything)."""
    try:
        text = vmstat_path(node_dir).read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def oom_kill(node_dir: Path, pid: int, comm: str, *, anon_bytes: int, shmem_bytes: int,
             file_bytes: int = 0, memcg: str | None = None) -> None:
    """Write what the kernel writes when its OOM killer (or a memory cgroup's, ``memcg``
    its path) kills ``pid``: the oom-kill line and the "Killed process" line in the kernel
    log, and one more on the oom_kill counter. The caller then sends the SIGKILL."""
    folder = kernel_dir(node_dir)
    folder.mkdir(parents=True, exist_ok=True)
    constraint = "CONSTRAINT_MEMCG" if memcg else "CONSTRAINT_NONE"
    cgroup = f",oom_memcg={memcg},task_memcg={memcg}" if memcg else ",task_memcg=/"
    lead = "Memory cgroup out of memory" if memcg else "Out of memory"
    vm_kb = (anon_bytes + shmem_bytes + file_bytes) // KIB + 4 * 1024 * 1024
    messages = [
        (4, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
            "order=0, oom_score_adj=0"),
        (6, f"oom-kill:constraint={constraint},nodemask=(null),cpuset=/,mems_allowed=0-1"
            f"{cgroup},task=python3,pid={pid},uid=0"),
        (3, f"{lead}: Killed process {pid} ({comm}) total-vm:{vm_kb}kB, "
            f"anon-rss:{anon_bytes // KIB}kB, file-rss:{file_bytes // KIB}kB, "
            f"shmem-rss:{shmem_bytes // KIB}kB, UID:0 pgtables:{anon_bytes // KIB // 512}kB "
            f"oom_score_adj:0"),
    ]
    with open(kmsg_path(node_dir), "a+", encoding="utf-8") as log:
        fcntl.flock(log, fcntl.LOCK_EX)  # ranks die at once: one sequence for all
        log.seek(0)
        seq = sum(1 for _ in log)
        usec = int(time.monotonic() * 1e6)
        for i, (prio, text) in enumerate(messages):
            log.write(f"{prio},{seq + i},{usec + i},-;{text}\n")
        log.flush()
        count = read_oom_kills(node_dir) + 1
        tmp = vmstat_path(node_dir).with_suffix(".tmp")
        tmp.write_text(f"oom_kill {count}\n")
        os.replace(tmp, vmstat_path(node_dir))
        with contextlib.suppress(OSError):
            fcntl.flock(log, fcntl.LOCK_UN)


# The node's /dev/shm (tmpfs, host RAM): <node>/kernel/shm/NAME, a small JSON file per
# segment saying its size and the process that made it. A segment is held while that
# process lives; a segment whose maker died without removing it is a leftover, as a real
# engine's is after a kill (collectors.shm reads a real node's).
def shm_dir(node_dir: Path) -> Path:
    return kernel_dir(node_dir) / "shm"


def make_segment(node_dir: Path, name: str, nbytes: int, pid: int, started: float) -> None:
    folder = shm_dir(node_dir)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text(json.dumps({"bytes": nbytes, "pid": pid, "started": started,
                               "made": time.time()}))
    os.replace(tmp, folder / name)


def remove_segment(node_dir: Path, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (shm_dir(node_dir) / name).unlink()


class Segment(NamedTuple):
    name: str
    bytes: int
    made: float  # wall-clock time
    held: bool  # its maker lives


def segments(node_dir: Path, alive: Callable[[int, float], bool]) -> list[Segment]:
    """Every segment of the node's /dev/shm; a file being written is skipped."""
    out: list[Segment] = []
    try:
        entries = sorted(p for p in shm_dir(node_dir).iterdir() if not p.name.startswith("."))
    except OSError:
        return out
    for path in entries:
        try:
            seg = json.loads(path.read_text())
            out.append(Segment(path.name, int(seg["bytes"]), float(seg["made"]),
                               alive(int(seg["pid"]), float(seg["started"]))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out
