"""inspect-log reads a line without end as the log follower does: its start cut at 64 KiB,
the lines after it read as ever (a 2 GB single-line file took over 4 GB of RAM)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from engram_top.cli.files import capped_lines, inspect_log


def test_lines_past_the_cap_keep_their_end() -> None:
    text = "short\n" + "a" * 25 + "END\n" + "b" * 40 + "\nlast"
    assert list(capped_lines(io.StringIO(text), 10)) == [
        "short\n", "...aaaaaaEND\n", "...bbbbbbbbb\n", "last"]
    assert list(capped_lines(io.StringIO("x" * 30), 10)) == ["..." + "x" * 10]


def test_inspect_log_reads_past_a_huge_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    with log.open("w") as f:
        f.write("x" * (8 * 1024 * 1024))  # 8 MiB without a newline, then a real line
        f.write("\n[2026-04-19 12:59:18] The server is fired up and ready to roll!\n")
    assert inspect_log(log, "sglang") == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["ready"] is True
