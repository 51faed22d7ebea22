"""What engram_top.model.facts gives the panels, alerts and exports: typed, frozen values.

Field names and their order are the keys snapshot.json has always had (facts.plain writes a
view as its fields, in order, or as its to_json() where a key is only sometimes present).
Maps keyed by data (phase durations, why a figure is unavailable) stay dicts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from collectors.readings import CgroupMemory, NumaNode, Quantiles
from scenarios.runstate import RunState


@dataclass(frozen=True)
class SourceStatus:
    """A source's latest state and message, and the age of its last good value (seconds)."""

    status: str  # a reading's Status value, or "none" before the first reading
    message: str
    last_good_age_s: float | None
    failing_for_s: float | None = None  # only while the source is failing

    def to_json(self) -> dict[str, Any]:
        # snapshot.json names failing_for_s only while the source fails, as it always has.
        out = asdict(self)
        if self.failing_for_s is None:
            del out["failing_for_s"]
        return out


@dataclass(frozen=True)
class GpuProcessView:
    pid: int
    name: str
    used_bytes: int | None
    server: bool = False  # the watched server's (model.host.gpu_server_pids)
    seen: bool | None = None  # on this host's /proc (collectors.readings.GpuProcess)
    container: str = ""  # what it runs in (collectors.readings.GpuProcess)


@dataclass(frozen=True)
class GpuView:
    index: int
    name: str
    uuid: str
    total_bytes: int
    reserved_bytes: int
    used_bytes: int
    free_bytes: int
    server_bytes: int  # what the watched server's processes hold on this GPU
    baseline_used_bytes: int | None
    util_gpu_pct: int | None
    power_w: float | None
    pcie_rx_bytes_per_s: float | None
    pcie_tx_bytes_per_s: float | None
    # SGLang's figures for the TP rank on this GPU ("GB" there is GiB).
    weights_gb: float | None
    kv_cache_gb: float | None
    kv_tokens: int | None
    processes: tuple[GpuProcessView, ...]
    # Health, as the GPU reading has it (None: not read there).
    power_limit_w: float | None = None
    temperature_c: int | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None  # () = not throttled
    energy_mj: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_rx_bytes_per_s: float | None = None
    nvlink_tx_bytes_per_s: float | None = None
    ecc_uncorrected: int | None = None
    xids: tuple[int, ...] = ()


@dataclass(frozen=True)
class HostView:
    total_bytes: int
    used_bytes: int
    available_bytes: int
    shmem_bytes: int
    baseline_used_bytes: int | None
    delta_bytes: int | None  # used now minus used at launch
    delta_gib: float | None
    hugepages_bytes: int
    swap_used_bytes: int
    server_rss_bytes: int | None
    server_rss_shmem_bytes: int | None
    server_pids: tuple[int, ...]
    numa_nodes: tuple[NumaNode, ...] = ()  # per NUMA node, as the host reading has them
    numa_problem: str = ""
    tree_problem: str = ""  # the host reading's: the server's processes not all readable
    # The memory cgroup the server runs in, where it has a limit: the kernel kills there.
    cgroup: CgroupMemory | None = None
    # The container the server runs in, from its cgroup ("docker 3f2a1b4c5d6e"); "" where
    # it runs on the host itself, or its processes are not known.
    container: str = ""
    # (size, free bytes) of the /dev/shm the server sees (collectors.readings.HostData).
    shm_mount: tuple[int, int] | None = None


@dataclass(frozen=True)
class KvView:
    capacity_tokens: int | None
    used_tokens: int | None
    token_usage: float | None
    running: int | None
    queued: int | None
    kv_cache_gb: float | None
    unavailable: dict[str, str]  # label -> why the server's figure is not a number
    # Hybrid models (DeepSeek-V4.x): the pools' usage; token_usage is their maximum.
    full_usage: float | None = None
    swa_usage: float | None = None
    available_tokens: int | None = None
    evictable_tokens: int | None = None
    retracted: int | None = None  # requests retracted now (the pool ran out mid-decode)
    retracted_per_s: float | None = None
    queue_time: Quantiles | None = None
    cache_hit_rate: float | None = None  # a fraction
    # One page's counters since the server started (no window yet, or none on this engine):
    # said as "since start", never as the window's hit rate.
    cache_hit_since_start: float | None = None
    paused: int | None = None  # requests paused now (SGLang: by an async weight sync)
    aborted_total: int | None = None  # requests aborted since the start
    aborted_per_s: float | None = None
    mamba_usage: float | None = None  # a hybrid model's Mamba state pool, 0..1
    # The pools SGLang sized at start-up (tokens per pool: full, swa, c4, c128, ...).
    pools: dict[str, int] | None = None
    page_problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class HiCacheView:
    """SGLang's hierarchical KV cache's host tier: its host pools and their traffic.

    Bytes are bytes: the start-up line's "GB" is 1e9 bytes (SGLang divides by 1e9 there,
    unlike its other memory lines). Every TP rank allocates its own pool, so ``pool_bytes``
    is the pools summed over the ranks. Rates are per second over the server window; None
    where the server does not report the figure (not 0).
    """

    pool_bytes_per_rank: float | None
    ranks: int | None
    pool_bytes: float | None  # summed over the ranks
    used_tokens: int | None  # the host pool's, summed over the schedulers that count
    total_tokens: int | None
    load_back_bytes_per_s: float | None  # host -> GPU, the node's (every rank's)
    backup_bytes_per_s: float | None  # GPU -> host, the node's
    dropped_host_pressure_per_s: float | None  # tokens dropped for host pressure
    evicted_per_s: float | None  # tokens evicted from the device cache
    source: str  # where the pool's size was read ("log: 8 ranks", "--hicache-size", ...)
    # Each TP rank's load-back bytes per second (rank r runs on GPU r): the page's tp_rank
    # series where it has them, else every rank at the reporting scheduler's figure.
    load_back_by_rank: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EngramView:
    """Where the Engram tables are and what they cost, as the engine reads the server."""

    placement: str | None
    layout: str | None
    source: str  # what the placement was read from
    prefetch: str  # the verdict: engaged, would not engage: ..., off, n/a
    reasons: tuple[str, ...]
    resident_mib: float | None  # the host tables' resident size, summed
    pinned: bool | None
    huge_pct: float | None  # resident in huge pages, weighted by size
    lookups_per_s: float | None  # over every Engram layer, where the server logs them
    hit_rate_pct: float | None  # the row cache's, lookup-weighted over layers

    @property
    def verdict(self) -> str:
        return f"prefetch: {self.prefetch}"


@dataclass(frozen=True)
class LatencyView:
    window_s: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    gen_throughput: float | None
    unavailable: dict[str, str]
    ttft: Quantiles | None
    itl: Quantiles | None
    e2e: Quantiles | None
    tpot: Quantiles | None = None  # vLLM's per-request time per output token: not the ITL
    engine: str = ""  # whose histograms these are (facts.engine_of)


@dataclass(frozen=True)
class EngramTableView:
    """One Engram host table, as the server's start-up log described it."""

    label: str
    layout: str
    resident_mib: float
    huge_pct: float
    pinned: bool | None
    no_huge_pages_warning: str | None


@dataclass(frozen=True)
class RunView:
    scenario: str
    placement: str
    node: str
    state: RunState
    phase: str
    pid: int | None
    url: str | None
    log_path: str | None
    time_scale: float
    launched_wall: float
    exit_code: int | None
    ready_s: float | None
    ready_s_node: float | None  # what the same start-up takes at time scale 1
    phase_durations_s: dict[str, float]
    max_total_num_tokens_log: int | None
    engram_host_tables: tuple[EngramTableView, ...]
    log_errors: tuple[str, ...]  # the last ten
