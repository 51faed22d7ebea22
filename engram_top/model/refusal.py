"""A start or switch refused for want of memory, as the dashboard knows it: the fit check's
lines, each with its figures. The live session raises it (its supervisor's refusal is this
too); the dashboard offers "start anyway" for it, which asks again with force."""

from __future__ import annotations


class FitRefused(Exception):
    """The scenario does not fit on the node. ``lines``: the verdict's headline, then its
    lines (each with need and free figures); ``scenario``: the one refused."""

    scenario: str
    lines: list[str]
