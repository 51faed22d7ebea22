"""Host memory per NUMA node: each node's meminfo under /sys/devices/system/node, and where the
server's shared host memory (the Engram tables: memfd, shmem and hugetlb mappings) resides,
from /proc/PID/maps and /proc/PID/numa_maps. On a two-socket node a table on one socket is
read across the socket link by the GPUs of the other.

Readers take their root folders as parameters, so tests run them on a tree they write. A
missing or malformed file is a problem in one line, never an exception out of reading().
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Protocol

from collectors.base import describe, read_text
from collectors.readings import NumaNode
from collectors.units import KIB

NODE_DIR = "devices/system/node"
_NODE = re.compile(r"node(\d+)")
# Backings of shared memory, as maps names them; a shared mapping of an ordinary file is
# page cache (weights read through mmap), not memory the server pinned.
SHM_PREFIXES = ("/memfd:", "/dev/shm/", "/dev/zero", "/SYSV", "/dev/hugepages")
# numa_maps makes the kernel walk every page of every mapping: 189 GiB of tables are ~97k
# huge pages per process that maps them (49M small ones), where /proc/PID/status costs
# nothing. So it is read at most this often, and for the first processes of the tree only
# (the launcher and its ranks come first; a compile pool's workers hold no tables).
SHARE_INTERVAL_S = 5.0
SHARE_MAX_PIDS = 16

Mappings = list[tuple[Hashable, dict[int, int]]]  # (mapping's identity, node -> bytes)


class NumaBackend(Protocol):
    def node_meminfo(self) -> dict[int, dict[str, int]] | None:
        """Each NUMA node's meminfo fields in bytes (HugePages_* are counts); None where the
        kernel shows no nodes."""

    def shared_mappings(self, pid: int) -> Mappings | None:
        """The process's shared-memory mappings, each as its identity (the same object
        mapped by two processes has the same) and its resident bytes per node; None if the
        process is gone."""


# --------------------------------------------------------------------------- parsing


def parse_node_meminfo(text: str) -> dict[str, int]:
    """``Node 0 MemTotal:  263841424 kB`` lines as {field: bytes}; counts stay counts.
    Lines that do not read so are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] != "Node" or not parts[2].endswith(":"):
            continue
        try:
            value = int(parts[3])
        except ValueError:
            continue
        out[parts[2][:-1]] = value * KIB if parts[4:5] == ["kB"] else value
    return out


def parse_maps(text: str) -> dict[int, tuple[str, Hashable, str]]:
    """/proc/PID/maps by start address: (perms, identity, path). The identity is device,
    inode, offset and length: what two processes mapping the same range share."""
    out: dict[int, tuple[str, Hashable, str]] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 5:
            continue
        try:
            start, end = (int(a, 16) for a in parts[0].split("-"))
            offset, inode = int(parts[2], 16), int(parts[4])
        except ValueError:
            continue
        path = parts[5].strip() if len(parts) > 5 else ""
        out[start] = (parts[1], (parts[3], inode, offset, end - start), path)
    return out


def parse_numa_maps(text: str) -> list[tuple[int, set[str], dict[int, int]]]:
    """/proc/PID/numa_maps lines as (start address, flag words, node -> bytes): pages per
    node (N0=123) times kernelpagesize_kB."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        try:
            start = int(parts[0], 16)
        except (ValueError, IndexError):
            continue
        fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        try:
            page = int(fields.get("kernelpagesize_kB", "4")) * KIB
            pages = {int(k[1:]): int(v) for k, v in fields.items() if re.fullmatch(r"N\d+", k)}
        except ValueError:
            continue
        words = {p for p in parts[1:] if "=" not in p}
        out.append((start, words, {n: c * page for n, c in pages.items()}))
    return out


def shared_of(maps_text: str, numa_maps_text: str) -> Mappings:
    """The shared-memory mappings of one process, from its maps and numa_maps."""
    maps = parse_maps(maps_text)
    out: Mappings = []
    for start, words, per_node in parse_numa_maps(numa_maps_text):
        if start not in maps:
            continue  # mapped between the two reads: the next reading has it
        perms, identity, path = maps[start]
        # hugetlb pages are reserved for their mapping and never swapped, shared or not.
        shared = perms[3:4] == "s" and (not path or path.startswith(SHM_PREFIXES))
        if per_node and ("huge" in words or shared):
            out.append((identity, per_node))
    return out


# --------------------------------------------------------------------------- reading


def read_node_meminfo(sys_root: Path) -> dict[int, dict[str, int]] | None:
    """Each node's fields; {} for a node whose file cannot be read. None without the
    folder (a kernel without NUMA, a container hiding /sys)."""
    # String paths, not pathlib: read each second by the host poll.
    folder = f"{sys_root}/{NODE_DIR}"
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    out = {}
    for name in names:
        m = _NODE.fullmatch(name)
        if not m:
            continue
        try:
            text = read_text(f"{folder}/{name}/meminfo")
        except OSError:
            text = ""
        out[int(m[1])] = parse_node_meminfo(text)
    return dict(sorted(out.items()))


def read_process_nodes(proc: Path, pid: int) -> dict[int, int] | None:
    """Where all of a process's mapped pages sit, bytes per NUMA node (its numa_maps'
    N<node>= counts over every mapping); None if it is gone or cannot be read (another
    user's, without root)."""
    try:
        text = (proc / str(pid) / "numa_maps").read_text(errors="replace")
    except OSError:
        return None
    out: dict[int, int] = {}
    for _, _, per_node in parse_numa_maps(text):
        for node, held in per_node.items():
            out[node] = out.get(node, 0) + held
    return dict(sorted(out.items()))


def read_shared_mappings(proc: Path, pid: int) -> Mappings | None:
    """None if the process is gone; other OSErrors (permission) are the caller's to say."""
    try:
        maps = (proc / str(pid) / "maps").read_text(errors="replace")
        numa_maps = (proc / str(pid) / "numa_maps").read_text(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return shared_of(maps, numa_maps)


class ServerShare:
    """The server's shared memory per node, summed over its processes with each mapped
    object counted once (every rank maps the one memfd), re-read every SHARE_INTERVAL_S."""

    def __init__(self, interval_s: float = SHARE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._key: tuple[int, ...] | None = None
        self._shmem: int | None = None  # the tree's RssShmem when last read
        self._seen: int | None = None  # its RssShmem at the call before this one
        self._at = 0.0
        self._value: tuple[dict[int, int] | None, str] = (None, "")

    def get(self, backend: NumaBackend, pids: Sequence[int],
            shmem_bytes: int | None = None) -> tuple[dict[int, int] | None, str]:
        """Bytes per node (None when no process could be read), and a problem or "".
        ``shmem_bytes``: the tree's RssShmem now, a cheap sign of its shared memory."""
        now = self.clock()
        seen, self._seen = self._seen, shmem_bytes
        # Read at once where the tree changed (another server, a rank come or gone), where
        # its shared memory moved a lot since the last read (tables faulted in after a read
        # at launch), or where it has settled at another figure (the last of a load): else
        # every interval. A read at launch would otherwise stand for a whole interval.
        settled = shmem_bytes != self._shmem and shmem_bytes == seen
        if self._key == tuple(pids) and now - self._at < self.interval_s and \
                not settled and not _moved(self._shmem, shmem_bytes):
            return self._value
        self._key, self._at, self._shmem = tuple(pids), now, shmem_bytes
        self._value = self._read(backend, pids[:SHARE_MAX_PIDS])
        return self._value

    @staticmethod
    def _read(backend: NumaBackend, pids: Sequence[int]) -> tuple[dict[int, int] | None, str]:
        total: dict[int, int] = {}
        seen: set[Hashable] = set()
        read_any = False
        problem = ""
        for pid in pids:
            try:
                mappings = backend.shared_mappings(pid)
            except OSError as exc:
                problem = f"numa_maps of pid {pid}: {exc.strerror or describe(exc)}"
                continue
            if mappings is None:
                continue  # exited since the tree was listed
            read_any = True
            for identity, per_node in mappings:
                if identity in seen:
                    continue
                seen.add(identity)
                for node, nbytes in per_node.items():
                    total[node] = total.get(node, 0) + nbytes
        return (total if read_any else None), problem


SHARE_MOVED = 0.05  # a change of RssShmem past this share (and SHARE_MOVED_BYTES) re-reads
SHARE_MOVED_BYTES = 64 * 1024 * 1024


def _moved(before: int | None, now: int | None) -> bool:
    if before is None or now is None:
        return before != now
    return abs(now - before) > max(SHARE_MOVED * before, SHARE_MOVED_BYTES)


def node_figures(node: int, f: dict[str, int], hugepage_size: int,
                 server: dict[int, int] | None) -> NumaNode | None:
    total = f.get("MemTotal")
    if not total:
        return None
    free = f.get("MemFree", 0)
    shmem = f.get("Shmem", 0)
    cache = max(0, f.get("FilePages", shmem) - shmem)  # FilePages holds Shmem
    return NumaNode(
        node=node, total_bytes=total, free_bytes=free,
        used_bytes=max(0, f.get("MemUsed", total - free) - cache), shmem_bytes=shmem,
        hugepages_total_bytes=f.get("HugePages_Total", 0) * hugepage_size,
        hugepages_free_bytes=f.get("HugePages_Free", 0) * hugepage_size,
        thp_bytes=f.get("AnonHugePages", 0) + f.get("ShmemHugePages", 0),
        server_shared_bytes=None if server is None else server.get(node, 0),
    )


def reading(backend: NumaBackend, hugepage_size: int, pids: Sequence[int],
            share: ServerShare | None,
            shmem_bytes: int | None = None) -> tuple[tuple[NumaNode, ...], str]:
    """The nodes' figures and a problem ("" when none); never raises, so that a NUMA
    failure costs the host reading its NUMA figures only."""
    try:
        by_node = backend.node_meminfo()
        if not by_node:
            return (), ""
        # One node holds everything: its share is the whole, not worth a walk of numa_maps.
        server: dict[int, int] | None = None
        problem = ""
        if share is not None and pids and len(by_node) > 1:
            server, problem = share.get(backend, pids, shmem_bytes)
        nodes = []
        for node, fields in by_node.items():
            figures = node_figures(node, fields, hugepage_size, server)
            if figures is None:
                problem = problem or f"NUMA node {node}: no MemTotal in its meminfo"
            else:
                nodes.append(figures)
        return tuple(nodes), problem
    except Exception as exc:  # a collector never lets a failure escape
        return (), f"NUMA: {describe(exc)}"
