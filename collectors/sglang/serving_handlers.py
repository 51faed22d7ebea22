"""The handlers of SGLang's lines around serving: the ServerArgs dump and the scheduler's
summary, the HTTP server coming up, ready, the engine's timings, the stop, and the
runtime's batch lines.
"""

from __future__ import annotations

from collectors.sglang import log_lines
from collectors.sglang.launch_state import MAX_SUMMARY_KEYS, LaunchState
from collectors.sglang.line_prefix import LogLine
from collectors.sglang.log_patterns import (
    PAIR,
    PID,
    URL,
    batch_fields,
    timing_pairs,
    to_bool,
    to_float,
    to_int,
)
from collectors.sglang.phase_timeline import ORDER
from collectors.startup_facts import FAILED, STOPPED, STOPPING, DecodeStats, PrefillStats


class ServingHandlers(LaunchState):
    """Reads the lines of a server getting ready to serve, serving, and stopping."""

    def _on_server_args(self, ln: LogLine, events: list[str]) -> None:
        # "server_args=ServerArgs(model_path='..', tp_size=8, ..)": once per launch, from the
        # main process. Another one once weights were loading: the server launched again.
        raw = log_lines.server_args(ln.msg)
        if not raw:
            return
        if self._server_args is not None \
                and ORDER.get(self._phases.phase, 99) >= ORDER["weights"] \
                and not self._is_late(ln.t):
            self._relaunch(ln, events)
        self._server_args = log_lines.typed_server_args(raw)
        events.append("server_args")

    def _on_swa_ratio(self, ln: LogLine, events: list[str]) -> None:
        # "Setting swa_full_tokens_ratio to 0.1 for DeepseekV4ForCausalLM."
        tail = ln.msg[ln.msg.find("swa_full_tokens_ratio to") + len("swa_full_tokens_ratio to"):]
        self._swa_ratio = to_float(tail)
        events.append("model_defaults")

    def _on_summary(self, ln: LogLine, events: list[str]) -> None:
        if "ServerArgs" in ln.msg or "server_args=" in ln.msg:  # the args dump, not the summary
            return
        for key, value in PAIR.findall(ln.msg):
            if key in self._summary or len(self._summary) < MAX_SUMMARY_KEYS:
                self._summary[key] = value
        events.append("scheduler_summary")

    def _on_http_started(self, ln: LogLine, events: list[str]) -> None:
        m = PID.search(ln.msg)
        if m:
            self._pid = int(m.group(1))
        self._phases.open("http", 0, ln.t)
        events.append("http_started")

    def _on_http_running(self, ln: LogLine, events: list[str]) -> None:
        m = URL.search(ln.msg)
        if m:
            self._url = m.group(1)
        if not self._phases.spans["http"]:
            self._phases.open("http", 0, ln.t)
        self._phases.close("http", 0, ln.t)
        # Uvicorn listens before the warm-up request: /health is still 503 here.
        self._phases.open("warmup", 0, ln.t)
        events.append("http_running")

    def _on_ready(self, ln: LogLine, events: list[str]) -> None:
        if self._ready or self._stopping:
            return
        self._ready = True
        self._ready_at = ln.t
        self._reached_final(ln.t)
        self._phases.close("warmup", 0, ln.t)
        # Being ready proves an earlier "fatal-looking" line was not fatal after all.
        self._failed_at = None
        self._failed_in = None
        self._failing = None
        for err in self._errors:
            err.fatal = False
        self._phases.phase = "ready"
        self._phases.open("ready", 0, ln.t)
        self._phases.close("ready", 0, ln.t)
        events.append("ready")

    def _on_timings(self, ln: LogLine, events: list[str]) -> None:
        pos = ln.msg.find(":", ln.msg.find("Engine startup timings"))
        if pos < 0:
            return
        self._timings.update(timing_pairs(ln.msg[pos + 1:]))
        events.append("startup_timings")

    def _on_stopping(self, ln: LogLine, events: list[str]) -> None:
        if self._stopped_at is not None:
            return
        if self._stopping_at is None and ln.t is not None:
            self._stopping_at = ln.t
        self._reached_final(ln.t)
        if not self._stopping:
            self._stopping = True
            events.append("stopping")
            if self._phases.phase != FAILED:
                self._phases.phase = STOPPING

    def _on_stopped(self, ln: LogLine, events: list[str]) -> None:
        if self._stopped_at is not None:
            return
        self._on_stopping(ln, events)  # a stop whose first line was this one
        self._stopped_at = ln.t if ln.t is not None else self._clock.last_t
        if self._phases.phase != FAILED:
            self._phases.phase = STOPPED
        events.append("stopped")

    def _on_decode(self, ln: LogLine, events: list[str]) -> None:
        f = batch_fields(ln.msg, "Decode batch")
        full = to_float(f.get("full token usage"))
        self._decode = DecodeStats(
            at=ln.t,
            rank=ln.rank,
            running_reqs=to_int(f.get("#running-req")),
            num_tokens=to_int(f.get("#token", f.get("#full token"))),
            token_usage=to_float(f.get("token usage")) if full is None else full,
            full_token_usage=full,
            swa_token_usage=to_float(f.get("swa token usage")),
            swa_tokens=to_int(f.get("#swa token")),
            gen_throughput=to_float(f.get("gen throughput (token/s)")),
            queue_reqs=to_int(f.get("#queue-req")),
            accept_len=to_float(f.get("accept len")),
            graph=to_bool(f.get("cuda graph", f.get("cpu graph", f.get("npu graph")))),
        )
        if self._from_launch is None:  # serving already: the log began after the launch
            self._from_launch = False

    def _on_prefill(self, ln: LogLine, events: list[str]) -> None:
        f = batch_fields(ln.msg, "Prefill batch")
        full = to_float(f.get("full token usage"))
        self._prefill = PrefillStats(
            at=ln.t,
            rank=ln.rank,
            new_seqs=to_int(f.get("#new-seq")),
            new_tokens=to_int(f.get("#new-token")),
            cached_tokens=to_int(f.get("#cached-token")),
            token_usage=to_float(f.get("token usage")) if full is None else full,
            full_token_usage=full,
            swa_token_usage=to_float(f.get("swa token usage")),
            running_reqs=to_int(f.get("#running-req")),
            queue_reqs=to_int(f.get("#queue-req")),
            input_throughput=to_float(f.get("input throughput (token/s)")),
            graph=to_bool(f.get("cuda graph", f.get("cpu graph", f.get("npu graph")))),
        )
        if self._from_launch is None:  # serving already: the log began after the launch
            self._from_launch = False
