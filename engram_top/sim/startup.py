"""The simulated server's start-up: SGLang's log lines, phase by phase, while the ranks'
virtual HBM and the host tables grow. Phase lengths come from seeds [startup], scaled.

The lines are those SGLang prints for DeepSeek-V4 (DeepseekV4ForCausalLM): its KV is
several pools, so the memory pool phase prints the DSV4 pool configurator's lines where
other models print "KV Cache is allocated"."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from collectors.units import GIB, MIB
from engram_top.seed.reference import Placement, Reference
from engram_top.sim import fail_kinds, hicache, log_style, pool_styles, sockets
from engram_top.sim.memory import MemoryPlan
from engram_top.sim.model import PREFILL_TOKEN_BUDGET
from engram_top.sim.pools import CHUNKED_PREFILL_SIZE
from engram_top.sim.server_args import CONTEXT_LEN
from engram_top.sim.state import read_proc
from scenarios.hicache_size import HiCacheSize

TABLES = (("L1", 0.5), ("L14", 0.5))  # the two Engram tables (layers 1 and 14), equal halves
# Of the server processes' host memory: the tokenizer + HTTP process; the ranks share the rest.
MAIN_HOST_SHARE = 0.26
# How SGLang's layout switch names each layout (SGLANG_DSV41_ENGRAM_HOST_TABLE_LAYOUT):
# "shared" upstream, "per_rank" in forks, "numa_shared" as proposed upstream for a copy per
# NUMA node.
LAYOUT_WORDS = {"shared": "shared", "numa-replicated": "numa_shared", "per-rank": "per_rank"}


def log(msg: str, rank: int | None = None) -> None:
    """A line as SGLang's logger writes it: its time, the rank's prefix for the layout
    (log_style: "TP3", "DP3 TP3 EP3", "PP1 TP1"), the message."""
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    sys.stdout.write(f"[{stamp}{log_style.rank_tag(rank)}] {msg}\n")
    sys.stdout.flush()


def raw(text: str) -> None:
    """Lines no logger prefixes: a traceback's body, what C++ code prints."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


class StartupFailed(Exception):
    """``said``: the log already tells the failure in the server's own words, so no
    closing line of the simulator's is added."""

    def __init__(self, message: str, said: bool = False) -> None:
        super().__init__(message)
        self.said = said


def process_start_monotonic() -> float:
    """This process's start time on the monotonic clock, to about 10 ms.

    Not psutil's create_time(): it rests on the boot time in whole seconds, up to 1 s off.
    """
    try:
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return time.monotonic() - max(0.0, uptime - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic()


async def sleep_until(deadline: float) -> None:
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))


@dataclass
class RankHandle:
    rank: int
    proc: subprocess.Popen[str]
    gpu_bytes: int = 0
    host_anon: int = 0
    host_shmem: int = 0
    host_huge: int = 0
    util: float = 0.0
    pcie_rx: float = 0.0

    def push(self) -> None:
        if self.proc.stdin is None or self.proc.poll() is not None:
            raise StartupFailed(f"Rank {self.rank} scheduler died (exit {self.proc.poll()})")
        try:
            self.proc.stdin.write(json.dumps({
                "gpu_bytes": self.gpu_bytes, "host_anon": self.host_anon,
                "host_shmem": self.host_shmem, "host_huge": self.host_huge,
                "util": self.util, "pcie_rx": self.pcie_rx}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise StartupFailed(f"Rank {self.rank} scheduler died: {exc}") from exc

    def written(self, node_dir: Path) -> bool:
        """Its state file holds the last update pushed (the rank writes it on its own time)."""
        state = read_proc(node_dir, self.proc.pid)
        return state is not None and state.gpu_bytes.get(self.rank, 0) == self.gpu_bytes \
            and state.host_anon_bytes == self.host_anon


async def ranks_settled(node_dir: Path, ranks: list[RankHandle], within: float = 30.0) -> None:
    """Until every rank's state file shows the memory it was last given. A real SGLang's
    schedulers report to the tokenizer once their memory is taken, so NVML shows a ready
    server's HBM; these ranks write their files when the OS runs them, which on a loaded
    machine is after the server would otherwise say ready."""
    deadline = time.monotonic() + within
    waiting = list(ranks)
    while True:
        for r in waiting:
            if r.proc.poll() is not None:
                raise StartupFailed(f"Rank {r.rank} scheduler died (exit {r.proc.poll()})")
        waiting = [r for r in waiting if not r.written(node_dir)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise StartupFailed(f"Rank {waiting[0].rank} scheduler did not take its memory "
                                f"in {within:.0f} s")
        await asyncio.sleep(0.01)


def spawn_ranks(node_dir: Path, gpus: int,
                name: str | Callable[[int], str] | None = None) -> list[RankHandle]:
    """One process per GPU; ``name``: its process name, ``{rank}`` filled in, or a function
    of the rank (default SGLang's scheduler's)."""
    ranks = []
    for r in range(gpus):
        named = [] if not name else ["--name", name(r) if callable(name) else
                                     name.format(rank=r)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram_top.sim.rank", "--node-dir", str(node_dir),
             "--gpu", str(r), "--rank", str(r), *named],
            stdin=subprocess.PIPE, text=True)
        ranks.append(RankHandle(r, proc))
    return ranks


class Startup:
    """Runs the phases. ``fail_at`` names a phase in which to die, for tests of failures."""

    def __init__(self, ref: Reference, placement: Placement, mem: MemoryPlan,
                 ranks: list[RankHandle], time_scale: float, fail_at: str | None = None,
                 on_main_host: Callable[[int], None] = lambda b: None) -> None:
        self.ref = ref
        self.placement = placement
        self.mem = mem
        self.ranks = ranks
        self.scale = time_scale
        self.fail_at = fail_at
        self.on_main_host = on_main_host
        self.phase_s = dict(placement.startup.phases)
        self.host = placement.name != "device"
        self.t0 = process_start_monotonic()
        self.elapsed_plan = 0.0  # planned (unscaled) seconds of the phases run so far
        self.hicache_bytes_per_rank = 0  # SGLang's HiCache host pool on each rank (0: off)
        self.hicache_size = HiCacheSize()  # as asked; a pool SGLang sizes is sized at the KV
        self.host_available: Callable[[], int | None] = lambda: None  # MemAvailable now
        self.on_hicache: Callable[[int], None] = lambda pool: None  # the pool, once sized
        self.layout = "shared"  # the host tables' copies (sim serve --engram-layout)
        self.held_by_others: list[int] = []  # HBM other tenants hold per GPU at launch
        self.fail_as: str | None = None  # die in a real server's words (sim serve --fail-as)
        self.pool_style = "dsv4"  # how the pool phase logs its pools (sim serve --kv-pools)

    async def wait_phase(self, phase: str) -> None:
        """A phase with nothing to show but its length (http, warmup)."""
        self.elapsed_plan += self.phase_s[phase]
        await sleep_until(self.t0 + self.elapsed_plan * self.scale)

    def avail_gb(self, rank: RankHandle) -> float:
        return (self.ref.gpu_total_bytes - self.ref.gpu_reserved_bytes - rank.gpu_bytes
                - self.others_on(rank.rank)) / GIB

    def others_on(self, gpu: int) -> int:
        return self.held_by_others[gpu] if gpu < len(self.held_by_others) else 0

    def push_all(self) -> None:
        for r in self.ranks:
            r.push()

    async def ramp(self, seconds: float, steps: int, apply: Callable[[float], None]) -> None:
        """Spread a phase over ``steps`` updates, applying the fraction done at each.

        Phases end at deadlines counted from the process's start, so interpreter start-up
        and logging overheads are absorbed and launch-to-ready matches the plan.
        """
        start = self.elapsed_plan
        self.elapsed_plan += seconds
        for i in range(1, steps + 1):
            await sleep_until(self.t0 + (start + seconds * i / steps) * self.scale)
            apply(i / steps)
            self.push_all()

    def check_room(self) -> None:
        """The weights on top of what other tenants hold: past the GPU, CUDA's OOM, as
        torch says it."""
        need = self.mem.context_bytes + self.mem.weights_bytes
        for r in self.ranks:
            room = self.ref.gpu_total_bytes - self.ref.gpu_reserved_bytes - self.others_on(r.rank)
            if need <= room:
                continue
            log("Traceback (most recent call last):", r.rank)
            log(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                f"{(need - room) / GIB:.2f} GiB. GPU {r.rank} has a total capacity of "
                f"{self.ref.gpu_total_bytes / GIB:.2f} GiB of which {max(0, room) / GIB:.2f} "
                f"GiB is free. Process has {need / GIB:.2f} GiB memory in use.", r.rank)
            raise StartupFailed(f"CUDA out of memory on GPU {r.rank} while loading the weights")

    def check_fail(self, phase: str) -> None:
        if self.fail_as is not None:
            if fail_kinds.phase_of(self.fail_as, self.fail_at) == phase:
                rank = self.ranks[-1].rank if self.ranks else 0
                cause = fail_kinds.emit(self.fail_as, phase, rank, self.ref.gpu_total_bytes,
                                        log, raw)
                raise StartupFailed(cause, said=True)
            return
        if self.fail_at == phase:
            log("Traceback (most recent call last):")
            log(f"RuntimeError: simulated failure during {phase} (--fail-at {phase})")
            raise StartupFailed(f"simulated failure during {phase}")

    # ------------------------------------------------------------------ the memory
    # What each phase does to the ranks' HBM and the host, whichever dialect logs it.
    def main_host(self) -> None:
        """The main (tokenizer + HTTP) process's share of the host memory, from launch."""
        self.on_main_host(int(self.mem.host_process_bytes * MAIN_HOST_SHARE))

    def dist_memory(self, frac: float) -> None:
        """``frac`` of the distributed init done: CUDA contexts and comm buffers."""
        mem = self.mem
        proc_share = mem.host_process_bytes * (1 - MAIN_HOST_SHARE) / len(self.ranks)
        for r in self.ranks:
            r.gpu_bytes = int(mem.context_bytes * frac)
            r.host_anon = int(proc_share * frac)

    def weights_memory(self, frac: float) -> None:
        """``frac`` of the weights loaded; a host placement's tables are faulted in first,
        then pinned."""
        mem = self.mem
        for r in self.ranks:
            r.gpu_bytes = mem.context_bytes + int(mem.weights_bytes * frac)
        if not self.host:
            return
        fill = 0.85
        table = int(mem.host_table_bytes * min(1.0, frac / fill))
        holders = self.table_holders()
        pin = max(0.0, (frac - fill) / (1 - fill))
        for r in self.ranks:
            held = table if r in holders else 0
            r.host_huge = held
            r.host_shmem = held + int(mem.host_pinned_extra_bytes / len(self.ranks) * pin)

    def table_holders(self) -> list[RankHandle]:
        """The ranks that hold a copy of the tables, each on its own NUMA node: rank 0
        alone for the shared layout (its memfd, which the others map), the first rank on
        each NUMA node for numa-replicated, every rank for per-rank."""
        if self.layout == "per-rank":
            return list(self.ranks)
        if self.layout == "numa-replicated":
            firsts: dict[int, RankHandle] = {}
            for r in self.ranks:
                firsts.setdefault(sockets.node_of_gpu(r.rank, len(self.ranks)), r)
            return list(firsts.values())
        return self.ranks[:1]

    def kv_memory(self) -> None:
        """The KV pools allocated, all at once."""
        for r in self.ranks:
            r.gpu_bytes += self.mem.kv_bytes

    def graphs_memory(self) -> Callable[[float], None]:
        """From now, ``frac`` of the device graphs captured."""
        base = {r.rank: r.gpu_bytes for r in self.ranks}

        def grow(frac: float) -> None:
            for r in self.ranks:
                r.gpu_bytes = base[r.rank] + int(self.mem.graphs_bytes * frac)
        return grow

    # ------------------------------------------------------------------ SGLang's lines
    async def run(self) -> None:
        mem = self.mem
        self.main_host()
        t0 = time.monotonic()
        for r in self.ranks:
            log("Init torch distributed begin.", r.rank)
        await self.ramp(self.phase_s["distributed_init"], 4, self.dist_memory)
        self.check_fail("distributed_init")
        for r in self.ranks:
            log(f"Init torch distributed ends. elapsed={time.monotonic() - t0:.2f} s, "
                f"mem usage={mem.context_bytes / GIB:.2f} GB", r.rank)
        await self.load_weights()
        await self.kv_pool()
        await self.graphs()

    async def load_weights(self) -> None:
        mem = self.mem
        t0 = time.monotonic()
        for r in self.ranks:
            log(f"Load weight begin. avail mem={self.avail_gb(r):.2f} GB", r.rank)
        shards = 64
        progress = {"shard": 0}

        def weights(frac: float) -> None:
            self.weights_memory(frac)
            shard = int(frac * shards)
            if shard >= progress["shard"] + 8 or shard == shards:
                progress["shard"] = shard
                log(f"Loading safetensors checkpoint shards: {shard * 100 // shards:3d}% "
                    f"Completed | {shard}/{shards}", 0)
        await self.ramp(self.phase_s["weights"], 40, weights)
        self.check_fail("weights")
        self.check_room()
        if self.host:
            word = LAYOUT_WORDS[self.layout]
            for r in self.table_holders():  # each copy's holder says so, as SGLang's ranks do
                for label, share in TABLES:
                    resident = mem.host_table_bytes * share / MIB
                    log(f"engram host table {label}: layout={word}, {resident:.0f} MiB "
                        f"resident, {resident:.0f} MiB in huge pages (100%), pinned", r.rank)
        elapsed = time.monotonic() - t0
        for r in self.ranks:
            log(f"Load weight end. elapsed={elapsed:.2f} s, type=DeepseekV4ForCausalLM, "
                f"quant=fp8, avail mem={self.avail_gb(r):.2f} GB, "
                f"mem usage={mem.weights_bytes / GIB:.2f} GB.", r.rank)

    async def kv_pool(self) -> None:
        mem = self.mem
        for r in self.ranks:
            log("Using KV cache dtype: torch.float8_e4m3fn", r.rank)
        await self.ramp(self.phase_s["kv_pool"], 2, lambda f: None)
        self.check_fail("kv_pool")
        if mem.kv_tokens <= 0:  # another tenant's HBM left no room for one KV page
            log("Traceback (most recent call last):", 0)
            log("RuntimeError: Not enough memory. Please try to increase "
                "--mem-fraction-static.", 0)
            raise StartupFailed("Not enough memory for the KV cache (another process holds "
                                f"{max(self.held_by_others) / GIB:.1f} GiB of a GPU)")
        self.kv_memory()
        # The ranks agree on one reading of available host memory, taken now (the tables
        # and the weights' staging are in), as SGLang's sizing does.
        self.hicache_bytes_per_rank = self.hicache_size.per_rank(
            self.host_available(), 0, len(self.ranks))
        self.on_hicache(self.hicache_bytes_per_rank)
        total_gb = self.ref.gpu_total_bytes / GIB
        rest_gb = mem.kv_bytes / GIB
        # Profiled after the weights: what the static fraction leaves for KV is rest_memory,
        # the whole KV budget. (The measured available memory can differ from the weights'
        # "avail mem" by a little; here by the rounding of mem_fraction_static.)
        profiled_gb = rest_gb + total_gb * (1 - mem.mem_fraction_static)
        for r in self.ranks:
            log(f"Memory profiling: available_gpu_memory={profiled_gb:.2f} GB, "
                f"total_gpu_memory={total_gb:.2f} GB, "
                f"mem_fraction_static={mem.mem_fraction_static}, "
                f"rest_memory={rest_gb:.2f} GB", r.rank)
            for line in pool_styles.lines(self.pool_style, mem,
                                          self.ref.kv_pools.swa_full_tokens_ratio):
                log(line, r.rank)
            if self.hicache_bytes_per_rank:  # pinned host memory, held by the rank
                log(hicache.log_line(self.hicache_bytes_per_rank), r.rank)
                r.host_anon += self.hicache_bytes_per_rank
        self.push_all()
        for r in self.ranks:
            log(f"Memory pool end. avail mem={self.avail_gb(r):.2f} GB", r.rank)

    async def graphs(self) -> None:
        mem = self.mem
        t0 = time.monotonic()
        grow = self.graphs_memory()
        for r in self.ranks:
            log(f"Capture cuda graph begin. This can take up to several minutes. "
                f"avail mem={self.avail_gb(r):.2f} GB", r.rank)
        log("Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256]", 0)
        await self.ramp(self.phase_s["graphs"], 10, grow)
        self.check_fail("graphs")
        for r in self.ranks:
            log(f"Capture cuda graph end. Time elapsed: {time.monotonic() - t0:.2f} s. "
                f"mem usage={mem.graphs_bytes / GIB:.2f} GB. avail mem={self.avail_gb(r):.2f} GB.",
                r.rank)
        svc = self.placement.service
        log(f"max_total_num_tokens={mem.kv_tokens}, chunked_prefill_size={CHUNKED_PREFILL_SIZE}, "
            f"max_prefill_tokens={PREFILL_TOKEN_BUDGET}, "
            f"max_running_requests={svc.max_running_requests}, "
            f"context_len={CONTEXT_LEN}, available_gpu_mem={self.avail_gb(self.ranks[0]):.2f} GB",
            0)
