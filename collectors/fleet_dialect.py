"""What a fleet reads of one engine's series through Prometheus: its name, how its series'
names begin, which of its gauges fill the fleet's server columns, and its latency histograms
and output counter. Each engine declares one (collectors/<engine>/); the Prometheus source
queries every engine's and tells a node's engine by whose series it has."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)  # one per engine: told apart by identity
class FleetDialect:
    name: str  # how people name the engine: what a node's row and panels say
    # Its names' beginning as a PromQL (RE2) regex: a relabelling pipeline or remote-write
    # store may rewrite the colon as an underscore.
    name_re: str
    # Its gauge (name after the prefix) -> the fleet's field (SGLang's own names, which
    # every engine's figures are read as).
    server: dict[str, str] = field(default_factory=dict)
    # figure -> histogram (after the prefix): ttft, tpot (the inter-token latency).
    latency: dict[str, str] = field(default_factory=dict)
    output_tokens: str = ""  # its counter of generated tokens, after the prefix
    # Its words where they differ from the dashboard's: what a node's panels say.
    words: dict[str, str] = field(default_factory=dict)

    def field_of(self, name: str) -> str | None:
        """The fleet's field a series of this engine fills, or None: not one of its names."""
        m = re.match(self.name_re, name)
        return self.server.get(name[m.end():]) if m else None

    def speaks(self, name: str) -> bool:
        return re.match(self.name_re, name) is not None
