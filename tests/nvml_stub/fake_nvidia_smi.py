"""A stand-in `nvidia-smi` for benchmarks/gpu_check.py's tests: the few forms the check uses
(--query-gpu, --query-compute-apps, dmon -s t), answered in nvidia-smi's units and CSV from
whatever libnvidia-ml.so.1 the loader finds (the stand-in one, fake_nvml.c), as the real
tool answers from the real library. A field it does not know is refused as the real one
refuses it (exit 2, the whole query); FAKE_SMI_REFUSE names more fields to refuse.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import pynvml

MIB = 1024**2


def _memory(h: Any) -> Any:
    return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)


FIELDS: dict[str, Callable[[Any], object]] = {
    "name": pynvml.nvmlDeviceGetName,
    "uuid": pynvml.nvmlDeviceGetUUID,
    "memory.total": lambda h: _memory(h).total // MIB,
    "memory.reserved": lambda h: _memory(h).reserved // MIB,
    "memory.used": lambda h: _memory(h).used // MIB,
    "memory.free": lambda h: _memory(h).free // MIB,
    "utilization.gpu": lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
    "utilization.memory": lambda h: pynvml.nvmlDeviceGetUtilizationRates(h).memory,
    "power.draw": lambda h: f"{pynvml.nvmlDeviceGetPowerUsage(h) / 1000:.2f}",
    "enforced.power.limit": lambda h: f"{pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000:.2f}",
    "temperature.gpu": lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    "clocks.sm": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
    "clocks.mem": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
    "pcie.link.gen.current": pynvml.nvmlDeviceGetCurrPcieLinkGeneration,
    "pcie.link.gen.max": pynvml.nvmlDeviceGetMaxPcieLinkGeneration,
    "pcie.link.width.current": pynvml.nvmlDeviceGetCurrPcieLinkWidth,
    "pcie.link.width.max": pynvml.nvmlDeviceGetMaxPcieLinkWidth,
    "ecc.errors.corrected.volatile.total": lambda h: pynvml.nvmlDeviceGetTotalEccErrors(
        h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
    "ecc.errors.uncorrected.volatile.total": lambda h: pynvml.nvmlDeviceGetTotalEccErrors(
        h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
    "clocks_event_reasons.active":
        lambda h: f"0x{pynvml.nvmlDeviceGetCurrentClocksEventReasons(h):016x}",
}


def value(fn: Callable[[Any], object], h: Any) -> str:
    try:
        return str(fn(h))
    except pynvml.NVMLError:
        return "[N/A]"


def main(argv: list[str]) -> int:
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    if argv[:1] == ["dmon"]:
        print("# gpu  rxpci  txpci\n# Idx   MB/s   MB/s")
        for i, h in enumerate(handles):
            rx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) / 1000
            tx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) / 1000
            print(f"  {i:>3} {rx:>6.0f} {tx:>6.0f}")
        return 0
    query = next((a for a in argv if a.startswith("--query-")), "")
    kind, _, names = query.partition("=")
    if kind == "--query-compute-apps":
        for h in handles:
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = "[N/A]" if p.usedGpuMemory is None else p.usedGpuMemory // MIB
                print(f"{pynvml.nvmlDeviceGetUUID(h)}, {p.pid}, {used}")
        return 0
    refused = set(os.environ.get("FAKE_SMI_REFUSE", "").split(","))
    fields = names.split(",")
    for name in fields:
        if name != "index" and (name not in FIELDS or name in refused):
            print(f'Field "{name}" is not a valid field to query.', file=sys.stderr)
            return 2
    for i, h in enumerate(handles):
        print(", ".join(str(i) if n == "index" else value(FIELDS[n], h) for n in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
