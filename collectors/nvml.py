"""GPU readings from NVML (nvidia-ml-py's ``pynvml``): memory, utilisation, power, PCIe, processes,
and health: temperature, clocks and what throttles them, energy, links, ECC and XID errors.

``NvmlBackend`` is blocking (ctypes calls into libnvidia-ml.so.1). ``GpuCollector`` runs any
backend in a worker thread with a time limit and turns every outcome into a ``Reading``,
so nothing above it ever sees an exception. A field one GPU cannot report (NotSupported,
FunctionNotFound on an older driver...) becomes None and is listed in
``GpuDevice.unsupported``; it never fails the whole sample.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import pynvml

from collectors.base import FailureTracker, SourceUnavailable, describe, run_blocking
from collectors.nvml_codes import throttle_names
from collectors.nvml_health import XidWatch
from collectors.proc_names import ProcessNames
from collectors.readings import GpuData, GpuDevice, GpuProcess, Reading, Status

R = TypeVar("R")

# Cumulative PCIe byte counters (newer drivers). getattr: older pynvml lacks the names.
_FI_PCIE_TX = getattr(pynvml, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 197)
_FI_PCIE_RX = getattr(pynvml, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 198)
# Cumulative NVLink data counters in KiB; scope UINT_MAX sums every link (nvml.h). The
# per-link nvmlDeviceGetNvLinkUtilizationCounter is deprecated and gone on current drivers.
_FI_NVLINK_TX = getattr(pynvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138)
_FI_NVLINK_RX = getattr(pynvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139)
_ALL_LINKS = 0xFFFFFFFF
# How often what a GPU changes seldom is read (NvmlBackend._seldom).
SLOW_S = 5.0

# Start-up failures that describe the machine, not a fault: the UI shows them as a state.
_INIT_MESSAGES: tuple[tuple[type[pynvml.NVMLError], str], ...] = (
    (pynvml.NVMLError_LibraryNotFound, "no NVIDIA driver: libnvidia-ml.so.1 not found"),
    (pynvml.NVMLError_DriverNotLoaded,
     "NVIDIA driver not loaded: libnvidia-ml.so.1 is present but the kernel module is not"),
    (pynvml.NVMLError_NoPermission,
     "no permission to use the NVIDIA driver: check read/write access to /dev/nvidia*"),
    (pynvml.NVMLError_LibRmVersionMismatch,
     "NVIDIA driver/library version mismatch: reboot or reload the nvidia kernel module"),
)


class SupportsSample(Protocol):
    def sample(self) -> GpuData: ...


class GpuBackend(SupportsSample, Protocol):
    """What GpuCollector drives: NvmlBackend here, a simulated node elsewhere."""

    def close(self) -> None: ...


class NvmlBusy(RuntimeError):
    """A previous NVML call (one that timed out) has still not returned."""


def _error_text(exc: BaseException) -> str:
    # str() of an NVMLError looks the code up (or asks nvmlErrorString); never empty here.
    return str(exc) or type(exc).__name__


def _field_value(fv: Any) -> int:
    # The union member to read depends on valueType; the PCIe counters are unsigned long long.
    member = {
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(fv.valueType, "ullVal")
    return int(getattr(fv.value, member))


# Field value types of 32 bits: a byte counter of that width wraps at 4.3 GB.
_NARROW_TYPES = frozenset({pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_SIGNED_INT})

# (counter value, NVML timestamp in µs, local monotonic seconds)
_Counter = tuple[int, int, float]


def _counter_rate(prev: _Counter, cur: _Counter) -> float | None:
    """Bytes/s between two readings of a cumulative counter; None when it went backwards."""
    if cur[0] < prev[0]:
        return None  # wrapped, or the driver was reloaded: start a new baseline
    # NVML's own timestamps say when each value was taken; our clock is the fallback.
    use_nvml_clock = prev[1] > 0 and cur[1] > prev[1]
    dt = (cur[1] - prev[1]) / 1e6 if use_nvml_clock else cur[2] - prev[2]
    return (cur[0] - prev[0]) / dt if dt > 0 else None


class NvmlBackend:
    """Blocking NVML sampler. Initialises lazily and retries init on every failed sample."""

    def __init__(self, *, busy_wait: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        # One call into NVML at a time: a sample that timed out may still be running in its
        # thread, and a second one queued behind it would tie up another worker thread.
        self._lock = threading.Lock()
        self._busy_wait = busy_wait
        self._initialised = False
        self._memory_v2_error: str | None = None  # set once the driver lacks the _v2 symbol
        self._counters: dict[tuple[str, int], _Counter] = {}
        self._missing: set[str] = set()  # newer NVML calls this driver lacks (_newer)
        self._xids = XidWatch()
        self._names = ProcessNames()  # its GPU processes' names, read once per pid
        # What a GPU never changes while the driver is loaded (its name, UUID, PCIe maxima;
        # the driver's version), kept once read: a fifth of a sample's calls. By (GPU index
        # or -1 for the driver, field); forgotten at each init and when the count changes.
        self._fixed: dict[tuple[int, str], Any] = {}
        self._count: int | None = None
        # What a GPU changes seldom (_seldom), read every SLOW_S: by GPU index, when read,
        # the values and the refusals.
        self._clock = clock
        self._slow: dict[int, tuple[float, dict[str, Any], list[tuple[str, str]]]] = {}

    # ------------------------------------------------------------------ public

    def sample(self) -> GpuData:
        if not self._lock.acquire(timeout=self._busy_wait):
            raise NvmlBusy("previous NVML call has not returned (driver hung?)")
        try:
            self._ensure_init()
            count = pynvml.nvmlDeviceGetCount()
            if count != self._count:
                self._fixed.clear()
                self._slow.clear()
                self._count = count
            driver = self._fixed_value(-1, [], "driver_version",
                                       pynvml.nvmlSystemGetDriverVersion)
            seen: dict[tuple[str, int], _Counter] = {}
            devices = tuple(self._device(i, seen) for i in range(count))
            self._counters = seen  # forget counters of GPUs that went away
            self._names.keep_only(p.pid for d in devices for p in d.processes)
            return GpuData(driver_version=driver or "", devices=devices)
        finally:
            self._lock.release()

    def close(self) -> None:
        # Shutting NVML down under a call still in flight can crash the process (nvitop
        # #222), so skip the shutdown when a timed-out sample still holds the lock.
        if not self._lock.acquire(timeout=1.0):
            return
        try:
            if self._initialised:
                self._initialised = False
                self._xids.close()  # event sets go before the library does
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlShutdown()
        finally:
            self._lock.release()

    # ------------------------------------------------------------------ internals

    def _ensure_init(self) -> None:
        if self._initialised:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            for cls, message in _INIT_MESSAGES:
                if isinstance(exc, cls):
                    raise SourceUnavailable(message) from exc
            raise
        self._initialised = True
        self._fixed.clear()  # a driver reloaded since may be another one
        self._slow.clear()

    @staticmethod
    def _try(bad: list[tuple[str, str]], fields: tuple[str, ...],
             fn: Callable[..., R], *args: Any) -> R | None:
        """Call one NVML query; on NVMLError record ``fields`` as unsupported and give None."""
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            text = _error_text(exc)
            bad.extend((f, text) for f in fields)
            return None

    def _fixed_value(self, index: int, bad: list[tuple[str, str]], field: str,
                     fn: Callable[..., R], *args: Any) -> R | None:
        """A value that does not change (see _fixed): read until it is once given, then
        kept. A refusal is not kept: asked again next sample, and listed in ``bad``."""
        key = (index, field)
        if key in self._fixed:
            value: R = self._fixed[key]
            return value
        found = self._try(bad, (field,), fn, *args)
        if found is not None:
            self._fixed[key] = found
        return found

    def _device(self, index: int, seen: dict[tuple[str, int], _Counter]) -> GpuDevice:
        bad: list[tuple[str, str]] = []
        handle = self._try(bad, ("handle",), pynvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            # Counted but unreadable (NoPermission, GpuIsLost): show it, with the reason;
            # what was kept of it is read again when it comes back (it may be another).
            for key in [k for k in self._fixed if k[0] == index]:
                del self._fixed[key]
            self._slow.pop(index, None)
            return GpuDevice(index, "", "", 0, 0, 0, 0, unsupported=tuple(bad))

        name = self._fixed_value(index, bad, "name", pynvml.nvmlDeviceGetName, handle) or ""
        uuid = self._fixed_value(index, bad, "uuid", pynvml.nvmlDeviceGetUUID, handle) or ""
        total, reserved, used, free = self._memory(handle, bad)
        util = self._try(bad, ("util_gpu_pct", "util_mem_pct"),
                         pynvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = self._try(bad, ("power_w",), pynvml.nvmlDeviceGetPowerUsage, handle)
        tx, rx = self._pcie(uuid or f"#{index}", handle, bad, seen)
        processes = self._processes(handle, bad)
        health = self._health(index, uuid or f"#{index}", handle, bad, seen)
        health.update(self._seldom(index, handle, bad))
        return GpuDevice(
            index=index, name=name, uuid=uuid,
            total_bytes=total, reserved_bytes=reserved, used_bytes=used, free_bytes=free,
            util_gpu_pct=None if util is None else int(util.gpu),
            util_mem_pct=None if util is None else int(util.memory),
            power_w=None if power_mw is None else power_mw / 1000.0,
            pcie_tx_bytes_per_s=tx, pcie_rx_bytes_per_s=rx,
            processes=processes, unsupported=tuple(bad), **health,
        )

    def _seldom(self, index: int, handle: Any, bad: list[tuple[str, str]]) -> dict[str, Any]:
        """What a GPU changes seldom, read every SLOW_S and given as last read between (the
        refusals too): its PCIe link's width and generation, the link's replay counter, the
        ECC counters, the power limit. 24 of a 4-GPU sample's 81 calls; an uncorrected ECC
        error also raises an XID event (48, 94, 95), and those are read every sample."""
        now = self._clock()
        kept = self._slow.get(index)
        if kept is not None and now - kept[0] < SLOW_S:
            bad.extend(kept[2])
            return kept[1]
        refused: list[tuple[str, str]] = []
        t = self._try
        limit_mw = t(refused, ("power_limit_w",), pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        values: dict[str, Any] = {
            "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
            "pcie_gen": t(refused, ("pcie_gen",), pynvml.nvmlDeviceGetCurrPcieLinkGeneration,
                          handle),
            "pcie_width": t(refused, ("pcie_width",), pynvml.nvmlDeviceGetCurrPcieLinkWidth,
                            handle),
            "pcie_replay_errors": t(refused, ("pcie_replay_errors",),
                                    pynvml.nvmlDeviceGetPcieReplayCounter, handle),
            "ecc_corrected": t(refused, ("ecc_corrected",), pynvml.nvmlDeviceGetTotalEccErrors,
                               handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                               pynvml.NVML_VOLATILE_ECC),
            "ecc_uncorrected": t(refused, ("ecc_uncorrected",),
                                 pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                 pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                 pynvml.NVML_VOLATILE_ECC),
        }
        self._slow[index] = (now, values, refused)
        bad.extend(refused)
        return values

    def _newer(self, bad: list[tuple[str, str]], fields: tuple[str, ...],
               newer: str, older: str, *args: Any) -> Any:
        """The newer of two NVML calls for the same figure; the older where the driver (or
        pynvml) lacks the newer symbol, remembered as for memory _v2."""
        fn = getattr(pynvml, newer, None)
        if fn is not None and newer not in self._missing:
            try:
                return fn(*args)
            except pynvml.NVMLError_FunctionNotFound:
                self._missing.add(newer)
            except pynvml.NVMLError as exc:
                bad.extend((f, _error_text(exc)) for f in fields)
                return None
        return self._try(bad, fields, getattr(pynvml, older), *args)

    def _health(self, index: int, key: str, handle: Any, bad: list[tuple[str, str]],
                seen: dict[tuple[str, int], _Counter]) -> dict[str, Any]:
        """GpuDevice's health fields, each None (and listed in ``bad``) where refused."""
        t = self._try
        out: dict[str, Any] = {
            "temperature_c": self._newer(bad, ("temperature_c",), "nvmlDeviceGetTemperatureV",
                                         "nvmlDeviceGetTemperature", handle,
                                         pynvml.NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": t(bad, ("sm_clock_mhz",), pynvml.nvmlDeviceGetClockInfo, handle,
                              pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": t(bad, ("mem_clock_mhz",), pynvml.nvmlDeviceGetClockInfo, handle,
                               pynvml.NVML_CLOCK_MEM),
            "energy_mj": t(bad, ("energy_mj",), pynvml.nvmlDeviceGetTotalEnergyConsumption,
                           handle),
            "pcie_gen_max": self._fixed_value(index, bad, "pcie_gen_max",
                                              pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            "pcie_width_max": self._fixed_value(index, bad, "pcie_width_max",
                                                pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        }
        # "Throttle" became "clocks event" in NVML 535; older drivers have only the old name.
        mask = self._newer(bad, ("throttle_reasons",), "nvmlDeviceGetCurrentClocksEventReasons",
                           "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        out["throttle_reasons"] = None if mask is None else throttle_names(int(mask))
        out["nvlink_tx_bytes_per_s"], out["nvlink_rx_bytes_per_s"] = self._nvlink(
            key, handle, bad, seen)
        out["xids"], why = self._xids.poll(key, handle)
        if why is not None:
            bad.append(("xids", why))
        return out

    def _nvlink(self, key: str, handle: Any, bad: list[tuple[str, str]],
                seen: dict[tuple[str, int], _Counter]) -> tuple[float | None, float | None]:
        """NVLink data TX/RX bytes/s over every link since the previous sample: None on the
        first sample (no delta yet), and None, listed in ``bad``, on a GPU without NVLink."""
        names = ("nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s")
        now = time.monotonic()
        try:
            values = pynvml.nvmlDeviceGetFieldValues(
                handle, [(_FI_NVLINK_TX, _ALL_LINKS), (_FI_NVLINK_RX, _ALL_LINKS)])
        except pynvml.NVMLError as exc:
            bad.extend((n, _error_text(exc)) for n in names)
            return None, None
        rates: list[float | None] = [None, None]
        for i, fv in enumerate(values):
            if fv.nvmlReturn != pynvml.NVML_SUCCESS:
                bad.append((names[i], _error_text(pynvml.NVMLError(fv.nvmlReturn))))
                continue
            cur: _Counter = (_field_value(fv) * 1024, int(fv.timestamp), now)
            counter = (f"{key}/nvlink", i)
            prev = self._counters.get(counter)
            seen[counter] = cur
            if prev is not None:
                rates[i] = _counter_rate(prev, cur)
        return rates[0], rates[1]

    def _memory(self, handle: Any, bad: list[tuple[str, str]]) -> tuple[int, int, int, int]:
        """(total, reserved, used, free) in bytes, v2 semantics where the driver has them."""
        v2_error = self._memory_v2_error
        if v2_error is None:
            try:
                m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                return int(m.total), int(m.reserved), int(m.used), int(m.free)
            except pynvml.NVMLError_FunctionNotFound as exc:
                # An old driver without the _v2 symbol: remember, and use v1 from now on.
                v2_error = self._memory_v2_error = _error_text(exc)
            except pynvml.NVMLError as exc:
                v2_error = _error_text(exc)  # try v1 for this sample only
        m = self._try(bad, ("memory",), pynvml.nvmlDeviceGetMemoryInfo, handle)
        if m is None:
            # GpuDevice's byte fields are not optional; zeros plus "memory" in unsupported.
            return 0, 0, 0, 0
        # v1 "used" includes the driver's reservation; it cannot be split out here.
        bad.append(("reserved_bytes", v2_error))
        return int(m.total), 0, int(m.used), int(m.free)

    def _pcie(self, key: str, handle: Any, bad: list[tuple[str, str]],
              seen: dict[tuple[str, int], _Counter]) -> tuple[float | None, float | None]:
        """PCIe TX/RX bytes/s, averaged over the time since the previous sample.

        nvmlDeviceGetPcieThroughput only covers a 20 ms window, so the cumulative counters
        are preferred; the snapshot fills in where no counter delta exists yet (first
        sample, counter wrap) or where the driver has no such counters.

        Counters NVML answers as 32-bit are not used: an H200 on driver 580.159.04 gives
        them as unsigned int, and at Gen5's ~60 GB/s they wrap about every 70 ms, so two
        readings a second apart read any figure (375 MB/s where nvidia-smi dmon read
        59.5 GB/s; benchmarks/gpu_pcie_counters.py). The 20 ms window is then the figure,
        as nvidia-smi dmon's is.
        """
        now = time.monotonic()
        rates: list[float | None] = [None, None]
        counter_errors: list[str | None] = [None, None]
        try:
            values = pynvml.nvmlDeviceGetFieldValues(handle, [_FI_PCIE_TX, _FI_PCIE_RX])
        except pynvml.NVMLError as exc:
            values = None
            counter_errors = [_error_text(exc)] * 2
        if values is not None:
            for i, fv in enumerate(values):
                # The call as a whole succeeds even when a single field fails.
                if fv.nvmlReturn != pynvml.NVML_SUCCESS:
                    counter_errors[i] = _error_text(pynvml.NVMLError(fv.nvmlReturn))
                    continue
                if fv.valueType in _NARROW_TYPES:
                    counter_errors[i] = "32-bit counter (wraps between samples)"
                    continue
                cur: _Counter = (_field_value(fv), int(fv.timestamp), now)
                prev = self._counters.get((key, i))
                seen[(key, i)] = cur
                if prev is not None:
                    rates[i] = _counter_rate(prev, cur)

        names = ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")
        counters = (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        for i in (0, 1):
            if rates[i] is not None:
                continue
            try:
                rates[i] = pynvml.nvmlDeviceGetPcieThroughput(handle, counters[i]) * 1000.0
            except pynvml.NVMLError as exc:
                # Only a loss when the counters are missing too; otherwise the next
                # sample has a delta.
                if counter_errors[i] is not None:
                    bad.append((names[i], f"counters: {counter_errors[i]}; "
                                          f"throughput: {_error_text(exc)}"))
        return rates[0], rates[1]

    def _processes(self, handle: Any, bad: list[tuple[str, str]]) -> tuple[GpuProcess, ...]:
        try:
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except pynvml.NVMLLibraryMismatchError:
                # Not an NVMLError: the driver lacks the _v3 symbol pynvml calls. Its _v2
                # has the same struct layout.
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)
        except pynvml.NVMLError as exc:
            bad.append(("processes", _error_text(exc)))
            return ()
        out = []
        for p in procs:
            name = self._names.name(int(p.pid))
            out.append(GpuProcess(
                pid=int(p.pid),
                # None where NVML cannot say (pynvml maps NVML_VALUE_NOT_AVAILABLE to None).
                used_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory),
                name=name or "", seen=name is not None,
                container=self._names.container(int(p.pid)) if name is not None else ""))
        return tuple(out)


class GpuCollector:
    """Polls a GPU backend off the event loop; every outcome becomes a Reading."""

    def __init__(self, backend: SupportsSample, *, source: str = "gpu",
                 timeout: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._backend = backend
        self._timeout = timeout
        self._tracker = FailureTracker(source, clock)  # the readings' times

    async def poll(self) -> Reading[GpuData]:
        try:
            data = await run_blocking(self._backend.sample, self._timeout)
        except SourceUnavailable as exc:
            return self._tracker.fail(Status.UNAVAILABLE, str(exc) or "NVML unavailable")
        except TimeoutError:
            return self._tracker.fail(
                Status.ERROR, f"NVML did not answer within {self._timeout:g}s")
        except Exception as exc:  # a poll must never raise
            return self._tracker.fail(Status.ERROR, describe(exc))
        return self._tracker.ok(data)

    async def close(self) -> None:
        close = getattr(self._backend, "close", None)
        if close is None:
            return
        # Shutting down: a failing or slow close has nobody left to report to.
        with contextlib.suppress(Exception):
            await run_blocking(close, self._timeout)
