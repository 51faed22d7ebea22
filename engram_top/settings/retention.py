"""How much of a folder of recordings is kept: an age, a size, or both (`7d`, `3GB`,
`7d,3GB`). The agent's `--retain` and the config file's [recordings] retain are read here."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "b": 1,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)
AGES = ("s", "m", "h", "d", "w")
# Past these a value is a typo (a size read as an age, digits doubled), not a retention.
MOST = {"age": (10 * 365 * 86400, "3650d"), "size": (10**15, "1000TB")}


@dataclass(frozen=True)
class Retention:
    max_age_s: float | None = 7 * 86400.0
    max_bytes: int | None = 10**9

    @classmethod
    def parse(cls, text: str) -> Retention:
        """``7d``, ``2GB``, or both joined by a comma (``7d,2GB``); ValueError naming what
        it cannot read."""
        age: float | None = None
        size: int | None = None
        for part in text.split(","):
            m = _AMOUNT.fullmatch(part)
            unit = m.group(2).lower() if m else ""
            if m is None or unit not in _UNITS:
                raise ValueError(f"{part.strip()!r} is no age (30m, 12h, 7d) or size (500MB, "
                                 "2GiB)")
            value = float(m.group(1)) * _UNITS[unit]
            if value <= 0:
                raise ValueError(f"{part.strip()!r}: must be more than 0")
            most, said = MOST["age" if unit in AGES else "size"]
            if value > most:  # an inf from 400 digits too
                raise ValueError(f"{part.strip()!r}: at most {said}")
            if unit in AGES:
                age = value
            else:
                size = int(value)
        return cls(age, size)

    def __str__(self) -> str:
        """As it would be written: ``7d,3GB``."""
        parts = []
        if self.max_age_s is not None:
            parts.append(_largest(self.max_age_s, ("s", "m", "h", "d")))  # 7d, not 1w
        if self.max_bytes is not None:
            parts.append(_largest(self.max_bytes, ("B", "kB", "MB", "GB", "TB", "KiB", "MiB",
                                                   "GiB", "TiB")))
        return ",".join(parts)


def _largest(amount: float, units: tuple[str, ...]) -> str:
    """``amount`` in the largest of ``units`` it is a whole number of (seconds, bytes)."""
    whole = [u for u in units if amount % _UNITS.get(u.lower(), 1) == 0]
    unit = max(whole, key=lambda u: _UNITS.get(u.lower(), 1), default=units[0])
    return f"{amount / _UNITS.get(unit.lower(), 1):g}{unit}"


# A dashboard's default folder: a week of one node (about 15.6 MB an hour with four GPUs,
# 2.6 GB a week) within 3 GB.
DASHBOARD = Retention(7 * 86400.0, 3 * 10**9)
