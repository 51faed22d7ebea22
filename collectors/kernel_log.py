"""The kernel's own word on a process it killed for memory: its log's OOM-kill records.

A host OOM kill leaves nothing in the server's log (SIGKILL gives no goodbye); the kernel
logs the victim's pid, name and memory by kind (anon, file, shmem: pinned host tables are
shmem), and whether a memory cgroup's limit was hit ("Memory cgroup out of memory",
``constraint=CONSTRAINT_MEMCG``). Read from /dev/kmsg (root, or kernel.dmesg_restrict=0),
or from a file of the same lines (``dmesg`` output, journalctl -k): records in kmsg's
``PRIO,SEQ,USEC,-;MESSAGE`` form, dmesg's ``[  123.456] MESSAGE`` or bare.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

from collectors.readings import KernelKill
from collectors.safetext import visible

KMSG = Path("/dev/kmsg")
KIB = 1024
READ_LIMIT = 4 * 1024 * 1024  # the kernel's ring is 128 KiB-32 MiB; a file may be larger
RECORD = 8192  # /dev/kmsg answers one record a read, EINVAL to a smaller buffer

_PREFIX = re.compile(r"^(?:\d+,\d+,\d+,[^;]*;|\[\s*\d+\.\d+\]\s*|<\d+>)")
_KILLED = re.compile(r"(Memory cgroup out of memory"
                     r"|Out of memory(?: \(oom_kill_allocating_task\))?)"
                     r": Killed process (\d+) \(([^)]{0,64})\)(.*)")
_RSS = re.compile(r"\b(total-vm|anon-rss|file-rss|shmem-rss):(\d{1,15})kB")
_OOM_KILL = re.compile(r"oom-kill:constraint=(\w+).*?\bpid=(\d+)")
_MEMCG = re.compile(r"\boom_memcg=([^,\s]+)")


def oom_kills(text: str) -> list[KernelKill]:
    """Every OOM kill the text records, oldest first."""
    out: list[KernelKill] = []
    constraint: dict[int, tuple[str, str]] = {}
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw.strip(), count=1)
        m = _OOM_KILL.search(line)
        if m:
            cg = _MEMCG.search(line)
            constraint[int(m.group(2))] = (m.group(1), cg.group(1) if cg else "")
            continue
        m = _KILLED.search(line)
        if not m:
            continue
        pid = int(m.group(2))
        rss = {k: int(v) * KIB for k, v in _RSS.findall(m.group(4))}
        kind, memcg = constraint.pop(pid, ("", ""))
        out.append(KernelKill(
            pid=pid, comm=m.group(3), memcg=memcg,
            cgroup_limit=m.group(1).startswith("Memory cgroup") or kind == "CONSTRAINT_MEMCG",
            anon_bytes=rss.get("anon-rss"), file_bytes=rss.get("file-rss"),
            shmem_bytes=rss.get("shmem-rss"), line=visible(line[:300])))
    return out


def read_kernel_log(path: Path = KMSG) -> tuple[str | None, str]:
    """(the log's text, "") or (None, why it could not be read). /dev/kmsg is read without
    blocking to its present end; a plain file's last READ_LIMIT bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    chunks: list[bytes] = []
    size = 0
    try:
        if not path.is_char_device():
            with contextlib.suppress(OSError):
                end = os.lseek(fd, 0, os.SEEK_END)
                os.lseek(fd, max(0, end - READ_LIMIT), os.SEEK_SET)
        while size < READ_LIMIT:
            try:
                chunk = os.read(fd, RECORD)
            except BlockingIOError:
                break  # /dev/kmsg: no more records for now
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records overwritten while reading: the next one is there
                return None, f"{path}: {exc.strerror or exc}"
            if not chunk:
                break
            chunks.append(chunk if chunk.endswith(b"\n") else chunk + b"\n")
            size += len(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace"), ""
