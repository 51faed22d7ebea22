"""What NVML's cumulative PCIe byte counters do under a steady host-to-device copy, read
raw: a lent GPU's check of the figures the NVML collector turns into PCIe rates.

gpu_check.py found the collector's PCIe RX at 375 MB/s where `nvidia-smi dmon` read
59,546 MB/s on an H200 copying host to device without a pause. This reads fields 197 and
198 (NVML_FI_DEV_PCIE_COUNT_TX_BYTES, _RX_BYTES) every few milliseconds for a few seconds,
beside nvmlDeviceGetPcieThroughput (a 20 ms window, KB/s), and prints each field's value
type, the largest value seen, how often it went backwards, how often NVML's timestamp moved,
and the rate between close readings (and with a 32-bit wrap undone), so the collector's rule
follows from what the driver does.

    python benchmarks/gpu_pcie_counters.py [--seconds 3] [--every-ms 5] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_check import CHILD, CHILD_READY_S  # noqa: E402

FIELDS = {197: "tx", 198: "rx"}
WRAP32 = 2**32


def read_fields(pynvml: Any, handle: Any) -> list[dict[str, Any]]:
    out = []
    for fv in pynvml.nvmlDeviceGetFieldValues(handle, list(FIELDS)):
        row = {"field": FIELDS[fv.fieldId], "ret": int(fv.nvmlReturn),
               "type": int(fv.valueType), "ts_us": int(fv.timestamp),
               "ull": int(fv.value.ullVal), "ui": int(fv.value.uiVal), "t": time.monotonic()}
        out.append(row)
    return out


def summarise(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["ret"] == 0]
    if len(ok) < 2:
        return {"field": name, "readings": len(rows), "ok": len(ok)}
    values = [r["ull"] for r in ok]
    backwards = sum(1 for a, b in zip(values, values[1:], strict=False) if b < a)
    same = sum(1 for a, b in zip(values, values[1:], strict=False) if b == a)
    ts_moves = sum(1 for a, b in zip(ok, ok[1:], strict=False) if b["ts_us"] != a["ts_us"])
    raw_rates, wrapped_rates = [], []
    for a, b in zip(ok, ok[1:], strict=False):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        d = b["ull"] - a["ull"]
        if d >= 0:
            raw_rates.append(d / dt)
        wrapped_rates.append(((b["ull"] - a["ull"]) % WRAP32) / dt)
    span_dt = ok[-1]["t"] - ok[0]["t"]
    span_ts = (ok[-1]["ts_us"] - ok[0]["ts_us"]) / 1e6
    return {
        "field": name, "readings": len(rows), "ok": len(ok),
        "value_types": sorted({r["type"] for r in ok}),
        "max_value": max(values), "under_2^32": max(values) < WRAP32,
        "backwards": backwards, "unchanged": same, "nvml_timestamp_moved": ts_moves,
        "first_last_rate_MBps": (values[-1] - values[0]) / span_dt / 1e6 if span_dt else None,
        "nvml_ts_span_s": span_ts, "local_span_s": span_dt,
        "median_rate_MBps_nonnegative_steps": (statistics.median(raw_rates) / 1e6
                                               if raw_rates else None),
        "median_rate_MBps_mod_2^32": (statistics.median(wrapped_rates) / 1e6
                                      if wrapped_rates else None),
        "first_values": values[:8],
        "one_second_apart_MBps": one_second_apart(ok),
    }


def one_second_apart(ok: list[dict[str, Any]]) -> list[float]:
    """What the collector computes: a rate between readings about a second apart."""
    out = []
    i = 0
    for j, r in enumerate(ok):
        if r["t"] - ok[i]["t"] >= 1.0:
            d = r["ull"] - ok[i]["ull"]
            out.append(round(d / (r["t"] - ok[i]["t"]) / 1e6, 1))
            i = j
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--every-ms", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    result: dict[str, Any] = {"driver": pynvml.nvmlSystemGetDriverVersion()}
    for label, load in (("idle", False), ("copying host to device", True)):
        child = None
        if load:
            child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
            line = child.stdout.readline()  # type: ignore[union-attr]
            if line.strip() != "ready":
                print(f"the copying process did not say ready ({CHILD_READY_S:g} s)")
                child.kill()
                return 1
        try:
            rows: list[dict[str, Any]] = []
            thr: dict[str, list[float]] = {"tx": [], "rx": []}
            end = time.monotonic() + args.seconds
            n = 0
            while time.monotonic() < end:
                rows.extend(read_fields(pynvml, handle))
                if n % 20 == 0:
                    for key, c in (("tx", pynvml.NVML_PCIE_UTIL_TX_BYTES),
                                   ("rx", pynvml.NVML_PCIE_UTIL_RX_BYTES)):
                        thr[key].append(pynvml.nvmlDeviceGetPcieThroughput(handle, c) / 1e3)
                n += 1
                time.sleep(args.every_ms / 1000)
        finally:
            if child is not None:
                child.stdin.close()  # type: ignore[union-attr]
                child.wait(timeout=30)
        part = {name: summarise(name, [r for r in rows if r["field"] == name])
                for name in ("tx", "rx")}
        for name in ("tx", "rx"):
            part[name]["throughput_api_MBps_median"] = (statistics.median(thr[name])
                                                       if thr[name] else None)
        result[label] = part
        print(f"## {label}")
        print(json.dumps(part, indent=1))
    pynvml.nvmlShutdown()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
