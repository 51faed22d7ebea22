"""vLLM's start-up log, line by line, into the same StartupFacts the SGLang parser gives.

vLLM's lines look like ``(EngineCore_DP0 pid=3561) INFO 12-02 12:24:53 [core.py:133] msg``:
a process tag (APIServer, EngineCore, Worker, VllmWorker rank=N, Worker_TP1...; absent in
single-process and older builds), a level, a date without a year, and the file that
logged, in brackets since 0.6 (``core.py:133]`` before). uvicorn's own lines
(``INFO:     Application startup complete.``) and Python's tracebacks come unprefixed.

What it reads, by phase (the order differs between the GPU and the CPU paths, and a phase
can come back: torch.compile runs before the KV cache is sized, graph capture after):
  - launching: the banner (version, model), ``non-default args: {...}``;
  - distributed_init: ``world_size=.. rank=.. distributed_init_method=``;
  - weights: ``Starting to load model``, ``Model loading took X GiB [memory] and Y s``;
  - graphs: torch.compile (``Starting torch.compile``, ``Compiling a graph``,
    ``torch.compile takes``/``took``, the CPU's
    ``Warming up model for the compilation``), CUDA graph capture (``Capturing CUDA
    graphs``, ``Graph capturing finished in N secs, took X GiB``);
  - kv_pool: ``Available KV cache memory: X GiB``, the CPU's ``Explicitly set (X/Y) GiB for
    KV cache``, ``<device> KV cache size: N tokens``, v0's ``# GPU blocks: N``;
  - http: ``Starting vLLM [API ]server [0] on http://..``, ``Uvicorn running on``;
  - ready: uvicorn's ``Application startup complete.``
Failures: a traceback's closing exception line, ``EngineCore failed to start``, CUDA out of
memory, before ready. Stopping: the ``[shutdown]`` lines; stopped: ``Application shutdown
complete``.
"""

from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field, replace

from collectors.startup_facts import (
    FAILED,
    PHASES,
    STOPPED,
    STOPPING,
    DecodeStats,
    LogError,
    PhaseSpan,
    RankFacts,
    ServerArgsFacts,
    StartupFacts,
)

_PREFIX = re.compile(
    r"^(?:\((?P<proc>[A-Za-z_]+[A-Za-z0-9_]*)(?: rank=(?P<rank>\d+))? pid=\d+\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<date>\d\d-\d\d \d\d:\d\d:\d\d)"
    r"(?:\.\d+)?\s+\[?[\w./-]+:\d+\]\s?(?P<msg>.*)$")
_UVICORN = re.compile(r"^(?:\([^)]*\)\s+)?(?:INFO|WARNING|ERROR):\s+(?P<msg>.*)$")
_TP = re.compile(r"_TP(\d+)")
_EXCEPTION = re.compile(
    r"^(?:[\w.]+\.)?(?P<name>[A-Z]\w*(?:Error|Exception|Exit))(?::\s*(?P<text>.*))?$")
_GIB = r"(\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB)"
_SCALE = {"GiB": 1.0, "GB": 1.0, "MiB": 1 / 1024, "MB": 1 / 1024}

_VERSION = re.compile(r"version\s+v?(\d+\.\d+[\w.+-]*)")
_ENGINE_VERSION = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?([\w.+-]+)\)")
_MODEL_LEN = re.compile(r"Using max model len (\d+)")
_WEIGHTS = re.compile(r"Model loading took " + _GIB + r"(?: memory)? and (\d+(?:\.\d+)?) s")
_LOAD_WEIGHTS = re.compile(r"Loading weights took (\d+(?:\.\d+)?) s")
_AVAILABLE_KV = re.compile(r"Available KV cache memory: " + _GIB)
_EXPLICIT_KV = re.compile(r"Explicitly set \((\d+(?:\.\d+)?)/\d+(?:\.\d+)?\) (GiB|GB) for KV cache")
_REST_KV = re.compile(r"reserved for KV Cache is " + _GIB)
_KV_TOKENS = re.compile(r"(?P<dev>[A-Z]+(?: \+ host)?) KV cache size: (?P<n>[\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: (\d+(?:\.\d+)?)x")
_BLOCKS = re.compile(r"# (?:GPU|CPU|XPU|NPU|HPU) blocks: (\d+)")
_CAPTURED = re.compile(r"Graph capturing finished in (\d+(?:\.\d+)?) secs?, took " + _GIB)
# "takes" in the 0.9 era; 0.32's monitor.py says "took" (and "torch.compile and initial
# profiling/warmup run together took" when it compiles without its AOT path).
_COMPILE = re.compile(r"torch\.compile(?: and initial profiling/warmup run together)? "
                      r"t(?:akes|ook) (\d+(?:\.\d+)?) s in total")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (\d+(?:\.\d+)?)"
                   r" s(?: \(compilation: (\d+(?:\.\d+)?) s)?")
_PROFILE = re.compile(r"Memory profiling takes (\d+(?:\.\d+)?) seconds")
_HTTP = re.compile(r"(?:Starting vLLM (?:API )?server(?: \d+)? on|Uvicorn running on) (\S+)")
_UVICORN_PID = re.compile(r"Started server process \[(\d+)\]")
_ARGS = re.compile(r"non-default args: (\{.*\})\s*$")
_STATS = re.compile(r"Running: (\d+) reqs?, (?:Swapped: \d+ reqs?, )?Waiting: (\d+) reqs?")
_GEN = re.compile(r"Avg generation throughput: (\d+(?:\.\d+)?) tokens/s")
_USAGE = re.compile(r"(?:GPU |CPU )?KV cache usage: (\d+(?:\.\d+)?)%")
_ENGRAM = re.compile(r"Engram table offloaded to pinned host memory: (\d+) rows x (\d+), "
                     r"(\d+(?:\.\d+)?) GiB (shared across DP replicas|per rank)")
_SECRET = re.compile(r"(?:^|_)(?:api_key|key|token|secret|password)$", re.IGNORECASE)

# Message fragments that open a phase (checked in this order).
_OPENS: tuple[tuple[str, str], ...] = (
    ("distributed_init_method=", "distributed_init"),
    ("is assigned as DP rank", "distributed_init"),
    ("Starting to load model", "weights"),
    ("Loading model weights", "weights"),
    ("Loading safetensors checkpoint shards", "weights"),
    ("Warming up model for the compilation", "graphs"),
    ("Starting torch.compile", "graphs"),
    ("Compiling a graph for", "graphs"),
    ("Dynamo bytecode transform time", "graphs"),
    ("Capturing CUDA graph", "graphs"),
    ("Capturing cudagraphs", "graphs"),
    ("Memory profiling takes", "kv_pool"),
    ("Available KV cache memory", "kv_pool"),
    ("for KV cache on node", "kv_pool"),
    ("KV cache size:", "kv_pool"),
    ("# GPU blocks:", "kv_pool"),
)
_FATAL = ("EngineCore failed to start", "Engine core initialization failed",
          "CUDA out of memory", "OutOfMemoryError")
_SHUTDOWN = ("[shutdown]", "Shutting down", "Received SIGTERM", "Received SIGINT")
_ARG_NAMES = {"model": "model_path", "tensor_parallel_size": "tp_size",
              "data_parallel_size": "dp_size", "pipeline_parallel_size": "pp_size",
              "kv_cache_dtype": "kv_cache_dtype", "max_model_len": "context_length",
              "max_num_seqs": "max_running_requests", "engram_config": "engram_config",
              "max_num_batched_tokens": "chunked_prefill_size"}


@dataclass
class _Rank:
    weights_gb: float | None = None
    weights_s: float | None = None
    kv_gb: float | None = None
    graph_gb: float | None = None
    graph_s: float | None = None


@dataclass
class _State:
    phase: str = "launching"
    failed_in: str | None = None
    ranks: dict[int, _Rank] = field(default_factory=dict)
    kv_tokens: int | None = None
    capacity_from_concurrency: int | None = None
    context_len: int | None = None
    args: dict[str, object] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    version: str | None = None
    engram: dict[str, str] = field(default_factory=dict)
    engram_messages: list[str] = field(default_factory=list)
    errors: list[LogError] = field(default_factory=list)
    spans: list[PhaseSpan] = field(default_factory=list)
    uvicorn_pid: int | None = None
    url: str | None = None
    ready_at: float | None = None
    failed_at: float | None = None
    stopping_at: float | None = None
    stopped_at: float | None = None
    launch_at: float | None = None
    after_launch: bool | None = None  # the first phase line seen was a later phase's
    decode: DecodeStats | None = None
    extra: dict[str, str] = field(default_factory=dict)


class VllmLogParser:
    """Fed one line at a time (``at``: when it was read; else the line's own time)."""

    def __init__(self) -> None:
        self._s = _State()
        self._launches = 0
        self._lines = 0
        self._last_at: float | None = None

    # ------------------------------------------------------------------ public
    def feed(self, line: str, at: float | None = None) -> list[str]:
        try:
            return self._feed(line.rstrip("\n"), at)
        except Exception:  # a strange line never takes the supervisor's loop down
            return []

    def feed_text(self, text: str) -> list[str]:
        out: list[str] = []
        for line in text.splitlines():
            out += self.feed(line)
        return out

    def current_phase(self) -> str:
        return self._s.phase

    @property
    def failed_in(self) -> str | None:
        return self._s.failed_in

    def facts(self) -> StartupFacts:
        s = self._s
        ranks = {r: RankFacts(rank=r, weights_gb=st.weights_gb, all_weights_gb=st.weights_gb,
                              weights_elapsed_s=st.weights_s, kv_total_gb=st.kv_gb,
                              all_kv_gb=st.kv_gb, kv_tokens=s.kv_tokens if r == 0 else None,
                              graph_mem_usage_gb=st.graph_gb, graph_elapsed_s=st.graph_s)
                 for r, st in sorted(s.ranks.items())}
        capacity = s.kv_tokens if s.kv_tokens is not None else s.capacity_from_concurrency
        notes = ()
        if s.kv_tokens is None and s.capacity_from_concurrency is not None:
            notes = ("KV capacity from the maximum concurrency line (model length x "
                     "concurrency): this build prints no token count",)
        extra = dict(s.extra)
        if s.version:
            extra["version"] = s.version
        return StartupFacts(
            ranks=ranks, max_total_num_tokens=capacity, kv_capacity_tokens=capacity,
            context_len=s.context_len, max_running_requests=_int(s.args.get("max_num_seqs")),
            server_args=self._server_args(), startup_timings_s=dict(s.timings),
            engram_config=dict(s.engram), engram_messages=tuple(s.engram_messages),
            engram_config_text=s.engram_messages[0] if s.engram_messages else None,
            uvicorn_pid=s.uvicorn_pid, uvicorn_url=s.url,
            ready=s.ready_at is not None, ready_at=s.ready_at, failed_at=s.failed_at,
            failed_in=s.failed_in, errors=tuple(s.errors), stopping_at=s.stopping_at,
            stopped_at=s.stopped_at, log_starts_after_launch=bool(s.after_launch),
            launches=self._launches, notes=notes, launch_at=s.launch_at,
            last_line_at=self._last_at, lines_seen=self._lines, phase=s.phase,
            timeline=tuple(s.spans), decode=s.decode, scheduler_extra=extra)

    # ------------------------------------------------------------------ lines
    def _feed(self, line: str, at: float | None) -> list[str]:
        self._lines += 1
        m = _PREFIX.match(line)
        proc = rank = None
        if m:
            msg = m["msg"]
            proc, rank = m["proc"], m["rank"]
            if at is None:
                at = _stamp(m["date"])
        else:
            u = _UVICORN.match(line)
            msg = u["msg"] if u else line.strip()
            if at is None:  # uvicorn's lines and tracebacks carry no time: the last line's
                at = self._last_at
        if at is not None:
            self._last_at = at
        events: list[str] = []
        if self._s.launch_at is None and at is not None and m:
            self._s.launch_at = at
        r = _rank_of(proc, rank)
        if ("version" in msg and _VERSION.search(msg) and "█" in msg) or _ARGS.search(msg):
            events += self._launch(at, msg)
        self._facts(msg, r, at)
        events += self._phase_lines(msg, at)
        return events

    def _launch(self, at: float | None, msg: str) -> list[str]:
        s = self._s
        events: list[str] = []
        if s.ready_at is not None or s.phase in (FAILED, STOPPING, STOPPED):
            self._s = _State(launch_at=at)  # a relaunch in one log: the latest one counts
            events.append("relaunch")
        if (msg.startswith("non-default args") or "█" in msg) \
                and (self._launches == 0 or events):
            self._launches += 1
            events.append("launch")
        return events

    def _facts(self, msg: str, rank: int, at: float | None) -> None:
        s = self._s
        st = s.ranks.setdefault(rank, _Rank()) if rank == 0 or rank in s.ranks else None
        if (v := _VERSION.search(msg)) and "█" in msg:
            s.version = v.group(1)
        elif v := _ENGINE_VERSION.search(msg):
            s.version = s.version or v.group(1)
        if m := _MODEL_LEN.search(msg):
            s.context_len = int(m.group(1))
        if m := _ARGS.search(msg):
            s.args = _args(m.group(1))
        if st is None and any(p.search(msg) for p in (_WEIGHTS, _AVAILABLE_KV, _CAPTURED)):
            st = s.ranks.setdefault(rank, _Rank())
        if st is not None:
            if m := _WEIGHTS.search(msg):
                st.weights_gb = float(m.group(1)) * _SCALE[m.group(2)]
                st.weights_s = float(m.group(3))
            if m := _AVAILABLE_KV.search(msg) or _REST_KV.search(msg):
                st.kv_gb = float(m.group(1)) * _SCALE[m.group(2)]
            elif m := _EXPLICIT_KV.search(msg):
                st.kv_gb = float(m.group(1))
            if m := _CAPTURED.search(msg):
                st.graph_s = (st.graph_s or 0.0) + float(m.group(1))
                st.graph_gb = (st.graph_gb or 0.0) + float(m.group(2)) * _SCALE[m.group(3)]
        if m := _KV_TOKENS.search(msg):
            s.kv_tokens = int(m["n"].replace(",", ""))
            s.extra["kv_device"] = m["dev"]
        if m := _CONCURRENCY.search(msg):
            s.capacity_from_concurrency = round(int(m.group(1).replace(",", ""))
                                                * float(m.group(2)))
        if m := _BLOCKS.search(msg):
            s.extra["num_gpu_blocks"] = m.group(1)
        if m := _LOAD_WEIGHTS.search(msg):
            s.timings["load_weights"] = float(m.group(1))
        if m := _COMPILE.search(msg):
            s.timings["compile"] = float(m.group(1))
        if m := _PROFILE.search(msg):
            s.timings["memory_profile"] = float(m.group(1))
        if m := _INIT.search(msg):
            s.timings["init_engine"] = float(m.group(1))
            if m.group(2):
                s.timings["compile"] = float(m.group(2))
        if m := _ENGRAM.search(msg):
            s.engram = {"placement": "cpu", "pinned": "true", "rows": m.group(1),
                        "dim": m.group(2), "size_gib": m.group(3),
                        "replication": "shared" if m.group(4).startswith("shared") else
                        "per_rank"}
            s.engram_messages.append(msg[:300])
        if m := _UVICORN_PID.search(msg):
            s.uvicorn_pid = int(m.group(1))
        if (m := _STATS.search(msg)) and "throughput" in msg:
            usage = _USAGE.search(msg)
            gen = _GEN.search(msg)
            s.decode = DecodeStats(at=at, rank=0, running_reqs=int(m.group(1)),
                                   queue_reqs=int(m.group(2)),
                                   token_usage=float(usage.group(1)) / 100 if usage else None,
                                   gen_throughput=float(gen.group(1)) if gen else None)

    def _phase_lines(self, msg: str, at: float | None) -> list[str]:
        s = self._s
        if s.phase in (FAILED, STOPPED):
            return []
        if any(p in msg for p in _SHUTDOWN) and s.phase != STOPPING \
                and (s.ready_at is not None or "[shutdown]" in msg):
            s.stopping_at = at
            self._enter(STOPPING, at)
            return ["stopping"]
        if "Application shutdown complete" in msg or "Finished server process" in msg:
            s.stopped_at = at
            self._enter(STOPPED, at)
            return ["stopped"]
        error = self._error(msg, at)
        if error is not None:
            s.errors.append(error)
            if error.fatal:
                s.failed_in = s.phase
                s.failed_at = at
                self._enter(FAILED, at)
                return ["failed"]
        if s.phase == STOPPING:
            return []
        events: list[str] = []
        moved = False
        if m := _HTTP.search(msg):
            s.url = m.group(1)
            events.append("http_running")
            moved = self._enter("http", at)
        elif "Application startup complete" in msg and s.phase in PHASES:
            s.ready_at = at if at is not None else time.time()  # a log without times
            moved = self._enter("ready", at)
            events.append("ready")
        elif s.phase not in ("http", "ready"):
            phase = next((ph for needle, ph in _OPENS if needle in msg), None)
            if phase is not None:
                moved = self._enter(phase, at)
        return events + ([f"phase:{s.phase}"] if moved else [])

    def _error(self, msg: str, at: float | None) -> LogError | None:
        """A fatal-error line, or a traceback's closing exception line; before ready,
        either ends the start-up."""
        s = self._s
        before_ready = s.ready_at is None
        phase = s.phase if before_ready else None
        if any(f in msg for f in _FATAL):
            kind = "oom" if "out of memory" in msg or "OutOfMemory" in msg else "engine"
            return LogError(at=at, kind=kind, text=msg[:300], fatal=before_ready, phase=phase)
        if _EXCEPTION.match(msg):
            return LogError(at=at, kind="traceback", text=msg[:300], exception=msg[:300],
                            fatal=before_ready, phase=phase)
        return None

    def _enter(self, phase: str, at: float | None) -> bool:
        """Into ``phase`` (a span of its own); False when it is the current one."""
        s = self._s
        if phase == s.phase and s.spans:
            return False
        if s.after_launch is None and phase in PHASES:
            # A log whose first phase line is the HTTP server's began after the launch.
            s.after_launch = phase in ("http", "ready")
        if s.spans and s.spans[-1].end is None:
            s.spans[-1] = replace(s.spans[-1], end=at)
        s.spans.append(PhaseSpan(phase, at, None))
        s.phase = phase
        return True

    def _server_args(self) -> ServerArgsFacts | None:
        args = self._s.args
        if not args:
            return None
        typed: dict[str, object] = {}
        for key, name in _ARG_NAMES.items():
            if key in args:
                typed[name] = args[key]
        spec = args.get("speculative_config")
        if isinstance(spec, dict):
            typed["speculative_algorithm"] = spec.get("method")
        fields = ServerArgsFacts.__dataclass_fields__
        clean = {k: v for k, v in typed.items() if k in fields and _fits(k, v)}
        raw = {k: "<redacted>" if _SECRET.search(k) and v else v for k, v in args.items()}
        return ServerArgsFacts(**clean, raw=raw)


def _fits(name: str, value: object) -> bool:
    if name in ("model_path", "kv_cache_dtype", "speculative_algorithm"):
        return isinstance(value, str)
    if name == "engram_config":
        return isinstance(value, str | dict)
    return isinstance(value, int) and not isinstance(value, bool)


def _args(text: str) -> dict[str, object]:
    """``non-default args: {...}``: a Python dict literal."""
    try:
        value = ast.literal_eval(text[:256 * 1024])
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return {}
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _rank_of(proc: str | None, rank: str | None) -> int:
    if rank is not None:
        return int(rank)
    if proc and (m := _TP.search(proc)):
        return int(m.group(1))
    return 0


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stamp(date: str) -> float | None:
    """``12-02 12:24:44`` (no year: this year's) as epoch seconds."""
    try:
        parsed = time.strptime(f"{time.localtime().tm_year}-{date}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return time.mktime(parsed)
