"""Why a server died, from what can be read after it: its exit status, its log's errors, the
kernel's OOM records and counter, and what it held just before. One class of death, its
evidence and the next action, written beside the run's facts (so recordings, snapshots and
`engram-top why` keep it) and said in the header and events.

Pure: the live session gathers the evidence (engram_top.live.forensics)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum

from collectors.readings import CgroupMemory, GpuData, HostData, KernelKill
from collectors.startup_facts import LogError
from collectors.units import GIB, gib, gib_change


class DeathKind(StrEnum):
    HBM_OOM_STARTUP = "hbm-oom-startup"
    HBM_OOM_RUNTIME = "hbm-oom-runtime"
    HOST_OOM_KILL = "host-oom-kill"
    CGROUP_OOM_KILL = "cgroup-oom-kill"
    SHM_FULL = "shm-full"
    NCCL_TIMEOUT = "nccl-timeout"
    SIGNAL = "signal"  # killed by a signal nothing here explains: from outside
    CRASH = "crash"  # an exception that is none of the above
    UNKNOWN = "unknown"


TITLES = {
    DeathKind.HBM_OOM_STARTUP: "out of GPU memory during start-up",
    DeathKind.HBM_OOM_RUNTIME: "out of GPU memory while serving",
    DeathKind.HOST_OOM_KILL: "killed by the kernel's OOM killer (host memory)",
    DeathKind.CGROUP_OOM_KILL: "killed at its memory cgroup's limit (container)",
    DeathKind.SHM_FULL: "/dev/shm full",
    DeathKind.NCCL_TIMEOUT: "NCCL or watchdog timeout (not memory)",
    DeathKind.SIGNAL: "killed by a signal from outside",
    DeathKind.CRASH: "crashed",
    DeathKind.UNKNOWN: "ended, cause unknown",
}


@dataclass(frozen=True, slots=True)
class Death:
    """A classified death: what killed the server, what says so, and what to do next."""

    scenario: str
    kind: DeathKind
    title: str
    evidence: tuple[str, ...] = ()
    action: str = ""
    at: float | None = None  # wall-clock seconds (time.time) when it was seen
    exit_code: int | None = None

    def headline(self) -> str:
        return f"{self.scenario} died: {self.title}"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What was read when the server's process ended."""

    scenario: str
    exit_code: int | None  # Popen's: -N for a signal; None where not ours to wait for
    was_ready: bool
    phase: str  # the start-up phase it was in, where it died before ready
    errors: tuple[LogError, ...] = ()
    pids: tuple[int, ...] = ()  # its processes, as last read
    kernel_kills: tuple[KernelKill, ...] = ()  # the kernel's OOM kills of those pids
    kernel_log_problem: str = ""  # why the kernel log could not be read ("" when it was)
    oom_kills_delta: int | None = None  # /proc/vmstat oom_kill's rise while it ran
    cgroup_oom_kills_delta: int | None = None  # its memory cgroup's memory.events oom_kill's
    cgroup_now: CgroupMemory | None = None  # its memory cgroup, read after the death
    host_before: HostData | None = None  # the last host reading with its tree alive
    host_at_launch: HostData | None = None  # its first reading with the server alive
    since: str = "launch"  # what that first reading was at: "launch", or "ready"
    gpu_before: GpuData | None = None  # the GPUs' last reading
    at: float | None = None
    log_tail: tuple[str, ...] = ()  # its last log lines
    # False for a server someone else started whose output goes to no file here (a
    # terminal, a pipe, the journal): its log's silence then says nothing.
    log_read: bool = True


def signal_name(exit_code: int | None) -> str | None:
    """SIGKILL for -9 (Popen) or 137 (a shell's 128+9); None for an exit code."""
    if exit_code is None:
        return None
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if number <= 0:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _gib(n: float | None) -> str:
    return "n/a" if n is None else f"{gib(n)} GiB"


def _status(e: Evidence) -> str:
    sig = signal_name(e.exit_code)
    if sig is not None:
        return f"its process ended by {sig} (exit status {e.exit_code})"
    return "exit status not known (not our process)" if e.exit_code is None \
        else f"its process exited with code {e.exit_code}"


def _last(errors: tuple[LogError, ...], *kinds: str) -> LogError | None:
    found = [err for err in errors if err.kind in kinds]
    return found[-1] if found else None


def _error_line(err: LogError) -> str:
    rank = f" ({err.rank_label or f'TP{err.rank}'})" if err.rank_label or err.rank else ""
    return f"log{rank}: {(err.exception or err.text)[:200]}"


def _host_lines(e: Evidence) -> list[str]:
    """What the server held on the host just before, and how that grew since launch."""
    before = e.host_before.server_tree if e.host_before is not None else None
    if before is None:
        return ["its host memory just before: not read (no poll found its processes)"]
    out = [f"its processes held {_gib(before.rss_anon_bytes)} pageable (anon) and "
           f"{_gib(before.rss_shmem_bytes)} shared/pinned (shmem) just before"]
    launch = e.host_at_launch.server_tree if e.host_at_launch is not None else None
    if e.host_before is not None and e.host_at_launch is not None:
        out.append(f"host available {_gib(e.host_before.available_bytes)} of "
                   f"{_gib(e.host_before.total_bytes)} just before (at {e.since} "
                   f"{_gib(e.host_at_launch.available_bytes)})")
    if launch is not None:
        out.append(f"since {e.since}: pageable "
                   f"{_grew(launch.rss_anon_bytes, before.rss_anon_bytes)}, "
                   f"pinned {_grew(launch.rss_shmem_bytes, before.rss_shmem_bytes)}")
    return out


def _grew(a: int, b: int) -> str:
    return f"{gib_change(b - a)} GiB"


def _pinned_grew(e: Evidence, kill: KernelKill | None) -> bool | None:
    """Whether the pinned (shmem) line rather than the pageable (anon) one is to cut: the
    one that grew more since launch, else the one the victim held more of; None unknown."""
    before = e.host_before.server_tree if e.host_before is not None else None
    launch = e.host_at_launch.server_tree if e.host_at_launch is not None else None
    if before is not None and launch is not None:
        anon = before.rss_anon_bytes - launch.rss_anon_bytes
        shmem = before.rss_shmem_bytes - launch.rss_shmem_bytes
        if max(anon, shmem) >= GIB:  # the polls saw it grow
            return shmem > anon
    held = (kill.anon_bytes, kill.shmem_bytes) if kill is not None else (None, None)
    victim_anon, victim_shmem = held
    if victim_anon is not None and victim_shmem is not None:
        if launch is not None:
            # The victim alone against its whole tree then: what it has beyond that, it
            # grew after the last poll (a heap can grow tens of GiB within a second).
            anon = victim_anon - launch.rss_anon_bytes
            shmem = victim_shmem - launch.rss_shmem_bytes
            if max(anon, shmem) >= GIB:
                return shmem > anon
        return victim_shmem > victim_anon
    if before is not None:
        return before.rss_shmem_bytes > before.rss_anon_bytes
    return None


PINNED_FIX = ("pinned host memory grew: a smaller --hicache-size or --hicache-ratio (HiCache's "
              "host pool, per rank), or the Engram tables back in HBM")
PAGEABLE_FIX = ("pageable memory grew (the processes' own heap): fewer requests at once "
                "(--max-running-requests), a leak (its RSS over time in the Host RAM panel), "
                "or more host memory for it")


def _other_gpu_processes(e: Evidence) -> list[str]:
    if e.gpu_before is None:
        return []
    mine = set(e.pids)
    out = []
    for dev in e.gpu_before.devices:
        for proc in dev.processes:
            if proc.pid not in mine and proc.used_bytes:
                out.append(f"GPU{dev.index}: another process, pid {proc.pid}"
                           f"{f' ({proc.name})' if proc.name else ''}, held "
                           f"{_gib(proc.used_bytes)} just before")
    return out[:4]


def _memory_kill(e: Evidence, kill: KernelKill | None, cgroup: bool) -> Death:
    evidence = []
    if kill is not None:
        evidence.append(f"kernel: {kill.line}")
        if kill.memcg:
            evidence.append(f"the cgroup whose limit was hit: {kill.memcg}")
    elif cgroup and e.cgroup_now is not None:
        cg = e.cgroup_now
        evidence.append(f"memory cgroup {cg.path}: memory.events oom_kill rose by "
                        f"{e.cgroup_oom_kills_delta} while it ran; its limit "
                        f"{_gib(cg.limit_bytes)}")
    else:
        evidence.append(f"/proc/vmstat oom_kill rose by {e.oom_kills_delta} while it ran; "
                        f"the kernel log did not name the process"
                        + (f" ({e.kernel_log_problem})" if e.kernel_log_problem else ""))
    evidence += [_status(e), *_host_lines(e)]
    pinned = _pinned_grew(e, kill)
    fix = PINNED_FIX if pinned else PAGEABLE_FIX if pinned is not None else \
        "shrink what it holds on the host (the Host RAM ledger says which line)"
    if cgroup:
        action = (f"raise the container's memory limit above its working set, or: {fix} "
                  f"(the fit check holds a start to the container's limit)")
        kind = DeathKind.CGROUP_OOM_KILL
    else:
        action = (f"{fix}; `engram-top switch FILE --to NAME` checks the fit before a start")
        kind = DeathKind.HOST_OOM_KILL
    return _death(e, kind, evidence, action)


def _death(e: Evidence, kind: DeathKind, evidence: list[str], action: str) -> Death:
    return Death(e.scenario, kind, TITLES[kind], tuple(evidence), action, e.at, e.exit_code)


def classify(e: Evidence) -> Death:
    """The death's class, most specific first: the kernel's word, then the log's, then the
    exit status alone."""
    mine = set(e.pids)
    # A record of a kill while the kernel's count stood still is an older process's of the
    # same pid (pids recycle; the kernel's log goes back to boot): not this death.
    kills = [k for k in e.kernel_kills if (not mine or k.pid in mine)
             and e.oom_kills_delta != 0]
    sig = signal_name(e.exit_code)
    if kills:
        return _memory_kill(e, kills[-1], kills[-1].cgroup_limit)
    if sig in ("SIGKILL", None) and e.cgroup_oom_kills_delta:
        return _memory_kill(e, None, True)
    if sig == "SIGKILL" and e.oom_kills_delta:
        return _memory_kill(e, None, False)

    oom = _last(e.errors, "oom")
    if oom is not None and not _shm_words(oom.text):
        evidence = [_error_line(oom), _status(e)]
        if not e.was_ready:
            phase = oom.phase or e.phase
            evidence.insert(1, f"during start-up, in {phase.replace('_', ' ')}")
            return _death(e, DeathKind.HBM_OOM_STARTUP, evidence, _startup_oom_action(phase))
        evidence += _other_gpu_processes(e)
        return _death(e, DeathKind.HBM_OOM_RUNTIME, evidence,
                      "leave more HBM for activations: a lower --mem-fraction-static (a "
                      "smaller KV pool) or a smaller --max-running-requests; if another "
                      "process grew on its GPU (above), move it off")
    shm = [err for err in e.errors if _shm_words(err.text)]
    shm_line = next((line for line in reversed(e.log_tail) if _shm_words(line)), None)
    if shm or shm_line or sig == "SIGBUS":
        evidence = [_error_line(shm[-1]) if shm else f"log: {shm_line[:200]}" if shm_line
                    else "no /dev/shm error in the log", _status(e)]
        return _death(e, DeathKind.SHM_FULL, evidence,
                      "free /dev/shm: remove segments no live process holds (`ls -la "
                      "/dev/shm`; NCCL's are nccl-*), or give the container a larger "
                      "--shm-size (docker) or a larger memory-backed emptyDir (Kubernetes)")
    nccl = _last(e.errors, "nccl_timeout")
    if nccl is not None:
        return _death(e, DeathKind.NCCL_TIMEOUT, [_error_line(nccl), _status(e)],
                      "not memory: a rank stopped in a collective. Read every rank's log "
                      "around that time (NCCL_DEBUG=INFO says more); a hung GPU shows XID "
                      "errors in the GPU panel")
    crash = _last(e.errors, "traceback", "exception", "cuda", "engram", "warmup_failed")
    if crash is not None:
        return _death(e, DeathKind.CRASH, [_error_line(crash), _status(e)],
                      "read the traceback in its log; it is not memory by its words")
    if sig is not None:
        evidence = [_status(e), _log_silent(e)]
        if sig == "SIGKILL":
            evidence.append("no OOM kill in the kernel's counter while it ran"
                            if e.oom_kills_delta == 0 else
                            f"the kernel's OOM records could not be read ({e.kernel_log_problem})"
                            if e.kernel_log_problem else "no OOM kill in the kernel's log")
        return _death(e, DeathKind.SIGNAL, evidence,
                      f"find who sent {sig}: systemd (journalctl -u), Kubernetes (kubectl "
                      f"describe pod: eviction, liveness probe), a user's kill; engram-top "
                      f"sends SIGTERM only when asked to stop")
    return _death(e, DeathKind.UNKNOWN, [_status(e), "nothing in the kernel's records says why",
                                         _log_silent(e)],
                  "read the end of its log (engram-top inspect-log FILE)")


def _log_silent(e: Evidence) -> str:
    return "nothing in its log says why" if e.log_read else \
        "its log was not read (its output goes to no file on this host)"


def _shm_words(text: str) -> bool:
    return "/dev/shm" in text and ("No space left" in text or "Bus error" in text
                                   or "shared memory" in text)


def _startup_oom_action(phase: str) -> str:
    if phase == "weights":
        return ("the weights do not fit: more GPUs (a larger --tp-size), or the Engram "
                "tables in host memory (host or host-prefetch)")
    if phase == "graphs":
        return ("CUDA graphs did not fit after the KV pool: a lower --mem-fraction-static or "
                "a smaller --cuda-graph-max-bs")
    return ("a lower --mem-fraction-static (the KV pool takes what is left after the "
            "weights), or free the GPU of other processes first")


def death_lines(death: Death) -> list[str]:
    """A death as Markdown list lines: what, why (each piece of evidence), what next. The
    same in summary.md and `engram-top why`."""
    return [f"- **{death.scenario}** died: {death.title} (`{death.kind.value}`)",
            *[f"  - {line}" for line in death.evidence],
            f"  - next: {death.action}"]
