"""The state of one launch as the start-up log parser reads it, and the steps every family
of its handlers shares: a rank's state, an error recorded, a new launch begun. The handlers
are mixins over this state, a module per family of lines (memory_handlers,
serving_handlers, engram_handlers, error_handlers); StartupLogParser joins them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from collectors.sglang.failures import FATAL_KINDS, SYMPTOM_KINDS, LogErr, text_phase
from collectors.sglang.line_prefix import DIMS, LineClock, LogLine, RankKey
from collectors.sglang.phase_timeline import PhaseTimeline
from collectors.sglang.rank_state import RankState
from collectors.startup_facts import (
    FAILED,
    DecodeStats,
    EngramTable,
    PrefillStats,
    ServerArgsFacts,
)

# Errors kept (oldest dropped first) and the longest text kept per error: a crash loop must
# not grow the parser without bound.
MAX_ERRORS = 64
MAX_ERROR_TEXT = 1000
MAX_ENGRAM_TABLES = 256
MAX_ENGRAM_MESSAGES = 64
MAX_ENGRAM_LAYERS = 64
# Per rank and launch: weight loads (a main and a draft model), KV passes and captures;
# per phase: its passes (phase_timeline.MAX_SPANS). Past them a log repeats itself, and
# nothing more is kept.
MAX_LOADS = 8
MAX_POOLS = 8
MAX_CAPTURES = 64
MAX_RANKS = 1024
MAX_SUMMARY_KEYS = 64

# A handler of one kind of line: the line, and the events it adds to.
Handler = Callable[[LogLine, list[str]], None]


class LaunchState:
    """Everything the parser knows of the launch its log is on (a log can hold several)."""

    def __init__(self) -> None:
        self._clock = LineClock()  # the log's: it goes on over launches
        self._launches = 0
        self._reset()

    def _reset(self) -> None:
        """A fresh launch: every fact of the one before forgotten (a log can hold many)."""
        self._started = False
        self._from_launch: bool | None = None  # None until a start-up line tells
        self._launch_at: float | None = None
        self._launch_outer = False  # launch_at is a shipper's envelope time, not SGLang's
        self._ranks: dict[RankKey, RankState] = {}
        self._named_dims: set[str] = set()  # the dimensions rank prefixes named
        # The sizes a launch command in the log gave (--tp 8 --dp 8 ..), and whether its
        # lines go on ("\\" at a line's end).
        self._command: dict[str, int | bool] = {}
        self._command_goes_on = False
        self._command_lines = 0
        # Out-of-order lines: the launch's earliest and latest times, and when it reached
        # ready, failed or a stop (a start-up line from before that is no new launch).
        self._earliest_t: float | None = None
        self._latest_t: float | None = None
        self._final_at: float | None = None
        # Frames printed without their "Traceback" line: their phase, for the exception
        # line that follows them.
        self._loose: LogErr | None = None
        self._phases = PhaseTimeline()
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
        self._failing: LogErr | None = None  # the error that made the start-up fail
        self._stopping_at: float | None = None
        self._stopped_at: float | None = None
        self._stopping = False
        self._timings: dict[str, float] = {}
        self._in_warning = False  # inside a Python warning (header + indented lines)
        self._errors: deque[LogErr] = deque(maxlen=MAX_ERRORS)
        self._tb: LogErr | None = None  # a traceback whose closing exception line is pending
        self._decode: DecodeStats | None = None
        self._prefill: PrefillStats | None = None

    def _relaunch(self, ln: LogLine, events: list[str]) -> None:
        """The same log, a new launch (a restart loop, a file appended to): forget the one
        before, so that its loads and errors do not pile onto this one's."""
        self._reset()
        self._started = True
        self._launches += 1
        self._from_launch = True
        self._launch_at = ln.t
        self._phases.open("launching", 0, None)
        events.append("relaunch")

    def _rank(self, ln: LogLine) -> RankState:
        """The state of the line's rank, keyed by every dimension its prefix names."""
        st = self._ranks.get(ln.key)
        if st is None:
            st = RankState(ln.rank)
            if len(self._ranks) < MAX_RANKS:  # past it, a line's figures are not kept
                self._ranks[ln.key] = st
        if ln.label and not st.label:
            st.label = ln.label
            for name in ln.label.split():
                dim = name.rstrip("0123456789")
                if dim in DIMS:
                    st.coords[dim] = ln.key[DIMS.index(dim)]
                    self._named_dims.add(dim)
        return st

    def _is_late(self, t: float | None) -> bool:
        """Whether a line is from before the launch became ready, failed or stopped: a line
        out of order, not a new launch."""
        return t is not None and self._final_at is not None and t < self._final_at

    def _reached_final(self, t: float | None) -> None:
        if self._final_at is None:
            self._final_at = t if t is not None else self._latest_t

    def _record_error(self, ln: LogLine, kind: str, events: list[str],
                      phase: str | None = None) -> LogErr:
        # Nothing is fatal once ready, nor while stopping (a stop interrupts whatever runs).
        fatal = kind in FATAL_KINDS and not self._ready and not self._stopping
        err = LogErr(ln.t, kind, ln.msg.strip()[:MAX_ERROR_TEXT], ln.rank, fatal, ln.label)
        loose, self._loose = self._loose, None
        # The phase: the caller's, else frames printed just before, else the text's words.
        err.phase = phase or (loose.phase if loose is not None else None) \
            or text_phase(err.text)
        self._errors.append(err)
        events.append("error")
        if fatal and self._failed_at is None:
            self._failed_at = ln.t if ln.t is not None else self._clock.last_t
            self._failed_in = err.phase or self._phases.under_way()
            self._failing = err
            self._phases.phase = FAILED
            self._reached_final(self._failed_at)
            events.append("failed")
        elif fatal and self._failing is not None and self._failing.kind in SYMPTOM_KINDS \
                and kind not in SYMPTOM_KINDS:
            # "One child failed" came first; this is the child's own error: the cause.
            self._failing = err
            self._failed_in = err.phase or self._failed_in
        return err
