"""GpuCollector's failure handling in-process, over Python backends that fail, hang or
answer as the test says (with a clock of the test's own), and NVML's decoding tables and
process names: the quick tier. The real pynvml over the stand-in libnvidia-ml.so.1 runs in
subprocesses: tests/collectors/test_nvml.py (slow)."""

from __future__ import annotations

import threading
from pathlib import Path

import pynvml
import pytest
from corpus import ManualClock

from collectors.base import SourceUnavailable
from collectors.nvml import GpuCollector, NvmlBackend, NvmlBusy
from collectors.readings import GpuData, GpuDevice, Status

MIB = 1024 * 1024
B200_TOTAL = 183359 * MIB
B200_RESERVED = 512 * MIB
NO_DRIVER = "no NVIDIA driver: libnvidia-ml.so.1 not found"


def test_throttle_reason_bits_decode_to_names() -> None:
    from collectors.nvml_codes import THROTTLE_BITS, throttle_names, xid_text

    assert throttle_names(0) == ()
    assert throttle_names(pynvml.nvmlClocksEventReasonGpuIdle
                          | pynvml.nvmlClocksEventReasonApplicationsClocksSetting) == ()
    assert throttle_names(pynvml.nvmlClocksEventReasonSwPowerCap) == ("sw_power_cap",)
    assert throttle_names(pynvml.nvmlClocksEventReasonHwThermalSlowdown
                          | pynvml.nvmlClocksEventReasonSwThermalSlowdown
                          | pynvml.nvmlClocksEventReasonHwSlowdown | 0x1) == (
        "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")
    assert throttle_names(pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown) == (
        "hw_power_brake",)
    # A bit this table does not know yet is shown by its value.
    assert throttle_names(0x4 | 0x800) == ("sw_power_cap", "0x800")
    # The table's bits are NVML's.
    assert dict(THROTTLE_BITS) == {
        pynvml.nvmlClocksEventReasonSwPowerCap: "sw_power_cap",
        pynvml.nvmlClocksEventReasonHwSlowdown: "hw_slowdown",
        pynvml.nvmlClocksEventReasonSyncBoost: "sync_boost",
        pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw_thermal_slowdown",
        pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw_thermal_slowdown",
        pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw_power_brake",
        pynvml.nvmlClocksEventReasonDisplayClockSetting: "display_clock_setting"}
    assert xid_text(79) == "XID 79 (GPU has fallen off the bus)"
    assert xid_text(1) == "XID 1"




def _data() -> GpuData:
    dev = GpuDevice(0, "NVIDIA B200", "GPU-x", B200_TOTAL, B200_RESERVED, 0,
                    B200_TOTAL - B200_RESERVED)
    return GpuData(driver_version="580.95.05", devices=(dev,), backend="simulated")


class ScriptedBackend:
    """Raises or returns whatever the test queued up next."""

    def __init__(self) -> None:
        self.next: BaseException | GpuData = _data()
        self.closed = False

    def sample(self) -> GpuData:
        if isinstance(self.next, BaseException):
            raise self.next
        return self.next

    def close(self) -> None:
        self.closed = True


class HangingBackend:
    def __init__(self) -> None:
        self.release = threading.Event()

    def sample(self) -> GpuData:
        self.release.wait(5.0)
        return _data()


async def test_failures_keep_failing_since_until_success() -> None:
    backend = ScriptedBackend()
    clock = ManualClock()
    collector = GpuCollector(backend, source="gpu-a", clock=clock)

    ok = await collector.poll()
    assert ok.status is Status.OK and ok.source == "gpu-a"
    assert ok.data == _data() and ok.failing_since is None and ok.at == clock.t

    backend.next = RuntimeError("boom\nsecond line")
    began = clock.advance(1.0)
    first = await collector.poll()
    assert first.status is Status.ERROR
    assert first.message == "RuntimeError: boom"
    assert first.data is None and first.failing_since == began

    backend.next = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)  # unhashable: no sets
    clock.advance(1.0)
    second = await collector.poll()
    assert second.message == "NVMLError_GpuIsLost: GPU is lost"
    assert second.failing_since == first.failing_since

    backend.next = pynvml.NVMLLibraryMismatchError("old driver")  # not an NVMLError
    third = await collector.poll()
    assert third.message == "NVMLLibraryMismatchError: old driver"
    assert third.failing_since == first.failing_since

    backend.next = _data()
    clock.advance(1.0)
    back = await collector.poll()
    assert back.status is Status.OK and back.failing_since is None

    backend.next = SourceUnavailable(NO_DRIVER)
    again = await collector.poll()  # a new run of failures: its own start
    assert again.status is Status.UNAVAILABLE and again.message == NO_DRIVER
    assert again.failing_since == clock.t == began + 2.0

    await collector.close()
    assert backend.closed


async def test_hanging_backend_times_out() -> None:
    backend = HangingBackend()
    collector = GpuCollector(backend, timeout=0.05)
    try:
        first = await collector.poll()
        second = await collector.poll()
    finally:
        backend.release.set()
    for reading in (first, second):
        assert reading.status is Status.ERROR
        assert reading.message == "NVML did not answer within 0.05s"
        assert reading.data is None
    assert second.failing_since == first.failing_since is not None

    ok = await collector.poll()  # the driver answers again
    assert ok.status is Status.OK and ok.failing_since is None
    await collector.close()  # no close() on this backend: nothing to do


async def test_poll_never_raises() -> None:
    backend = ScriptedBackend()
    collector = GpuCollector(backend)
    for exc in (ValueError(), OSError(5, "I/O error"), pynvml.NVMLError(3), KeyError("k"),
                ZeroDivisionError("x")):
        backend.next = exc
        reading = await collector.poll()
        assert reading.status is Status.ERROR
        assert reading.message.startswith(type(exc).__name__)


def test_nvml_backend_refuses_to_queue_behind_a_stuck_call() -> None:
    # A timed-out sample still holds the lock: the next one fails fast instead of tying
    # up another worker thread (and it never reaches nvmlInit in this process).
    backend = NvmlBackend(busy_wait=0.01)
    backend._lock.acquire()
    try:
        with pytest.raises(NvmlBusy):
            backend.sample()
    finally:
        backend._lock.release()
    backend.close()  # never initialised: nothing to shut down




def test_process_names_are_read_once_and_forgotten_once_unlisted(tmp_path: Path) -> None:
    from collectors.proc_names import ProcessNames
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "comm").write_text("sglang::schedu\n")
    names = ProcessNames(tmp_path)
    assert names.name(12) == "sglang::schedu" and names.name(13) is None
    (tmp_path / "12" / "comm").write_text("renamed\n")
    assert names.name(12) == "sglang::schedu"  # read once while NVML lists it
    names.keep_only([13])
    assert names.name(12) == "renamed"  # unlisted, then listed again: a new process
    assert names.name(0) is None and names.name(-1) is None
