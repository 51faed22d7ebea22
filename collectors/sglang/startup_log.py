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
never on the prefix (:mod:`collectors.sglang.line_prefix` takes the prefix off and reads
the line's time and rank from it).

Hybrid KV models (DeepSeek-V4.x) size several pools instead of printing ``KV Cache is
allocated``: the ``<tag> memory calculation``, ``<tag> pool sizes``, ``<tag> SWA sizing``,
``Memory profiling`` and ``Initialize ..TokenToKVPool`` lines each open the KV phase, and
without a ``max_total_num_tokens=`` line the full pool is the capacity
(:mod:`collectors.sglang.log_lines` reads their figures).

A sliding-window (SWA) model logs a full and a SWA pool: its capacity is the full pool's
("Use sliding window memory pool. full_layer_tokens=..", "SWAKVPool .. full size"), its KV
total SWAKVPool's "mem usage"; a post-capture resize states the pool that serves; a Mamba
model's state pool is apart (:mod:`collectors.sglang.hybrid_handlers`). Each figure says
the line it came from, and derived ones say so.

Ranks are keyed by every dimension their prefix names (``DP1 PP0 TP3 EP3``), in GPU order;
the parallel sizes come from the ServerArgs, a pasted launch command, or the prefixes
(derived) (:mod:`collectors.sglang.parallel_layout`). A shipper's JSON records
(:mod:`collectors.sglang.json_lines`) and PyTorch's ``[rankN]:`` heads are taken off first.

The facts and their units (SGLang's "GB" is GiB) are in :mod:`collectors.startup_facts`.

Times: give ``at`` for every line or for none: the two clocks are not comparable.
``launch_at`` is the time of the first line that has one: a real log starts with Python
warnings that carry no timestamp, so without ``at`` it is the first line with a ``[ts]``
prefix. A log whose first start-up line belongs to a later phase (it was cut, or rotated)
started after the launch: it says so, and has no launch time to count from.

One log can hold several launches (a restart loop writing to one file): a second ServerArgs
dump, a rank initialising its distributed group again, or weights loading again after the
server was ready, stopped or failed, starts a new run; the facts are the latest launch's.

Python warnings (``path.py:71: UserWarning: ..`` and their indented continuation lines) are
skipped: they are neither errors nor facts.

Failures: a traceback (its frames name the phase it came from: model_runner's
``load_model``, ``init_memory_pool``, the graph capture...; frames printed without their
"Traceback" line too), a bare ``SomeError: ..`` line, ``CUDA error: ..`` (no kernel image),
"Capture cuda graph failed", SGLang's "Received sigquit from a child process" and "SIGQUIT
received .. one child failed", a scheduler that died, NCCL's watchdog timeouts, an
out-of-memory message or a KV pool sized below zero. Before "ready" they are fatal; the
phase is what the frames or the text name, else the one under way, and the cause is one
line (a child's own error wins over the "one child failed" that announced it). Lines out
of order (a begin after its end, a rank's lines flushed late) never start a new launch
nor run the timeline backwards.

Shutdown: ``SIGTERM received``, ``Gracefully exiting``, uvicorn's ``Shutting down`` and
``Waiting for application shutdown``/``Application shutdown complete`` set ``stopping_at``
and the phase STOPPING; uvicorn's ``Finished server process [pid]`` sets ``stopped_at`` and
STOPPED. A stop never hides a failure: after FAILED the phase stays FAILED (the times are
still recorded), and errors seen while stopping are recorded but not fatal.

Where each part is: the line's prefix in line_prefix, the messages' patterns and number
readers in log_patterns and log_lines, the phase timeline in phase_timeline, a rank's
figures in rank_state, what failures mean in failures, the launch's state and its bounds in
launch_state, and the handlers by family of lines in memory_handlers, serving_handlers,
engram_handlers and error_handlers, which this parser joins.
"""

from __future__ import annotations

from collectors.sglang import json_lines
from collectors.sglang.engram_handlers import EngramHandlers
from collectors.sglang.error_handlers import ErrorHandlers
from collectors.sglang.failures import NCCL_TIMEOUT_WORDS, cause_line
from collectors.sglang.hybrid_handlers import HybridPoolHandlers
from collectors.sglang.launch_state import Handler
from collectors.sglang.layout_handlers import LayoutHandlers
from collectors.sglang.log_patterns import (
    ANSI,
    AVAILABLE,
    PY_WARNING,
    SUMMARY_INT,
    to_float,
    to_int,
)
from collectors.sglang.memory_handlers import MemoryHandlers
from collectors.sglang.parallel_layout import COMMAND_WORDS, DERIVED_FROM_PREFIXES, PREFIX_SOURCE
from collectors.sglang.serving_handlers import ServingHandlers
from collectors.startup_facts import StartupFacts

# Events of a launch's first lines, and of later phases: the first of either that a log
# shows tells whether it holds its server's launch.
_LAUNCH_EVENTS = frozenset({"server_args", "model_defaults", "distributed_init_begin",
                            "weights_begin", "memory_baseline", "launch_command"})
_LATER_EVENTS = frozenset({
    "distributed_init_end", "weights_end", "kv_allocated", "kv_sizing", "kv_pool_end",
    "graphs_begin", "graphs_end", "scheduler_summary", "http_started", "http_running", "ready",
    "engram_layer", "engram_table", "startup_timings", "hicache_allocated", "mamba_allocated",
    # A log whose first lines are a stop's began after its server's launch: a teardown is
    # no launch of its own.
    "stopping", "stopped",
})

# Event names feed() can return. "phase:<name>" is added whenever current_phase() changes.
EVENTS: tuple[str, ...] = (
    "launch", "distributed_init_begin", "distributed_init_end", "weights_begin", "weights_end",
    "kv_allocated", "kv_pool_end", "graphs_begin", "graphs_end", "scheduler_summary",
    "http_started", "http_running", "ready", "engram_table", "engram_config", "error", "failed",
    "memory_baseline", "startup_timings", "stopping", "stopped", "kv_sizing", "server_args",
    "engram_layer", "relaunch", "model_defaults", "hicache_allocated", "mamba_allocated",
    "launch_command",
)
NOTE_AFTER_LAUNCH = "log starts after launch: time to ready unknown"


class StartupLogParser(MemoryHandlers, HybridPoolHandlers, ServingHandlers, EngramHandlers,
                       ErrorHandlers, LayoutHandlers):
    """Feed SGLang log lines one at a time; ask for facts() whenever convenient."""

    def __init__(self) -> None:
        super().__init__()
        # Counts the lines that told it something (a handler ran): facts() can only differ
        # from the last call's when it moved, so a reader may skip rebuilding them.
        self.version = 0
        self._lines = 0  # every line fed, over all launches
        # Needle -> handler, tried in order with plain substring tests. Batch lines come
        # first because they are the most common lines that match at all; errors last but
        # for the catch-all of Engram lines nobody has a reader for.
        self._dispatch: tuple[tuple[str, Handler], ...] = (
            ("Decode batch", self._on_decode),
            ("Prefill batch", self._on_prefill),
            ("ServerArgs(", self._on_server_args),
            *((words, self._on_command) for words in COMMAND_WORDS),
            ("swa_full_tokens_ratio to", self._on_swa_ratio),
            ("Init torch distributed", self._on_dist),
            ("Init parallel", self._on_dist),
            ("Memory baseline taken", self._on_baseline),
            ("Load weight ", self._on_weights),
            ("liding window memory pool", self._on_swa_pool),
            ("_layer_tokens=", self._on_swa_pool),
            ("SWAKVPool", self._on_swa_kv),
            ("KV cache allocated", self._on_post_capture_kv),
            ("Mamba Cache is allocated", self._on_mamba),
            ("KV Cache is allocated", self._on_kv),
            ("Using KV cache dtype", self._on_kv_dtype),
            ("Memory profiling:", self._on_kv_sizing),
            ("memory calculation:", self._on_kv_sizing),
            ("pool sizes:", self._on_kv_sizing),
            ("SWA sizing:", self._on_kv_sizing),
            ("vailable memory for KV cache is", self._on_kv_sizing),
            ("TokenToKVPool", self._on_kv_sizing),
            ("Memory pool end", self._on_pool_end),
            ("host memory for hierarchical KV cache", self._on_hicache),
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
            ("SIGQUIT", self._on_error),
            *((words, self._on_error) for words in NCCL_TIMEOUT_WORDS),
            ("scheduler died", self._on_error),
            ("scheduler is dead", self._on_error),
            ("crashed with exit code", self._on_error),
            ("CUDA Error", self._on_error),
            ("CUDA error", self._on_error),
            ("Error:", self._on_bare_error),
            ("Exception:", self._on_bare_error),
            ("Engram", self._on_engram_message),
            ("engram", self._on_engram_message),
        )

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
        return self._phases.phase

    @property
    def last_line_at(self) -> float | None:
        """The time of the latest line fed, whatever it said."""
        return self._clock.last_t

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
            m = AVAILABLE.fullmatch(key)
            if m:
                device, available = m.group(1), to_float(s[key])
                break
        ranks, parallel, parallel_from = self._layout()
        first = next(iter(ranks.values()), None)
        max_total = to_int(s.get("max_total_num_tokens"))
        after_launch = self._from_launch is False
        derived = {f"parallel.{name}": DERIVED_FROM_PREFIXES
                   for name, source in parallel_from.items() if source == PREFIX_SOURCE}
        capacity_from = "max_total_num_tokens" if max_total is not None else (
            first.kv_tokens_from if first is not None and first.kv_tokens is not None
            else None)
        if first is not None and (first.kv_total_from or "").startswith("derived"):
            derived["ranks.kv_total_gb"] = first.kv_total_from or ""
        launch_at = self._launch_at
        if launch_at is not None and self._earliest_t is not None \
                and self._earliest_t < launch_at:
            launch_at = self._earliest_t  # lines out of order: the launch began at the earliest
        return StartupFacts(
            ranks=ranks,
            max_total_num_tokens=max_total,
            chunked_prefill_size=to_int(s.get("chunked_prefill_size")),
            max_prefill_tokens=to_int(s.get("max_prefill_tokens")),
            max_running_requests=to_int(s.get("max_running_requests")),
            context_len=to_int(s.get("context_len")),
            available_mem_gb=available,
            available_mem_device=device,
            available_gpu_mem_gb=available if device == "gpu" else None,
            scheduler_extra={
                k: v for k, v in s.items()
                if k not in SUMMARY_INT and not AVAILABLE.fullmatch(k)
            },
            kv_capacity_tokens=max_total if max_total is not None
            else (first.kv_tokens if first is not None else None),
            kv_capacity_from=capacity_from,
            mamba_state=dict(first.mamba_state) if first is not None else {},
            parallel=parallel,
            parallel_from=parallel_from,
            derived=derived,
            failure_cause=cause_line(self._failing) if self._failing is not None else None,
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
            errors=tuple(e.frozen() for e in self._errors),
            stopping_at=self._stopping_at,
            stopped_at=self._stopped_at,
            log_starts_after_launch=after_launch,
            launches=self._launches,
            notes=(NOTE_AFTER_LAUNCH,) if after_launch else (),
            launch_at=None if after_launch else launch_at,
            last_line_at=self._clock.last_t,
            lines_seen=self._lines,
            phase=self._phases.phase,
            timeline=self._phases.timeline(launch_at, self._from_launch),
            decode=self._decode,
            prefill=self._prefill,
        )

    def _feed(self, line: str, at: float | None) -> list[str]:
        if line[:1] == "{" or line.lstrip()[:1] == "{":
            record = json_lines.unwrap(line)
            if record is not None:  # a shipper's JSON: the lines it carries, at its time
                pieces, when = record
                json_t = self._json_time(when)
                events: list[str] = []
                for piece in pieces:
                    events.extend(self._feed_line(piece, at, json_t))
                return events
        return self._feed_line(line, at, None)

    def _json_time(self, when: object) -> float | None:
        parts = json_lines.iso_parts(when)
        if parts is not None:
            return self._clock.parse_ts(*parts)
        return json_lines.epoch_seconds(when)

    def _feed_line(self, line: str, at: float | None, json_t: float | None) -> list[str]:
        events: list[str] = []
        if at is not None:
            self._clock.last_t = at
        line = line.rstrip("\r\n")
        if "\r" in line:  # tqdm redraws: only the last frame of the line is real
            line = line.rsplit("\r", 1)[1]
        if "\x1b" in line:
            line = ANSI.sub("", line)
        line, outer_t = self._clock.strip_outer(line)
        if outer_t is None:
            outer_t = json_t
        self._lines += 1
        if not self._started:
            self.version += 1
            self._started = True
            self._launches += 1
            self._phases.open("launching", 0, None)  # its start is launch_at (see its timeline)
            events.append("launch")
        if self._launch_at is None and line.strip():
            # The first line with a time: `at` when given, else its "[ts]" prefix (a real log
            # opens with un-stamped Python warnings). The clock stays the one of that line.
            # An empty line says nothing of the launch (a shipper's envelope around nothing).
            t = at if at is not None else self._clock.prefix_time(line.lstrip())
            self._launch_outer = t is None and outer_t is not None
            if t is None:
                t = outer_t
            if t is not None:
                self._clock.last_t = t
                self._launch_at = t
        elif self._launch_outer:
            # A shipper's envelope time stands for the launch until a line with SGLang's own
            # stamp: an earlier one wins (a foreign line at a log's head moved the launch).
            own = self._clock.prefix_time(line.lstrip())
            if own is not None:
                self._launch_outer = False
                if self._launch_at is not None and own < self._launch_at:
                    self._launch_at = own
        if self._tb is not None and self._traceback_continues(line):
            return events
        if self._command_goes_on and self._command_continues(line):
            return events
        if self._tb is None and self._loose_frame(line):
            return events
        if self._in_warning:
            if line[:1] in (" ", "\t"):  # the warning's source line or message continuation
                return events
            self._in_warning = False
        if "Warning: " in line and PY_WARNING.match(line.lstrip()):
            self._in_warning = True
            return events
        for needle, handler in self._dispatch:
            if needle in line:
                self.version += 1
                before = self._phases.phase
                ln = self._clock.split(line, at, outer_t)
                self._saw_time(ln.t)
                handler(ln, events)
                if self._from_launch is None:
                    self._tell_start(events)
                if self._phases.phase != before:
                    events.append(f"phase:{self._phases.phase}")
                break
        if line[:1] not in (" ", "\t"):
            self._loose = None  # frames without a traceback end at the next line
        return events

    def _saw_time(self, t: float | None) -> None:
        if t is None:
            return
        if self._earliest_t is None or t < self._earliest_t:
            self._earliest_t = t
        if self._latest_t is None or t > self._latest_t:
            self._latest_t = t

    def _tell_start(self, events: list[str]) -> None:
        """Whether the log holds its server's launch: its first start-up line says."""
        if any(e in _LAUNCH_EVENTS for e in events):
            self._from_launch = True
        elif any(e in _LATER_EVENTS for e in events):
            self._from_launch = False


def parse_startup_log(text: str) -> StartupFacts:
    """Facts of a whole log file at once (times from the line prefixes)."""
    parser = StartupLogParser()
    parser.feed_text(text)
    return parser.facts()
