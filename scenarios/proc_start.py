"""When a process started, as a fact that stays put: a pid and its start tell a process from
a later one given the same pid.

Not psutil's create_time(): it adds the boot time, which Linux gives in whole seconds and
works out anew from the wall clock at each read, so as NTP steers the clock two reads of one
process's start can be a second apart. Taken for another process by that second, a live rank
reads as dead and its memory vanishes, a live folder is swept, a running server is not
adopted. The start in clock ticks since boot (/proc/PID/stat, field 22) never
moves: it is what is recorded and compared here."""

from __future__ import annotations

import os

import psutil

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# A start recorded by an older engram-top as seconds since the epoch (create_time()); no
# process starts this long after boot.
_EPOCH_SECONDS = 1e8


def _stat(pid: int) -> tuple[bytes, float] | None:
    """(its state letter, seconds from boot to its start) from /proc/PID/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The name in parentheses may hold spaces and ")": the fields follow the last.
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0], int(fields[19]) / _TICKS_PER_S
    except (OSError, ValueError, IndexError):
        return None


def start_of(pid: int) -> float | None:
    """Seconds from boot to the start of ``pid``; None where it is gone or cannot be read."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def started_as(pid: int, recorded: float, *, running: bool = False) -> bool:
    """Whether ``pid`` is still the process whose start was recorded (a start_of, or an
    older record's create_time) and has not been replaced by another under its pid; with
    ``running``, also not a zombie (gone but for its exit status, its memory released)."""
    if recorded > _EPOCH_SECONDS:
        try:
            proc = psutil.Process(pid)
            # The boot time moves by whole seconds (above): a second's leeway, and a half.
            return abs(proc.create_time() - recorded) < 1.5 and not (
                running and proc.status() == psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False
    stat = _stat(pid)
    # Both are a whole number of ticks over the same divisor: equal, or another process.
    return stat is not None and abs(stat[1] - recorded) < 0.5 / _TICKS_PER_S \
        and not (running and stat[0] == b"Z")
