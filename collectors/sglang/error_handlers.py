"""The handlers of SGLang's failure lines: tracebacks (read frame by frame until their
exception line), bare exception lines, out-of-memory and the other fatal messages.
What each means is in :mod:`collectors.sglang.failures`.
"""

from __future__ import annotations

from collectors.sglang.failures import (
    BARE_EXC,
    EXC_LINE,
    NCCL_TIMEOUT_WORDS,
    OOM_WORDS,
    LogErr,
    kv_failure,
    read_frame,
)
from collectors.sglang.launch_state import MAX_ERROR_TEXT, LaunchState
from collectors.sglang.line_prefix import PREFIX, LogLine

# A scheduler's death as its parent tells it ("Rank 0 scheduler died during initialization
# (exit code: -9)", "Rank 0 scheduler is dead", "Subprocess .. crashed with exit code ..").
CHILD_WORDS = ("scheduler died", "scheduler is dead", "crashed with exit code")


class ErrorHandlers(LaunchState):
    """Reads failures; before "ready" a fatal one fails the start-up."""

    def _on_error(self, ln: LogLine, events: list[str]) -> None:
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
        elif any(word in msg for word in NCCL_TIMEOUT_WORDS):
            kind = "nccl_timeout"  # a collective that never finished: a rank hung or died
        elif "sigquit" in msg.lower() or any(word in msg for word in CHILD_WORDS):
            # A scheduler or detokenizer died and SGLang kills the rest: "Received sigquit
            # from a child process" (older), "SIGQUIT received. .. It usually means one
            # child failed." (0.5.x); a handler being set up is no failure.
            if not any(word in msg.lower() for word in ("received", "fail", "died", "dead",
                                                         "crashed", "terminated")):
                return
            kind = "child_failed"
        elif ("CUDA Error" in msg or "CUDA error" in msg) \
                and not any(word in msg for word in OOM_WORDS):
            kind = "cuda"
        else:
            kind = "oom"
            phase = kv_failure(msg)
        err = self._record_error(ln, kind, events, phase=phase)
        if "Traceback" in msg:
            self._tb = err

    def _on_bare_error(self, ln: LogLine, events: list[str]) -> None:
        # "RuntimeError: ..", "AssertionError: .." alone on a line: what a process printed
        # as it died, without the traceback (or with it in another file).
        msg = ln.msg.strip()
        if BARE_EXC.match(msg) is None:
            return
        kind = "oom" if any(word in msg for word in OOM_WORDS) else "exception"
        self._record_error(ln, kind, events, phase=kv_failure(msg))

    def _traceback_continues(self, line: str) -> bool:
        """True while ``line`` belongs to the pending traceback (and must not be scanned:
        source lines in frames would trip the needles)."""
        err = self._tb
        assert err is not None
        stripped = line.strip()
        if not stripped or line[0] in " \t":
            if stripped.startswith("File "):
                read_frame(err, stripped)
                if err is self._failing and err.phase is not None:
                    self._failed_in = err.phase  # a log cut inside its traceback too
            return True
        if stripped.startswith(("Traceback", "During handling", "The above exception")):
            return True
        self._tb = None
        if PREFIX.match(stripped) or not EXC_LINE.match(stripped):
            self._traceback_done(err)
            return False  # the traceback ended without an exception line: scan normally
        err.exception = stripped[:MAX_ERROR_TEXT]
        if err.kind == "traceback" and any(word in stripped for word in OOM_WORDS):
            err.kind = "oom"
        elif err.kind == "traceback" and ("CUDA error" in stripped or "CUDA Error" in stripped):
            err.kind = "cuda"
        if not err.outer:
            err.phase = kv_failure(stripped) or err.phase
        self._traceback_done(err)
        return True

    def _traceback_done(self, err: LogErr) -> None:
        if err is self._failing and err.phase is not None:
            self._failed_in = err.phase

    def _loose_frame(self, line: str) -> bool:
        """Frames printed without their "Traceback" line (a log cut, or a logger that
        dropped it): read for the phase of the exception line after them; True while the
        line is one of them or their source lines (never scanned for needles)."""
        stripped = line.strip()
        if line[:1] not in (" ", "\t") or not stripped:
            return False
        if stripped.startswith('File "'):
            if self._loose is None:
                self._loose = LogErr(None, "frames", "", 0, False)
            read_frame(self._loose, stripped)
            return True
        return self._loose is not None  # a frame's source line
