"""Typed readings: what every collector returns.

A collector never lets an exception escape: a failed poll is a Reading whose status says
what went wrong, when the trouble started, and carries no data. Bytes are stored as bytes;
times are monotonic seconds (``at``) plus wall-clock seconds (``wall``) for exports.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Literal, NamedTuple, TypeVar

T = TypeVar("T")


class Status(StrEnum):
    OK = "ok"
    # The source answered, but is not serving yet (SGLang /health 503 while starting).
    STARTING = "starting"
    # The source cannot exist here (no NVIDIA driver): a state, not a fault.
    UNAVAILABLE = "unavailable"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Reading(Generic[T]):
    source: str
    status: Status
    data: T | None = None
    message: str = ""
    at: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)
    # Monotonic time of the first failure in the current run of failures (None when OK).
    failing_since: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


# --------------------------------------------------------------------------- GPU (NVML)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None where NVML cannot say (WDDM, some containers)
    name: str = ""
    # Whether this host's /proc has the pid: False for another PID namespace's (the
    # dashboard in a container, the driver answering with the host's pids); None where
    # nobody looked (a simulated node, an older recording).
    seen: bool | None = None
    # What it runs in, from its cgroup ("docker 3f2a1b4c5d6e", "k8s pod 7d1c0e2a, ..."):
    # collectors.cgroup.container_name; "" on the host itself or where not read.
    container: str = ""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    # Memory v2 semantics (what nvidia-smi shows): total = reserved + used + free.
    total_bytes: int
    reserved_bytes: int
    used_bytes: int
    free_bytes: int
    util_gpu_pct: int | None = None
    util_mem_pct: int | None = None  # % of time memory was read or written, not capacity
    power_w: float | None = None
    power_limit_w: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    # Fields NVML refused (NotSupported, FunctionNotFound...), name -> error text.
    unsupported: tuple[tuple[str, str], ...] = ()
    # Health and interconnect. None: not read (refused, listed in unsupported, or not
    # provided by this backend); a reading, never an error.
    temperature_c: int | None = None  # GPU core
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    # What holds the clocks down now (sw_power_cap, hw_thermal_slowdown...); () = nothing.
    # Idle and an applications-clocks setting are not throttling and never appear here.
    throttle_reasons: tuple[str, ...] | None = None
    energy_mj: int | None = None  # cumulative, since the driver loaded
    pcie_gen: int | None = None  # current link; an idle GPU may train down to save power
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_errors: int | None = None  # cumulative link-level retransmissions
    nvlink_tx_bytes_per_s: float | None = None  # all links together
    nvlink_rx_bytes_per_s: float | None = None
    ecc_corrected: int | None = None  # volatile: since the driver loaded
    ecc_uncorrected: int | None = None
    xids: tuple[int, ...] = ()  # the last XID errors seen while watched, oldest first


@dataclass(frozen=True, slots=True)
class GpuData:
    driver_version: str
    devices: tuple[GpuDevice, ...]
    backend: str = "nvml"  # "nvml" or "simulated"


# --------------------------------------------------------------------------- host


@dataclass(frozen=True, slots=True)
class ProcessTreeMemory:
    root_pid: int
    pids: tuple[int, ...]
    rss_bytes: int
    rss_anon_bytes: int
    rss_file_bytes: int
    # Shared anonymous / tmpfs memory; where pinned (cudaHostAlloc) host memory shows up.
    rss_shmem_bytes: int
    # Pinned and locked pages (VmPin + VmLck), summed; None where the kernel gives neither
    # line (before Linux 3.2, or a backend that does not read them): unknown, not 0.
    pinned_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """A process outside the server's tree, by its resident memory (VmRSS)."""

    pid: int
    name: str
    rss_bytes: int
    # Where it sits, (NUMA node, bytes), on a host of two nodes or more; () elsewhere.
    numa_bytes: tuple[tuple[int, int], ...] = ()
    container: str = ""  # what it runs in, as GpuProcess.container


@dataclass(frozen=True, slots=True)
class KernelKill:
    """One process the kernel killed for memory (collectors.kernel_log reads them)."""

    pid: int
    comm: str
    cgroup_limit: bool  # a memory cgroup's limit, not the whole host
    anon_bytes: int | None = None
    file_bytes: int | None = None
    shmem_bytes: int | None = None  # shared/pinned host memory it held
    memcg: str = ""  # the cgroup whose limit was hit, where the kernel names it
    line: str = ""  # the kernel's line, as it said it (cleaned for a terminal)


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    """A memory cgroup's figures (collectors.cgroup): where a server runs in a container,
    what the kernel holds it to, which can be far less than the host has free."""

    path: str  # as /proc/PID/cgroup names it ("/system.slice/docker-ab12.scope")
    version: int  # 2 (the unified hierarchy), or 1
    limit_bytes: int | None  # memory.max (v1: memory.limit_in_bytes); None: no limit
    current_bytes: int | None  # memory.current (v1: memory.usage_in_bytes)
    anon_bytes: int | None = None  # memory.stat anon (v1: rss)
    file_bytes: int | None = None  # memory.stat file, shmem and tmpfs in it (v1: cache)
    shmem_bytes: int | None = None  # memory.stat shmem: pinned tables, /dev/shm
    oom_kills: int | None = None  # memory.events oom_kill (v1: memory.oom_control)

    @property
    def available_bytes(self) -> int | None:
        """What the kernel lets it take before it reclaims its last page cache and kills:
        the limit less what it holds, its reclaimable page cache (file - shmem) counted
        free. None without a limit."""
        if self.limit_bytes is None or self.current_bytes is None:
            return None
        cache = max(0, (self.file_bytes or 0) - (self.shmem_bytes or 0))
        return max(0, self.limit_bytes - self.current_bytes + cache)


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node's memory (/sys/devices/system/node/nodeN/meminfo), in bytes."""

    node: int
    total_bytes: int
    free_bytes: int
    # total - free - reclaimable page cache (FilePages - Shmem): a node has no MemAvailable,
    # and the kernel's MemUsed counts page cache, yet pinned Shmem must count as used.
    used_bytes: int
    shmem_bytes: int
    hugepages_total_bytes: int  # hugetlb pool of the default page size
    hugepages_free_bytes: int
    thp_bytes: int  # transparent huge pages: AnonHugePages + ShmemHugePages
    # The server's shared host memory resident here (memfd, shmem and hugetlb mappings: the
    # Engram tables), from its processes' numa_maps; None where those were not read.
    server_shared_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ShmFile:
    """A file in /dev/shm that no live process has open or mapped: host RAM (tmpfs) that
    only a remove gives back, most often a crashed server's segment."""

    name: str
    bytes: int  # allocated, not its apparent size: a sparse file holds only what was written
    age_s: float  # since it was made (its ctime), at the reading


@dataclass(frozen=True, slots=True)
class HostData:
    total_bytes: int
    available_bytes: int
    used_bytes: int  # total - MemAvailable (psutil >= 7 semantics; does not hide pinned memory)
    free_bytes: int
    cached_bytes: int
    shmem_bytes: int
    hugepages_total: int
    hugepages_free: int
    hugepage_size_bytes: int
    anon_hugepages_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    swap_in_bytes: int  # cumulative, from /proc/vmstat
    swap_out_bytes: int
    server_tree: ProcessTreeMemory | None = None
    backend: str = "proc"  # "proc" or "simulated"
    buffers_bytes: int = 0  # block-device page cache, reclaimable as Cached is
    # Per NUMA node; empty where the kernel shows none (and in recordings made before).
    numa_nodes: tuple[NumaNode, ...] = ()
    numa_problem: str = ""  # why some NUMA figures are missing, in one line; "" when none
    # Why the server's tree is missing or partial, in one line: processes of it this user
    # may not read (/proc mounted hidepid=1, another user's server); "" when none.
    tree_problem: str = ""
    # Processes the kernel's OOM killer has killed since boot (/proc/vmstat oom_kill, Linux
    # 4.13+); None where the kernel does not say. A rise while a server ran that then died
    # is an OOM kill even where the kernel log cannot be read.
    oom_kills: int | None = None
    # The memory cgroup the server runs in (without one, the one this process runs in: where
    # a server it starts would go); None on a host with no limit there, or not read.
    cgroup: CgroupMemory | None = None
    # The largest processes outside the server's tree, by RSS, largest first (re-read every
    # 30 s: a scan of every process); empty where not read, and in older recordings.
    largest_others: tuple[ProcessMemory, ...] = ()
    # /dev/shm's files that no live process holds, largest first (re-read every 30 s:
    # collectors.shm); empty where none, not read, and in older recordings.
    shm_unheld: tuple[ShmFile, ...] = ()
    # (size, free bytes) of the /dev/shm the server sees (its mount namespace's: a
    # container's own), else this process's; None where not read, and in older recordings.
    shm_mount: tuple[int, int] | None = None
    # The container the server runs in, from its cgroup (collectors.cgroup.container_name:
    # "docker 3f2a1b4c5d6e"); "" on the host itself, or without the server's tree.
    server_container: str = ""


# --------------------------------------------------------------------------- SGLang


class Bucketed(NamedTuple):
    """One quantile of a histogram and the bucket it fell in (collectors.windowed decides
    ``coarse``, once, for every screen and file)."""

    value: float | None  # histogram_quantile's figure: interpolated inside the bucket
    lo: float | None  # the bucket's lower bound, 0 for the first one; None: not known
    hi: float | None  # its upper bound; None for the +Inf bucket (or not known)
    # The bucket is wider than windowed.COARSE_SHARE of ``value`` (the first bucket from 0
    # always is), or open (+Inf): ``value`` is an interpolation, not a measurement, and the
    # screens and files say the bucket's bounds instead ("<= 100 ms", "100-200 ms").
    coarse: bool = False
    over: bool = False  # in the +Inf bucket: ``value`` is the highest finite bound


Which = Literal["p50", "p99"]


@dataclass(frozen=True, slots=True)
class Quantiles:
    p50: float | None
    p99: float | None
    mean: float | None  # exact: the window's _sum over its _count
    count: float  # observations in the window
    # The quantile fell in the +Inf bucket: the value is the last finite bound, a lower
    # bound ("> 30 s"), not the quantile itself.
    p50_over: bool = False
    p99_over: bool = False
    # The quantile fell in the lowest bucket (0 to first_bound). Kept for recordings made
    # before the buckets below were (bucketed() reads them there).
    p50_under: bool = False
    p99_under: bool = False
    first_bound: float | None = None
    # The spread of the window's observations (a standard deviation about ``mean``), from
    # the bucket counts (windowed.bucket_sd); None where it cannot be told. ``over``: the
    # observations above the highest finite bound, whose spread nobody knows.
    sd: float | None = None
    over: float = 0.0
    # The bucket each quantile fell in, (lower, upper) in seconds, the upper None for the
    # +Inf bucket; ``*_coarse``: too wide a bucket for the interpolated figure to be a
    # measurement (Bucketed.coarse). None where the quantile came without its buckets.
    p50_bucket: tuple[float, float | None] | None = None
    p99_bucket: tuple[float, float | None] | None = None
    p50_coarse: bool = False
    p99_coarse: bool = False

    def bucketed(self, which: Which) -> Bucketed:
        """The p50 or p99 with its bucket. A recording made before buckets were kept gives
        them from its older flags (the first bucket, the +Inf one); a quantile that came
        without buckets (Prometheus's answer) has none, and reads as its figure."""
        if which == "p50":
            value, bucket, coarse, over, under = (self.p50, self.p50_bucket, self.p50_coarse,
                                                  self.p50_over, self.p50_under)
        else:
            value, bucket, coarse, over, under = (self.p99, self.p99_bucket, self.p99_coarse,
                                                  self.p99_over, self.p99_under)
        if bucket is not None:
            return Bucketed(value, bucket[0], bucket[1], coarse or over, over)
        if over and value is not None:
            return Bucketed(value, value, None, True, True)
        if under and self.first_bound is not None:
            return Bucketed(value, 0.0, self.first_bound, True, False)
        return Bucketed(value, None, None)


@dataclass(frozen=True, slots=True)
class StackPage:
    """A page of the serving stack that is no engine's, where a server was expected: SGLang's
    router (sgl-router, sgl-model-gateway) or LMCache's. It has no GPU memory or KV pool of
    its own: those are its workers'. ``kind`` is page_kind's word for it."""

    kind: str  # "sgl-router" or "lmcache"
    summary: str  # one line: what it is and what it holds
    workers: tuple[str, ...] = ()  # the workers its page names (URLs), at most a few
    active_workers: float | None = None
    running_requests: float | None = None
    requests_total: float | None = None
    # The router's cache-aware routing hits, or LMCache's hit tokens of those asked for,
    # since it started (one page has no window).
    hit_rate_since_start: float | None = None


@dataclass(frozen=True, slots=True)
class ServerData:
    url: str
    healthy: bool
    # From /server_info (None until it answers).
    version: str | None = None
    model_path: str | None = None
    tp_size: int | None = None
    max_total_num_tokens: int | None = None
    weight_gb: float | None = None  # SGLang's "GB" figures are GiB
    kv_cache_gb: float | None = None
    graph_gb: float | None = None
    # From /metrics gauges.
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    num_used_tokens: float | None = None
    token_usage: float | None = None
    gen_throughput: float | None = None
    # Hybrid (multi-pool) KV models such as DeepSeek-V4: each pool's usage, 0..1; token_usage
    # is the highest of them (the bottleneck).
    full_token_usage: float | None = None
    swa_token_usage: float | None = None
    kv_used_tokens: float | None = None
    kv_available_tokens: float | None = None
    kv_evictable_tokens: float | None = None
    # Memory pressure: requests retracted (preempted) now, and per second in the window.
    num_retracted_reqs: float | None = None
    retracted_per_s: float | None = None
    cache_hit_rate: float | None = None  # a fraction, 0..1, whatever the server's era
    # Since the server started, from one page's counters (a single page has no window):
    # vLLM's prefix-cache hits over its queries, SGLang's cached prompt tokens over its
    # prompt tokens. Never shown as cache_hit_rate, which is the window's (or the gauge's).
    cache_hit_rate_since_start: float | None = None
    # Requests paused (SGLang: by an async weight sync), and those aborted since the start
    # and per second in the window.
    num_paused_reqs: float | None = None
    aborted_requests_total: float | None = None
    # SGLang PD disaggregation: requests whose KV transfer between prefill and decode
    # failed, since the start.
    transfer_failed_total: float | None = None
    aborted_per_s: float | None = None
    # Prompt tokens served from a cache since the start, by where (SGLang's cache_source:
    # device, host, storage), and per second in the window.
    cached_tokens_total: float | None = None
    cached_tokens_by_source: dict[str, float] = field(default_factory=dict)
    cached_tokens_per_s: float | None = None
    # A hybrid model's Mamba state pool's usage, 0..1 (SGLang's mamba_usage).
    mamba_usage: float | None = None
    # Hierarchical cache's host KV tier.
    hicache_host_used_tokens: float | None = None
    hicache_host_total_tokens: float | None = None
    # Its traffic and losses, per second over the window (counter deltas): bytes loaded back
    # host -> GPU and backed up GPU -> host, tokens dropped for host pressure, tokens evicted
    # (the device radix cache's, with or without HiCache). The byte rates are one scheduler
    # per DP rank's (the lowest TP rank's); by_rank keeps each tp_rank's where the page has it.
    hicache_load_back_bytes_per_s: float | None = None
    hicache_backup_bytes_per_s: float | None = None
    hicache_dropped_host_pressure_per_s: float | None = None
    evicted_tokens_per_s: float | None = None
    hicache_load_back_by_rank: dict[int, float] = field(default_factory=dict)
    # Windowed, from histogram and counter deltas (seconds; tokens/s).
    ttft: Quantiles | None = None
    itl: Quantiles | None = None
    e2e: Quantiles | None = None
    queue_time: Quantiles | None = None
    # vLLM's per-request time per output token (one observation a request: its decode time
    # over its tokens): not the inter-token latency, so never shown as it.
    tpot: Quantiles | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    window_s: float | None = None
    # Per TP rank (scheduler gauges carry tp_rank; every rank reports with SGLang's
    # --enable-metrics-for-all-schedulers): weight_gb, kv_cache_gb, max_total_num_tokens.
    ranks: dict[int, dict[str, float]] = field(default_factory=dict)
    # The server args its info endpoint gives that a placement reading needs (SGLang's
    # /server_info: tp_size, attention backends, engram_config ...), by name; {} where none.
    server_args: dict[str, object] = field(default_factory=dict)
    # Figures its engine does not report at all (field -> why): vLLM's weights, graph memory
    # and tokens in use. Said once by the panels, never shown as zeros.
    not_reported: dict[str, str] = field(default_factory=dict)
    # A simulated server's own block of /server_info (its placement, time scale, node
    # folder, Engram environment); None for any other server.
    simulated: dict[str, object] | None = None
    # What else its engine's collector gives, by name (vLLM's cache_config): kept, recorded
    # and exported, read by no panel.
    extra: dict[str, object] = field(default_factory=dict)
    # Figures the server sent but that are not numbers to show (NaN, +Inf): field -> why,
    # "n/a: NaN from rank 0". The field itself is None.
    unavailable: dict[str, str] = field(default_factory=dict)
    # What is wrong with the page itself though it parsed: a _count that disagrees with its
    # +Inf bucket, a series given twice. One line each, naming the metric.
    page_problems: tuple[str, ...] = ()
    # Where the URL serves a router's or a cache's page instead of an engine's: its figures
    # (requests_per_s above is then the router's).
    stack_page: StackPage | None = None


@dataclass(frozen=True)
class OtherData:
    """The data of a reading type this program has no format for (a newer source's, read
    back from a recording): its type's name and its fields as plain values."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)


def spell(value: float) -> str:
    """How a figure that is not a number reads on the screen."""
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def finite(data: ServerData) -> ServerData:
    """The same data with every NaN or infinite figure made None, and why kept in
    ``unavailable``: whatever reads a ServerData (panels, int() in the facts, JSON exports)
    meets numbers or None only. Also applied to recordings made before this check."""
    changes: dict[str, Any] = {}
    why = dict(data.unavailable)
    for f in dataclasses.fields(data):
        value = getattr(data, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            changes[f.name] = None
            why.setdefault(f.name, f"n/a: {spell(value)}")
        elif isinstance(value, Quantiles):
            q = _finite_quantiles(value)
            if q is not value:
                changes[f.name] = q
                why.setdefault(f.name, "n/a: NaN or Inf in the histogram")
    ranks = {r: {k: v for k, v in figures.items() if _is_finite(v)}
             for r, figures in data.ranks.items()}
    if ranks != data.ranks:
        changes["ranks"] = ranks
    if not changes:
        return data
    return dataclasses.replace(data, **changes, unavailable=why)


def _is_finite(value: object) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _finite_quantiles(q: Quantiles) -> Quantiles:
    if all(_is_finite(v) for v in (q.p50, q.p99, q.mean)) and math.isfinite(q.count):
        return q
    return dataclasses.replace(q, p50=_finite_or_none(q.p50), p99=_finite_or_none(q.p99),
                               mean=_finite_or_none(q.mean),
                               count=q.count if math.isfinite(q.count) else 0.0)


def _finite_or_none(value: float | None) -> float | None:
    return value if _is_finite(value) else None
