"""What the startup-log parser learns about a server: immutable facts, in SGLang's units.

collectors.sglang.startup_log builds these from the log lines; the supervisor, the store and the
snapshots read them. Units: SGLang prints "GB" but divides by 1024**3, so every ``*_gb``
field is GiB exactly as SGLang means it (the Engram host-table lines print MiB = 1024**2).
Use :mod:`collectors.units`' ``gib_to_bytes`` / ``mib_to_bytes`` (or the ``*_bytes``
properties) for bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from collectors.units import MIB, gib_to_bytes

# Phases in startup order; current_phase() returns one of these or FAILED.
PHASES: tuple[str, ...] = (
    "launching", "distributed_init", "weights", "kv_pool", "graphs", "http", "warmup", "ready",
)
FAILED = "failed"
# After the startup phases (and after "ready"): the server was asked to stop / has stopped.
STOPPING = "stopping"
STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class WeightLoad:
    """One ``Load weight begin``/``end`` pair; a speculative draft model adds a second one."""

    begin_avail_gb: float | None = None
    elapsed_s: float | None = None
    model_type: str | None = None  # the "type=" key: model class, or Main/Draft on spec paths
    dtype: str | None = None
    quant: str | None = None
    avail_gb: float | None = None
    mem_usage_gb: float | None = None  # free before minus free after: the weights' HBM
    # No "mem usage=" printed (older builds): the drop in "avail mem" from begin to end.
    mem_usage_derived: bool = False
    begin_at: float | None = None
    end_at: float | None = None


@dataclass(frozen=True, slots=True)
class KvPool:
    """One ``KV Cache is allocated`` line (MHA: K + V sizes; MLA: one KV size)."""

    tokens: int | None = None  # None on the early-2025 text that printed no #tokens
    k_size_gb: float | None = None
    v_size_gb: float | None = None
    kv_size_gb: float | None = None
    extra_gb: float | None = None  # "Landmark size" (DSA pools) or a bare "Cache size"
    total_gb: float | None = None  # K + V (or KV) + extra
    # Inline "dtype: .." (0.5.x), else the "Using KV cache dtype" line before it (older).
    dtype: str | None = None
    at: float | None = None
    # The words before "KV Cache is allocated" ("Full", "SWA": a SWA model's two pools),
    # "post-capture" for the pool a post-capture resize states; None where there are none.
    label: str | None = None


@dataclass(frozen=True, slots=True)
class GraphCapture:
    """One CUDA-graph capture (plain, piecewise, target decode/verify, draft decode...)."""

    kind: str  # text between "Capture" and "cuda graph", lower case; "default" when empty
    begin_avail_gb: float | None = None
    elapsed_s: float | None = None
    mem_usage_gb: float | None = None
    avail_gb: float | None = None
    begin_at: float | None = None
    end_at: float | None = None


@dataclass(frozen=True, slots=True)
class RankFacts:
    """What one TP rank printed. Headline fields describe the first (main-model) load, pool
    and all captures; the tuples keep every occurrence (draft models add more)."""

    rank: int
    dist_init_elapsed_s: float | None = None
    dist_init_mem_usage_gb: float | None = None
    memory_baseline_gb: float | None = None  # "Memory baseline taken. mem usage=.. GB" (0.5.x)
    weights_begin_avail_gb: float | None = None
    weights_elapsed_s: float | None = None
    weights_type: str | None = None
    weights_dtype: str | None = None
    weights_quant: str | None = None
    weights_avail_gb: float | None = None  # avail mem after the main load
    weights_gb: float | None = None  # "mem usage" of the main load
    all_weights_gb: float | None = None  # main + draft loads
    kv_dtype: str | None = None  # the main pool's dtype (else the latest "Using KV cache dtype")
    kv_tokens: int | None = None
    k_size_gb: float | None = None
    v_size_gb: float | None = None
    kv_size_gb: float | None = None  # MLA pools print one figure
    kv_total_gb: float | None = None  # main pool
    all_kv_gb: float | None = None  # main + draft pools
    pool_end_avail_gb: float | None = None  # latest "Memory pool end"
    graph_begin_avail_gb: float | None = None  # first capture's begin
    graph_mem_usage_gb: float | None = None  # sum over captures that reported it
    graph_elapsed_s: float | None = None  # sum over captures that reported it
    graph_avail_gb: float | None = None  # latest capture end
    weight_loads: tuple[WeightLoad, ...] = ()
    kv_pools: tuple[KvPool, ...] = ()
    graph_captures: tuple[GraphCapture, ...] = ()
    # "Memory profiling: available_gpu_memory=.. GB, total_gpu_memory=.., mem_fraction_static
    # =.., rest_memory=.. GB": *_gb keys in GiB, mem_fraction_static a fraction.
    memory_profile: dict[str, float] = field(default_factory=dict)
    # Hybrid KV models (DeepSeek-V4): the pool configurator's lines. kv_sizing: the first
    # "<tag> memory calculation" (line: its tag, full_tokens, available_bytes_gb, ..);
    # pool_sizes: the first "pool sizes" (or "Initialize ..TokenToKVPool") line by pool;
    # a second one (a speculative draft model's) apart in draft_pool_sizes.
    swa_sizing: dict[str, float | int | str] = field(default_factory=dict)
    kv_sizing: dict[str, float | int | str] = field(default_factory=dict)
    pool_sizes: dict[str, int] = field(default_factory=dict)
    draft_pool_sizes: dict[str, int] = field(default_factory=dict)
    # "Allocating X GB host memory for hierarchical KV cache.": HiCache's host pool on this
    # rank, in BYTES (that line divides by 1e9, not 1024**3), summed over its lines (a
    # hybrid model may size one host pool per KV pool); None where the line was not seen.
    hicache_host_bytes: float | None = None
    hicache_host_lines: int = 0
    # The rank's place by every dimension its line prefix names ({"DP": 1, "TP": 0}; {} for
    # a bare line) and those as printed ("DP1 TP0"). The ranks' key is the GPU order.
    coords: dict[str, int] = field(default_factory=dict)
    label: str = ""
    # The line each KV figure was taken from: kv_tokens ("sliding window pool:
    # full_layer_tokens", "SWAKVPool: full size", "KV Cache is allocated: #tokens", ..) and
    # kv_total_gb ("SWAKVPool mem usage", "KV Cache is allocated", or "derived: ..").
    kv_tokens_from: str | None = None
    kv_total_from: str | None = None
    # "Mamba Cache is allocated. max_mamba_cache_size: N, conv_state size: X GB, ssm_state
    # size: Y GB, ..": counts as printed, sizes under "<name>_gb" (GiB); their sum apart.
    mamba_state: dict[str, float | int] = field(default_factory=dict)
    mamba_state_gb: float | None = None
    # vLLM (v0.21+) "Estimated CUDA graph memory: X GiB total", before capture: an estimate,
    # kept apart from what a capture line says it took (graph_mem_usage_gb).
    graph_estimate_gb: float | None = None

    @property
    def weights_bytes(self) -> int | None:
        return gib_to_bytes(self.weights_gb)

    @property
    def kv_total_bytes(self) -> int | None:
        return gib_to_bytes(self.kv_total_gb)

    @property
    def graph_bytes(self) -> int | None:
        return gib_to_bytes(self.graph_mem_usage_gb)


@dataclass(frozen=True, slots=True)
class EngramTable:
    """``engram host table {label}: layout=.., N MiB resident, M MiB in huge pages (P%), ..``"""

    label: str
    layout: str
    resident_mib: float
    huge_mib: float
    huge_pct: float
    pinned: bool | None  # "pinned" -> True, "unpinned (ATS)" -> False, neither -> None
    no_huge_pages_warning: str | None = None  # "No huge pages: expect ~10x slower ..." text
    rank: int = 0
    at: float | None = None

    @property
    def resident_bytes(self) -> int:
        return round(self.resident_mib * MIB)

    @property
    def huge_bytes(self) -> int:
        return round(self.huge_mib * MIB)


@dataclass(frozen=True, slots=True)
class LogError:
    at: float | None
    kind: str  # traceback, oom, warmup_failed, health_check, engram, retract
    text: str
    rank: int = 0
    exception: str | None = None  # the closing "SomeError: ..." line of a traceback
    fatal: bool = False  # seen before "ready" with a fatal kind
    # The start-up phase the traceback's frames point at (model_runner's init_memory_pool:
    # "kv_pool"), where they name one.
    phase: str | None = None
    rank_label: str = ""  # the line's rank by every dimension its prefix names ("PP1 TP0")


@dataclass(frozen=True, slots=True)
class DecodeStats:
    at: float | None
    rank: int
    running_reqs: int | None = None
    num_tokens: int | None = None  # "#token", "#full token" on hybrid models
    token_usage: float | None = None  # "full token usage" on hybrid (SWA/Mamba) models
    full_token_usage: float | None = None  # hybrid models: each pool's usage
    swa_token_usage: float | None = None
    swa_tokens: int | None = None
    gen_throughput: float | None = None  # tokens/s
    queue_reqs: int | None = None
    accept_len: float | None = None
    graph: bool | None = None  # cuda/cpu/npu graph
    cache_hit_rate: float | None = None  # the prefix cache's, a fraction (vLLM's stats line)


@dataclass(frozen=True, slots=True)
class KvShortfall:
    """A start-up refused because one request of the longest length does not fit in the KV
    cache (vLLM's check before it serves), in the engine's figures."""

    needed_gb: float  # what one request of max_seq_len needs
    available_gb: float  # what the KV cache has
    max_seq_len: int | None = None  # the length asked for (where the line states it)
    fits_len: int | None = None  # the longest the engine estimates would fit


@dataclass(frozen=True, slots=True)
class PrefillStats:
    at: float | None
    rank: int
    new_seqs: int | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    token_usage: float | None = None
    full_token_usage: float | None = None
    swa_token_usage: float | None = None
    running_reqs: int | None = None
    queue_reqs: int | None = None
    input_throughput: float | None = None
    graph: bool | None = None


@dataclass(frozen=True, slots=True)
class PhaseSpan:
    """One pass through a phase. A phase entered again (a draft model's weights, a second
    graph capture) gets another span; start/end are None where the line was not seen."""

    phase: str
    start: float | None
    end: float | None


@dataclass(frozen=True, slots=True)
class ServerArgsFacts:
    """The ``server_args=ServerArgs(...)`` dump: the settings a placement reading needs,
    typed (None when the dump does not give them or gives another type), and every key as
    printed in ``raw`` (secrets redacted)."""

    model_path: str | None = None
    tp_size: int | None = None
    dp_size: int | None = None
    pp_size: int | None = None
    ep_size: int | None = None
    mem_fraction_static: float | None = None
    kv_cache_dtype: str | None = None
    page_size: int | None = None
    context_length: int | None = None
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    attention_backend: str | None = None
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    enable_dp_attention: bool | None = None
    enable_hierarchical_cache: bool | None = None
    hicache_ratio: float | None = None
    hicache_size: float | None = None
    swa_full_tokens_ratio: float | None = None
    engram_config: str | dict[str, object] | None = None
    raw: dict[str, object] = field(default_factory=dict)


def server_args_facts(values: Mapping[str, object], raw: dict[str, object]) -> ServerArgsFacts:
    """ServerArgsFacts of the settings a log states by ServerArgsFacts' names, each of its
    field's type or None (a bool is no int here; an int is a float)."""

    def text(name: str) -> str | None:
        value = values.get(name)
        return value if isinstance(value, str) else None

    def whole(name: str) -> int | None:
        value = values.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def real(name: str) -> float | None:
        value = values.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    def flag(name: str) -> bool | None:
        value = values.get(name)
        return value if isinstance(value, bool) else None

    engram = values.get("engram_config")
    return ServerArgsFacts(
        model_path=text("model_path"), tp_size=whole("tp_size"), dp_size=whole("dp_size"),
        pp_size=whole("pp_size"), ep_size=whole("ep_size"),
        mem_fraction_static=real("mem_fraction_static"),
        kv_cache_dtype=text("kv_cache_dtype"), page_size=whole("page_size"),
        context_length=whole("context_length"),
        max_running_requests=whole("max_running_requests"),
        chunked_prefill_size=whole("chunked_prefill_size"),
        attention_backend=text("attention_backend"),
        decode_attention_backend=text("decode_attention_backend"),
        prefill_attention_backend=text("prefill_attention_backend"),
        speculative_algorithm=text("speculative_algorithm"),
        speculative_num_steps=whole("speculative_num_steps"),
        speculative_num_draft_tokens=whole("speculative_num_draft_tokens"),
        speculative_draft_model_path=text("speculative_draft_model_path"),
        enable_dp_attention=flag("enable_dp_attention"),
        enable_hierarchical_cache=flag("enable_hierarchical_cache"),
        hicache_ratio=real("hicache_ratio"), hicache_size=real("hicache_size"),
        swa_full_tokens_ratio=real("swa_full_tokens_ratio"),
        engram_config=engram if isinstance(engram, str | dict) else None,
        raw=raw)


@dataclass(frozen=True, slots=True)
class StartupFacts:
    """Everything known so far. ``*_gb`` are GiB (SGLang's "GB"), ``*_mib`` MiB, times are
    the clock of the fed lines (``at`` or prefix timestamps). ``launch_at`` is the first line
    fed that has a time, so attach the parser at the start of the log for a meaningful
    "launching" phase. ``phase`` is one of PHASES, FAILED, STOPPING or STOPPED."""

    ranks: dict[int, RankFacts] = field(default_factory=dict)  # TP rank -> facts
    # Scheduler summary line (TP rank 0).
    max_total_num_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    # "available_<device>_mem=.. GB": device "gpu" on GPUs, "cpu" on CPU builds (host RAM).
    available_mem_gb: float | None = None
    available_mem_device: str | None = None
    available_gpu_mem_gb: float | None = None  # available_mem_gb when the device is "gpu"
    scheduler_extra: dict[str, str] = field(default_factory=dict)  # keys this parser does not know
    # The KV capacity in tokens: max_total_num_tokens, else (hybrid models, whose builds may
    # print no such line) the full pool's size from the lowest rank's sizing lines.
    kv_capacity_tokens: int | None = None
    # The lowest rank's pool sizes (the main model's, and a draft model's apart).
    pool_sizes: dict[str, int] = field(default_factory=dict)
    draft_pool_sizes: dict[str, int] = field(default_factory=dict)
    server_args: ServerArgsFacts | None = None
    swa_full_tokens_ratio: float | None = None  # "Setting swa_full_tokens_ratio to X for .."
    # "Engine startup timings (s): load_weight=.., cuda_graph={prefill=.., ..}, ..": seconds
    # by key, in printed order; nested groups flattened with a dot ("cuda_graph.decode").
    startup_timings_s: dict[str, float] = field(default_factory=dict)
    # Engram.
    engram_tables: tuple[EngramTable, ...] = ()
    engram_config_text: str | None = None  # raw "DeepSeek-V4.1 Engram tables: ..." message
    engram_config: dict[str, str] = field(default_factory=dict)  # placement/replication/lookup
    engram_messages: tuple[str, ...] = ()  # page-cache drops, MADV_COLLAPSE errno, unknown lines
    # "Engram layer=N lookups=.. hit_rate=..% reads=.. cache=..GiB(K-way) ..": each layer's
    # latest line (lookups and reads since the line before; interval_s the time between
    # the two, None for a layer's first), and the totals since the log began.
    engram_layers: dict[int, dict[str, object]] = field(default_factory=dict)
    # HTTP.
    uvicorn_pid: int | None = None
    uvicorn_url: str | None = None
    # Outcome.
    ready: bool = False
    ready_at: float | None = None
    failed_at: float | None = None
    # The phase the start-up failed in: what the error's text and its traceback's frames
    # say (a KV pool allocation's frames: "kv_pool"), else the phase current when it came.
    failed_in: str | None = None
    # Why, in one line ("ValueError: The model's max seq len (163840) is larger than ..."):
    # the fatal error's own words, cut at the first line; None where the start-up did not fail.
    failure_cause: str | None = None
    errors: tuple[LogError, ...] = ()
    # Shutdown (see the module docstring): the first stop line, uvicorn's "Finished server".
    stopping_at: float | None = None
    stopped_at: float | None = None
    # Parallel layout: tp_size, dp_size, pp_size, ep_size (and attn_cp_size, moe_dp_size
    # where prefixes name them), each from the first source that gives it, named in
    # parallel_from: "server_args", "launch command", or "rank prefixes" (derived).
    parallel: dict[str, int] = field(default_factory=dict)
    parallel_from: dict[str, str] = field(default_factory=dict)
    # Where kv_capacity_tokens came from ("max_total_num_tokens", or the lowest rank's line).
    kv_capacity_from: str | None = None
    mamba_state: dict[str, float | int] = field(default_factory=dict)  # the lowest rank's
    # The figures above that are derived rather than stated, by name, with how.
    derived: dict[str, str] = field(default_factory=dict)
    # Timeline. A log that starts after its server's launch (its first start-up line is a
    # later phase's) has no launch_at: its time to ready is unknown, not counted from there.
    log_starts_after_launch: bool = False
    launches: int = 0  # launches this log holds; the facts are the latest one's
    notes: tuple[str, ...] = ()  # what the reader of these facts should be told
    # vLLM's "Maximum concurrency for N tokens per request: X.XXx": N and X as stated.
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    launch_at: float | None = None
    last_line_at: float | None = None
    lines_seen: int = 0
    phase: str = "launching"
    timeline: tuple[PhaseSpan, ...] = ()
    kv_shortfall: KvShortfall | None = None  # the start-up failed for it
    # Runtime (latest only).
    decode: DecodeStats | None = None
    prefill: PrefillStats | None = None

    def current_phase(self) -> str:
        return self.phase

    def phase_durations(self, now: float | None = None) -> dict[str, float]:
        """Seconds per phase, summed over its spans; "total" is launch -> ready.

        Open spans count only when ``now`` is given (same clock as the fed times).
        """
        out: dict[str, float] = {}
        for span in self.timeline:
            if span.phase == "ready":
                continue
            end = span.end if span.end is not None else now
            if span.start is None or end is None:
                continue
            out[span.phase] = out.get(span.phase, 0.0) + max(0.0, end - span.start)
        if self.launch_at is not None:
            if self.ready_at is not None:
                out["total"] = max(0.0, self.ready_at - self.launch_at)
            elif now is not None:
                out["total"] = max(0.0, now - self.launch_at)
        return out

    def to_dict(self) -> dict[str, object]:
        """Plain data for json.dumps (rank keys stay ints; json writes them as strings)."""
        out = asdict(self)
        out["current_phase"] = self.phase
        out["phase_durations"] = self.phase_durations()
        return out
