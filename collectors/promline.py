"""One sample line of the Prometheus text format: the regex that reads the common shape
(collectors.promtext's fast path) and the character scanner that reads any other and names
what is wrong with a broken one."""

from __future__ import annotations

import re

Labels = tuple[tuple[str, str], ...]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
# Only the three escapes the format defines; anything else goes to the careful path.
# Written as an unrolled loop: twice as fast in `re` as (?:[^"\\]|\\.)* on long lines.
_LABEL_VALUE = r'"[^"\\\n]*(?:\\[\\"n][^"\\\n]*)*"'
_PAIR = rf"{_LABEL_NAME}={_LABEL_VALUE}"
FAST_SAMPLE = re.compile(
    rf"({_NAME})(?:\{{((?:{_PAIR},)*(?:{_PAIR})?)\}})?[ \t]+([^ \t{{]+)(?:[ \t]+(-?[0-9]+))?"
)
FAST_LABEL = re.compile(rf'({_LABEL_NAME})="([^"\\\n]*(?:\\[\\"n][^"\\\n]*)*)"')
NAME_RE = re.compile(_NAME)
LABEL_NAME_RE = re.compile(_LABEL_NAME)
TIMESTAMP_RE = re.compile(r"-?[0-9]+")
ESCAPE = re.compile(r"\\(.)")
HELP_ESCAPE = re.compile(r"\\([\\n])")


def unescape_char(m: re.Match[str]) -> str:
    c = m.group(1)
    return "\n" if c == "n" else c


class Bad(Exception):
    """Raised with a reason for a line that cannot be read; promtext.parse adds the line."""


def parse_value(text: str) -> float:
    # float() alone would also accept "1_000"; the format (Go's ParseFloat) does not.
    if "_" in text:
        raise Bad(f"invalid value {text!r}")
    try:
        return float(text)
    except ValueError:
        raise Bad(f"invalid value {text!r}") from None


def sorted_labels(pairs: list[tuple[str, str]]) -> Labels:
    labels = tuple(sorted(pairs))
    for i in range(1, len(labels)):
        if labels[i][0] == labels[i - 1][0]:
            raise Bad(f"duplicate label name {labels[i][0]!r}")
    return labels


def careful_sample(line: str) -> tuple[str, Labels, float, int | None]:
    """Scan one sample line character by character; raise Bad naming what is wrong."""
    n = len(line)
    m = NAME_RE.match(line)
    if m is None:
        if line.startswith("{"):
            raise Bad("metric name missing (quoted UTF-8 names are not supported)")
        raise Bad("invalid metric name")
    name = m.group()
    i = j = m.end()
    while j < n and line[j] in " \t":  # Go's parser allows blanks before '{'
        j += 1
    pairs: list[tuple[str, str]] = []
    if j < n and line[j] == "{":
        i = j + 1
        while True:
            while i < n and line[i] in " \t":
                i += 1
            if i >= n:
                raise Bad("unterminated label set (missing '}')")
            if line[i] == "}":
                i += 1
                break
            lm = LABEL_NAME_RE.match(line, i)
            if lm is None:
                raise Bad(f"invalid label name at column {i + 1}")
            label = lm.group()
            i = lm.end()
            while i < n and line[i] in " \t":
                i += 1
            if i >= n or line[i] != "=":
                raise Bad(f"expected '=' after label name {label!r}")
            i += 1
            while i < n and line[i] in " \t":
                i += 1
            if i >= n or line[i] != '"':
                raise Bad(f"value of label {label!r} is not quoted")
            i += 1
            chars: list[str] = []
            while i < n and line[i] != '"':
                c = line[i]
                if c == "\\":
                    if i + 1 >= n:
                        break
                    e = line[i + 1]
                    if e == "n":
                        chars.append("\n")
                    elif e in '\\"':
                        chars.append(e)
                    else:
                        raise Bad(f"invalid escape sequence '\\{e}' in label {label!r}")
                    i += 2
                else:
                    chars.append(c)
                    i += 1
            if i >= n:
                raise Bad(f"unterminated value of label {label!r}")
            i += 1  # closing quote
            pairs.append((label, "".join(chars)))
            while i < n and line[i] in " \t":
                i += 1
            if i < n and line[i] == ",":
                i += 1
            elif i < n and line[i] == "}":
                i += 1
                break
            elif i >= n:
                raise Bad("unterminated label set (missing '}')")
            else:
                raise Bad(f"expected ',' or '}}' after label {label!r}")
    elif i < n and line[i] not in " \t":
        raise Bad(f"invalid character {line[i]!r} in metric name")
    tokens = line[i:].split()
    if not tokens:
        raise Bad("missing value")
    if len(tokens) > 2:
        raise Bad(f"unexpected text after timestamp: {tokens[2]!r}")
    value = parse_value(tokens[0])
    ts: int | None = None
    if len(tokens) == 2:
        if TIMESTAMP_RE.fullmatch(tokens[1]) is None:
            raise Bad(f"invalid timestamp {tokens[1]!r} (integer milliseconds expected)")
        ts = int(tokens[1])
    return name, sorted_labels(pairs), value, ts
