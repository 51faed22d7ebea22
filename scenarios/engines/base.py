"""What engram-top needs from a serving engine, in one place: how to launch it (argv,
environment, how a secret travels), how to read its start-up log (typed events), how to
poll it over HTTP, when it is ready, which of its log lines are the dashboard's own polls,
and what a scenario's placement means to it.

The supervisor, the session, bench, the scenario files and the CLI look an engine up by the
scenario's kind and ask it; none of them branches on the kind.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Mapping
from dataclasses import Field, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, TypeVar

from collectors.engram_setting import EngramSetting
from collectors.fleet_dialect import FleetDialect
from collectors.readings import Reading, ServerData
from collectors.units import MIB

if TYPE_CHECKING:
    from collectors.page_kind import PageKind
    from collectors.promtext import Family, Histogram
    from collectors.startup_facts import StartupFacts

# Lines left out of a pasted page that inspect-metrics lists one by one; past them, a count.
SKIPPED_SHOWN = 100

# Where the Engram tables live: the seed's three placements.
PLACEMENTS = ("device", "host", "host-prefetch")


class Mark(NamedTuple):
    """A server's own counters at one moment (see :meth:`Engine.mark_figures`)."""

    queue_sum_s: float | None
    queue_count: float | None
    retracted: float | None

    @classmethod
    def of(cls, queue: Histogram | None, retracted: float | None) -> Mark:
        """From the merged queue-time histogram and the counter; a NaN (no _sum, no +Inf
        bucket) is no figure."""
        def finite(x: float | None) -> float | None:
            return x if x is not None and math.isfinite(x) else None
        return cls(finite(queue.sum) if queue else None, finite(queue.count) if queue else None,
                   finite(retracted))


class ScenarioSpec(Protocol):
    """What an engine reads of a scenario (scenarios.scenario_file.Scenario has it all).
    A protocol rather than the class: the scenario file looks its engine up here, so an
    engine importing the scenario's module would close an import circle. A dataclass:
    tune() gives back a copy with fields replaced."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def placement(self) -> str | None: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def python(self) -> str | None: ...
    @property
    def model_path(self) -> str | None: ...
    @property
    def tp(self) -> int: ...
    @property
    def args(self) -> tuple[str, ...]: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def engram_interface(self) -> str: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def time_scale(self) -> float: ...
    @property
    def serve_scale(self) -> float: ...
    @property
    def source(self) -> str: ...  # FILE:LINE of its table, for messages


# tune() gives back the scenario it was given, changed: the caller's own type.
SpecT = TypeVar("SpecT", bound=ScenarioSpec)


class EngineError(ValueError):
    """A scenario this engine cannot run as written; the message says what to change."""


class LogParser(Protocol):
    """An engine's start-up log parser: fed one line at a time, asked for facts at will."""

    def feed(self, line: str, at: float | None = None) -> list[str]: ...
    def current_phase(self) -> str: ...
    @property
    def failed_in(self) -> str | None: ...
    def facts(self) -> StartupFacts: ...


class ServerCollector(Protocol):
    """An engine's HTTP collector: a poll never raises; a failure is a reading too."""

    def poll(self) -> Awaitable[Reading[ServerData]]: ...
    def close(self) -> Awaitable[None]: ...


class Signal(enum.Enum):
    PHASE = "phase"  # a new start-up phase began (LogEvent.phase names it)
    HTTP_UP = "http_up"  # the HTTP server is listening: /health is worth asking
    READY = "ready"  # the server says it is ready to serve
    FAILURE = "failure"  # a fatal error during start-up (LogEvent.phase: where)


@dataclass(frozen=True)
class LogEvent:
    signal: Signal
    at: float | None = None
    phase: str | None = None


@dataclass(frozen=True)
class Readiness:
    """When a starting server counts as ready. The log's ready line always decides; /health
    alone decides only after ``health_only_after_s`` of 200s once the log showed the HTTP
    server up (SGLang answers 200 during its warm-up), or at once when the log never shows
    it (a log without info lines). Before the log shows HTTP, /health is asked only after
    ``probe_after_s`` (nothing listens yet; no point knocking)."""

    health_path: str = "/health"
    health_only_after_s: float = 15.0
    probe_after_s: float = 5.0
    http_phases: tuple[str, ...] = ("http", "warmup", "ready")
    # False: the log's ready line only says HTTP is up; /health (and the page below) decide.
    log_decides: bool = True
    # A page that must also answer 200 with this text in it before the server counts as
    # ready (vLLM: /metrics with its families), or None.
    confirm_path: str | None = None
    confirm_text: str = ""


class LogFollower:
    """Turns an engine parser's named events into typed ones for the supervisor."""

    def __init__(self, parser: LogParser, http_events: tuple[str, ...],
                 ready_events: tuple[str, ...]) -> None:
        self.parser = parser
        self._http = http_events
        self._ready = ready_events
        self._phase = parser.current_phase()

    def feed(self, line: str, at: float | None) -> list[LogEvent]:
        named = self.parser.feed(line, at)
        out: list[LogEvent] = []
        if any(e in self._http for e in named):
            out.append(LogEvent(Signal.HTTP_UP, at))
        if any(e in self._ready for e in named):
            out.append(LogEvent(Signal.READY, at))
        phase = self.parser.current_phase()
        if phase != self._phase:
            self._phase = phase
            failed = self.parser.failed_in
            out.append(LogEvent(Signal.FAILURE, at, failed) if failed is not None
                       else LogEvent(Signal.PHASE, at, phase))
        return out


class Engine:
    """One serving engine. Subclass it, fill in what differs, register an instance."""

    kind = ""  # the scenario files' `kind`
    label = ""  # how people name it, for messages
    speaks = "SGLang"  # whose log, HTTP and metrics dialect its servers speak
    article = "a"  # "an SGLang scenario"
    required: tuple[str, ...] = ()  # scenario keys it cannot do without
    # Its servers run on the simulated node (their GPUs are that node's, in a folder),
    # rather than on this machine's real GPUs.
    simulated_node = False
    # Its start-up follows the seed's model, so the seed's ready time is its plan.
    follows_reference = False
    readiness = Readiness()
    # What its collector names its readings by ("sglang": "sglang http://host:port"): the
    # session's reading of a server whose port is not open yet is named the same.
    reading_source = "server"
    # Access-log fragments of the dashboard's own polls, hidden in the log pane.
    own_polls: tuple[str, ...] = ()
    # How its /metrics families' names begin: a server attached without --engine is
    # read by the engine whose names its page has.
    page_prefixes: tuple[str, ...] = ()
    # The variables of a server's environment that configure it (read from an attached
    # server's process: its Engram switches may be there).
    env_prefixes: tuple[str, ...] = ()
    # Its words where they differ from the dashboard's ("retracted": "preempted"), and its
    # series in a fleet's Prometheus: each declared once, in its collectors' package.
    words: Mapping[str, str] = {}
    fleet: FleetDialect | None = None
    # Words of a log line worth quoting when a start fails.
    error_markers: tuple[str, ...] = ("Traceback", "Error:")
    # The API key travels in the server's environment (which only its user can read),
    # rather than in a file or on the argv.
    key_in_env = False

    def mark_figures(self, families: dict[str, Family]) -> Mark:
        """A bench level's server marks from one parsed /metrics page: its queue-time
        histogram's sum and count and its count of requests pushed out for want of KV room
        (SGLang retracts, vLLM preempts), each over every scheduler of the server, or None
        where the page has none (a level's row then says nothing false)."""
        return Mark(None, None, None)

    @property
    def display(self) -> str:
        """What a comparison's engine column says: "vLLM", "SGLang (simulated)"."""
        return self.speaks + (" (simulated)" if self.simulated_node else "")

    def problems(self, m: dict[str, Any]) -> list[tuple[str, str]]:
        """(key, what is wrong) for a scenario table (defaults applied) this engine cannot
        run; the required keys are checked already."""
        return []

    def argv(self, sc: ScenarioSpec, key_file: Path | None, node_dir: Path | None) -> list[str]:
        """The launch argv, never a shell string. ``key_file``: where key_file_text() was
        written, when the key travels in a file; ``node_dir``: the simulated node's folder
        for engines that run on it."""
        raise NotImplementedError

    def launch_env(self, sc: ScenarioSpec) -> dict[str, str]:
        """The environment on top of ours; the scenario file's `env` goes last."""
        return dict(sc.env)

    def key_file_text(self, sc: ScenarioSpec) -> str | None:
        """What the API key file holds, or None when the key (if any) goes on the argv."""
        return None

    def scratch_env(self, folder: Path) -> dict[str, str]:
        """The environment that sends what the server leaves behind (temporary files) into
        ``folder``, a folder of the run's own that goes when the run ends; {} for an engine
        that needs none (then no folder is made)."""
        return {}

    def check(self, sc: ScenarioSpec) -> None:
        """What would refuse this scenario on this machine (a missing interpreter or model
        path): raise EngineError. Runs off the event loop."""

    def parser(self) -> LogParser:
        raise NotImplementedError

    def follower(self) -> LogFollower:
        return LogFollower(self.parser(), ("http_running",), ("ready",))

    def collector(self, url: str, api_key: str | None = None,
                  auth: tuple[str, str] | None = None) -> ServerCollector:
        raise NotImplementedError

    def page_limit(self, path: str) -> int:
        """The most bytes one of its pages may hold (past it, a server that streams without
        end is cut off)."""
        return 16 * MIB

    def inspect_metrics(self, text: str) -> dict[str, object]:
        """What its metrics parser extracts from one page (`engram-top inspect-metrics`);
        ValueError, naming the line, for a page it cannot read."""
        raise ValueError(f"{self.label} has no metrics page reader")

    @staticmethod
    def read_page(text: str) -> tuple[dict[str, Family], list[str]]:
        """A pasted or fetched page's families, and a problem per line left out (its number
        and reason: an author's ``...``, two pages run together): every well-formed sample
        is read. ValueError where no line could be read: the first bad line, or what the
        text is instead (JSON, HTML, nvidia-smi)."""
        from collectors import page_kind, promtext  # a command's, not a dashboard's
        skipped = promtext.Skipped(keep=SKIPPED_SHOWN)
        families = page_kind.read(text, skipped)
        said = [f"{e} (skipped)" for e in skipped.first]
        if skipped.count > len(skipped.first):
            said.append(f"{skipped.count - len(skipped.first):,} more lines skipped")
        return families, said

    @staticmethod
    def other_page(kind: PageKind, reader: str, skipped: list[str],
                   hints: Mapping[str, str]) -> dict[str, object]:
        """What inspect-metrics says of a page that is not ``reader``'s engine's: what it is
        and what it holds, not a list of nulls; ``hints``: by page kind, how to read it."""
        other: dict[str, object] = {"page": kind.kind, reader: False, "summary": kind.summary,
                                    "found": kind.found}
        if kind.kind in hints:
            other["hint"] = hints[kind.kind]
        if skipped:
            other["page_problems"] = skipped
        return other

    def clock(self, sc: ScenarioSpec) -> tuple[float, float]:
        """(start-up time scale, service time scale): how its times compare to a real
        node's. 1.0 for real servers."""
        return 1.0, 1.0

    def tune(self, sc: SpecT, time_scale: float | None, serve_scale: float | None,
             stream_interval: int | None = None) -> SpecT:
        """The scenario with a session's overrides for simulated servers (time scales, a
        chunk per ``stream_interval`` tokens), where they mean anything."""
        return sc

    def engram(self, sc: ScenarioSpec | None, *, env: Mapping[str, str],
               args: Mapping[str, Any], startup: StartupFacts,
               gpu_name: str | None) -> EngramSetting | None:
        """Where its server keeps the Engram tables and whether its prefetch engages, from
        the scenario (None for a server someone else started), the server's environment,
        its server args, its start-up facts and its GPU; None for an engine that has none."""
        return None

    def is_own_poll(self, line: str) -> bool:
        return any(p in line for p in self.own_polls)

