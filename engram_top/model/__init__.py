"""A run's data and how it reads: the store, its facts and views, formatted; no I/O.

Its face: what a package above reads of it (the app through nothing else, a contract in
pyproject.toml); its modules are its own business."""

from collectors.readings import Reading, StackPage, Status
from engram_top.model.facts import (
    classify_log_line,
    engine_of,
    engram_facts,
    gpu_facts,
    hicache_facts,
    host_facts,
    is_own_poll,
    kv_facts,
    latency_facts,
    not_reported,
    run_facts,
    run_host_delta_bytes,
    server_pids,
    source_status,
    stack_page,
    word,
)
from engram_top.model.figures import RunFigures
from engram_top.model.hicache import engram_rx_estimate
from engram_top.model.in_flight import why_ask
from engram_top.model.ledger import (
    GpuLedger,
    HostLedger,
    LedgerLine,
    hbm_ledger,
    host_ledger,
    others_delta_bytes,
    run_server_delta_bytes,
)
from engram_top.model.left_running import LeftRunning
from engram_top.model.pool_state import MambaView, mamba_facts
from engram_top.model.refusal import FitRefused
from engram_top.model.store import (
    GPU_LABEL,
    LOCAL,
    Event,
    RunFacts,
    RunStore,
    Series,
    SeriesKey,
    SeriesName,
    SourceName,
    StoreTopic,
)
from engram_top.model.views import (
    EngramView,
    GpuView,
    HiCacheView,
    HostView,
    KvView,
    LatencyView,
    Quantiles,
    RunView,
    SourceStatus,
)
from scenarios.runstate import (
    ENDED,
    LIVE,
    SERVING,
    STARTING_UP,
    STOP_ASKED,
    UNASKED_END,
    UNDER_WAY,
    RunState,
)

__all__ = [
    "ENDED", "GPU_LABEL", "LIVE", "LOCAL", "SERVING", "STARTING_UP", "STOP_ASKED",
    "UNASKED_END", "UNDER_WAY", "EngramView", "Event", "FitRefused", "GpuLedger", "GpuView",
    "HiCacheView", "HostLedger", "HostView", "KvView", "LatencyView", "LedgerLine",
    "LeftRunning", "MambaView", "Quantiles", "Reading", "RunFacts", "RunFigures",
    "RunState", "RunStore", "RunView", "Series", "SeriesKey", "SeriesName", "SourceName",
    "SourceStatus", "StackPage", "Status", "StoreTopic", "classify_log_line", "engine_of",
    "engram_facts", "engram_rx_estimate", "gpu_facts", "hbm_ledger", "hicache_facts",
    "host_facts", "host_ledger", "is_own_poll", "kv_facts", "latency_facts", "mamba_facts",
    "not_reported", "others_delta_bytes", "run_facts", "run_host_delta_bytes",
    "run_server_delta_bytes", "server_pids", "source_status", "stack_page", "why_ask",
    "word",
]
