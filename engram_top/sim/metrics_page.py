"""SGLang's /metrics page, written by hand: the same names, types, labels and default buckets
as SGLang's collectors (its metrics module, with its names, labels and buckets), without
prometheus_client, which the light install does not carry."""

from __future__ import annotations

import bisect
import math

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
               8.000)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
               1200, 1800, 2400)
QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15,
                 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900,
                 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000)


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return "{" + inner + "}"


class Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0.0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.sum += value * weight

    def observe_interval(self, interval: float, tokens: int) -> None:
        # SGLang's ITL fast path: the whole interval goes to _sum, and the bucket of
        # interval/tokens gets `tokens` observations, so _count counts tokens.
        if tokens <= 0:
            return
        self.counts[bisect.bisect_left(self.bounds, interval / tokens)] += tokens
        self.sum += interval

    def render(self, name: str, labels: dict[str, str]) -> list[str]:
        out = []
        cumulative = 0.0
        for bound, count in zip((*self.bounds, math.inf), self.counts, strict=True):
            cumulative += count
            le = "+Inf" if math.isinf(bound) else repr(float(bound))
            out.append(f"{name}_bucket{_labels({**labels, 'le': le})} {_fmt(cumulative)}")
        out.append(f"{name}_sum{_labels(labels)} {_fmt(self.sum)}")
        out.append(f"{name}_count{_labels(labels)} {_fmt(cumulative)}")
        return out


_Sample = tuple[dict[str, str], float | Histogram]  # (its labels, its value)


class MetricsPage:
    """Holds the families in declaration order and renders the exposition text."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[_Sample]]] = {}

    def declare(self, name: str, kind: str, help_text: str) -> None:
        self._families.setdefault(name, (kind, help_text, []))

    def set(self, name: str, labels: dict[str, str], value: float | Histogram) -> None:
        series = self._families[name][2]
        for i, (existing, _) in enumerate(series):
            if existing == labels:
                series[i] = (labels, value)
                return
        series.append((labels, value))

    def render(self) -> str:
        lines: list[str] = []
        for name, (kind, help_text, series) in self._families.items():
            if not series:
                continue  # prometheus_client leaves out families with no samples, and so do we
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in series:
                if isinstance(value, Histogram):
                    lines.extend(value.render(name, labels))
                else:
                    lines.append(f"{name}{_labels(labels)} {_fmt(float(value))}")
        return "\n".join(lines) + "\n"
