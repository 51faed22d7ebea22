"""Incremental parser of SGLang server logs: startup facts, phase timeline, latest batch stats.

The supervisor tails the server log and calls :meth:`StartupLogParser.feed` once per line,
so the parser is built for that: it keeps small, bounded state, never raises, and rejects
the common line (uvicorn access lines, ``Decode batch`` lines) with a few substring tests
before any regex runs. :meth:`StartupLogParser.facts` returns an immutable
:class:`StartupFacts`.

Format strings and their variants are SGLang's own, gathered from its source and from logs
of several eras, and checked against a real SGLang 0.5.23 log (``tests/data/sglang-cpu/``:
``Init parallel begin/ends``, the KV line with its dtype inline, ``available_cpu_mem=``,
``Engine startup timings``, the shutdown lines). Lines are matched on their message text,
never on the prefix, because the prefix changes between builds and processes:
``[ts] msg``, ``[ts TP0] msg``, ``[ts DP0 TP0 EP0] msg``, ``[HH:MM:SS TP0] msg`` (time
only), ``[ts] INFO file.py:123: msg``, ``[gpu_id=0] msg`` (2024 builds), bare ``msg`` and
uvicorn's ``INFO:     msg``. What a container or log shipper puts in front (``name  | ``
of docker compose, an ISO or ``YYYY-MM-DD HH:MM:SS`` time, a syslog head, ``[pod/..]``) is
taken off first; its time serves a line that has none of SGLang's own.

Hybrid KV models (DeepSeek-V4.x) size several pools instead of printing ``KV Cache is
allocated``: the ``<tag> memory calculation``, ``<tag> pool sizes``, ``<tag> SWA sizing``,
``Memory profiling`` and ``Initialize ..TokenToKVPool`` lines each open the KV phase, and
without a ``max_total_num_tokens=`` line the full pool is the capacity
(:mod:`collectors.sglang.log_lines` reads their figures).

The facts and their units (SGLang's "GB" is GiB) are in :mod:`collectors.startup_facts`.

Times: a line's time is the caller's ``at`` (monotonic arrival time) when given, else the
prefix timestamp (second resolution, read as UTC so that only differences matter), else the
time of the previous timed line. Give ``at`` for every line or for none: the two clocks are
not comparable. ``launch_at`` is the time of the first line that has one: a real log starts
with Python warnings that carry no timestamp, so without ``at`` it is the first line with a
``[ts]`` prefix. A log whose first start-up line belongs to a later phase (it was cut, or
rotated) started after the launch: it says so, and has no launch time to count from.

One log can hold several launches (a restart loop writing to one file): a second ServerArgs
dump, a rank initialising its distributed group again, or weights loading again after the
server was ready, stopped or failed, starts a new run; the facts are the latest launch's.

Python warnings (``path.py:71: UserWarning: ..`` and their indented continuation lines) are
skipped: they are neither errors nor facts. A line where another process's output ends and an
SGLang line starts without a newline (``...refleaks.html[2026-11-29 19:50:11] msg``) is read
from the glued ``[ts]`` prefix on.

Failures: a traceback (its frames name the phase it came from: model_runner's
``load_model``, ``init_memory_pool``, the graph capture...), a bare ``SomeError: ..`` line,
``CUDA Error: ..``, SGLang's "Received sigquit from a child process", an out-of-memory
message or a KV pool sized below zero. Before "ready" they are fatal.

Shutdown: ``SIGTERM received``, ``Gracefully exiting``, uvicorn's ``Shutting down`` and
``Waiting for application shutdown``/``Application shutdown complete`` set ``stopping_at``
and the phase STOPPING; uvicorn's ``Finished server process [pid]`` sets ``stopped_at`` and
STOPPED. A stop never hides a failure: after FAILED the phase stays FAILED (the times are
still recorded), and errors seen while stopping are recorded but not fatal.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime

from collectors.log_markers import NO_HUGE_PAGES
from collectors.sglang import log_lines
from collectors.startup_facts import (
    FAILED,
    PHASES,
    STOPPED,
    STOPPING,
    DecodeStats,
    EngramTable,
    GraphCapture,
    KvPool,
    LogError,
    PhaseSpan,
    PrefillStats,
    RankFacts,
    ServerArgsFacts,
    StartupFacts,
    WeightLoad,
)

_ORDER = {name: i for i, name in enumerate(PHASES)}
# Events of a launch's first lines, and of later phases: the first of either that a log
# shows tells whether it holds its server's launch.
_LAUNCH_EVENTS = frozenset({"server_args", "model_defaults", "distributed_init_begin",
                            "weights_begin", "memory_baseline"})
_LATER_EVENTS = frozenset({
    "distributed_init_end", "weights_end", "kv_allocated", "kv_sizing", "kv_pool_end",
    "graphs_begin", "graphs_end", "scheduler_summary", "http_started", "http_running", "ready",
    "engram_layer", "engram_table", "startup_timings",
})
_FINAL = frozenset({FAILED, "ready", STOPPING, STOPPED})  # _advance never leaves these

# Event names feed() can return. "phase:<name>" is added whenever current_phase() changes.
EVENTS: tuple[str, ...] = (
    "launch", "distributed_init_begin", "distributed_init_end", "weights_begin", "weights_end",
    "kv_allocated", "kv_pool_end", "graphs_begin", "graphs_end", "scheduler_summary",
    "http_started", "http_running", "ready", "engram_table", "engram_config", "error", "failed",
    "memory_baseline", "startup_timings", "stopping", "stopped", "kv_sizing", "server_args",
    "engram_layer", "relaunch", "model_defaults",
)

# Errors kept (oldest dropped first) and the longest text kept per error: a crash loop must
# not grow the parser without bound.
MAX_ERRORS = 64
MAX_ERROR_TEXT = 1000
MAX_ENGRAM_TABLES = 256
MAX_ENGRAM_MESSAGES = 64
MAX_ENGRAM_LAYERS = 64
# Per rank and launch: weight loads (a main and a draft model), KV passes and captures;
# per phase: its passes. Past them a log repeats itself, and nothing more is kept.
MAX_LOADS = 8
MAX_POOLS = 8
MAX_CAPTURES = 64
MAX_SPANS = 16
MAX_RANKS = 1024
MAX_SUMMARY_KEYS = 64
NOTE_AFTER_LAUNCH = "log starts after launch: time to ready unknown"

# Error kinds that mean the startup died when seen before "ready". "health_check" and
# "retract" (runtime KV retraction) are recorded but are not fatal.
_FATAL_KINDS = frozenset({"traceback", "oom", "warmup_failed", "engram", "exception", "cuda",
                          "child_failed"})
_OOM_WORDS = ("out of memory", "OutOfMemory", "Not enough memory")


# --------------------------------------------------------------------------- regexes

_NUM = r"(-?\d+(?:\.\d+)?)"
# "[2026-02-04 10:11:12]", "[2026-02-04 10:11:12 DP0 TP0 EP0]" or the time-only
# "[10:11:12 TP0]": group 1 the date (or None), 2 the time, 3 its fraction, 4 the tags.
_PREFIX = re.compile(
    r"\[(?:(\d{4}-\d\d-\d\d)[ T])?(\d\d:\d\d:\d\d)([.,]\d+)?((?:\s[^\]]*)?)\]\s?")
# What a container runtime or log shipper writes before SGLang's own line, any of them in
# any order: docker compose's "name  | ", an ISO or "YYYY-MM-DD HH:MM:SS" time (docker logs
# -t, kubectl --timestamps, a shipper), a syslog/journald head, kubectl's "[pod/x/y] ".
_OUTER = re.compile(
    r"(?:[\w.\-]+\s+\|\s?"
    r"|(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?"
    r"(?:Z|[+-]\d\d:?\d\d)?\s"
    r"|[A-Z][a-z]{2}\s+\d{1,2} \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?:\s"
    r"|\[pod/[^\]]*\]\s)+"
)
_LEVEL = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[\w.\-/]+:\d+:\s*")
_GPU_ID = re.compile(r"\[gpu_id=(\d+)\]\s*")
_TP = re.compile(r"\bTP(\d+)\b")
# A bare exception line: "RuntimeError: ..", "torch.OutOfMemoryError: ..", "AssertionError:".
_BARE_EXC = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit):(?:\s|$)")
# A traceback frame: '  File "/x/model_runner.py", line 312, in init_memory_pool'.
_FRAME = re.compile(r'File "([^"]*)", line \d+, in (\S+)')
# ModelRunner's start-up steps by the phase they are; the outermost one a traceback passes
# through names the phase it failed in (inner frames can be anywhere: a KV write inside a
# graph capture's forward pass is still the capture's failure).
_STEP_PHASES = {
    "init_torch_distributed": "distributed_init", "init_distributed_environment":
    "distributed_init", "initialize_model_parallel": "distributed_init",
    "load_model": "weights", "load_weights": "weights", "load_weights_and_postprocess":
    "weights",
    "init_memory_pool": "kv_pool", "profile_max_num_token": "kv_pool",
    "init_cuda_graphs": "graphs", "init_device_graphs": "graphs",
    "init_piecewise_cuda_graphs": "graphs",
    "_wait_and_warmup": "warmup", "_execute_server_warmup": "warmup",
}
# Without one of those: the innermost frame in one of these files.
_FILE_PHASES = (
    ("pool_configurator", "kv_pool"), ("memory_pool", "kv_pool"), ("allocator", "kv_pool"),
    ("cuda_graph_runner", "graphs"), ("loader", "weights"), ("weight_utils", "weights"),
    ("parallel_state", "distributed_init"),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_AVAIL = re.compile(r"avail mem=\s*" + _NUM + r"\s*GB")
_MEM_USAGE = re.compile(r"mem usage=\s*" + _NUM + r"\s*GB")
_ELAPSED = re.compile(r"(?:elapsed=|Time elapsed:)\s*" + _NUM + r"\s*s\b")
_KV_FIELD = re.compile(
    r"(?<![\w])(#tokens|KV size|K size|V size|Landmark size|Cache size)\s*:\s*" + _NUM
)
_KV_DTYPE = re.compile(r"Using KV cache dtype:\s*(\S+)")
_KV_INLINE_DTYPE = re.compile(r"(?<![\w#])dtype\s*[:=]\s*([\w.]+)")
_DIST = re.compile(r"Init (?:torch distributed|parallel)\s+(begin|end)", re.IGNORECASE)
_AVAILABLE = re.compile(r"available_(\w+?)_mem")
# "/path/x.py:71: UserWarning: msg" (after an optional "[ts]" prefix): Python's warnings.
_PY_WARNING = re.compile(r"^(?:\[[^\]]*\]\s*)?\S+:\d+: (?:[\w.]+\.)?\w*Warning: ")
_GRAPH = re.compile(r"Capture\s+(.*?)\s*cuda graph\s+(begin|end)\b", re.IGNORECASE)
_PAIR = re.compile(r"(\w+)=([^,\s]+)")
_PID = re.compile(r"Started server process \[(\d+)\]")
_URL = re.compile(r"Uvicorn running on (\S+)")
_ENGRAM_TABLE = re.compile(
    r"engram host table\s*(?P<label>[^:]*?)\s*:\s*layout=(?P<layout>[\w-]+)\s*,\s*"
    r"(?P<res>\d[\d,]*(?:\.\d+)?)\s*MiB resident\s*,\s*"
    r"(?P<huge>\d[\d,]*(?:\.\d+)?)\s*MiB in huge pages\s*\(\s*(?P<pct>\d+(?:\.\d+)?)\s*%\s*\)"
    r"(?P<rest>.*)$",
    re.IGNORECASE,
)
_UNPINNED = re.compile(r"\bunpinned\b", re.IGNORECASE)
_PINNED = re.compile(r"\bpinned\b", re.IGNORECASE)
_ENGRAM_KEY = re.compile(r"\b(placement|replication|lookup)\b[\"']?\s*[:=]\s*[\"']?([\w-]+)")
# "key: value" pairs of batch lines; keys start with '#' or a letter, so a leading ". " or
# " [iter]" after "batch" is skipped.
_BATCH_FIELD = re.compile(r"(#?[A-Za-z][\w\-/() ]*?)\s*:\s*([^,]+)")
# A traceback's last line: "RuntimeError: ..", "torch.OutOfMemoryError: ..", "KeyboardInterrupt".
_EXC_LINE = re.compile(r"[A-Za-z_][\w.]*(?::\s|:$|$)")

_SUMMARY_INT = (
    "max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens",
    "max_running_requests", "context_len",
)


def _nz(value: float) -> float:
    """``-0.00`` printed by SGLang (a memory delta that rounds to zero) is 0.0, not -0.0."""
    return 0.0 if value == 0 else value


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return _nz(float(text.split()[0].rstrip(".,")))
    except (ValueError, IndexError):
        return None


def _int(text: str | None) -> int | None:
    value = _float(text)
    return None if value is None else int(value)


def _bool(text: str | None) -> bool | None:
    if text is None:
        return None
    word = text.strip().lower()
    return True if word == "true" else False if word == "false" else None


def _group_float(rx: re.Pattern[str], text: str) -> float | None:
    m = rx.search(text)
    return _nz(float(m.group(1))) if m else None


def _top_level_parts(text: str) -> list[str]:
    """``a=1, b={c=2, d=3}, e=4`` -> ``["a=1", "b={c=2, d=3}", "e=4"]`` (commas in braces kept)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _timings(text: str, prefix: str = "", out: dict[str, float] | None = None,
             depth: int = 0) -> dict[str, float]:
    """``key=seconds`` pairs; ``key={k=v, ..}`` groups flattened to ``key.k``. Values that are
    not finite numbers are left out."""
    out = {} if out is None else out
    for part in _top_level_parts(text):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            continue
        if value.startswith("{"):
            if depth < 4:
                _timings(value[1:].rstrip("}"), f"{prefix}{key}.", out, depth + 1)
            continue
        number = _float(value)
        if number is not None and math.isfinite(number):
            out[prefix + key] = number
    return out


def _mib(text: str) -> float:
    return float(text.replace(",", ""))


# --------------------------------------------------------------------------- parser state


class _Rank:
    """Mutable per-rank state; frozen into RankFacts by facts()."""

    __slots__ = (
        "rank", "dist_begins", "dist_ends", "dist_elapsed_s", "dist_mem_gb", "baseline_gb",
        "loads", "open_load", "pools", "pool_ends", "pool_end_avail_gb", "kv_dtype", "graphs",
        "open_graphs", "kv_open", "profile", "swa_sizing", "kv_sizings", "pool_sizes",
    )

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.dist_begins = 0
        self.dist_ends = 0
        self.dist_elapsed_s: float | None = None
        self.dist_mem_gb: float | None = None
        self.baseline_gb: float | None = None
        self.loads: list[WeightLoad] = []
        self.open_load: int | None = None
        self.pools: list[KvPool] = []
        self.pool_ends = 0
        self.pool_end_avail_gb: float | None = None
        self.kv_dtype: str | None = None
        self.graphs: list[GraphCapture] = []
        self.open_graphs: dict[str, int] = {}  # kind -> index of a capture awaiting its end
        self.kv_open: int | None = None  # the KV pass a sizing line opened (pool_ends then)
        self.profile: dict[str, float] = {}
        self.swa_sizing: dict[str, float | int | str] = {}
        self.kv_sizings: list[dict[str, float | int | str]] = []
        self.pool_sizes: list[dict[str, int]] = []  # main model's, then a draft model's

    def freeze(self) -> RankFacts:
        main = self.loads[0] if self.loads else WeightLoad()
        pool = self.pools[0] if self.pools else KvPool()
        sizing = self.kv_sizings[0] if self.kv_sizings else {}
        sizes = self.pool_sizes[0] if self.pool_sizes else {}
        # A hybrid model prints no "KV Cache is allocated": its full pool is the capacity,
        # and the sizing's available bytes are what its pools take together.
        tokens = pool.tokens
        if tokens is None:
            full = sizes.get("full", sizing.get("full_tokens"))
            tokens = int(full) if isinstance(full, int | float) else None
        total = pool.total_gb
        if total is None and isinstance(sizing.get("available_bytes_gb"), float | int):
            total = float(sizing["available_bytes_gb"])
        return RankFacts(
            rank=self.rank,
            dist_init_elapsed_s=self.dist_elapsed_s,
            dist_init_mem_usage_gb=self.dist_mem_gb,
            memory_baseline_gb=self.baseline_gb,
            weights_begin_avail_gb=main.begin_avail_gb,
            weights_elapsed_s=main.elapsed_s,
            weights_type=main.model_type,
            weights_dtype=main.dtype,
            weights_quant=main.quant,
            weights_avail_gb=main.avail_gb,
            weights_gb=main.mem_usage_gb,
            all_weights_gb=_sum(w.mem_usage_gb for w in self.loads),
            kv_dtype=pool.dtype if pool.dtype is not None else self.kv_dtype,
            kv_tokens=tokens,
            k_size_gb=pool.k_size_gb,
            v_size_gb=pool.v_size_gb,
            kv_size_gb=pool.kv_size_gb,
            kv_total_gb=total,
            all_kv_gb=_sum(p.total_gb for p in self.pools) if self.pools else total,
            pool_end_avail_gb=self.pool_end_avail_gb,
            graph_begin_avail_gb=self.graphs[0].begin_avail_gb if self.graphs else None,
            graph_mem_usage_gb=_sum(g.mem_usage_gb for g in self.graphs),
            graph_elapsed_s=_sum(g.elapsed_s for g in self.graphs),
            graph_avail_gb=next(
                (g.avail_gb for g in reversed(self.graphs) if g.avail_gb is not None), None
            ),
            weight_loads=tuple(self.loads),
            kv_pools=tuple(self.pools),
            graph_captures=tuple(self.graphs),
            memory_profile=dict(self.profile),
            swa_sizing=dict(self.swa_sizing),
            kv_sizing=dict(sizing),
            pool_sizes=dict(sizes),
            draft_pool_sizes=dict(self.pool_sizes[1]) if len(self.pool_sizes) > 1 else {},
        )


def _sum(values: Iterable[float | None]) -> float | None:
    """Sum of the known values; None when none is known (unknown is not zero)."""
    known = [v for v in values if v is not None]
    return round(sum(known), 6) if known else None


class _Err:
    __slots__ = ("at", "kind", "text", "rank", "exception", "fatal", "phase", "outer")

    def __init__(self, at: float | None, kind: str, text: str, rank: int, fatal: bool) -> None:
        self.at = at
        self.kind = kind
        self.text = text
        self.rank = rank
        self.exception: str | None = None
        self.fatal = fatal
        self.phase: str | None = None  # from the traceback's frames
        self.outer = False  # phase named by a ModelRunner step (wins over a file's name)


class _Line:
    """A line split into time, rank and message; built only for lines a needle matched."""

    __slots__ = ("t", "rank", "msg")

    def __init__(self, t: float | None, rank: int, msg: str) -> None:
        self.t = t
        self.rank = rank
        self.msg = msg


# --------------------------------------------------------------------------- parser


class StartupLogParser:
    """Feed SGLang log lines one at a time; ask for facts() whenever convenient."""

    def __init__(self) -> None:
        # Counts the lines that told it something (a handler ran): facts() can only differ
        # from the last call's when it moved, so a reader may skip rebuilding them.
        self.version = 0
        self._lines = 0  # every line fed, over all launches
        self._launches = 0
        self._last_t: float | None = None
        self._ts_cache: tuple[str, float] = ("", 0.0)
        self._tod_day = 0.0  # time-only prefixes: days passed, from midnight wraps
        self._tod_last = -1.0
        self._reset()
        # Needle -> handler, tried in order with plain substring tests. Batch lines come
        # first because they are the most common lines that match at all; errors last but
        # for the catch-all of Engram lines nobody has a reader for.
        self._dispatch: tuple[tuple[str, Callable[[_Line, list[str]], None]], ...] = (
            ("Decode batch", self._on_decode),
            ("Prefill batch", self._on_prefill),
            ("ServerArgs(", self._on_server_args),
            ("swa_full_tokens_ratio to", self._on_swa_ratio),
            ("Init torch distributed", self._on_dist),
            ("Init parallel", self._on_dist),
            ("Memory baseline taken", self._on_baseline),
            ("Load weight ", self._on_weights),
            ("KV Cache is allocated", self._on_kv),
            ("Using KV cache dtype", self._on_kv_dtype),
            ("Memory profiling:", self._on_kv_sizing),
            ("memory calculation:", self._on_kv_sizing),
            ("pool sizes:", self._on_kv_sizing),
            ("SWA sizing:", self._on_kv_sizing),
            ("TokenToKVPool", self._on_kv_sizing),
            ("Memory pool end", self._on_pool_end),
            ("Capture ", self._on_graph),
            ("max_total_num_tokens=", self._on_summary),
            ("Started server process", self._on_http_started),
            ("Uvicorn running on", self._on_http_running),
            ("fired up and ready to roll", self._on_ready),
            ("Engine startup timings", self._on_timings),
            ("SIGTERM received", self._on_stopping),
            ("Gracefully exiting", self._on_stopping),
            ("Shutting down", self._on_stopping),
            ("pplication shutdown", self._on_stopping),
            ("Finished server process", self._on_stopped),
            ("ngram host table", self._on_engram_table),
            ("Engram tables:", self._on_engram_config),
            ("Engram layer=", self._on_engram_layer),
            ("[engram_offload]", self._on_engram_message),
            ("Initialization failed", self._on_error),
            ("Health check failed", self._on_error),
            ("Traceback", self._on_error),
            ("OutOfMemory", self._on_error),
            ("out of memory", self._on_error),
            ("Not enough memory", self._on_error),
            ("no GPU memory for the KV cache", self._on_error),
            ("profiled value -", self._on_error),
            ("Received sigquit", self._on_error),
            ("CUDA Error", self._on_error),
            ("Error:", self._on_bare_error),
            ("Exception:", self._on_bare_error),
            ("Engram", self._on_engram_message),
            ("engram", self._on_engram_message),
        )

    def _reset(self) -> None:
        """A fresh launch: every fact of the one before forgotten (a log can hold many)."""
        self._started = False
        self._from_launch: bool | None = None  # None until a start-up line tells
        self._launch_at: float | None = None
        self._ranks: dict[int, _Rank] = {}
        self._spans: dict[str, list[list[float | None]]] = {p: [] for p in PHASES}
        self._phase = "launching"
        self._summary: dict[str, str] = {}
        self._server_args: ServerArgsFacts | None = None
        self._swa_ratio: float | None = None
        self._engram_tables: deque[EngramTable] = deque(maxlen=MAX_ENGRAM_TABLES)
        self._engram_config_text: str | None = None
        self._engram_config: dict[str, str] = {}
        self._engram_messages: deque[str] = deque(maxlen=MAX_ENGRAM_MESSAGES)
        self._engram_layers: dict[int, dict[str, object]] = {}
        self._pid: int | None = None
        self._url: str | None = None
        self._ready_at: float | None = None
        self._ready = False
        self._failed_at: float | None = None
        self._failed_in: str | None = None
        self._failing: _Err | None = None  # the error that made the start-up fail
        self._stopping_at: float | None = None
        self._stopped_at: float | None = None
        self._stopping = False
        self._timings: dict[str, float] = {}
        self._in_warning = False  # inside a Python warning (header + indented lines)
        self._errors: deque[_Err] = deque(maxlen=MAX_ERRORS)
        self._tb: _Err | None = None  # a traceback whose closing exception line is pending
        self._decode: DecodeStats | None = None
        self._prefill: PrefillStats | None = None

    # ------------------------------------------------------------------ public

    def feed(self, line: str, at: float | None = None) -> list[str]:
        """Consume one line; return the names of the events it triggered (see EVENTS)."""
        try:
            return self._feed(line, at)
        except Exception:  # a weird line must never take the supervisor's tail loop down
            return []

    def feed_text(self, text: str) -> list[str]:
        events: list[str] = []
        for line in text.splitlines():
            events.extend(self.feed(line))
        return events

    def current_phase(self) -> str:
        return self._phase

    @property
    def last_line_at(self) -> float | None:
        """The time of the latest line fed, whatever it said."""
        return self._last_t

    @property
    def failed_in(self) -> str | None:
        """The phase a fatal error came in (current_phase() then says "failed")."""
        return self._failed_in

    def phase_durations(self, now: float | None = None) -> dict[str, float]:
        return self.facts().phase_durations(now)

    def facts(self) -> StartupFacts:
        s = self._summary
        device, available = None, None
        for key in s:
            m = _AVAILABLE.fullmatch(key)
            if m:
                device, available = m.group(1), _float(s[key])
                break
        ranks = {r: st.freeze() for r, st in sorted(self._ranks.items())}
        first = next(iter(ranks.values()), None)
        max_total = _int(s.get("max_total_num_tokens"))
        after_launch = self._from_launch is False
        return StartupFacts(
            ranks=ranks,
            max_total_num_tokens=max_total,
            chunked_prefill_size=_int(s.get("chunked_prefill_size")),
            max_prefill_tokens=_int(s.get("max_prefill_tokens")),
            max_running_requests=_int(s.get("max_running_requests")),
            context_len=_int(s.get("context_len")),
            available_mem_gb=available,
            available_mem_device=device,
            available_gpu_mem_gb=available if device == "gpu" else None,
            scheduler_extra={
                k: v for k, v in s.items()
                if k not in _SUMMARY_INT and not _AVAILABLE.fullmatch(k)
            },
            kv_capacity_tokens=max_total if max_total is not None
            else (first.kv_tokens if first is not None else None),
            pool_sizes=dict(first.pool_sizes) if first is not None else {},
            draft_pool_sizes=dict(first.draft_pool_sizes) if first is not None else {},
            server_args=self._server_args,
            swa_full_tokens_ratio=self._swa_ratio,
            startup_timings_s=dict(self._timings),
            engram_tables=tuple(self._engram_tables),
            engram_config_text=self._engram_config_text,
            engram_config=dict(self._engram_config),
            engram_messages=tuple(self._engram_messages),
            engram_layers={k: dict(v) for k, v in sorted(self._engram_layers.items())},
            uvicorn_pid=self._pid,
            uvicorn_url=self._url,
            ready=self._ready,
            ready_at=self._ready_at,
            failed_at=self._failed_at,
            failed_in=self._failed_in,
            errors=tuple(
                LogError(e.at, e.kind, e.text, e.rank, e.exception, e.fatal, e.phase)
                for e in self._errors
            ),
            stopping_at=self._stopping_at,
            stopped_at=self._stopped_at,
            log_starts_after_launch=after_launch,
            launches=self._launches,
            notes=(NOTE_AFTER_LAUNCH,) if after_launch else (),
            launch_at=None if after_launch else self._launch_at,
            last_line_at=self._last_t,
            lines_seen=self._lines,
            phase=self._phase,
            timeline=self._timeline(),
            decode=self._decode,
            prefill=self._prefill,
        )

    # ------------------------------------------------------------------ core

    def _feed(self, line: str, at: float | None) -> list[str]:
        events: list[str] = []
        if at is not None:
            self._last_t = at
        line = line.rstrip("\r\n")
        if "\r" in line:  # tqdm redraws: only the last frame of the line is real
            line = line.rsplit("\r", 1)[1]
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        outer_t: float | None = None
        if line and (line[0] != "[" or line.startswith("[pod/")):
            m = _OUTER.match(line)
            if m is not None:  # a container's or shipper's head: off, its time kept
                if m.group("time"):
                    outer_t = self._parse_ts(m.group("date"), m.group("time"), m.group("frac"))
                line = line[m.end():]
        self._lines += 1
        if not self._started:
            self.version += 1
            self._started = True
            self._launches += 1
            self._open("launching", 0, None)  # its start is launch_at (see _timeline)
            events.append("launch")
        if self._launch_at is None:
            # The first line with a time: `at` when given, else its "[ts]" prefix (a real log
            # opens with un-stamped Python warnings). The clock stays the one of that line.
            t = at if at is not None else self._prefix_time(line.lstrip())
            if t is None:
                t = outer_t
            if t is not None:
                self._last_t = t
                self._launch_at = t
        if self._tb is not None and self._traceback_continues(line):
            return events
        if self._in_warning:
            if line[:1] in (" ", "\t"):  # the warning's source line or message continuation
                return events
            self._in_warning = False
        if "Warning: " in line and _PY_WARNING.match(line.lstrip()):
            self._in_warning = True
            return events
        for needle, handler in self._dispatch:
            if needle in line:
                self.version += 1
                before = self._phase
                handler(self._split(line, at, outer_t), events)
                if self._from_launch is None:
                    self._tell_start(events)
                if self._phase != before:
                    events.append(f"phase:{self._phase}")
                break
        return events

    def _tell_start(self, events: list[str]) -> None:
        """Whether the log holds its server's launch: its first start-up line says."""
        if any(e in _LAUNCH_EVENTS for e in events):
            self._from_launch = True
        elif any(e in _LATER_EVENTS for e in events):
            self._from_launch = False

    def _relaunch(self, ln: _Line, events: list[str]) -> None:
        """The same log, a new launch (a restart loop, a file appended to): forget the one
        before, so that its loads and errors do not pile onto this one's."""
        self._reset()
        self._started = True
        self._launches += 1
        self._from_launch = True
        self._launch_at = ln.t
        self._open("launching", 0, None)
        events.append("relaunch")

    def _prefix(self, msg: str) -> tuple[re.Match[str] | None, str]:
        """SGLang's ``[ts ..]`` prefix of a message and the message from it on: at the start,
        or after another process's output glued in front (two writers, one file, no newline
        between)."""
        m = _PREFIX.match(msg)
        if m is None and "[" in msg:
            m = _PREFIX.search(msg)
            if m is not None:
                msg = msg[m.start():]
                m = _PREFIX.match(msg)
        return m, msg

    def _prefix_time(self, line: str) -> float | None:
        m, _ = self._prefix(line)
        return self._parse_ts(m.group(1), m.group(2), m.group(3)) if m else None

    def _parse_ts(self, date: str | None, clock: str, frac: str | None) -> float | None:
        if date is None:  # "[HH:MM:SS TP0]": seconds of the day, days counted from wraps
            try:
                h, mi, sec = (int(x) for x in clock.split(":"))
            except ValueError:
                return None
            of_day = h * 3600.0 + mi * 60.0 + sec
            if self._tod_last >= 0 and of_day < self._tod_last - 43200:
                self._tod_day += 86400.0
            self._tod_last = of_day
            base = self._tod_day + of_day
        else:
            ts = f"{date} {clock}"
            if ts == self._ts_cache[0]:
                base = self._ts_cache[1]
            else:
                try:
                    base = datetime.strptime(ts, "%Y-%m-%d %H:%M:%S").replace(
                        tzinfo=UTC
                    ).timestamp()
                except ValueError:
                    return None
                self._ts_cache = (ts, base)
        return base + float("0." + frac[1:]) if frac else base

    def _split(self, line: str, at: float | None, outer_t: float | None = None) -> _Line:
        """Time, rank and message. The time: ``at``, else SGLang's prefix, else the time a
        container put in front (``outer_t``), else the previous line's."""
        t = at
        rank: int | None = None
        m, msg = self._prefix(line.lstrip())
        if m:
            if t is None:
                t = self._parse_ts(m.group(1), m.group(2), m.group(3))
            tp = _TP.search(m.group(4))
            if tp:
                rank = int(tp.group(1))
            msg = msg[m.end():]
        lvl = _LEVEL.match(msg)
        if lvl:
            msg = msg[lvl.end():]
        gpu = _GPU_ID.match(msg)
        if gpu:
            # 2024 builds tagged scheduler lines with the GPU id, which was the TP rank.
            if rank is None:
                rank = int(gpu.group(1))
            msg = msg[gpu.end():]
        if t is None:
            t = outer_t
        if t is None:
            t = self._last_t
        else:
            self._last_t = t
        return _Line(t, rank if rank is not None else 0, msg)

    def _rank(self, rank: int) -> _Rank:
        st = self._ranks.get(rank)
        if st is None:
            st = _Rank(rank)
            if len(self._ranks) < MAX_RANKS:  # past it, a line's figures are not kept
                self._ranks[rank] = st
        return st

    # ------------------------------------------------------------------ phases

    def _open(self, phase: str, idx: int, t: float | None) -> None:
        """Start pass ``idx`` of ``phase`` (earliest start over ranks wins)."""
        spans = self._spans[phase]
        if idx >= len(spans):
            if len(spans) < MAX_SPANS:
                spans.append([t, None])
            # A rank entering a phase for the second time (draft model) moves the phase back.
            self._advance(phase, force=idx > 0)
        else:
            span = spans[idx]
            if t is not None and (span[0] is None or t < span[0]):
                span[0] = t
            self._advance(phase, force=False)

    def _close(self, phase: str, idx: int, t: float | None) -> None:
        """End pass ``idx`` of ``phase`` (latest end over ranks wins)."""
        spans = self._spans[phase]
        # An end moves the phase forward too: its begin may be a line this log lacks, or a
        # model's way of sizing its KV pool that prints no "KV Cache is allocated".
        self._advance(phase, force=False)
        if idx >= len(spans):
            if len(spans) < MAX_SPANS:
                spans.append([None, t])  # the start line was not seen
            return
        span = spans[idx]
        if t is not None and (span[1] is None or t > span[1]):
            span[1] = t

    def _advance(self, phase: str, force: bool) -> None:
        if self._phase in _FINAL:
            return
        # Never move back because a slower rank starts a phase the others have left.
        if force or _ORDER[phase] >= _ORDER[self._phase]:
            self._phase = phase

    def _under_way(self) -> str:
        """The phase work is in: the current one, or the next once the current one has
        ended ("Load weight end", then an error while the KV pool is set up: a KV failure,
        not a weights one)."""
        spans = self._spans.get(self._phase)
        order = _ORDER.get(self._phase)
        if spans and spans[-1][1] is not None and order is not None \
                and order + 1 < len(PHASES) - 1:  # never "ready"
            return PHASES[order + 1]
        return self._phase

    def _timeline(self) -> tuple[PhaseSpan, ...]:
        spans: list[PhaseSpan] = []
        first_other: float | None = None
        for phase in PHASES[1:]:
            for start, end in self._spans[phase]:
                spans.append(PhaseSpan(phase, start, end))
                if start is not None and (first_other is None or start < first_other):
                    first_other = start
        if self._spans["launching"] and self._from_launch is not False:
            # "launching" lasts from the first line until any other phase starts; a log that
            # starts after the launch has none to show.
            spans.insert(0, PhaseSpan("launching", self._launch_at, first_other))

        def key(span: PhaseSpan) -> tuple[int, float, int]:
            at = span.start if span.start is not None else span.end
            return (at is None, at if at is not None else 0.0, _ORDER[span.phase])

        return tuple(sorted(spans, key=key))

    # ------------------------------------------------------------------ handlers

    def _on_dist(self, ln: _Line, events: list[str]) -> None:
        # "Init torch distributed begin." / "... ends. elapsed=.. s, mem usage=.. GB" (older
        # builds: "end", no elapsed=); 0.5.x: "Init parallel begin." / "... ends. elapsed=..".
        m = _DIST.search(ln.msg)
        if m is None:
            return
        if m.group(1).lower() == "begin" and self._phase in _FINAL:
            self._relaunch(ln, events)  # a server that was ready (or died) starts again
        st = self._rank(ln.rank)
        if m.group(1).lower() == "begin":
            self._open("distributed_init", st.dist_begins, ln.t)
            st.dist_begins += 1
            events.append("distributed_init_begin")
        else:
            st.dist_elapsed_s = _group_float(_ELAPSED, ln.msg)
            st.dist_mem_gb = _group_float(_MEM_USAGE, ln.msg)
            self._close("distributed_init", st.dist_ends, ln.t)
            st.dist_ends += 1
            events.append("distributed_init_end")

    def _on_weights(self, ln: _Line, events: list[str]) -> None:
        msg = ln.msg
        if "Load weight begin" in msg and self._phase in _FINAL:
            self._relaunch(ln, events)
        st = self._rank(ln.rank)
        if "Load weight begin" in msg:
            if len(st.loads) >= MAX_LOADS:  # the same loads again and again: one more is noise
                events.append("weights_begin")
                return
            st.open_load = len(st.loads)
            st.loads.append(
                WeightLoad(begin_avail_gb=_group_float(_AVAIL, msg), begin_at=ln.t)
            )
            self._open("weights", st.open_load, ln.t)
            events.append("weights_begin")
            return
        pos = msg.find("Load weight end")
        if pos < 0:
            return
        # "Load weight end. elapsed=.. s, type=.., [dtype=..|quant=.., ]avail mem=.. GB,
        # mem usage=.. GB." - split into key=value so new or missing keys do not matter.
        values: dict[str, str] = {}
        for part in msg[pos + len("Load weight end"):].split(","):
            key, sep, value = part.strip(" .").partition("=")
            if sep:
                values[key.strip()] = value.strip().rstrip(".").strip()
        if st.open_load is None:  # no begin seen: still record the load
            if len(st.loads) >= MAX_LOADS:
                events.append("weights_end")
                return
            st.open_load = len(st.loads)
            st.loads.append(WeightLoad())
            self._open("weights", st.open_load, None)
        idx = st.open_load
        load = st.loads[idx]
        avail = _float(values.get("avail mem"))
        usage = _float(values.get("mem usage"))
        derived = False
        if usage is None and avail is not None and load.begin_avail_gb is not None:
            # Builds that print no "mem usage=": the free memory the load took.
            usage, derived = round(max(0.0, load.begin_avail_gb - avail), 2), True
        st.loads[idx] = replace(
            load,
            elapsed_s=_float(values.get("elapsed")),
            model_type=values.get("type"),
            dtype=values.get("dtype"),
            quant=values.get("quant"),
            avail_gb=avail,
            mem_usage_gb=usage,
            mem_usage_derived=derived,
            end_at=ln.t,
        )
        st.open_load = None
        self._close("weights", idx, ln.t)
        events.append("weights_end")

    def _on_baseline(self, ln: _Line, events: list[str]) -> None:
        # "Memory baseline taken. mem usage=0.00 GB" (0.5.x, after the distributed init).
        self._rank(ln.rank).baseline_gb = _group_float(_MEM_USAGE, ln.msg)
        events.append("memory_baseline")

    def _on_timings(self, ln: _Line, events: list[str]) -> None:
        pos = ln.msg.find(":", ln.msg.find("Engine startup timings"))
        if pos < 0:
            return
        self._timings.update(_timings(ln.msg[pos + 1:]))
        events.append("startup_timings")

    def _on_stopping(self, ln: _Line, events: list[str]) -> None:
        if self._stopped_at is not None:
            return
        if self._stopping_at is None and ln.t is not None:
            self._stopping_at = ln.t
        if not self._stopping:
            self._stopping = True
            events.append("stopping")
            if self._phase != FAILED:
                self._phase = STOPPING

    def _on_stopped(self, ln: _Line, events: list[str]) -> None:
        if self._stopped_at is not None:
            return
        self._on_stopping(ln, events)  # a stop whose first line was this one
        self._stopped_at = ln.t if ln.t is not None else self._last_t
        if self._phase != FAILED:
            self._phase = STOPPED
        events.append("stopped")

    def _on_kv_dtype(self, ln: _Line, events: list[str]) -> None:
        m = _KV_DTYPE.search(ln.msg)
        if m:
            self._rank(ln.rank).kv_dtype = m.group(1)

    def _on_kv(self, ln: _Line, events: list[str]) -> None:
        st = self._rank(ln.rank)
        sizes: dict[str, float] = {}
        for key, value in _KV_FIELD.findall(ln.msg):
            sizes.setdefault(key, _nz(float(value)))
        k, v, kv = sizes.get("K size"), sizes.get("V size"), sizes.get("KV size")
        extra = sizes.get("Landmark size")
        if extra is None and k is None and v is None and kv is None:
            extra = sizes.get("Cache size")
        total = _sum((k, v, kv, extra))
        tokens = sizes.get("#tokens")
        inline = _KV_INLINE_DTYPE.search(ln.msg)  # 0.5.x: "allocated. dtype: torch.bfloat16, .."
        if inline is not None:
            st.kv_dtype = inline.group(1)
        if len(st.pools) < MAX_POOLS:
            st.pools.append(KvPool(
                tokens=None if tokens is None else int(tokens), k_size_gb=k, v_size_gb=v,
                kv_size_gb=kv, extra_gb=extra, total_gb=total, dtype=st.kv_dtype, at=ln.t,
            ))
        self._open("kv_pool", st.pool_ends, ln.t)  # this rank's KV pass: its pool ends so far
        events.append("kv_allocated")

    def _on_kv_sizing(self, ln: _Line, events: list[str]) -> None:
        """A hybrid model's KV sizing: memory profiling, the SWA sizing, the memory
        calculation, the pool sizes and the pool's construction (its sizes again)."""
        msg = ln.msg
        st = self._rank(ln.rank)
        full: object = None
        if "Memory profiling:" in msg:
            st.profile = log_lines.memory_profiling(msg)
        elif "memory calculation:" in msg:
            calc = log_lines.memory_calculation(msg)
            if len(st.kv_sizings) < MAX_POOLS:
                st.kv_sizings.append(calc)
            full = calc.get("full_tokens")
        elif "pool sizes:" in msg:
            sizes = log_lines.pool_sizes(msg[msg.find("pool sizes:"):])
            if len(st.pool_sizes) < MAX_POOLS:
                st.pool_sizes.append(sizes)  # a second line: a draft model's pools
            full = sizes.get("full")
        elif "SWA sizing:" in msg:
            st.swa_sizing = log_lines.swa_sizing(msg)
        elif "Init" in msg and "TokenToKVPool" in msg:
            # The pool's constructor: the same sizes once more, under its own names. It
            # completes the latest sizes line (or stands for one that was not printed).
            sizes = log_lines.pool_sizes(msg[msg.find("TokenToKVPool"):])
            if not st.pool_sizes:
                st.pool_sizes.append({})
            for key, value in sizes.items():
                st.pool_sizes[-1].setdefault(key, value)
        else:
            return
        self._open("kv_pool", st.pool_ends, ln.t)
        events.append("kv_sizing")
        if isinstance(full, int) and full < 0:  # what the weights left cannot hold a pool
            self._record_error(ln, "oom", events, phase="kv_pool")

    def _on_pool_end(self, ln: _Line, events: list[str]) -> None:
        st = self._rank(ln.rank)
        st.pool_end_avail_gb = _group_float(_AVAIL, ln.msg)
        self._close("kv_pool", st.pool_ends, ln.t)
        st.pool_ends += 1
        events.append("kv_pool_end")

    def _on_graph(self, ln: _Line, events: list[str]) -> None:
        m = _GRAPH.search(ln.msg)
        if m is None:  # "Capture cuda graph bs [..]" and other progress lines
            return
        kind = " ".join(m.group(1).lower().split()) or "default"
        st = self._rank(ln.rank)
        msg = ln.msg
        if m.group(2).lower() == "begin":
            idx = len(st.graphs)
            st.graphs.append(GraphCapture(
                kind, begin_avail_gb=_group_float(_AVAIL, msg), begin_at=ln.t
            ))
            st.open_graphs[kind] = idx
            self._open("graphs", idx, ln.t)
            events.append("graphs_begin")
            return
        idx_or_none = st.open_graphs.pop(kind, None)
        if idx_or_none is None and st.open_graphs:
            # Begin and end worded differently ("Capture cuda graph begin" .. "Capture target
            # decode CUDA graph end"): close the most recent open capture.
            latest = max(st.open_graphs, key=st.open_graphs.__getitem__)
            idx_or_none = st.open_graphs.pop(latest)
        if idx_or_none is None:  # end without any begin
            idx = len(st.graphs)
            st.graphs.append(GraphCapture(kind))
        else:
            idx = idx_or_none
        st.graphs[idx] = replace(
            st.graphs[idx],
            elapsed_s=_group_float(_ELAPSED, msg),
            mem_usage_gb=_group_float(_MEM_USAGE, msg),
            avail_gb=_group_float(_AVAIL, msg),
            end_at=ln.t,
        )
        self._close("graphs", idx, ln.t)
        events.append("graphs_end")

    def _on_summary(self, ln: _Line, events: list[str]) -> None:
        if "ServerArgs" in ln.msg or "server_args=" in ln.msg:  # the args dump, not the summary
            return
        for key, value in _PAIR.findall(ln.msg):
            if key in self._summary or len(self._summary) < MAX_SUMMARY_KEYS:
                self._summary[key] = value
        events.append("scheduler_summary")

    def _on_server_args(self, ln: _Line, events: list[str]) -> None:
        # "server_args=ServerArgs(model_path='..', tp_size=8, ..)": once per launch, from the
        # main process. Another one once weights were loading: the server launched again.
        raw = log_lines.server_args(ln.msg)
        if not raw:
            return
        if self._server_args is not None and _ORDER.get(self._phase, 99) >= _ORDER["weights"]:
            self._relaunch(ln, events)
        self._server_args = typed_server_args(raw)
        events.append("server_args")

    def _on_swa_ratio(self, ln: _Line, events: list[str]) -> None:
        # "Setting swa_full_tokens_ratio to 0.1 for DeepseekV4ForCausalLM."
        tail = ln.msg[ln.msg.find("swa_full_tokens_ratio to") + len("swa_full_tokens_ratio to"):]
        self._swa_ratio = _float(tail)
        events.append("model_defaults")

    def _on_http_started(self, ln: _Line, events: list[str]) -> None:
        m = _PID.search(ln.msg)
        if m:
            self._pid = int(m.group(1))
        self._open("http", 0, ln.t)
        events.append("http_started")

    def _on_http_running(self, ln: _Line, events: list[str]) -> None:
        m = _URL.search(ln.msg)
        if m:
            self._url = m.group(1)
        if not self._spans["http"]:
            self._open("http", 0, ln.t)
        self._close("http", 0, ln.t)
        # Uvicorn listens before the warm-up request: /health is still 503 here.
        self._open("warmup", 0, ln.t)
        events.append("http_running")

    def _on_ready(self, ln: _Line, events: list[str]) -> None:
        if self._ready or self._stopping:
            return
        self._ready = True
        self._ready_at = ln.t
        self._close("warmup", 0, ln.t)
        # Being ready proves an earlier "fatal-looking" line was not fatal after all.
        self._failed_at = None
        self._failed_in = None
        for err in self._errors:
            err.fatal = False
        self._phase = "ready"
        self._open("ready", 0, ln.t)
        self._close("ready", 0, ln.t)
        events.append("ready")

    def _on_engram_table(self, ln: _Line, events: list[str]) -> None:
        msg = ln.msg
        if "memfd" in msg and "cannot open" in msg:
            self._engram_messages.append(msg)
            self._record_error(ln, "engram", events)
            return
        m = _ENGRAM_TABLE.search(msg)
        if m is None:  # page-cache drop, MADV_COLLAPSE errno...
            self._engram_messages.append(msg)
            return
        rest = m.group("rest")
        pinned: bool | None = None
        if _UNPINNED.search(rest):
            pinned = False
        elif _PINNED.search(rest):
            pinned = True
        warn_at = rest.find(NO_HUGE_PAGES)
        self._engram_tables.append(EngramTable(
            label=m.group("label"),
            layout=m.group("layout"),
            resident_mib=_mib(m.group("res")),
            huge_mib=_mib(m.group("huge")),
            huge_pct=float(m.group("pct")),
            pinned=pinned,
            no_huge_pages_warning=rest[warn_at:].strip() if warn_at >= 0 else None,
            rank=ln.rank,
            at=ln.t,
        ))
        events.append("engram_table")

    def _on_engram_config(self, ln: _Line, events: list[str]) -> None:
        pos = ln.msg.find("DeepSeek")
        self._engram_config_text = ln.msg[pos:] if pos >= 0 else ln.msg
        self._engram_config.update(_ENGRAM_KEY.findall(ln.msg))
        events.append("engram_config")

    def _on_engram_message(self, ln: _Line, events: list[str]) -> None:
        # Engram lines no reader here knows (a newer build's): kept verbatim, bounded.
        self._engram_messages.append(ln.msg.strip()[:MAX_ERROR_TEXT])

    def _on_engram_layer(self, ln: _Line, events: list[str]) -> None:
        stats = log_lines.engram_layer(ln.msg)
        if stats is None:
            self._on_engram_message(ln, events)
            return
        layer = int(stats["layer"])
        before = self._engram_layers.get(layer)
        if before is None and len(self._engram_layers) >= MAX_ENGRAM_LAYERS:
            return
        at = before.get("at") if before else None
        stats["interval_s"] = (round(ln.t - at, 6) if isinstance(at, float | int)
                               and ln.t is not None and ln.t > at else None)
        stats["at"] = ln.t
        stats["rank"] = ln.rank
        for key in ("lookups", "reads"):  # since the line before: totals since the log began
            value = stats.get(key)
            total = before.get(f"{key}_total", 0) if before else 0
            if isinstance(value, int) and isinstance(total, int):
                stats[f"{key}_total"] = total + value
        self._engram_layers[layer] = stats
        events.append("engram_layer")

    def _on_error(self, ln: _Line, events: list[str]) -> None:
        msg = ln.msg
        phase: str | None = None
        if "Initialization failed" in msg:
            kind = "warmup_failed"
        elif "Health check failed" in msg:
            kind = "health_check"
        elif "Decode out of memory happened" in msg:
            kind = "retract"  # runtime KV retraction: the server carries on
        elif "Traceback" in msg:
            kind = "traceback"
        elif "Received sigquit" in msg:
            kind = "child_failed"  # a scheduler or detokenizer died; SGLang kills the rest
        elif "CUDA Error" in msg and not any(word in msg for word in _OOM_WORDS):
            kind = "cuda"
        else:
            kind = "oom"
            phase = _kv_failure(msg)
        err = self._record_error(ln, kind, events, phase=phase)
        if "Traceback" in msg:
            self._tb = err

    def _on_bare_error(self, ln: _Line, events: list[str]) -> None:
        # "RuntimeError: ..", "AssertionError: .." alone on a line: what a process printed
        # as it died, without the traceback (or with it in another file).
        msg = ln.msg.strip()
        if _BARE_EXC.match(msg) is None:
            return
        kind = "oom" if any(word in msg for word in _OOM_WORDS) else "exception"
        self._record_error(ln, kind, events, phase=_kv_failure(msg))

    def _record_error(self, ln: _Line, kind: str, events: list[str],
                      phase: str | None = None) -> _Err:
        # Nothing is fatal once ready, nor while stopping (a stop interrupts whatever runs).
        fatal = kind in _FATAL_KINDS and not self._ready and not self._stopping
        err = _Err(ln.t, kind, ln.msg.strip()[:MAX_ERROR_TEXT], ln.rank, fatal)
        err.phase = phase
        self._errors.append(err)
        events.append("error")
        if fatal and self._failed_at is None:
            self._failed_at = ln.t if ln.t is not None else self._last_t
            self._failed_in = phase or self._under_way()
            self._failing = err
            self._phase = FAILED
            events.append("failed")
        return err

    def _traceback_continues(self, line: str) -> bool:
        """True while ``line`` belongs to the pending traceback (and must not be scanned:
        source lines in frames would trip the needles)."""
        err = self._tb
        assert err is not None
        stripped = line.strip()
        if not stripped or line[0] in " \t":
            if stripped.startswith("File "):
                self._frame(err, stripped)
            return True
        if stripped.startswith(("Traceback", "During handling", "The above exception")):
            return True
        self._tb = None
        if _PREFIX.match(stripped) or not _EXC_LINE.match(stripped):
            self._traceback_done(err)
            return False  # the traceback ended without an exception line: scan normally
        err.exception = stripped[:MAX_ERROR_TEXT]
        if err.kind == "traceback" and any(word in stripped for word in _OOM_WORDS):
            err.kind = "oom"
        if not err.outer:
            err.phase = _kv_failure(stripped) or err.phase
        self._traceback_done(err)
        return True

    @staticmethod
    def _frame(err: _Err, frame: str) -> None:
        """A frame line: the outermost ModelRunner step names the phase; without one, the
        innermost frame in a file of a phase's own."""
        m = _FRAME.search(frame)
        if m is None or err.outer:
            return
        step = _STEP_PHASES.get(m.group(2))
        if step is not None:
            err.phase, err.outer = step, True
            return
        name = m.group(1).rsplit("/", 1)[-1]
        for part, phase in _FILE_PHASES:
            if part in name:
                err.phase = phase
                break

    def _traceback_done(self, err: _Err) -> None:
        if err is self._failing and err.phase is not None:
            self._failed_in = err.phase

    # ------------------------------------------------------------------ runtime batches

    def _on_decode(self, ln: _Line, events: list[str]) -> None:
        f = _batch_fields(ln.msg, "Decode batch")
        full = _float(f.get("full token usage"))
        self._decode = DecodeStats(
            at=ln.t,
            rank=ln.rank,
            running_reqs=_int(f.get("#running-req")),
            num_tokens=_int(f.get("#token", f.get("#full token"))),
            token_usage=_float(f.get("token usage")) if full is None else full,
            full_token_usage=full,
            swa_token_usage=_float(f.get("swa token usage")),
            swa_tokens=_int(f.get("#swa token")),
            gen_throughput=_float(f.get("gen throughput (token/s)")),
            queue_reqs=_int(f.get("#queue-req")),
            accept_len=_float(f.get("accept len")),
            graph=_bool(f.get("cuda graph", f.get("cpu graph", f.get("npu graph")))),
        )
        if self._from_launch is None:  # serving already: the log began after the launch
            self._from_launch = False

    def _on_prefill(self, ln: _Line, events: list[str]) -> None:
        f = _batch_fields(ln.msg, "Prefill batch")
        full = _float(f.get("full token usage"))
        self._prefill = PrefillStats(
            at=ln.t,
            rank=ln.rank,
            new_seqs=_int(f.get("#new-seq")),
            new_tokens=_int(f.get("#new-token")),
            cached_tokens=_int(f.get("#cached-token")),
            token_usage=_float(f.get("token usage")) if full is None else full,
            full_token_usage=full,
            swa_token_usage=_float(f.get("swa token usage")),
            running_reqs=_int(f.get("#running-req")),
            queue_reqs=_int(f.get("#queue-req")),
            input_throughput=_float(f.get("input throughput (token/s)")),
            graph=_bool(f.get("cuda graph", f.get("cpu graph", f.get("npu graph")))),
        )
        if self._from_launch is None:  # serving already: the log began after the launch
            self._from_launch = False


# Messages of a KV pool that cannot be sized: the failure is the KV phase's, wherever the
# phase timeline stands (a rank may not have printed its "Load weight end").
_KV_FAILURES = ("no GPU memory for the KV cache", "Not enough memory", "profiled value -")


def _kv_failure(msg: str) -> str | None:
    return "kv_pool" if any(words in msg for words in _KV_FAILURES) else None


_ARG_TYPES: dict[str, type | tuple[type, ...]] = {
    "model_path": str, "tp_size": int, "dp_size": int, "pp_size": int, "ep_size": int,
    "mem_fraction_static": (int, float), "kv_cache_dtype": str, "page_size": int,
    "context_length": int, "max_running_requests": int, "chunked_prefill_size": int,
    "attention_backend": str, "decode_attention_backend": str,
    "prefill_attention_backend": str, "speculative_algorithm": str,
    "speculative_num_steps": int, "speculative_num_draft_tokens": int,
    "speculative_draft_model_path": str, "enable_dp_attention": bool,
    "enable_hierarchical_cache": bool, "hicache_ratio": (int, float),
    "hicache_size": (int, float), "swa_full_tokens_ratio": (int, float),
    "engram_config": (str, dict),
}
# Older and newer names of the same setting.
_ARG_ALIASES = {"ep_size": ("moe_ep_size", "expert_parallel_size"),
                "tp_size": ("tensor_parallel_size",), "dp_size": ("data_parallel_size",)}


def typed_server_args(raw: dict[str, object]) -> ServerArgsFacts:
    """The settings a placement reading needs from a ServerArgs dump, each of its type or
    None (a bool is no int here; an int is a float)."""
    typed: dict[str, object] = {}
    for name, kind in _ARG_TYPES.items():
        value = raw.get(name)
        for alias in _ARG_ALIASES.get(name, ()):
            if value is None:
                value = raw.get(alias)
        if isinstance(value, bool) and kind is not bool:
            value = None
        if value is not None and isinstance(value, kind):
            typed[name] = float(value) if kind == (int, float) else value
    return ServerArgsFacts(**typed, raw=dict(raw))  # type: ignore[arg-type]


def _batch_fields(msg: str, head: str) -> dict[str, str]:
    body = msg[msg.find(head) + len(head):]
    return {k.strip(): v.strip() for k, v in _BATCH_FIELD.findall(body)}


def parse_startup_log(text: str) -> StartupFacts:
    """Facts of a whole log file at once (times from the line prefixes)."""
    parser = StartupLogParser()
    parser.feed_text(text)
    return parser.facts()
