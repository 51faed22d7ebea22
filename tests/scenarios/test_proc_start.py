"""A process told from a later one of its pid by its start, whatever the boot time reads.

Linux works /proc/stat's btime out anew from the wall clock: as NTP steers a VM's clock it
reads a second off from one read to the next. psutil's create_time() adds it, so a rank
compared by create_time() was taken for dead (its memory gone from the simulated GPUs) on
such a machine. The boot time here flips at every read, as it can there."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import running, wait_until
from psutil import _pslinux

from engram_top.sim import state
from scenarios import owned_folder, server_run
from scenarios.proc_start import start_of, started_as

pytestmark = pytest.mark.slow  # each starts a sleeping process to be told apart

SLEEPER = [sys.executable, "-c", "import signal; signal.pause()"]  # until killed


@pytest.fixture
def flipping_boot_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = _pslinux.boot_time()
    flips = itertools.cycle((real, real + 1.0))
    monkeypatch.setattr(_pslinux, "boot_time", lambda: next(flips))
    # It does flip: two reads of one process's create_time() a second apart.
    me = os.getpid()
    assert abs(psutil.Process(me).create_time() - psutil.Process(me).create_time()) \
        == pytest.approx(1.0)
    yield


def test_a_start_is_the_ticks_since_boot_and_tells_processes_apart() -> None:
    me = start_of(os.getpid())
    assert me is not None and 0 < me <= float(Path("/proc/uptime").read_text().split()[0])
    with running(SLEEPER) as child:
        theirs = start_of(child.pid)
        assert theirs is not None and theirs >= me
        assert started_as(child.pid, theirs)
        assert not started_as(child.pid, theirs + 1 / os.sysconf("SC_CLK_TCK"))  # another
        assert not started_as(os.getpid(), theirs) or theirs == me
        assert started_as(child.pid, theirs, running=True)
        child.kill()  # not reaped yet: a zombie, the same process, no longer running
        wait_until(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1]
                   .split()[0] == "Z", 10, "the child a zombie")
        assert started_as(child.pid, theirs) and not started_as(child.pid, theirs, running=True)
    child.wait()
    assert start_of(child.pid) is None and not started_as(child.pid, theirs)


@pytest.mark.usefixtures("flipping_boot_time")
def test_a_live_rank_stays_alive_while_the_boot_time_flips(tmp_path: Path) -> None:
    with running(SLEEPER) as rank:
        started = start_of(rank.pid)
        assert started is not None
        state.procs_dir(tmp_path).mkdir(parents=True)
        state.write_proc(tmp_path, state.ProcState(rank.pid, started, "sglang::scheduler_TP0",
                                                   gpu_bytes={0: 100}))
        for _ in range(4):  # each read of its start a second off the one before
            assert [p.pid for p in state.live_procs(tmp_path)] == [rank.pid]
        members = {rank.pid: (started, "sglang::scheduler_TP0")}
        assert server_run.gone_members(members) == []
    rank.wait()
    assert state.live_procs(tmp_path) == [] and server_run.gone_members(members) != []


@pytest.mark.usefixtures("flipping_boot_time")
def test_an_older_records_create_time_is_read_with_a_seconds_leeway() -> None:
    """Run files and folder owners written before: seconds since the epoch."""
    with running(SLEEPER) as child:
        created = psutil.Process(child.pid).create_time()
        assert started_as(child.pid, created) and started_as(child.pid, created)
        assert not started_as(child.pid, created - 5)
        assert owned_folder._alive({"pid": child.pid, "started": created})
