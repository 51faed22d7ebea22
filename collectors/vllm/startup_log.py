"""vLLM's start-up log, line by line, into the same StartupFacts the SGLang parser gives.

A line is split by collectors.vllm.line_prefix (what a container or shipper wrapped around it,
the process tags, torch's rank, the level, the time, the file); its rank is placed by
collectors.vllm.ranks in every parallel dimension the prefix or the text gives; its figures
are read by collectors.vllm.log_figures, each as stated; a launch's settings by
collectors.vllm.launch_args; what ends a start-up by collectors.vllm.failures.

Phases (the order differs between the GPU and the CPU paths, and a phase can come back:
torch.compile and v0.21+'s graph memory profile run before the KV cache is sized, graph
capture after):
  - launching: the banner (version, model), ``non-default args: {...}``, V0's ``args:
    Namespace(..)``, the engine's config line;
  - distributed_init: ``world_size=.. rank=.. distributed_init_method=``, ``is assigned as
    DP rank``;
  - weights: ``Starting to load model``, ``Model loading took``, ``Loading model weights``;
  - graphs: torch.compile, ``Profiling CUDA graph memory``, CUDA graph capture;
  - kv_pool: ``Memory profiling``, ``Available KV cache memory``, ``KV cache size``, V0's
    blocks and profile lines;
  - http: ``Starting vLLM [API ]server [0] on http://..``, ``Uvicorn running on``;
  - ready: uvicorn's ``Application startup complete.``
Stopping: the ``[shutdown]`` lines (after ready, a SIGTERM's too); stopped: ``Application
shutdown complete``. Figures worked out rather than read are named in ``derived``.
"""

from __future__ import annotations

import time
from dataclasses import replace

from collectors.startup_facts import (
    FAILED,
    PHASES,
    STOPPED,
    STOPPING,
    LogError,
    PhaseSpan,
    StartupFacts,
)
from collectors.vllm import failures, launch_args
from collectors.vllm.facts import freeze
from collectors.vllm.line_prefix import Clock, VllmLine, split
from collectors.vllm.log_figures import RankFigures, read_engine, read_rank
from collectors.vllm.log_state import LogState
from collectors.vllm.ranks import Place, RankBook, coords, label
from collectors.vllm.server_args import HTTP, engram_line, parallel_stated, read_stats, version_of

# Message fragments that open a phase (checked in this order).
_OPENS: tuple[tuple[str, str], ...] = (
    ("distributed_init_method=", "distributed_init"),
    (" local_rank=", "distributed_init"),
    ("is assigned as DP rank", "distributed_init"),
    ("Starting to load model", "weights"),
    ("Loading model weights", "weights"),
    ("Model loading took", "weights"),
    ("Loading safetensors checkpoint shards", "weights"),
    ("Warming up model for the compilation", "graphs"),
    ("Starting torch.compile", "graphs"),
    ("Compiling a graph for", "graphs"),
    ("Dynamo bytecode transform time", "graphs"),
    ("Profiling CUDA graph memory", "graphs"),
    ("Estimated CUDA graph memory", "graphs"),
    ("Capturing CUDA graph", "graphs"),
    ("Capturing cudagraphs", "graphs"),
    ("for CUDA graphs", "graphs"),
    ("Memory profiling", "kv_pool"),
    ("Initial profiling/warmup run", "kv_pool"),
    ("Overriding num_gpu_blocks", "kv_pool"),
    ("model weights take", "kv_pool"),
    ("Available KV cache memory", "kv_pool"),
    ("for KV cache on node", "kv_pool"),
    ("KV cache size:", "kv_pool"),
    (" blocks: ", "kv_pool"),
    ("engine can allocate", "kv_pool"),
)
_SHUTDOWN = ("[shutdown]", "Shutting down", "Received SIGTERM", "Received SIGINT")
_QUIET = ("INFO", "DEBUG")  # levels whose lines never carry a failure
MAX_ERRORS = 50


class VllmLogParser:
    """Fed one line at a time (``at``: when it was read; else the line's own time)."""

    def __init__(self) -> None:
        self._s = LogState()
        self._launches = 0
        self._lines = 0
        self._clock = Clock()
        self._book = RankBook()

    # ------------------------------------------------------------------ public
    def feed(self, line: str, at: float | None = None) -> list[str]:
        try:
            return self._feed(line.rstrip("\r\n"), at)
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
        return freeze(self._s, self._book, self._launches, self._lines, self._clock.last)

    # ------------------------------------------------------------------ lines
    def _feed(self, raw: str, at: float | None) -> list[str]:
        self._lines += 1
        line = split(raw)
        msg = line.msg
        at = self._clock.time_of(line, at)
        place = self._book.place(line)
        events: list[str] = []
        if self._s.launch_at is None and at is not None and line.level is not None:
            self._s.launch_at = at
        if self._launch_line(msg):
            events += self._launch(at)
        self._facts(line, place, at)
        events += self._phase_lines(line, place, at)
        return events

    def _launch_line(self, msg: str) -> bool:
        if "█" in msg and version_of(msg):
            return True
        if msg.startswith(("non-default args", "args: Namespace(")):
            return True
        # An engine's first line opens a launch where no banner did (V0's logs, a log that
        # holds the engine's lines only); each DP engine prints one, so only the first counts.
        return "LLM engine (v" in msg and msg.startswith("Initializing") and (
            self._launches == 0 or self._ended())

    def _ended(self) -> bool:
        s = self._s
        return s.ready_at is not None or s.phase in (FAILED, STOPPING, STOPPED)

    def _launch(self, at: float | None) -> list[str]:
        events: list[str] = []
        if self._ended():
            self._s = LogState(launch_at=at)  # a relaunch in one log: the latest one counts
            events.append("relaunch")
        if self._launches == 0 or events:
            self._launches += 1
            events.append("launch")
        return events

    def _facts(self, line: VllmLine, place: Place, at: float | None) -> None:
        s = self._s
        msg = line.msg
        s.version = version_of(msg, s.version)
        if (args := launch_args.non_default(msg)) is not None \
                or (args := launch_args.namespace(msg)) is not None:
            s.args = args
        elif (config := launch_args.engine_config(msg)) is not None:
            s.config = config
        elif (cmd := launch_args.command(msg)) is not None and cmd:
            s.command = cmd
        read_stats(msg, at, s)
        if (engram := engram_line(msg)) is not None:
            s.engram = engram
            s.engram_messages.append(msg[:300])
        rank = s.ranks.get(place)
        if rank is None:
            rank = RankFigures()
            read_rank(msg, rank)
            if rank != RankFigures():  # only a line with figures makes a rank
                s.ranks[place] = rank
        else:
            read_rank(msg, rank)
        read_engine(msg, s.engine)

    def _phase_lines(self, line: VllmLine, place: Place, at: float | None) -> list[str]:
        s = self._s
        msg = line.msg
        if s.phase == STOPPED:
            return []
        if s.phase == FAILED:  # the lines that follow say why, and where
            self._explain(line, place, at)
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
        error = self._error(line, place, at)
        if error is not None and error.fatal:
            s.failed_in, s.failed_at = error.phase, at
            s.failed_from = "text" if failures.phase_of_text(msg) else \
                "frames" if failures.phase_of_frames(s.frames) else "phase"
            s.cause, s.cause_generic = failures.one_line(msg), failures.is_generic(msg)
            self._enter(FAILED, at)
            return ["failed"]
        if s.phase == STOPPING:
            return []
        events: list[str] = []
        moved = False
        if m := _http(msg):
            s.url = m
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

    def _error(self, line: VllmLine, place: Place, at: float | None) -> LogError | None:
        """A fatal-error line, or a traceback's closing exception line; before ready,
        either ends the start-up. Frames of a traceback are kept for the phase."""
        s = self._s
        msg = line.msg.strip()
        self._frame(msg)
        if line.level in _QUIET:
            return None
        fatal_text = any(f in msg for f in failures.FATAL)
        exception = failures.EXCEPTION.match(msg) if line.level != "WARNING" else None
        if not fatal_text and exception is None:
            return None
        before_ready = s.ready_at is None
        phase = None
        if before_ready:
            phase = failures.phase_of_text(msg) or failures.phase_of_frames(s.frames) \
                or s.phase
        error = LogError(at=at, kind=failures.kind_of(msg) if fatal_text else "traceback",
                         text=msg[:300], rank=self._index(place), rank_label=self._label(place),
                         exception=msg[:300] if exception else None, fatal=before_ready,
                         phase=phase)
        if len(s.errors) < MAX_ERRORS:
            s.errors.append(error)
        return error

    def _explain(self, line: VllmLine, place: Place, at: float | None) -> None:
        """After the failing line: a cause that says what went wrong replaces a generic one,
        and a phase from the words or the frames replaces the phase the log was in."""
        s = self._s
        error = self._error(line, place, at)
        if error is None:
            return
        msg = line.msg.strip()
        if s.cause_generic and not failures.is_generic(msg):
            s.cause, s.cause_generic = failures.one_line(msg), False
        if s.failed_from != "text":
            if (phase := failures.phase_of_text(msg)) is not None:
                s.failed_in, s.failed_from = phase, "text"
            elif s.failed_from == "phase" and (phase := failures.phase_of_frames(s.frames)):
                s.failed_in, s.failed_from = phase, "frames"

    def _frame(self, msg: str) -> None:
        frames = self._s.frames
        if msg.startswith("Traceback (most recent call last)"):
            frames.clear()
        elif (m := failures.FRAME.match(msg)) is not None and len(frames) < failures.MAX_FRAMES:
            frames.append(m["func"])

    def _label(self, place: Place) -> str:
        sizes, _, _ = self._book.sizes(parallel_stated(self._s),
                                       parallel_stated(self._s, command=True))
        place = self._book.resolve(place)
        return label(coords(place, self._book.ep.get(place), sizes.get("tp", 1),
                            sizes.get("pp", 1)))

    def _index(self, place: Place) -> int:
        sizes, _, _ = self._book.sizes(parallel_stated(self._s),
                                       parallel_stated(self._s, command=True))
        return self._book.resolve(place).index(sizes.get("tp", 1), sizes.get("pp", 1))

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


def _http(msg: str) -> str | None:
    m = HTTP.search(msg)
    return m.group(1) if m else None
