"""Before the next server starts: the last one's HBM back near its pre-launch baseline (or
the processes still holding it named), and its host shared memory back (or a warning)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from collectors.readings import GpuData
from collectors.units import GIB
from scenarios.owner import SupervisorOwner
from scenarios.server_run import Run

HOST_RELEASE_S = 10.0  # how long a switch waits for host shared memory to come back


@dataclass(frozen=True)
class GuardResult:
    released: bool
    waited_s: float
    holders: tuple[str, ...] = ()  # "GPU 0: pid 123 (python) holds 40.0 GiB", ...
    note: str = ""


def host_figure(read: Callable[[], int]) -> int | None:
    """A host memory figure, or None where it cannot be read (then nothing is checked
    against it)."""
    try:
        return read()
    except Exception:  # no host figure: no host baseline, nothing checked against it
        return None


async def release_guard(owner: SupervisorOwner, run: Run) -> GuardResult:
    """Wait until every GPU is back near the run's pre-launch baseline."""
    if not run.baseline_gpu:
        return GuardResult(True, 0.0, note="no GPU readings here: HBM release not checked")
    slack = run.scenario.hbm_release_slack_gib * GIB
    started = time.monotonic()
    deadline = started + run.scenario.hbm_release_timeout_s
    data: GpuData | None = None
    while True:
        try:
            data = await asyncio.to_thread(owner.gpu_sample)
        except Exception as exc:  # a failing NVML is said, not hidden
            return GuardResult(False, time.monotonic() - started,
                               note=f"cannot read the GPUs: {type(exc).__name__}: {exc}")
        high = [d for d in data.devices
                if d.used_bytes > run.baseline_gpu.get(d.index, 0) + slack]
        if not high:
            return GuardResult(True, time.monotonic() - started)
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    holders = []
    for d in high:
        for p in d.processes:
            name = p.name
            with contextlib.suppress(psutil.Error):
                name = name or psutil.Process(p.pid).name()
            size = "?" if p.used_bytes is None else f"{p.used_bytes / GIB:.1f} GiB"
            holders.append(f"GPU {d.index}: pid {p.pid} ({name or 'unknown'}) holds {size}")
        if not d.processes:
            holders.append(f"GPU {d.index}: {d.used_bytes / GIB:.1f} GiB used, no process "
                           "listed (another container or namespace?)")
    return GuardResult(False, time.monotonic() - started, tuple(holders))


async def host_guard(owner: SupervisorOwner, run: Run,
                     timeout_s: float | None = None) -> GuardResult:
    """Wait briefly for host shared memory to return to its level before the run.

    Pinned Engram host tables show in Shmem, and a kernel frees them with the last
    process that maps them, so this is quick; what stays is held by someone else:
    segments left in /dev/shm by a crash, or a process outside the server's tree. The
    next run starts anyway (host memory is not the GPU's to wait for), with a warning:
    its host delta counts from a baseline that holds this memory."""
    if run.baseline_host_shmem is None:
        return GuardResult(True, 0.0)
    timeout_s = HOST_RELEASE_S if timeout_s is None else timeout_s
    slack = run.scenario.hbm_release_slack_gib * GIB
    started = time.monotonic()
    while True:
        now = await asyncio.to_thread(host_figure, owner.host_shmem)  # /proc: off the loop
        if now is None:
            return GuardResult(True, time.monotonic() - started,
                               note="cannot read host memory: its release not checked")
        over = now - run.baseline_host_shmem
        if over <= slack:
            return GuardResult(True, time.monotonic() - started)
        waited = time.monotonic() - started
        if waited >= timeout_s:
            return GuardResult(False, waited, note=(
                f"host shared memory is still {over / GIB:.1f} GiB above its level before "
                f"'{run.scenario.name}' launched ({waited:.1f} s after the HBM came back; "
                "segments left in /dev/shm? Shmem in /proc/meminfo): the next run's host "
                "delta counts from here"))
        await asyncio.sleep(0.2)
