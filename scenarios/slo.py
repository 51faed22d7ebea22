"""A service-level objective as a plan, a scenario file or the user's config writes it:
`[slo]` with `ttft = { percentile = 99, max_ms = 2000 }` per metric, read and bounded here
(the arithmetic over requests is engram_top.compare.slo's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scenarios.bounds import bounded_float

METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Slo:
    metric: str  # "ttft", "tpot" or "e2e"
    percentile: float  # 99 for p99
    max_s: float

    @property
    def label(self) -> str:
        return f"p{self.percentile:g} {self.metric.upper()} <= {self.max_s * 1000:g} ms"


def parse(where: str, table: Any, problems: list[str]) -> tuple[Slo, ...]:
    """A plan's [slo] table: `ttft = { percentile = 99, max_ms = 2000 }` per metric."""
    if table is None:
        return ()
    if not isinstance(table, dict):
        problems.append(f"{where}: slo: should be a table [slo]")
        return ()
    out = []
    for metric, spec in table.items():
        at = f"{where}: slo.{metric}"
        if metric not in METRICS:
            problems.append(f"{at}: unknown metric (one of {', '.join(METRICS)})")
            continue
        if not isinstance(spec, dict) or set(spec) - {"percentile", "max_ms"} \
                or "max_ms" not in spec:
            problems.append(f"{at}: should be {{ percentile = 99, max_ms = N }}")
            continue
        p, limit = spec.get("percentile", 99), spec["max_ms"]
        if (problem := PERCENTILE.problem(p)) is not None:
            problems.append(f"{at}.percentile: {problem}")
        elif (problem := MAX_MS.problem(limit)) is not None:
            problems.append(f"{at}.max_ms: {problem}")
        else:
            out.append(Slo(metric, float(p), float(limit) / 1000))
    return tuple(out)


# A percentile above 0 (p0 bounds nothing); a bound from a microsecond to a day, in ms (a
# 400-digit one is no float, and no latency is longer than the request's own deadline).
PERCENTILE = bounded_float(0.001, 100, what="a percentile")
MAX_MS = bounded_float(0.001, 86_400_000, unit="milliseconds")
