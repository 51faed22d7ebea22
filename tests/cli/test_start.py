"""The program's entry (engram_top.cli.start): the garbage collector off while a dashboard
starts (the dashboard turns it on after its first frame: tests/app/test_process_end.py),
on for any other command once its arguments are read, and on when the program returns."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from engram_top.cli import start


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    yield
    gc.enable()


@pytest.mark.parametrize(("argv", "runs", "on"), [
    (["attach", "http://127.0.0.1:9"], "engram_top.cli.dashboards.run_attach", False),
    ([], "engram_top.cli.dashboards.run_demo", False),  # the demo, no command given
    (["replay", "x.jsonl"], "engram_top.cli.dashboards.run_replay", False),
    (["diff", "a", "b"], "engram_top.cli.diff.diff", True),
    (["inspect-log", "x.log"], "engram_top.cli.files.inspect_log", True),
])
def test_the_collector_is_off_only_while_a_dashboard_starts(
        monkeypatch: pytest.MonkeyPatch, argv: list[str], runs: str, on: bool) -> None:
    seen: list[bool] = []
    monkeypatch.setattr(runs, lambda *a, **k: seen.append(gc.isenabled()) or 0)
    monkeypatch.setattr(sys, "argv", ["engram-top", *argv])
    assert start.main() == 0
    assert seen == [on]  # as the command ran
    assert gc.isenabled()  # and once it returned


def test_a_refused_command_line_leaves_the_collector_on(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["engram-top", "attach"])  # no URL
    with pytest.raises(SystemExit) as exit_:
        start.main()
    assert exit_.value.code == 2 and "URL" in capsys.readouterr().err
    assert gc.isenabled()
