"""Host memory: /proc/meminfo and /proc/vmstat for the node, /proc/PID/status for the server's
process tree (psutil finds the tree), and per NUMA node (collectors.numa). used = MemTotal -
MemAvailable, as psutil >= 7 and node_exporter users compute it, so pinned host memory (which
shows as Shmem) is not hidden.

A backend supplies the raw numbers so that a simulated node can stand in for /proc.

/proc's text is read with undecodable bytes replaced (here, in numa and in cgroup): a
process's name and the paths it maps are whatever bytes it chose, and one process named in
Latin-1 must not fail the node's reading.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
import re
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from collectors import cgroup, numa, shm
from collectors.base import FailureTracker, describe, read_text, run_blocking
from collectors.kernel_log import KMSG, read_kernel_log
from collectors.readings import (
    CgroupMemory,
    HostData,
    ProcessMemory,
    ProcessTreeMemory,
    Reading,
    ShmFile,
    Status,
)
from collectors.settled import Settled, SettledParts
from collectors.tree_members import TreeMembers
from collectors.units import KIB

STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")
# A death's "before": the most the server's tree held over this many seconds of readings.
PEAK_WINDOW_S = 10.0
# Pinned (pin_user_pages: RDMA registrations, some cudaHostRegister paths) and mlock'ed pages;
# a kernel without either line leaves the tree's pinned figure unknown.
PINNED_KEYS = ("VmPin", "VmLck")
STATUS_LINES = STATUS_KEYS + PINNED_KEYS  # what a process's status is read for
VMSTAT_LINES = re.compile(r"^(pswpin|pswpout|oom_kill) (\d+)$", re.M)


class HostBackend(Protocol):
    name: str

    def meminfo(self) -> dict[str, int]:
        """/proc/meminfo fields in bytes (HugePages_* are counts)."""

    def vmstat(self) -> dict[str, int]:
        """/proc/vmstat counters (pswpin/pswpout in pages; oom_kill where given)."""

    def process_memory(self, pid: int) -> dict[str, int] | None:
        """VmRSS, RssAnon, RssFile, RssShmem in bytes, and VmPin, VmLck where the kernel
        gives them; None if the process is gone; PermissionError where this user may not
        read it (/proc mounted hidepid=1 and another user's process)."""

    def children(self, pid: int) -> list[int] | None:
        """The process's descendants; None if the process is gone."""

    def thread_children(self, pid: int) -> list[int] | None:
        """The children of the process's main thread; None where the kernel does not say
        (collectors.tree_members)."""

    def node_meminfo(self) -> dict[int, dict[str, int]] | None:
        """Per NUMA node, its meminfo fields (numa.NumaBackend)."""

    def shared_mappings(self, pid: int) -> numa.Mappings | None:
        """The process's shared-memory mappings per NUMA node (numa.NumaBackend)."""

    def process_nodes(self, pid: int) -> dict[int, int] | None:
        """Where a process's memory sits, bytes per NUMA node; None where not read."""

    def kernel_log(self) -> tuple[str | None, str]:
        """The kernel log's text, or (None, why it cannot be read) (collectors.kernel_log)."""

    def cgroup(self, pid: int | None) -> CgroupMemory | None:
        """The memory cgroup of ``pid`` (None: this process's), with a limit or not; None
        where there is none (collectors.cgroup)."""

    def reread_cgroup(self, found: CgroupMemory) -> CgroupMemory | None:
        """A cgroup read before, read again by its path (its process may be gone)."""

    def thp(self) -> str:
        """Transparent huge pages as the kernel is set (always, madvise, never); "" where
        it does not say."""

    def largest(self, n: int, outside: frozenset[int]) -> list[ProcessMemory]:
        """The ``n`` processes of most resident memory, those in ``outside`` left out."""

    def shm_unheld(self) -> list[ShmFile]:
        """/dev/shm's files that no live process holds, largest first (collectors.shm)."""

    def shm_mount(self, pid: int | None) -> tuple[int, int] | None:
        """(size, free bytes) of the /dev/shm ``pid`` sees (None: this process's): its mount
        namespace's, so a container's own (Docker gives 64 MiB unless --shm-size says
        more, and NCCL and SGLang's shared-memory transport need more); None where it
        cannot be read."""


def pid_list(text: str) -> list[int]:
    """A /proc children file's pids ("101 102 ")."""
    return [int(k) for k in text.split() if k.isdigit()]


def parse_meminfo(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            continue
        out[key.strip()] = value * KIB if len(parts) > 1 and parts[1] == "kB" else value
    return out


class ProcBackend:
    """The machine's own /proc."""

    name = "proc"

    def __init__(self, proc: Path = Path("/proc"), sys: Path = Path("/sys"),
                 kmsg: Path = KMSG, shm_dir: Path = shm.SHM_DIR) -> None:
        self.proc = proc
        self.sys = sys
        self.shm_dir = shm_dir
        self.kmsg = kmsg
        self.cgroup_root = sys / "fs" / "cgroup"

    def meminfo(self) -> dict[str, int]:
        path = f"{self.proc}/meminfo"
        fields = parse_meminfo(read_text(path))
        if "MemTotal" not in fields:  # every kernel writes it: not a meminfo (a bind mount?)
            raise ValueError(f"{path} has no MemTotal line")
        return fields

    def vmstat(self) -> dict[str, int]:
        # Three of its 170-odd lines, found without splitting the others.
        return {key: int(value) for key, value in VMSTAT_LINES.findall(
            read_text(f"{self.proc}/vmstat"))}

    def process_memory(self, pid: int) -> dict[str, int] | None:
        try:
            text = read_text(f"{self.proc}/{pid}/status")
        except (FileNotFoundError, ProcessLookupError):
            return None
        # The lines of the keys alone, 6 of about 60 (read for every member each poll).
        values = parse_meminfo("\n".join(line for line in text.splitlines()
                                         if line.startswith(STATUS_LINES)))
        # Kernel threads and zombies have no Vm lines: they hold no user memory.
        out = {k: values.get(k, 0) for k in STATUS_KEYS}
        out.update({k: values[k] for k in PINNED_KEYS if k in values})
        return out

    def children(self, pid: int) -> list[int] | None:
        try:
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        except psutil.AccessDenied:  # it reads every process's stat: hidepid=1 refuses some
            return self._task_children(pid)

    def _task_children(self, root: int) -> list[int] | None:
        """The descendants by each thread's children file (Linux 3.5+), which needs only the
        tree's own /proc; PermissionError where the root's is refused too. A kernel without
        the files (CONFIG_PROC_CHILDREN) gives the root alone."""
        found: list[int] = []
        seen = {root}
        todo = [root]
        while todo:
            pid = todo.pop()
            try:
                tasks = os.listdir(f"{self.proc}/{pid}/task")
            except FileNotFoundError:  # gone since its parent's file listed it
                if pid == root:
                    return None
                continue
            for tid in tasks:
                try:
                    text = read_text(f"{self.proc}/{pid}/task/{tid}/children")
                except FileNotFoundError:
                    continue
                kids = [k for k in pid_list(text) if k not in seen]
                seen.update(kids)
                found += kids
                todo += kids
        return found

    def thread_children(self, pid: int) -> list[int] | None:
        try:
            text = read_text(f"{self.proc}/{pid}/task/{pid}/children")
        except OSError:  # gone, or a kernel built without CONFIG_PROC_CHILDREN
            return None
        return pid_list(text)

    def node_meminfo(self) -> dict[int, dict[str, int]] | None:
        return numa.read_node_meminfo(self.sys)

    def shared_mappings(self, pid: int) -> numa.Mappings | None:
        return numa.read_shared_mappings(self.proc, pid)

    def process_nodes(self, pid: int) -> dict[int, int] | None:
        return numa.read_process_nodes(self.proc, pid)

    def kernel_log(self) -> tuple[str | None, str]:
        return read_kernel_log(self.kmsg)

    def cgroup(self, pid: int | None) -> CgroupMemory | None:
        # The pid's cgroup, else this process's (where a server it starts would go).
        return cgroup.memory_of("self" if pid is None else pid, self.proc, self.cgroup_root)

    def reread_cgroup(self, found: CgroupMemory) -> CgroupMemory | None:
        return cgroup.read_memory(found.version, found.path, self.cgroup_root)

    def largest(self, n: int, outside: frozenset[int]) -> list[ProcessMemory]:
        found = []
        for entry in os.listdir(self.proc):  # every process: strings, not pathlib
            if not entry.isdigit() or int(entry) in outside:
                continue
            try:
                text = read_text(f"{self.proc}/{entry}/status")
            except OSError:  # gone since the listing, or not ours to read
                continue
            lines = [ln for ln in text.splitlines() if ln.startswith(("Name:", "VmRSS:"))]
            rss = parse_meminfo("\n".join(lines)).get("VmRSS", 0)  # kernel threads: none
            name = next((ln.split(":", 1)[1].strip() for ln in lines
                         if ln.startswith("Name:")), "?")
            if rss:
                found.append(ProcessMemory(int(entry), name, rss))
        top = heapq.nlargest(n, found, key=lambda m: m.rss_bytes)
        return [dataclasses.replace(p, container=cgroup.container_of(p.pid, self.proc))
                for p in top]

    def shm_unheld(self) -> list[ShmFile]:
        return shm.unheld(self.shm_dir, self.proc)

    def shm_mount(self, pid: int | None) -> tuple[int, int] | None:
        # Through /proc/PID/root: the process's own mounts (root, or the same user, may look).
        try:
            st = os.statvfs(self.proc / ("self" if pid is None else str(pid)) / "root" / "dev"
                            / "shm")
        except OSError:
            return None
        return (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize) if st.f_blocks else None

    def thp(self) -> str:
        try:
            text = (self.sys / "kernel" / "mm" / "transparent_hugepage" / "enabled").read_text(
                errors="replace")
        except OSError:
            return ""
        start, end = text.find("["), text.find("]")
        return text[start + 1:end] if 0 <= start < end else ""


class Every:
    """Due at the first call, then once every ``interval_s``: a scan of every process (or of
    their maps) is worth its cost twice a minute, not once a second."""

    def __init__(self, interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s, self.clock = interval_s, clock
        self._at: float | None = None

    def due(self) -> bool:
        now = self.clock()
        if self._at is not None and now - self._at < self.interval_s:
            return False
        self._at = now
        return True


class ShmScan:
    """/dev/shm's unheld files, re-read every ``interval_s``: which ones are held is a scan
    of every process's maps and open files."""

    def __init__(self, interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = Every(interval_s, clock)
        self._value: tuple[ShmFile, ...] = ()

    def get(self, backend: HostBackend) -> tuple[ShmFile, ...]:
        if self.every.due():
            self._value = tuple(backend.shm_unheld())
        return self._value


class Largest:
    """The largest processes outside the server's tree, re-read every ``interval_s``: a
    scan of every process, for the host alert to name who holds the memory."""

    def __init__(self, n: int = 3, interval_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.n = n
        self.every = Every(interval_s, clock)
        self._value: tuple[ProcessMemory, ...] = ()

    def get(self, backend: HostBackend, tree: frozenset[int],
            per_node: bool = False) -> tuple[ProcessMemory, ...]:
        """``per_node``: on a host of two NUMA nodes or more, where each one's memory
        sits too (its numa_maps: a page-table walk, for these few, at this cadence)."""
        if self.every.due():
            found = backend.largest(self.n, tree)
            if per_node:
                found = [dataclasses.replace(p, numa_bytes=tuple(
                    (backend.process_nodes(p.pid) or {}).items())) for p in found]
            self._value = tuple(found)
        return tuple(p for p in self._value if p.pid not in tree)  # a rank started since


def sample(backend: HostBackend, root_pid: int | None,
           share: numa.ServerShare | None = None,
           members: TreeMembers | None = None, largest: Largest | None = None,
           shm_scan: ShmScan | None = None, settled: Settled | None = None) -> HostData:
    """``share`` reads where the server's shared memory sits per NUMA node; without it (the
    supervisor's guards, which need the totals only) the nodes' own figures alone.
    ``members`` keeps the server tree's listing between polls, ``settled`` the parts that
    move only when the host's memory does (collectors.settled): a poller's own."""
    mi = backend.meminfo()
    total = mi["MemTotal"]
    # MemAvailable exists since Linux 3.14; estimate as `free` does on older kernels.
    available = mi.get("MemAvailable", mi.get("MemFree", 0) + mi.get("Buffers", 0)
                       + mi.get("Cached", 0))
    vm = backend.vmstat()
    page = 4096
    swap_total = mi.get("SwapTotal", 0)
    due = settled is None or settled.due(mi, root_pid)
    tree, unreadable = tree_memory(backend, root_pid, members, spawns=due) \
        if root_pid else (None, ())
    # Each poll: the server's shared memory counted once comes from the nodes' numa_maps
    # share (itself read every few seconds), and it is the server's share of the host.
    nodes, numa_problem = numa.reading(backend, mi.get("Hugepagesize", 0),
                                       tree.pids if tree else (), share,
                                       tree.rss_shmem_bytes if tree else None)
    parts = settled.kept if settled is not None and not due else None
    if parts is None:
        parts = SettledParts(backend.cgroup(root_pid), backend.shm_mount(root_pid))
        if settled is not None:
            settled.keep(parts)
    cg = parts.cgroup
    return HostData(
        total_bytes=total,
        available_bytes=available,
        used_bytes=total - available,
        free_bytes=mi.get("MemFree", 0),
        cached_bytes=mi.get("Cached", 0),
        buffers_bytes=mi.get("Buffers", 0),
        shmem_bytes=mi.get("Shmem", 0),
        hugepages_total=mi.get("HugePages_Total", 0),
        hugepages_free=mi.get("HugePages_Free", 0),
        hugepage_size_bytes=mi.get("Hugepagesize", 0),
        anon_hugepages_bytes=mi.get("AnonHugePages", 0) + mi.get("ShmemHugePages", 0),
        swap_total_bytes=swap_total,
        swap_used_bytes=swap_total - mi.get("SwapFree", 0),
        swap_in_bytes=vm.get("pswpin", 0) * page,
        swap_out_bytes=vm.get("pswpout", 0) * page,
        server_tree=tree,
        backend=backend.name,
        numa_nodes=nodes,
        numa_problem=numa_problem,
        tree_problem=tree_problem(root_pid, tree, unreadable),
        oom_kills=vm.get("oom_kill"),
        cgroup=cg,
        server_container=cgroup.container_name(cg.path) if tree and cg is not None else "",
        largest_others=largest.get(backend, frozenset(tree.pids if tree else ()),
                                   per_node=len(nodes) > 1)
        if largest is not None else (),
        shm_unheld=shm_scan.get(backend) if shm_scan is not None else (),
        shm_mount=parts.shm_mount,
    )


def tree_memory(backend: HostBackend, root_pid: int, members: TreeMembers | None = None,
                spawns: bool = True) -> tuple[ProcessTreeMemory | None, tuple[int, ...]]:
    """The server's tree's memory (None when its root is gone or none of it can be read),
    and the members this user may not read, whose memory is left out of it. ``spawns``:
    whether a kept listing is checked for new children (TreeMembers.get)."""
    try:
        if members is None:
            kids = backend.children(root_pid)
            pids = None if kids is None else [root_pid, *kids]
        else:
            pids = members.get(backend, root_pid, spawns)
    except PermissionError:  # not even its listing: none of it is this user's to read
        return None, (root_pid,)
    if pids is None:
        return None, ()
    totals = dict.fromkeys(STATUS_KEYS, 0)
    pinned: int | None = None
    alive = []
    unreadable = []
    for pid in pids:
        try:
            mem = backend.process_memory(pid)
        except PermissionError:  # one member of the tree: the rest is still read
            unreadable.append(pid)
            continue
        if mem is None:  # exited since the listing
            if members is not None:
                members.gone()
            if pid == root_pid:
                return None, ()
            continue
        alive.append(pid)
        for key in STATUS_KEYS:
            totals[key] += mem[key]
        if any(k in mem for k in PINNED_KEYS):
            pinned = (pinned or 0) + sum(mem.get(k, 0) for k in PINNED_KEYS)
    if not alive:
        return None, tuple(unreadable)
    return ProcessTreeMemory(root_pid, tuple(alive), totals["VmRSS"], totals["RssAnon"],
                             totals["RssFile"], totals["RssShmem"], pinned), tuple(unreadable)


def tree_problem(root_pid: int | None, tree: ProcessTreeMemory | None,
                 unreadable: tuple[int, ...]) -> str:
    """The Host RAM panel's line on a tree this user may not read whole ("" when read)."""
    if not unreadable:
        return ""
    if tree is None:
        return (f"server (pid {root_pid}): its /proc is not readable by this user (hidepid, or "
                "another user's): its memory is not in the server's share")
    pids = ", ".join(map(str, unreadable[:3])) + (", ..." if len(unreadable) > 3 else "")
    return (f"server: {len(unreadable)} of {len(unreadable) + len(tree.pids)} processes not "
            f"readable by this user (pid {pids}): their memory is not in the server's share")


class HostCollector:
    def __init__(self, backend: HostBackend | None = None, *, root_pid: int | None = None,
                 source: str = "host", timeout: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend or ProcBackend()
        self.root_pid = root_pid  # the server's launcher; its tree is the server
        self.timeout = timeout
        # One clock (monotonic seconds) for the readings, the numa_maps throttle and the
        # tree's relisting: a test's own moves them all without sleeping.
        self.tracker = FailureTracker(source, clock)
        # Throttled: numa_maps is a page-table walk.
        self.numa_share = numa.ServerShare(clock=clock)
        self.members = TreeMembers(clock)  # the tree's listing, kept between polls
        self.largest = Largest(clock=clock)
        self.shm_scan = ShmScan(clock=clock)
        self.settled = Settled(clock)  # cgroup, /dev/shm, spawns: as often as memory moves
        # The last reading that found the server's tree alive, and those of the last
        # PEAK_WINDOW_S with its root (the death forensics read them).
        self.last_with_tree: HostData | None = None
        self._clock = clock
        self._recent_trees: deque[tuple[float, HostData]] = deque(maxlen=64)

    async def poll(self) -> Reading[HostData]:
        try:
            data = await run_blocking(
                lambda: sample(self.backend, self.root_pid, self.numa_share, self.members,
                               self.largest, self.shm_scan, self.settled),
                self.timeout)
        except TimeoutError:
            return self.tracker.fail(Status.ERROR, f"/proc did not answer within {self.timeout:g}s")
        except Exception as exc:  # a collector never lets a failure escape
            return self.tracker.fail(Status.ERROR, describe(exc))
        if data.server_tree is not None:
            self.last_with_tree = data
            now = self._clock()
            self._recent_trees.append((now, data))
            while self._recent_trees and now - self._recent_trees[0][0] > PEAK_WINDOW_S:
                self._recent_trees.popleft()
        return self.tracker.ok(data)

    @property
    def peak_with_tree(self) -> HostData | None:
        """Of the last PEAK_WINDOW_S's readings with the server's tree alive (its root
        the last one's), the one where it held the most: what it held before it died. The
        last one alone can be read during the end itself, a rank killed and its memory gone
        while the launcher still lives, and would say the memory fell."""
        last = self.last_with_tree
        if last is None or last.server_tree is None:
            return last
        root = last.server_tree.root_pid
        same = [d for _, d in self._recent_trees
                if d.server_tree is not None and d.server_tree.root_pid == root]
        return max(same, key=lambda d: d.server_tree.rss_bytes if d.server_tree else 0,
                   default=last)
