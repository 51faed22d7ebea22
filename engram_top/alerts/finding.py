"""A condition an alert check sees now (the monitor raises and clears alerts from these)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """A condition seen now. ``firing`` False: inside the hysteresis band, which keeps an
    active alert alive but starts none."""

    id: str
    severity: str
    message: str
    firing: bool = True
