"""Outside text made safe to show: one function, visible(), for every string that comes from
outside (Prometheus labels, server pages, log lines, scenario and recording files, error
messages quoting them) before it reaches the terminal or an export.

Rich and Textual drop only a few controls (BEL, BS, VT, FF, CR): ESC and the C1 controls pass
through them, so a label holding ESC ] 0 ; title BEL would retitle the user's terminal, and a
CSI sequence would move its cursor or repaint it. Unicode's format controls (bidi overrides,
zero-width characters) are no escape, but they make a shown name read as another.

What is not safe becomes the escape Python and C write for it: ESC is \\x1b, a C1 CSI \\x9b,
RIGHT-TO-LEFT OVERRIDE \\u202e, a tag character \\U000e0001, a newline \\n. Why that form:
- it is printable ASCII only, so it can never itself be a control sequence, and every font,
  terminal, Markdown viewer, CSV reader and SVG shows it;
- each code point has one spelling, the same on the screen and in every export, so what a
  user saw can be found again in a snapshot with grep, and told apart from its neighbours
  (the Control Pictures block has glyphs for C0 alone, none for C1 or the bidi controls);
- it reads as the bytes that were sent, the form a user pastes into a bug report.
A byte that was not UTF-8 (decoded with surrogateescape, as a log read as bytes may be)
shows as the byte itself, \\xe9. A backslash is left as it is: this is for reading, not a
round trip.

No I/O and no Rich or Textual here: every layer imports it (the app by a contract exception,
as it imports collectors.units).
"""

from __future__ import annotations

import functools
import re

# What is escaped: Unicode's categories Cc (C0, DEL, C1), Cf (format: bidi, zero-width,
# soft hyphen, tags ...), Cs (lone surrogates: unencodable, they would end a write with
# UnicodeEncodeError) and Zl/Zp (line and paragraph separators, which some terminals and
# viewers break lines at). Written out rather than computed from unicodedata at import (a
# walk of every code point costs the first frame a quarter of a second);
# tests/collectors/test_safetext checks it against this Python's unicodedata, and it holds
# the later Unicode versions' Cf additions already (U+13439-U+1343F).
_UNSAFE_CLASS = (
    r"\x00-\x1f\x7f-\x9f\xad"
    r"\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    r"\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    r"\ud800-\udfff\ufeff\ufff9-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


@functools.lru_cache(maxsize=16)
def _pattern(keep: str) -> re.Pattern[str]:
    """Compiled when first needed (a few milliseconds: not at every start)."""
    if not keep:
        return re.compile(f"[{_UNSAFE_CLASS}]")
    return re.compile(f"(?![{re.escape(keep)}])[{_UNSAFE_CLASS}]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if 0xDC80 <= cp <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): the byte
        return f"\\x{cp - 0xDC00:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def visible(text: object, keep: str = "") -> str:
    """`text` with every control and format character written as its escape (\\x1b, \\x9b,
    \\u202e, \\n ...), so that it shows as what it is and never acts on the terminal.

    `keep` names characters left as they are where the caller means them: "\\n" for text
    that is meant to have several lines, "\\t" where Rich expands tabs. Bytes are read as
    UTF-8 (a byte that is not shows as \\xNN); anything else as its str().

    Printable text, the common case, is returned as it is, not copied: this runs on every
    repaint."""
    if not isinstance(text, str):
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8", "surrogateescape")
        else:
            text = str(text)
    # str.isprintable() is false for every character escaped here (Unicode's "Other" and
    # "Separator" but the space), and for a few shown as they are (a no-break space, private
    # use): only those strings are searched.
    if text.isprintable():
        return text
    pattern = _pattern(keep)
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escape, text)


def table_cell(text: object) -> str:
    """A Markdown table cell: visible() (a newline is \\n, so the row stays one line) and
    each | escaped, so that a label cannot end its cell or add one."""
    return visible(text).replace("|", "\\|")


def unsafe_in(text: str, keep: str = "") -> list[str]:
    """The characters visible() would escape in `text` (for checks and tests)."""
    return _pattern(keep).findall(text)
