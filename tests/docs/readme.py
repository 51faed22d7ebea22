"""README.md read as the docs tier needs it: its commands, its quoted outputs, its TOML
excerpts and its synopses, each with the line it starts on; and the matcher that checks a
quoted output against what a command printed.

A README command is "concrete" when it can be run as written (`engram-top switch
scenarios/oncall.toml --to neighbour --wait-ready`) and a "synopsis" when it holds a
placeholder (`--out DIR`, `[--force]`, `FILE ...`): a concrete one must be run by a test of
the docs tier (registered with `covers`), a synopsis only has to name options that exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# Words the README uses for "put yours here": in an option's value or a path's part they
# make a command a synopsis.
PLACEHOLDERS = frozenset({
    "URL", "DIR", "N", "S", "X", "Y", "P", "Q", "K", "D", "L", "PATH", "FILE", "NAME", "KIND",
    "GB", "GIB", "PHASE", "RANGE", "PLAN.toml", "SCENARIO_FILE", "FILE_OR_URL", "PROBE_JSON",
    "KEY", "NODE", "PROMETHEUS", "RECORDING", "SNAPSHOT", "A", "C"})
# What starts a command line in a block or a code span.
# "engram-top: ..." and "engram-top switch: ..." are what a command printed, not commands;
# "engram-top-fleet-*" is a folder's name.
COMMAND_START = re.compile(r"^(engram-top(?=\s|$)(?!\s+[\w-]+:)|\.venv/bin/|python3 -m venv"
                           r"|scripts/[\w-]+\.sh|PYTHONPATH=|\.ci/run)")
# A code span naming a command in prose ("`engram-top snapshot` without a terminal"): its
# subcommand must exist; it is no command to run.
NAME_ONLY = re.compile(r"^engram-top( sim)? [\w-]+$")


@dataclass(frozen=True)
class Command:
    text: str  # whitespace made single spaces; a block's comment after '#' dropped
    line: int
    in_block: bool

    @property
    def concrete(self) -> bool:
        return not is_synopsis(self.text)


@dataclass(frozen=True)
class Block:
    lang: str
    lines: tuple[str, ...]  # dedented
    line: int  # the line of its first content line

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Span:
    text: str  # an inline code span, whitespace made single spaces
    line: int


def is_synopsis(text: str) -> bool:
    if NAME_ONLY.match(text):
        return True
    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", text)  # '.[test]' is a literal, not an option
    if any(ch in bare for ch in "[]|") or "..." in bare or "/path/to/" in bare:
        return True
    for token in text.split():
        parts = re.split(r"[/=]", token)
        if any(p in PLACEHOLDERS for p in parts) or re.search(r"-[A-Z]+/", token):
            return True
    return False


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").split("\n")


def blocks() -> list[Block]:
    out: list[Block] = []
    lines = _lines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        out.append(Block(lang, tuple(body), i + 2))
        i = j + 1
    return out


def prose() -> str:
    """README.md with its fenced blocks blanked (line numbers kept)."""
    out, inside = [], False
    for line in _lines():
        if re.match(r"^\s*```", line):
            inside = not inside
            out.append("")
        else:
            out.append("" if inside else line)
    return "\n".join(out)


def spans() -> list[Span]:
    text = prose()
    return [Span(" ".join(m.group(1).split()), text[:m.start()].count("\n") + 1)
            for m in re.finditer(r"`([^`]+)`", text)]


def commands() -> list[Command]:
    out = []
    for block in blocks():
        if block.lang:
            continue
        for k, raw in enumerate(block.lines):
            line = raw.split("  #")[0].strip()
            if COMMAND_START.match(line):
                out.append(Command(" ".join(line.split()), block.line + k, True))
    out += [Command(s.text, s.line, False) for s in spans() if COMMAND_START.match(s.text)]
    return out


def quotes() -> list[Block]:
    """Fenced blocks that show what something prints or holds: neither a command nor TOML."""
    return [b for b in blocks() if not b.lang and not any(
        COMMAND_START.match(line.strip()) for line in b.lines if line.strip())]


# ------------------------------------------------------------------ what tests cover

F = TypeVar("F", bound=Callable[..., object])


def covers(*texts: str) -> Callable[[F], F]:
    """Marks a test as the one that runs (or checks) these README texts: commands as
    written, or the first line of a quoted block. The index test holds the README to it."""
    def mark(fn: F) -> F:
        fn.__readme__ = tuple(texts)  # type: ignore[attr-defined]  # read by the index test
        return fn
    return mark


def covered_by(functions: Iterable[object]) -> dict[str, str]:
    out: dict[str, str] = {}
    for fn in functions:
        for text in getattr(fn, "__readme__", ()):
            out[text] = getattr(fn, "__name__", "?")
    return out


# ------------------------------------------------------------------ quoted output

BAR = "[\u2580-\u259f]+"
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
BOX = str.maketrans({c: " " for c in "│┃║╭╮╰╯─━┌┐└┘"})


def _normal(line: str) -> str:
    return " ".join(line.translate(BOX).split())


def _pattern(quoted: str) -> tuple[re.Pattern[str], list[str]]:
    """The quoted line as a regex: '…' matches anything, a pid, a clock time or a bar any
    one, and each other number is a group to compare."""
    parts, numbers = [], []
    pos = 0
    text = _normal(quoted)
    for m in re.finditer(r"…|pid \d+|\b\d\d:\d\d:\d\d\b|" + BAR + "|" + NUMBER.pattern,
                         text):
        parts.append(re.escape(text[pos:m.start()]))
        token = m.group(0)
        if token == "…":
            parts.append(".*?")
        elif re.fullmatch(BAR, token):
            parts.append(BAR)  # a bar draws the figure beside it
        elif token.startswith("pid "):
            parts.append(r"pid \d+")
        elif re.fullmatch(r"\d\d:\d\d:\d\d", token):
            parts.append(r"\d\d:\d\d:\d\d")
        else:
            parts.append(f"({NUMBER.pattern})")
            numbers.append(token)
        pos = m.end()
    parts.append(re.escape(text[pos:]))
    return re.compile("".join(parts)), numbers


def _value(token: str) -> float:
    return float(token.replace(",", ""))


def find_quoted(quoted: str, output: Iterable[str], tolerance: float = 0.0,
                exact: Iterable[str] = ()) -> str | None:
    """The line of ``output`` that the quoted line shows, or None. Numbers must agree within
    ``tolerance`` (relative; 0: as printed), those in ``exact`` as printed whatever the
    tolerance (a live panel's sizes beside its rates); pids and clock times may differ, and
    '…' in the quote stands for whatever the README left out."""
    pattern, numbers = _pattern(quoted)
    fixed = set(exact)

    def agree(got: str, want: str) -> bool:
        if tolerance == 0 or want in fixed:
            return _value(got) == _value(want)
        return abs(_value(got) - _value(want)) <= tolerance * max(abs(_value(want)), 1e-9)

    for line in output:
        for m in pattern.finditer(_normal(line)):
            if all(agree(g, w) for g, w in zip(m.groups(), numbers, strict=True)):
                return line
    return None


def assert_quoted(block: Iterable[str], output: str | Iterable[str], *,
                  tolerance: float = 0.0, exact: Iterable[str] = (),
                  where: str = "the output") -> None:
    lines = output.splitlines() if isinstance(output, str) else list(output)
    exact = tuple(exact)
    missing = [q for q in block
               if q.strip() and find_quoted(q, lines, tolerance, exact) is None]
    assert not missing, (f"README quotes lines that {where} does not show:\n  "
                         + "\n  ".join(missing) + f"\n{where} was:\n" + "\n".join(lines[-80:]))


def block_at(first_line: str) -> Block:
    """The quoted block whose first line starts with ``first_line``."""
    found = [b for b in blocks() if b.lines and b.lines[0].startswith(first_line)]
    assert len(found) == 1, f"README: {len(found)} blocks start with {first_line!r}"
    return found[0]
