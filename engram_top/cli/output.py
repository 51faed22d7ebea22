"""What a command prints goes to a terminal too: its stdout and stderr pass through
collectors.safetext.visible, so an error line quoting a server's answer, a label or a file
name shows an ESC or a C1 control as \\x1b, \\x9b and never sends it on.

One place for every print of every command (errors, paths, `compare`'s Markdown), rather
than one at each of them. Lines and tabs are kept; JSON output is escaped by json.dumps
already and passes unchanged. The dashboards draw through Textual's driver, which writes to
the terminal itself (sys.__stderr__), not through these streams."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from collectors.safetext import visible


class VisibleWriter:
    """A text stream that writes what it is given with its controls made visible; the
    rest (fileno, isatty, flush, encoding ...) is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text, "\n\t"))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def visible_output() -> Iterator[None]:
    """sys.stdout and sys.stderr made visible while the block runs."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = VisibleWriter(out)
    sys.stderr = VisibleWriter(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def print_json(data: object) -> None:
    """Standard JSON on stdout: NaN and infinities as null."""
    import json

    from engram_top.model.facts import finite_json
    print(json.dumps(finite_json(data), indent=2, default=str, allow_nan=False))
