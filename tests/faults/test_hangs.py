"""Fault classes 6-8: every network wait has a total deadline, a stalled stream is a failed
request with its reason, and a signal to a headless command stops what it started."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from drive import SIZE
from faultkit import PLAN, Cli, bench_with, no_traceback, sim_scenario_file
from helpers import ENGRAM_TOP, panel_text, quit_app, screen_text, until, wait_until

from engram_top.app.main import EngramTopApp
from engram_top.live.session import Session, SessionOptions
from scenarios.logtail import MAX_LINE, LogTail

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

# --------------------------------------------------------------------------- 6


async def test_fault_06_a_dripping_page_ends_each_poll_and_the_source_recovers(
        bad_server, cli: Cli) -> None:
    bad_server.faults["metrics"] = "drip"
    started = time.monotonic()
    res = cli.run("inspect-metrics", bad_server.url, timeout=60)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 1 and "no whole page within 5 s" in res.stderr, res.stderr
    assert time.monotonic() - started < 30

    session = Session(SessionOptions(attach=(bad_server.url,), load=None, poll_interval=0.2))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "no whole page within 5 s" in screen_text(app), 20,
                    "the dripping page said on screen")
        polls = bad_server.requests.count("GET /health")
        bad_server.faults["health"] = "drip"
        # Said in the KV panel, wrapped at its width (the events line cuts each alert to
        # its line), and the header says the server is not answering.
        await until(pilot, lambda: "/health gave no whole answer within 5 s"
                    in panel_text(app, "#kv") and "NOT ANSWERING" in screen_text(app), 20,
                    "the dripping /health said on screen")
        bad_server.faults["health"] = ""
        bad_server.faults["metrics"] = "endless"  # a firehose, not a drip: cut at a size
        await until(pilot, lambda: "more than 64 MiB" in panel_text(app, "#kv"), 20,
                    "the endless page cut off")
        bad_server.faults.clear()  # the server recovers: so must the source
        await until(pilot, lambda: session.store.latest["server"].ok, 20,
                    "a good reading after the server recovered")
        assert bad_server.requests.count("GET /health") > polls + 1
        await quit_app(app, pilot)


def test_fault_06_a_log_without_newlines_is_read_in_bounded_lines(tmp_path: Path) -> None:
    """A server that writes megabytes without a newline (progress bars' carriage returns,
    a binary dump): the supervisor's tail gives it as a line, its start cut, and goes on."""
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * (3 * MAX_LINE) + b"\rlast words")
    tail = LogTail(log)
    lines = [line for _, line in tail.read_new()]
    assert len(lines) == 1 and len(lines[0]) <= MAX_LINE + 3 and lines[0].endswith("last words")
    with open(log, "ab") as f:
        f.write(b"\nready\n")
    assert [line for _, line in tail.read_new()] == ["", "ready"]


# --------------------------------------------------------------------------- 7


def test_fault_07_a_stalled_stream_fails_at_its_deadline(cli: Cli, tmp_path: Path) -> None:
    report, rows, took = bench_with(cli, tmp_path, "stream=stall:3")
    results = {r["scenario"]: r for r in report["results"]}
    assert results["ok"]["completed"] == 4 and results["ok"]["failed"] == 0
    assert results["bad"]["completed"] == 0 and results["bad"]["failed"] == 4
    # Nothing complete: no latency to report, and no output throughput to speak of.
    assert results["bad"]["ttft_mean_s"] is None and results["bad"]["output_tok_s"] == 0
    bad = [r for r in rows if r["scenario"] == "bad"]
    assert [r["status"] for r in bad] == ["failed"] * 4
    assert all("no complete answer within 2 s (3 of 32 tokens came)" in r["error"]
               for r in bad), bad
    assert took < 60  # two levels of two 2 s deadlines, not 10-minute reads


# --------------------------------------------------------------------------- 8


@pytest.mark.parametrize("command,sig", [("bench", "SIGTERM"), ("bench", "SIGINT"),
                                         ("switch", "SIGHUP"), ("bench", "SIGKILL")])
def test_fault_08_a_signal_stops_what_a_headless_command_started(cli: Cli, tmp_path: Path,
                                                                command: str, sig: str) -> None:
    scenarios = sim_scenario_file(tmp_path)
    if command == "bench":
        plan = tmp_path / "plan.toml"
        plan.write_text(PLAN.format(scenarios=scenarios, names='["ok"]')
                        .replace('"ok"', '"device"'))
        proc = cli.start("bench", str(plan), "--out", str(tmp_path / "out"))
        target = str(plan)
    else:  # a start that takes its time: x1, the seed's 125 s
        scenarios.write_text(scenarios.read_text().replace("0.02", "1.0"))
        proc = cli.start("switch", str(scenarios), "--to", "device", "--wait-ready")
        target = str(scenarios)
    wait_until(lambda: len(cli.servers()) == 5, 60, "the server and its 4 ranks")
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    no_traceback(out, err)
    assert "KeyboardInterrupt" not in err
    if sig == "SIGKILL":  # nothing can clean up after it: `stop` finds what it left
        assert len(cli.servers()) == 5
        res = cli.run("stop", target)
        assert res.returncode == 0 and res.stdout.startswith("stopped device"), res.stdout
    else:
        assert proc.returncode == 128 + getattr(signal, sig), err
        assert f"engram-top {command}: stopped by {sig}" in err, err
    wait_until(lambda: not cli.servers(), 10, "no server left")
    res = cli.run("stop", target)
    assert res.returncode == 0 and "nothing of this scenario file is running" in res.stdout


# --------------------------------------------------------------------------- no terminal


@pytest.mark.parametrize("args", [
    ("fleet", "--prometheus", "http://127.0.0.1:9"),
    ("fleet", "--demo", "--nodes", "1"),
    ("demo", "--no-load", "--no-record"),
])
def test_a_dashboard_without_a_terminal_says_so_and_starts_nothing(
        cli: Cli, args: tuple[str, ...]) -> None:
    """Standard input at its end (`< /dev/null`, a cron job): Textual's key reader would loop
    on the empty reads at a whole core, beyond q's reach. The command says what it needs and
    what to use instead, at once, and nothing it would have started is left."""
    res = subprocess.run([*ENGRAM_TOP, *args], stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=60, env=cli.env, cwd=cli.tmp)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 2, res.stderr
    assert "the dashboard needs a terminal: standard input is not one" in res.stderr
    assert "engram-top snapshot" in res.stderr
    assert not cli.processes()
    assert not list(cli.tmpdir.iterdir())  # no demo folder either
