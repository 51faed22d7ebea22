"""A lent GPU's check, in one run of under 5 minutes: the collectors against the tools an
operator trusts, and the placement probe at its default sizes.

1. NVML: the GPU collector's reading of every field beside `nvidia-smi --query-gpu` for the
   same field (memory used/reserved/total/free, utilisation, PCIe link and throughput, power,
   temperature, clocks, clock-event reasons, ECC), and per-process memory of a torch process
   this script starts (it holds 1 GiB and copies host to device, so PCIe and utilisation
   are not idle).
2. Pinned host memory: N GiB pinned through torch (cudaHostAlloc), and N GiB of shared
   memory registered with cudaHostRegister (how a table shared between processes is
   pinned): where each shows in /proc/meminfo (Shmem, Mlocked, Cached, used) and in this
   process's /proc/self/status (RssAnon, RssShmem, VmLck, VmPin), what the host collector
   reports, and whether engram-top's claim ("pinned host memory shows as Shmem") holds.
3. The probe (engram_top.probe.gpu) at its default sizes.

Imports only the collectors and the probe: a GPU node's Python may have torch, nvidia-ml-py
and psutil but not Textual or pandas. Without CUDA it still runs: NVML is reported missing,
the pinned part is skipped, the probe runs its CPU path. Prints what it finds and writes
gpu_check.md, gpu_check.json and probe/ into --out.

    python benchmarks/gpu_check.py [--out DIR] [--pinned-gib 8] [--probe-seconds S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import select
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors import host as host_collector  # noqa: E402

GIB = 1024**3
MIB = 1024**2
SMI_TIMEOUT_S = 20.0
CHILD_READY_S = 120.0

# The claim under test, and where engram-top makes it.
CLAIM = "pinned host memory shows as Shmem (and so in host used = MemTotal - MemAvailable)"
CLAIM_PLACES = (("README.md", "pinned host memory shows up there"),
                ("collectors/host.py", "pinned host memory (which\nshows as Shmem)"),
                ("collectors/readings.py", "where pinned (cudaHostAlloc) host memory shows"))


class Report:
    """What is printed, kept for gpu_check.md; the raw figures for gpu_check.json."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.data: dict[str, Any] = {}

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def table(self, head: list[str], rows: list[list[Any]]) -> None:
        self.say("| " + " | ".join(head) + " |")
        self.say("|" + "---|" * len(head))
        for row in rows:
            self.say("| " + " | ".join("n/a" if v is None else str(v) for v in row) + " |")
        self.say()


# ----------------------------------------------------------------------------- environment

def import_torch(r: Report) -> Any:
    try:
        import torch
    except (ImportError, OSError) as exc:
        r.say(f"torch: missing ({type(exc).__name__}: {exc})")
        return None
    if torch.cuda.is_available():
        r.say(f"torch {torch.__version__}, CUDA {torch.version.cuda}: "
              f"{torch.cuda.get_device_name(0)}")
    else:
        r.say(f"torch {torch.__version__}, CUDA not available")
    return torch


# ----------------------------------------------------------------------------- NVML

CHILD = r"""
import sys, threading, torch
GIB = 1024**3
hold = torch.empty(GIB, dtype=torch.uint8, device="cuda").fill_(1)
src = torch.empty(256 * 1024**2, dtype=torch.uint8, pin_memory=True).fill_(2)
dst = torch.empty_like(src, device="cuda")
torch.cuda.synchronize()
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
while not stop.is_set():  # host-to-device copies: PCIe RX and utilisation are not idle
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
"""

# nvidia-smi --query-gpu name -> (GpuDevice field, scale from nvidia-smi's unit, tolerance:
# relative for a float, absolute for an int, exact when None)
SMI_FIELDS: dict[str, tuple[str, float, Any]] = {
    "name": ("name", 1, None),
    "uuid": ("uuid", 1, None),
    "memory.total": ("total_bytes", MIB, ("rel", 0.001)),
    "memory.reserved": ("reserved_bytes", MIB, ("rel", 0.02)),
    "memory.used": ("used_bytes", MIB, ("rel", 0.02)),
    "memory.free": ("free_bytes", MIB, ("rel", 0.02)),
    "utilization.gpu": ("util_gpu_pct", 1, ("abs", 25)),
    "utilization.memory": ("util_mem_pct", 1, ("abs", 25)),
    "power.draw": ("power_w", 1, ("rel", 0.25)),
    "enforced.power.limit": ("power_limit_w", 1, ("rel", 0.01)),
    "temperature.gpu": ("temperature_c", 1, ("abs", 3)),
    "clocks.sm": ("sm_clock_mhz", 1, ("rel", 0.15)),
    "clocks.mem": ("mem_clock_mhz", 1, ("rel", 0.05)),
    "pcie.link.gen.current": ("pcie_gen", 1, None),
    "pcie.link.gen.max": ("pcie_gen_max", 1, None),
    "pcie.link.width.current": ("pcie_width", 1, None),
    "pcie.link.width.max": ("pcie_width_max", 1, None),
    "ecc.errors.corrected.volatile.total": ("ecc_corrected", 1, None),
    "ecc.errors.uncorrected.volatile.total": ("ecc_uncorrected", 1, None),
    "clocks_event_reasons.active": ("throttle_reasons", 1, None),
}


def smi(args: list[str]) -> tuple[int, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 127, "nvidia-smi not found"
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True,
                             timeout=SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, f"nvidia-smi did not answer within {SMI_TIMEOUT_S:g} s"
    return out.returncode, (out.stdout if out.returncode == 0 else out.stdout + out.stderr)


def smi_query(fields: list[str]) -> dict[int, dict[str, str]]:
    """Every field per GPU index. An nvidia-smi that refuses one field refuses the whole
    query, so then each is asked alone, and a refused one reads as its error (GPU -1)."""
    def ask(names: list[str]) -> tuple[int, dict[int, dict[str, str]], str]:
        rc, text = smi([f"--query-gpu=index,{','.join(names)}",
                        "--format=csv,noheader,nounits"])
        out: dict[int, dict[str, str]] = {}
        for line in text.strip().splitlines() if rc == 0 else []:
            parts = [p.strip() for p in line.split(",")]
            if parts[0].isdigit():
                out[int(parts[0])] = dict(zip(names, parts[1:], strict=False))
        return rc, out, text

    rc, out, _ = ask(fields)
    if rc == 0:
        return out
    for name in fields:
        rc, one, text = ask([name])
        if rc != 0:
            out.setdefault(-1, {})[name] = f"refused: {' '.join(text.split())[:60]}"
        for gpu, values in one.items():
            out.setdefault(gpu, {}).update(values)
    return out


def smi_pcie() -> dict[int, tuple[float, float]]:
    """nvidia-smi dmon's PCIe throughput, MB/s: {gpu: (rx, tx)}."""
    rc, text = smi(["dmon", "-s", "t", "-c", "1"])
    out = {}
    if rc == 0:
        for line in text.splitlines():
            parts = line.split()
            if parts and parts[0].isdigit() and len(parts) >= 3:
                with contextlib.suppress(ValueError):
                    out[int(parts[0])] = (float(parts[1]), float(parts[2]))
    return out


def agree(nvml: Any, text: str, scale: float, tol: Any, field: str) -> str:
    if text.startswith("refused") or text in ("[N/A]", "[Not Supported]", "N/A"):
        return "nvidia-smi: n/a" if nvml is None else "only NVML"
    if nvml is None:
        return "only nvidia-smi"
    if field == "throttle_reasons":
        from collectors.nvml_codes import throttle_names
        try:
            smi_names = throttle_names(int(text, 16))
        except ValueError:
            return "?"
        return "yes" if tuple(smi_names) == tuple(nvml) else f"no (nvidia-smi: {smi_names})"
    if tol is None:
        try:
            return "yes" if float(text) * scale == float(nvml) else "no"
        except (TypeError, ValueError):
            return "yes" if text.strip() == str(nvml).strip() else "no"
    try:
        theirs = float(text) * scale
    except ValueError:
        return "?"
    kind, limit = tol
    diff = abs(theirs - float(nvml))
    ok = diff <= limit * max(abs(theirs), 1.0) if kind == "rel" else diff <= limit
    return "yes" if ok else "no"


def same_order(mine: float | None, theirs: float | None) -> str:
    """PCIe rates over different windows (the collector's: between its two samples;
    dmon's: its own second) can only agree in size."""
    if mine is None or theirs is None:
        return "n/a"
    if max(mine, theirs) < 100:
        return "both under 100 MB/s"
    ok = 0.5 <= (mine + 1) / (theirs + 1) <= 2
    return "same order" if ok else "no (more than 2x apart)"


def shown(value: Any, field: str) -> Any:
    if field.endswith("_bytes") and isinstance(value, int | float):
        return f"{value / MIB:,.0f} MiB"
    return value


@contextlib.contextmanager
def torch_child(r: Report, torch: Any):  # type: ignore[no-untyped-def]
    """A torch process that holds 1 GiB on GPU 0 and copies host to device until told."""
    if torch is None or not torch.cuda.is_available():
        yield None
        return
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], CHILD_READY_S)
        line = child.stdout.readline() if ready else ""  # type: ignore[union-attr]
        if line.strip() != "ready":
            r.say(f"the torch process did not get ready within {CHILD_READY_S:g} s")
            yield None
        else:
            yield child.pid
    finally:
        with contextlib.suppress(OSError):
            child.stdin.close()  # type: ignore[union-attr]
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=15)


def check_nvml(r: Report, torch: Any) -> None:
    r.say("## NVML collector beside nvidia-smi")
    r.say()
    try:
        from collectors import nvml
    except ImportError as exc:
        r.say(f"NVML missing: nvidia-ml-py is not installed ({exc}); nothing to compare.")
        r.data["nvml"] = {"missing": str(exc)}
        r.say()
        return
    from collectors.base import SourceUnavailable
    backend = nvml.NvmlBackend()
    try:
        with torch_child(r, torch) as pid:
            try:
                backend.sample()  # the first sample is the PCIe counters' baseline
            except SourceUnavailable as exc:
                r.say(f"NVML missing: {exc}; nothing to compare.")
                r.data["nvml"] = {"missing": str(exc)}
                r.say()
                return
            time.sleep(1.0)  # a second of counters between the two samples
            data = backend.sample()
            smi_values = smi_query(list(SMI_FIELDS))
            pcie = smi_pcie()
            rc, apps = smi(["--query-compute-apps=gpu_uuid,pid,used_memory",
                            "--format=csv,noheader,nounits"])
    finally:
        backend.close()
    r.say(f"driver {data.driver_version}; the torch process: pid {pid}")
    r.say()
    r.data["nvml"] = {"driver": data.driver_version, "devices": [], "torch_pid": pid}
    for dev in data.devices:
        theirs = smi_values.get(dev.index, {})
        rows = []
        for name, (field, scale, tol) in SMI_FIELDS.items():
            mine = getattr(dev, field, None)
            text = theirs.get(name) or smi_values.get(-1, {}).get(name, "not given")
            rows.append([f"`{name}`", shown(mine, field), text,
                         agree(mine, text, scale, tol, field)])
        rx_tx = pcie.get(dev.index)
        for i, (field, label) in enumerate((("pcie_rx_bytes_per_s", "rxpci"),
                                            ("pcie_tx_bytes_per_s", "txpci"))):
            mine = getattr(dev, field)
            theirs_mb = None if rx_tx is None else rx_tx[i]
            rows.append([f"dmon `{label}` (MB/s)", None if mine is None else f"{mine / 1e6:,.0f}",
                         None if theirs_mb is None else f"{theirs_mb:,.0f}",
                         same_order(None if mine is None else mine / 1e6, theirs_mb)])
        r.say(f"### GPU {dev.index}: {dev.name}")
        r.say()
        r.table(["nvidia-smi field", "NVML collector", "nvidia-smi", "agree"], rows)
        if dev.unsupported:
            r.say("NVML refused: " + "; ".join(f"{f}: {why}" for f, why in dev.unsupported))
            r.say()
        r.data["nvml"]["devices"].append({"index": dev.index, "rows": rows,
                                          "unsupported": list(dev.unsupported)})
        smi_procs = {}
        for line in (apps if rc == 0 else "").strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3 and parts[0] == dev.uuid and parts[1].isdigit():
                smi_procs[int(parts[1])] = parts[2]
        rows = [[p.pid, "n/a" if p.used_bytes is None else f"{p.used_bytes / MIB:,.0f}",
                 smi_procs.get(p.pid, "not listed"),
                 "the torch process" if p.pid == pid else ""] for p in dev.processes]
        rows += [[q, "not listed", m, "the torch process" if q == pid else ""]
                 for q, m in smi_procs.items() if q not in {p.pid for p in dev.processes}]
        r.say("Processes (MiB):")
        r.say()
        r.table(["pid", "NVML collector", "nvidia-smi", ""], rows)


# ----------------------------------------------------------------------------- pinned memory

MEMINFO = ("MemAvailable", "Shmem", "Mlocked", "Cached", "Unevictable", "AnonPages")
STATUS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck", "VmPin")


def proc_figures() -> dict[str, int]:
    mi = host_collector.parse_meminfo(Path("/proc/meminfo").read_text())
    st = host_collector.parse_meminfo(Path("/proc/self/status").read_text())
    out = {f"meminfo.{k}": mi.get(k, 0) for k in MEMINFO}
    out["meminfo.used"] = mi["MemTotal"] - mi.get("MemAvailable", 0)
    out.update({f"self.{k}": st.get(k, 0) for k in STATUS})
    collected = host_collector.sample(host_collector.ProcBackend(), os.getpid())
    tree = collected.server_tree
    out["collector.used_bytes"] = collected.used_bytes
    out["collector.shmem_bytes"] = collected.shmem_bytes
    out["collector.cached_bytes"] = collected.cached_bytes
    out["collector.tree_rss_anon"] = tree.rss_anon_bytes if tree else 0
    out["collector.tree_rss_shmem"] = tree.rss_shmem_bytes if tree else 0
    return out


def check_pinned(r: Report, torch: Any, gib: float) -> None:
    r.say(f"## Pinned host memory ({gib:g} GiB)")
    r.say()
    r.say(f"The claim: {CLAIM}. Made in:")
    for path, words in CLAIM_PLACES:
        try:
            found = " ".join(words.split()) in " ".join((ROOT / path).read_text().split())
        except OSError:
            found = False
        r.say(f"- {path}: \"{' '.join(words.split())}\" ({'found' if found else 'NOT found'})")
    r.say()
    if torch is None or not torch.cuda.is_available():
        r.say("skipped: pinned memory needs CUDA (torch.cuda.is_available() is False here). "
              "What /proc and the host collector show for this process now:")
        r.say()
        now = proc_figures()
        r.table(["figure", "now"], [[k, f"{v / MIB:,.0f} MiB"] for k, v in now.items()])
        r.data["pinned"] = {"skipped": "no CUDA", "now": now}
        return
    nbytes = int(gib * GIB)
    results = {}
    before = proc_figures()
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    pinned.fill_(1)
    results["torch pin_memory (cudaHostAlloc)"] = delta(before, proc_figures())
    del pinned
    with contextlib.suppress(Exception):  # torch keeps freed pinned blocks cached
        torch._C._host_emptyCache()
    before = proc_figures()
    shared = torch.ones(nbytes, dtype=torch.uint8).share_memory_()
    rc = torch.cuda.cudart().cudaHostRegister(shared.data_ptr(), nbytes, 0)
    results[f"shared memory + cudaHostRegister (rc {int(rc)})"] = delta(before, proc_figures())
    with contextlib.suppress(Exception):
        torch.cuda.cudart().cudaHostUnregister(shared.data_ptr())
    del shared
    names = list(results)
    rows = [[k] + [f"{results[n][k] / GIB:+.2f}" for n in names] for k in before]
    r.table(["change, GiB", *names], rows)
    verdicts = {}
    for n in names:
        d = results[n]
        shm = d["meminfo.Shmem"] >= 0.9 * nbytes
        used = d["meminfo.used"] >= 0.9 * nbytes
        where = [k for k, v in d.items() if v >= 0.9 * nbytes]
        verdicts[n] = {"shows_as_shmem": shm, "in_used": used, "where": where}
        r.say(f"- {n}: the claim {'HOLDS' if shm and used else 'DOES NOT HOLD'} "
              f"(Shmem {'yes' if shm else 'no'}, host used {'yes' if used else 'no'}); "
              f"the {gib:g} GiB appear in: {', '.join(where) or 'nothing above'}")
    r.say()
    r.data["pinned"] = {"gib": gib, "deltas": results, "verdicts": verdicts}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}


# ----------------------------------------------------------------------------- probe

def check_probe(r: Report, torch: Any, out: Path, seconds: float | None) -> None:
    r.say("## The probe at its default sizes")
    r.say()
    if torch is None:
        r.say("skipped: the probe needs torch")
        r.data["probe"] = {"skipped": "no torch"}
        return
    from engram_top.probe import gpu as probe
    p = argparse.ArgumentParser()
    probe.add_arguments(p)
    args = p.parse_args(["--out", str(out / "probe")]
                        + ([] if seconds is None else ["--seconds", str(seconds)]))
    data = probe.measure(torch, probe.settings(args, torch.cuda.is_available()),
                         progress=lambda text: print(f"probe: {text}", flush=True))
    probe.write(data, args.out)
    for line in probe.summary(data).splitlines():
        r.say(line)
    r.say(f"(probe.json and probe.md in {args.out})")
    r.say()
    r.data["probe"] = {"path": str(args.out / "probe.json"), "wall_s": data["wall_s"]}


# ----------------------------------------------------------------------------- main

def main() -> int:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(f"gpu-check-{stamp}"))
    ap.add_argument("--pinned-gib", type=float, default=8.0)
    ap.add_argument("--probe-seconds", type=float, default=None,
                    help="seconds per batch and mode (default: the probe's own)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    r = Report()
    started = time.monotonic()
    r.say(f"# gpu_check ({datetime.now(UTC).isoformat(timespec='seconds')})")
    r.say()
    r.say(f"Python {platform.python_version()} on {platform.node()}, {os.cpu_count()} CPUs")
    torch = import_torch(r)
    r.say()
    for name, step in (("nvml", lambda: check_nvml(r, torch)),
                       ("pinned", lambda: check_pinned(r, torch, args.pinned_gib)),
                       ("probe", lambda: check_probe(r, torch, args.out, args.probe_seconds))):
        try:
            step()
        except Exception as exc:  # one part failing must not lose the others' figures
            r.say(f"{name}: failed: {type(exc).__name__}: {exc}")
            r.say()
            r.data.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"
    r.say(f"done in {time.monotonic() - started:.1f} s; written to {args.out}")
    (args.out / "gpu_check.md").write_text("\n".join(r.lines) + "\n", encoding="utf-8")
    (args.out / "gpu_check.json").write_text(json.dumps(r.data, indent=2, default=str) + "\n",
                                             encoding="utf-8")
    return 1 if "failed" in r.data else 0


if __name__ == "__main__":
    sys.exit(main())
