"""Figures read out of a parsed /metrics page (collectors.promtext's families): one gauge,
a counter's total, the families with a name prefix spelt another way."""

from __future__ import annotations

from collectors.promtext import Family, Sample

__all__ = ["counter_total", "gauge", "renamed"]


def renamed(families: dict[str, Family], old: str, new: str) -> dict[str, Family]:
    """The families with the name prefix ``old`` spelt ``new`` (``sglang_`` as gateways and
    some Prometheus pipelines write SGLang's ``sglang:``), samples included."""
    out: dict[str, Family] = {}
    for name, fam in families.items():
        if not name.startswith(old):
            out.setdefault(name, fam)
            continue
        fresh = new + name[len(old):]
        out[fresh] = Family(fresh, fam.type, fam.help, [
            Sample(new + s.name[len(old):] if s.name.startswith(old) else s.name, s.labels,
                   s.value, s.timestamp_ms) for s in fam.samples])
    return out


def gauge(families: dict[str, Family], name: str, **label_filter: object) -> float | None:
    """Value of the FIRST sample of family ``name`` whose labels include ``label_filter``.

    Not a sum: a gauge such as ``sglang:num_running_reqs`` is per scheduler, and adding
    ratios (token_usage) across ranks would be meaningless; filter to the series you want.
    Filter values are compared as strings (``tp_rank=0`` matches ``tp_rank="0"``).
    Returns None when the family or a matching series is absent.
    """
    fam = families.get(name)
    if fam is None:
        return None
    wanted = [(k, str(v)) for k, v in label_filter.items()]
    for s in fam.samples:
        if s.name == name and all(pair in s.labels for pair in wanted):
            return s.value
    return None


def counter_total(families: dict[str, Family], name: str) -> float | None:
    """Sum of a counter over all its label sets (``_created`` samples excluded).

    ``name`` may be given with or without ``_total``. None when absent or without samples.
    """
    fam = families.get(name) or families.get(name + "_total")
    if fam is None and name.endswith("_total"):
        fam = families.get(name[:-6])
    if fam is None:
        return None
    values = [s.value for s in fam.samples if not s.name.endswith("_created")]
    return sum(values) if values else None
