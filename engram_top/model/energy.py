"""Energy per output token: what the GPUs' energy counters (NVML's, in mJ since the driver
loaded) gained over a serving window, per output token served in it.

The counters are read only when the GPUs are polled, so a window's energy is its GPUs'
mean draw between two polls times the window: joules per token = watts / (tokens/s).
"""

from __future__ import annotations

from collections.abc import Collection

from collectors.readings import GpuData, Reading
from collectors.source import SourceName
from engram_top.model.store import RunStore, SeriesName


def total_energy_mj(data: GpuData | None, gpus: Collection[int] | None = None) -> int | None:
    """The counters of ``gpus`` (every GPU by default) summed; None when one of them has
    none (a part would undercount)."""
    if data is None:
        return None
    values = [d.energy_mj for d in data.devices if gpus is None or d.index in gpus]
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def mean_power_w(before: Reading[GpuData] | None, after: Reading[GpuData] | None,
                 gpus: Collection[int] | None = None) -> float | None:
    """The GPUs' mean draw (W, together) between two readings, from their energy counters.
    None without two readings apart in time, of the same GPUs, or when a counter went back
    (the driver was reloaded in between)."""
    if before is None or after is None or before.data is None or after.data is None:
        return None
    if [d.uuid for d in before.data.devices] != [d.uuid for d in after.data.devices]:
        return None
    e0, e1 = total_energy_mj(before.data, gpus), total_energy_mj(after.data, gpus)
    dt = after.at - before.at
    if e0 is None or e1 is None or dt <= 0 or e1 < e0:
        return None
    return (e1 - e0) / 1000.0 / dt


def joules_per_token(power_w: float | None, tokens_per_s: float | None) -> float | None:
    """A window's energy over the tokens served in it: its mean draw times its length over
    its rate times its length, so W / (tokens/s). None when either is unknown or no token
    was served."""
    if power_w is None or tokens_per_s is None or tokens_per_s <= 0:
        return None
    return power_w / tokens_per_s


def window_power_w(store: RunStore, gpus: list[int], window_s: float | None) -> float | None:
    """The GPUs' mean draw over the last ``window_s`` seconds of their energy series (the
    window the server's own rates cover); None where a GPU has fewer than two points."""
    if not gpus or not window_s:
        return None
    total = 0.0
    for index in gpus:
        series = store.line(SourceName.GPU, SeriesName.ENERGY, gpu=str(index))
        if series is None or not series.fine:
            return None
        # Newest first, stopping at the window's start: once a second, on every GPU, the
        # whole fine tier (600 points) need not be copied.
        t1, e1 = series.fine[-1]
        t0, e0 = t1, e1
        for t, e in reversed(series.fine):
            if t < t1 - window_s:
                break
            t0, e0 = t, e
        if t1 <= t0 or e1 < e0:
            return None
        total += (e1 - e0) / 1000.0 / (t1 - t0)
    return total
