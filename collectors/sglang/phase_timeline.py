"""The phases of one launch of SGLang: the phase it is in, and each phase's passes as spans
(a phase can run several: a draft model's weights, a second KV pool)."""

from __future__ import annotations

from collectors.startup_facts import FAILED, PHASES, STOPPED, STOPPING, PhaseSpan

ORDER = {name: i for i, name in enumerate(PHASES)}
FINAL = frozenset({FAILED, "ready", STOPPING, STOPPED})  # advance() never leaves these
MAX_SPANS = 16  # passes kept of one phase: past them a log repeats itself


class PhaseTimeline:
    """Where a launch stands and when each of its phases ran; a new launch gets a new one."""

    __slots__ = ("phase", "spans", "closed")

    def __init__(self) -> None:
        self.phase = "launching"
        self.spans: dict[str, list[list[float | None]]] = {p: [] for p in PHASES}
        # Passes of each phase whose end line was seen (with a time or not: a log without
        # timestamps still says a phase ended).
        self.closed: dict[str, int] = {}

    def open(self, phase: str, idx: int, t: float | None) -> None:
        """Start pass ``idx`` of ``phase`` (earliest start over ranks wins)."""
        spans = self.spans[phase]
        if idx >= len(spans):
            if len(spans) < MAX_SPANS:
                spans.append([t, None])
            # A rank entering a phase for the second time (draft model) moves the phase back.
            self.advance(phase, force=idx > 0)
        else:
            span = spans[idx]
            if t is not None and (span[0] is None or t < span[0]):
                span[0] = t
            self.advance(phase, force=False)

    def close(self, phase: str, idx: int, t: float | None) -> None:
        """End pass ``idx`` of ``phase`` (latest end over ranks wins)."""
        spans = self.spans[phase]
        self.closed[phase] = max(self.closed.get(phase, 0), idx + 1)
        # An end moves the phase forward too: its begin may be a line this log lacks, or a
        # model's way of sizing its KV pool that prints no "KV Cache is allocated".
        self.advance(phase, force=False)
        if idx >= len(spans):
            if len(spans) < MAX_SPANS:
                spans.append([None, t])  # the start line was not seen
            return
        span = spans[idx]
        if t is not None and (span[1] is None or t > span[1]):
            span[1] = t

    def advance(self, phase: str, force: bool) -> None:
        if self.phase in FINAL:
            return
        # Never move back because a slower rank starts a phase the others have left.
        if force or ORDER[phase] >= ORDER[self.phase]:
            self.phase = phase

    def under_way(self) -> str:
        """The phase work is in: the current one, or the next once the current one has
        ended ("Load weight end", then an error while the KV pool is set up: a KV failure,
        not a weights one)."""
        spans = self.spans.get(self.phase)
        order = ORDER.get(self.phase)
        if spans and self.closed.get(self.phase, 0) >= len(spans) and order is not None \
                and order + 1 < len(PHASES) - 1:  # never "ready"
            return PHASES[order + 1]
        return self.phase

    def timeline(self, launch_at: float | None,
                 from_launch: bool | None) -> tuple[PhaseSpan, ...]:
        spans: list[PhaseSpan] = []
        first_other: float | None = None
        for phase in PHASES[1:]:
            for start, end in self.spans[phase]:
                if start is not None and end is not None and end < start:
                    # Lines out of order (two streams merged, ranks' buffers flushed late):
                    # the pass spans both stated times, never a negative stretch.
                    start, end = end, start
                spans.append(PhaseSpan(phase, start, end))
                if start is not None and (first_other is None or start < first_other):
                    first_other = start
        if self.spans["launching"] and from_launch is not False:
            # "launching" lasts from the first line until any other phase starts; a log that
            # starts after the launch has none to show.
            start = launch_at
            if start is not None and first_other is not None and first_other < start:
                start = first_other  # a later line stated an earlier time: it starts there
            spans.insert(0, PhaseSpan("launching", start, first_other))

        def key(span: PhaseSpan) -> tuple[int, float, int]:
            at = span.start if span.start is not None else span.end
            return (at is None, at if at is not None else 0.0, ORDER[span.phase])

        return tuple(sorted(spans, key=key))
