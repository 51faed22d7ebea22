"""The handlers of SGLang's failure lines: tracebacks (read frame by frame until their
exception line), bare exception lines, out-of-memory and the other fatal messages.
What each means is in :mod:`collectors.sglang.failures`.
"""

from __future__ import annotations

from collectors.sglang.failures import BARE_EXC, EXC_LINE, OOM_WORDS, LogErr, kv_failure, read_frame
from collectors.sglang.launch_state import MAX_ERROR_TEXT, LaunchState
from collectors.sglang.line_prefix import PREFIX, LogLine


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
        elif "Received sigquit" in msg:
            kind = "child_failed"  # a scheduler or detokenizer died; SGLang kills the rest
        elif "CUDA Error" in msg and not any(word in msg for word in OOM_WORDS):
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
        if not err.outer:
            err.phase = kv_failure(stripped) or err.phase
        self._traceback_done(err)
        return True

    def _traceback_done(self, err: LogErr) -> None:
        if err is self._failing and err.phase is not None:
            self._failed_in = err.phase
