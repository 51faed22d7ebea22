"""Node backends that read the simulated node's state: the GPU backend stands where NVML
would, the host backend where /proc would. The collectors run their normal code over them."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

from collectors.host import ProcBackend
from collectors.kernel_log import read_kernel_log
from collectors.numa import Mappings
from collectors.readings import (
    CgroupMemory,
    GpuData,
    GpuDevice,
    GpuProcess,
    ProcessMemory,
    ShmFile,
)
from collectors.units import GIB, MIB
from engram_top.sim import kernel, sockets, state

IDLE_POWER_W = 140.0
POWER_LIMIT_W = 1000.0  # B200 board power
DRIVER = "580.95.05 (simulated)"
# Assumptions, not derived by the model: a B200's core temperature from idle to full load,
# its boost clocks (clocks do not drop: the model's draw stays under the power limit, so
# nothing throttles), its PCIe Gen5 x16 link with no replays and no ECC errors, and
# NVLink 5 traffic growing with the load (tensor-parallel all-reduces) up to this rate.
IDLE_TEMP_C, FULL_LOAD_TEMP_C = 34, 72
SM_CLOCK_MHZ, IDLE_SM_CLOCK_MHZ, MEM_CLOCK_MHZ = 1965, 345, 3996
NVLINK_FULL_LOAD_BYTES_PER_S = 60e9


def _uuid(node_dir: Path, index: int) -> str:
    h = hashlib.sha1(f"{node_dir.resolve()}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


class SimGpuBackend:
    name = "simulated"

    def __init__(self, node_dir: Path) -> None:
        self.node_dir = node_dir
        # The energy counter, integrated here: the simulated driver loads with the backend.
        self._energy_mj: dict[int, float] = {}
        self._last_power: dict[int, tuple[float, float]] = {}  # GPU -> (monotonic, W)
        # A sample that timed out may still run in its thread beside the next one.
        self._energy_lock = threading.Lock()

    def _energy(self, index: int, power_w: float) -> int:
        """mJ so far: the power between two samples taken as the mean of their draws."""
        with self._energy_lock:
            now = time.monotonic()
            last = self._last_power.get(index)
            energy = self._energy_mj.get(index, 0.0)
            if last is not None:
                energy += (last[1] + power_w) / 2 * (now - last[0]) * 1000.0
            self._energy_mj[index] = energy
            self._last_power[index] = (now, power_w)
            return int(energy)

    def sample(self) -> GpuData:
        spec = state.read_spec(self.node_dir)
        procs = state.live_procs(self.node_dir)
        devices = []
        for i in range(spec.gpus):
            owners = [(p, p.gpu_bytes[i]) for p in procs if p.gpu_bytes.get(i)]
            used = sum(b for _, b in owners)
            util = sum(p.gpu_util_pct.get(i, 0.0) for p in procs)
            free = spec.gpu_total_bytes - spec.gpu_reserved_bytes - used
            load = min(100.0, util) / 100
            power = IDLE_POWER_W + (POWER_LIMIT_W - IDLE_POWER_W) * 0.8 * load
            nvlink = NVLINK_FULL_LOAD_BYTES_PER_S * load
            devices.append(GpuDevice(
                index=i, name=spec.gpu_name, uuid=_uuid(self.node_dir, i),
                total_bytes=spec.gpu_total_bytes, reserved_bytes=spec.gpu_reserved_bytes,
                used_bytes=used, free_bytes=max(0, free),
                util_gpu_pct=int(min(100, util)), util_mem_pct=int(min(100, util * 0.6)),
                power_w=power, power_limit_w=POWER_LIMIT_W,
                pcie_rx_bytes_per_s=sum(p.pcie_rx_bytes_per_s.get(i, 0.0) for p in procs),
                pcie_tx_bytes_per_s=sum(p.pcie_tx_bytes_per_s.get(i, 0.0) for p in procs),
                processes=tuple(GpuProcess(p.pid, b, p.name) for p, b in owners),
                temperature_c=round(IDLE_TEMP_C + (FULL_LOAD_TEMP_C - IDLE_TEMP_C) * load),
                sm_clock_mhz=SM_CLOCK_MHZ if util > 0 else IDLE_SM_CLOCK_MHZ,
                mem_clock_mhz=MEM_CLOCK_MHZ, throttle_reasons=(),
                energy_mj=self._energy(i, power),
                pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
                pcie_replay_errors=0, nvlink_tx_bytes_per_s=nvlink, nvlink_rx_bytes_per_s=nvlink,
                ecc_corrected=0, ecc_uncorrected=0,
            ))
        return GpuData(driver_version=DRIVER, devices=tuple(devices), backend="simulated")

    def close(self) -> None:
        pass


class SimHostBackend(ProcBackend):
    """A virtual host: meminfo from the node spec plus what live server processes hold;
    process memory from their state files; the process tree itself is the real one."""

    name = "simulated"

    def __init__(self, node_dir: Path) -> None:
        super().__init__()
        self.node_dir = node_dir
        self._procs: dict[int, state.ProcState] = {}
        self._procs_at = 0.0

    def _live(self, fresh: bool = False) -> dict[int, state.ProcState]:
        # One scan per poll: meminfo() (the first call of every sample) rescans, and the
        # process_memory() calls of the same poll share its result.
        if fresh or not self._procs_at:
            self._procs = {p.pid: p for p in state.live_procs(self.node_dir)}
            self._procs_at = time.monotonic()
        return self._procs

    def meminfo(self) -> dict[str, int]:
        spec = state.read_spec(self.node_dir)
        procs = self._live(fresh=True).values()
        anon = sum(p.host_anon_bytes for p in procs)
        # The node's /dev/shm segments are RAM whoever holds them, a dead maker's too.
        shmem = sum(p.host_shmem_bytes for p in procs) + sum(
            seg.bytes for seg in kernel.segments(self.node_dir, state.alive))
        huge = sum(p.host_hugepage_bytes for p in procs)
        baseline_shmem = 2 * GIB
        used = spec.host_baseline_used_bytes + anon + shmem
        total = spec.host_total_bytes
        cached = 64 * GIB + shmem  # Shmem is part of Cached, as on a real kernel
        return {
            "MemTotal": total, "MemAvailable": total - used,
            "MemFree": max(0, total - used - 64 * GIB), "Buffers": 2 * GIB,
            "Cached": cached, "Shmem": baseline_shmem + shmem, "ShmemHugePages": huge,
            "AnonHugePages": 0, "HugePages_Total": 0, "HugePages_Free": 0,
            "Hugepagesize": 2 * MIB, "SwapTotal": 0, "SwapFree": 0,
        }

    def vmstat(self) -> dict[str, int]:
        return {"pswpin": 0, "pswpout": 0, "oom_kill": kernel.read_oom_kills(self.node_dir)}

    def cgroup(self, pid: int | None) -> CgroupMemory | None:
        return None  # the virtual host runs its servers in no container

    def reread_cgroup(self, found: CgroupMemory) -> CgroupMemory | None:
        return None

    def thp(self) -> str:
        return "madvise"  # the virtual host's, not this machine's

    def largest(self, n: int, outside: frozenset[int]) -> list[ProcessMemory]:
        # The virtual host's processes (ranks, tenants) by their modelled memory only.
        found = [ProcessMemory(p.pid, p.name, p.host_anon_bytes + p.host_shmem_bytes)
                 for p in self._live().values() if p.pid not in outside
                 and p.host_anon_bytes + p.host_shmem_bytes > 0]
        return sorted(found, key=lambda m: -m.rss_bytes)[:n]

    def shm_mount(self, pid: int | None) -> tuple[int, int] | None:
        return None  # the virtual host's /dev/shm has no size of its own (not modelled)

    def shm_unheld(self) -> list[ShmFile]:
        # The virtual host's /dev/shm (engram_top.sim.kernel), never this machine's.
        now = time.time()
        found = [ShmFile(seg.name, seg.bytes, max(0.0, now - seg.made))
                 for seg in kernel.segments(self.node_dir, state.alive) if not seg.held]
        return sorted(found, key=lambda f: (-f.bytes, f.name))

    def kernel_log(self) -> tuple[str | None, str]:
        # The virtual host's kernel (engram_top.sim.kernel), never this machine's.
        path = kernel.kmsg_path(self.node_dir)
        if not path.exists():
            return "", ""  # a kernel that has said nothing of note
        return read_kernel_log(path)

    def process_memory(self, pid: int) -> dict[str, int] | None:
        proc = self._live().get(pid)
        if proc is None:
            return super().process_memory(pid)
        if super().process_memory(pid) is None:
            return None
        # The modelled memory only: the virtual host's meminfo holds no Python interpreter's
        # pages either, so the server's ledger lines stay within what the host has in use.
        # It pins its shared host memory (the tables and the prefetch staging: its log says
        # "pinned"), as cudaHostRegister does.
        anon, shmem = proc.host_anon_bytes, proc.host_shmem_bytes
        return {"VmRSS": anon + shmem, "RssAnon": anon, "RssFile": 0, "RssShmem": shmem,
                "VmPin": shmem, "VmLck": 0}

    def node_meminfo(self) -> dict[int, dict[str, int]] | None:
        # The virtual host's two sockets, never this machine's /sys (engram_top.sim.sockets).
        return sockets.node_meminfo(state.read_spec(self.node_dir), self._live().values())

    def process_nodes(self, pid: int) -> dict[int, int] | None:
        # A virtual process's modelled host memory, on its node; a real one's is this
        # machine's, not the virtual host's: not told.
        proc = self._live().get(pid)
        return None if proc is None else sockets.process_nodes(proc,
                                                               state.read_spec(self.node_dir))

    def shared_mappings(self, pid: int) -> Mappings | None:
        # The model only: a real process's own shared mappings are Python's few KiB, on
        # this machine's nodes rather than the virtual host's.
        proc = self._live().get(pid)
        return sockets.shared_mappings(proc, state.read_spec(self.node_dir).gpus) if proc else []
