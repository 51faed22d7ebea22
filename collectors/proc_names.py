"""The names of the processes NVML lists on a GPU: NVML gives a pid alone, and the on-call
question is whose memory it is.

A name is read once per pid (/proc/PID/comm) and kept while NVML lists that pid. A pid this
host's /proc does not have belongs to another PID namespace: the dashboard runs in a
container while the driver answers with the host's pids (or the other way round). That is
said as not seen (None), never guessed at: the ledgers and the fit check decide what an
unseen process may be.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from collectors.cgroup import container_of


class ProcessNames:
    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self._known: dict[int, str | None] = {}
        self._containers: dict[int, str] = {}

    def name(self, pid: int) -> str | None:
        """The process's command name ("" when it cannot be read, a zombie's too); None when
        this host has no such process."""
        if pid not in self._known:
            self._known[pid] = self._read(pid)
        return self._known[pid]

    def container(self, pid: int) -> str:
        """What the process runs in, from its cgroup (read once per pid, as its name): ""
        on the host itself, or where this host has no such process."""
        if pid not in self._containers:
            self._containers[pid] = container_of(pid, self.proc) if pid > 0 else ""
        return self._containers[pid]

    def keep_only(self, pids: Iterable[int]) -> None:
        """Forget every pid NVML no longer lists (a later process may reuse it)."""
        listed = set(pids)
        for pid in [p for p in self._known if p not in listed]:
            del self._known[pid]
        for pid in [p for p in self._containers if p not in listed]:
            del self._containers[pid]

    def _read(self, pid: int) -> str | None:
        if pid <= 0:
            return None
        try:
            return (self.proc / str(pid) / "comm").read_text(errors="replace").strip()
        except FileNotFoundError:
            return None
        except OSError:  # there, but not readable (another user's, hidepid)
            return ""
