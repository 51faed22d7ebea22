"""The range of every number a user gives engram-top, checked before anything starts.

One Range serves both ways a number comes in: as an argparse type for a command-line option
(`type=Range(1, 86400, unit="seconds")`: a value out of range ends the command with exit 2,
the option named, the range said, no traceback) and as the check of a TOML value
(`Range.problem(value)`: a sentence for the file's FILE:LINE: KEY: message).

Why every number gets an upper bound too: a number without one is a wait without end (an
interval of 1e-9 s spins a core; one of 1e300 s overflows asyncio's timer), a size that ends
inside a library (a batch of 1e20 rows in torch), or an int too large to become a float (a
400-digit TOML integer raised OverflowError). NaN and the infinities are never a value.

Here, below the product and the scenarios alike, because both read user numbers: scenario
files and the fleet demo (scenarios), the CLI, the config file and bench plans (engram_top).
No I/O, nothing but the standard library: the probe imports it on a GPU node's bare Python.
"""

from __future__ import annotations

import argparse
import math
import re
import tomllib
from typing import Any

# An integer written with more digits than this is out of every range here (the largest
# bound is below 10^18); it is refused without converting it (Python refuses to read an int
# of more than 4,300 digits at all).
_MAX_DIGITS = 18
_INT = re.compile(r"[+-]?\d+")


def _fmt(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:g}"


def shown(value: Any) -> str:
    """A value as a message quotes it: short, and no control character reaches a terminal
    (an argument or a TOML string may hold ESC)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):  # str() of a 5,000-digit int raises ValueError
        return str(value) if abs(value) < 10**_MAX_DIGITS else \
            f"an integer of more than {_MAX_DIGITS} digits"
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if isinstance(value, str) and _INT.fullmatch(text.strip()) and len(text.strip()) > 24:
        return f"a {len(text.strip().lstrip('+-'))}-digit number"
    cut = text if len(text) <= 40 else text[:32] + f"… ({len(text)} characters)"
    return repr(cut) if isinstance(value, str) else f"{type(value).__name__} {cut}"


def typed(value: Any) -> str:
    """A value of the wrong kind, with its kind: str '30001', bool True, float 2.5."""
    if isinstance(value, bool | str | int | float):
        text = repr(value) if isinstance(value, bool) else shown(value)
        return f"{type(value).__name__} {text}"
    return shown(value)


class Range:
    """Numbers from `lo` to `hi`, both included; `whole` for integers. `unit` goes into the
    description ("a number of seconds from 1 to 86400"), or `what` says it all ("a
    percentage"). Called with a string (argparse), it returns the number or raises
    ArgumentTypeError."""

    def __init__(self, lo: float, hi: float, *, whole: bool = False, unit: str = "",
                 what: str = "") -> None:
        self.lo, self.hi, self.whole, self.unit, self.what = lo, hi, whole, unit, what
        # argparse names a type by __name__ in some messages
        self.__name__ = "whole number" if whole else "number"

    def describe(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        of = f" of {self.unit}" if self.unit else ""
        return f"{self.what or kind + of} from {_fmt(self.lo)} to {_fmt(self.hi)}"

    def __repr__(self) -> str:
        return f"Range({self.describe()})"

    def problem(self, value: Any) -> str | None:
        """What is wrong with a value read from a file (TOML, JSON), or None. Booleans are
        not numbers (TOML's true is an int to Python); a float is not a whole number."""
        ok_type = isinstance(value, int) if self.whole else isinstance(value, int | float)
        if isinstance(value, bool) or not ok_type:
            return f"should be {self.describe()}, got {typed(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"should be {self.describe()}, got {shown(value)}"
        # int against float compares exactly in Python, a 400-digit int included: no
        # conversion, no OverflowError.
        if not self.lo <= value <= self.hi:
            return f"{shown(value)} is out of range: should be {self.describe()}"
        return None

    def parse(self, text: str) -> int | float:
        """The number a string says; ValueError with the message otherwise."""
        t = text.strip()
        if self.whole:
            if not _INT.fullmatch(t):
                raise ValueError(f"should be {self.describe()}, got {shown(text)}")
            if len(t.lstrip("+-")) > _MAX_DIGITS:
                raise ValueError(f"{shown(text)} is out of range: should be {self.describe()}")
            value: int | float = int(t)
        else:
            try:
                value = float(t)
            except ValueError:
                raise ValueError(f"should be {self.describe()}, got {shown(text)}") from None
            if math.isnan(value) or (math.isinf(value) and "inf" in t.lower()):
                raise ValueError(f"should be {self.describe()}, got {shown(text)}")
        if not self.lo <= value <= self.hi:
            raise ValueError(f"{shown(text)} is out of range: should be {self.describe()}")
        return value

    def __call__(self, text: str) -> Any:
        try:
            return self.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def checked(self, value: Any) -> Any:
        """A file's value once problem() said None: a float for a number, an int for a
        whole number."""
        return int(value) if self.whole else float(value)


def bounded_int(lo: int, hi: int, unit: str = "", what: str = "") -> Range:
    return Range(lo, hi, whole=True, unit=unit, what=what)


def bounded_float(lo: float, hi: float, unit: str = "", what: str = "") -> Range:
    return Range(lo, hi, unit=unit, what=what)


class IntList:
    """A comma-separated list of whole numbers (`--batch 1,8,64`), each in `each`, at most
    `most` of them; an argparse type."""

    def __init__(self, each: Range, most: int) -> None:
        self.each, self.most = each, most
        self.__name__ = "list"

    def __call__(self, text: str) -> tuple[int, ...]:
        parts = [p for p in text.split(",") if p.strip()]
        what = f"a comma-separated list of up to {self.most} whole numbers, each from " \
               f"{_fmt(self.each.lo)} to {_fmt(self.each.hi)}"
        if not parts or len(parts) > self.most:
            raise argparse.ArgumentTypeError(f"should be {what}, got {shown(text)}")
        out = []
        for part in parts:
            try:
                out.append(int(self.each.parse(part)))
            except ValueError:
                among = f" in {shown(text)}" if len(parts) > 1 else ""
                raise argparse.ArgumentTypeError(
                    f"should be {what}, got {shown(part.strip())}{among}") from None
        return tuple(out)


# A PromQL duration: units from the largest down, each at most once, whole numbers
# ("1m", "90s", "1h30m"), as Prometheus accepts them in a range selector.
_DURATION = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?"
                       r"(?:(\d+)ms)?")
_DURATION_S = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


class PromDuration:
    """A PromQL duration from `lo_s` to `hi_s` seconds, returned as the text Prometheus takes.
    Checked here because it is written into every query: anything else would be refused by
    Prometheus at each refresh, or change the query."""

    def __init__(self, lo_s: float, hi_s: float) -> None:
        self.lo_s, self.hi_s = lo_s, hi_s
        self.__name__ = "duration"

    def seconds(self, text: str) -> float | None:
        m = _DURATION.fullmatch(text)
        if m is None or not text or any(g is not None and len(g) > 12 for g in m.groups()):
            return None
        return sum(int(g) * unit for g, unit in zip(m.groups(), _DURATION_S, strict=True)
                   if g is not None)

    def __call__(self, text: str) -> str:
        what = (f"a PromQL duration from {_fmt(self.lo_s)} s to {_fmt(self.hi_s)} s, "
                "e.g. 30s, 1m, 1h30m")
        value = self.seconds(text.strip())
        if value is None:
            raise argparse.ArgumentTypeError(f"should be {what}, got {shown(text)}")
        if not self.lo_s <= value <= self.hi_s:
            raise argparse.ArgumentTypeError(f"{shown(text)} is out of range: should be {what}")
        return text.strip()


_LONG_NUMBER = re.compile(r"\d[\d_]{4000,}")


def read_toml(text: str) -> dict[str, Any]:
    """tomllib.loads, where a number too long for Python to read (an integer of more than
    4,300 digits: tomllib raises a bare ValueError for it, not its own error) is a
    TOMLDecodeError with its line, as every other mistake in the text is. RecursionError
    (nesting too deep) still comes through for the caller to say."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except ValueError:
        m = _LONG_NUMBER.search(text)
        where = "" if m is None else \
            f" (at line {text.count(chr(10), 0, m.start()) + 1}, column " \
            f"{m.start() - text.rfind(chr(10), 0, m.start())})"
        raise tomllib.TOMLDecodeError(f"A number too long to read{where}") from None
