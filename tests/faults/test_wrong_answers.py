"""Fault classes 9-15: no wrong answer and no lost data. Cut streams are not successes, one
command at a time starts a file's servers, bad numbers are refused, a recording path is
never appended to, a recording that cannot be written says so for as long as it cannot,
a dead TP rank raises an alert, and a failed start names the phase it failed in."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest
from drive import SIZE, make_recording
from faultkit import Cli, bench_with, command_line, no_traceback, sim_scenario_file
from helpers import free_port, quit_app, screen_text, until, wait_until

from engram_top.alerts.monitor import AlertMonitor
from engram_top.app.main import EngramTopApp
from engram_top.live.session import Session, SessionOptions
from engram_top.record.recorder import Recorder
from engram_top.settings.user_config import load_config

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


def test_fault_09_a_stream_cut_short_is_incomplete_not_a_success(cli: Cli,
                                                                  tmp_path: Path) -> None:
    report, rows, _ = bench_with(cli, tmp_path, "stream=truncate:8")
    results = {r["scenario"]: r for r in report["results"]}
    assert results["bad"]["completed"] == 0 and results["bad"]["failed"] == 4
    assert results["bad"]["tpot_mean_s"] is None and results["bad"]["output_tok_s"] == 0
    assert any("4 requests failed (4 of them incomplete)" in n for n in results["bad"]["notes"])
    bad = [r for r in rows if r["scenario"] == "bad"]
    assert [(r["status"], r["output_len"], r["asked_len"]) for r in bad] == \
        [("incomplete", "8", "32")] * 4
    assert all("ended after 8 of 32 tokens without [DONE]" in r["error"] for r in bad)
    ok = [r for r in rows if r["scenario"] == "ok"]
    assert [(r["status"], r["output_len"]) for r in ok] == [("ok", "32")] * 4


def test_fault_10_one_command_at_a_time_starts_a_files_servers(cli: Cli,
                                                               tmp_path: Path) -> None:
    scenarios = sim_scenario_file(tmp_path, f"""
[scenarios.host]
placement = "host"
port = {free_port()}
""")
    procs = [cli.start("switch", str(scenarios), "--to", name)
             for name in ("device", "host", "device")]
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        no_traceback(out, err)
        assert proc.returncode == 0, out + err
    mains = [p for p in cli.servers() if "sim serve" in command_line(p)]
    assert len(mains) == 1, [command_line(p) for p in mains]
    (current,) = cli.state.glob("engram-top/*/current.json")
    assert json.loads(current.read_text())["pid"] == mains[0].pid

    # A dashboard holds the file's servers for its whole life: a switch is refused at once.
    term = cli.terminal("run", str(scenarios), "--no-record")
    wait_until(lambda: "found device still running" in term.output or "device" in term.output,
               30, "the dashboard to adopt the running server")
    wait_until(lambda: (current.parent / "lock").read_text().count('"run"'), 30,
               "the dashboard's lock")
    res = cli.run("switch", str(scenarios), "--to", "host")
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 1 and "are run by engram-top run (pid" in res.stderr, res.stderr
    # The dashboard started nothing: the server it adopted is left running, and named.
    term.proc.send_signal(signal.SIGTERM)
    assert term.wait(60) == 128 + signal.SIGTERM
    assert [p.pid for p in cli.servers() if "sim serve" in command_line(p)] == [mains[0].pid]
    last = json.loads(current.read_text())["scenario"]  # the switches' order is the lock's
    assert f"left running: {last} (pid {mains[0].pid}) on 127.0.0.1:" in term.output, \
        term.output[-600:]
    res = cli.run("stop", str(scenarios))
    assert res.returncode == 0 and res.stdout.startswith(f"stopped {last}"), res.stderr
    wait_until(lambda: not cli.servers(), 15, "no server left")


def test_fault_11_non_finite_numbers_are_refused_where_they_are(cli: Cli,
                                                                tmp_path: Path) -> None:
    scenarios = sim_scenario_file(tmp_path, "time_scale = inf\nstop_grace_s = nan\n"
                                            "readiness_timeout_s = nan\n")
    res = cli.run("switch", str(scenarios), "--to", "device")
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 2
    lines = scenarios.read_text().splitlines()
    for key, value in (("time_scale", "inf"), ("stop_grace_s", "nan"),
                       ("readiness_timeout_s", "nan")):
        line = lines.index(f"{key} = {value}") + 1
        assert f"{scenarios}:{line}: scenarios.device.{key}: should be" in res.stderr
        assert f"got {value}" in res.stderr
    res = cli.run("demo", "--time-scale", "inf")
    assert res.returncode == 2 and "should be a number from 0.001 to 100" in res.stderr

    config = tmp_path / "config.toml"
    config.write_text("[alerts]\nserver_silent_s = nan\nclear_after_s = nan\n"
                      "swap_window_s = inf\n")
    _, error = load_config(config)
    assert error is not None
    for line, key in ((2, "server_silent_s"), (3, "clear_after_s"), (4, "swap_window_s")):
        assert f"{config}:{line}: alerts.{key}: should be" in error

    plan = tmp_path / "plan.toml"
    plan.write_text(f'[bench]\nscenarios_file = "{scenarios}"\nscenarios = ["device"]\n'
                    'baseline = "device"\nprice_per_gpu_hour = nan\n'
                    '[workload]\nlevels = [{ rate = inf, requests = 3 }]\n')
    res = cli.run("bench", str(plan), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "bench.price_per_gpu_hour: should be" in res.stderr
    assert "workload.levels[0].rate: should be a number of requests per second" in res.stderr


async def test_fault_12_a_record_path_is_never_appended_to(bad_server, cli: Cli,
                                                           tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    for _ in range(2):
        term = cli.terminal("attach", bad_server.url, "--record", str(path))
        wait_until(lambda t=term: "recording to" in t.output and path.stat().st_size > 0, 30,
                   "the recording to begin")
        term.press("q")
        assert term.wait(30) == 0, term.output[-4000:]
    second = tmp_path / "session-2.jsonl"
    assert second.exists()
    for file in (path, second):
        assert file.read_text().count('"type":"header"') == 1

    # A file that two sessions wrote to (an older engram-top appended) reads as two.
    twice = tmp_path / "twice.jsonl"
    twice.write_text(make_recording(tmp_path / "a.jsonl").read_text()
                     + make_recording(tmp_path / "b.jsonl").read_text())
    res = cli.run("compare", str(twice), "--baseline", "device")
    assert res.returncode == 0 and "2 trial(s) per scenario" in res.stdout, res.stderr
    for session in ("1", "2"):
        res = cli.run("snapshot", "--recording", str(twice), "--session", session,
                      "--out", str(tmp_path / "snaps"))
        assert res.returncode == 0, res.stderr
    res = cli.run("snapshot", "--recording", str(twice), "--session", "3",
                  "--out", str(tmp_path / "snaps"))
    assert res.returncode == 2 and "no session 3: it holds 2" in res.stderr


@pytest.fixture
def alert_checks(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock reading of every alert check in this test, whoever makes it."""
    times: list[float] = []
    evaluate = AlertMonitor.evaluate

    def watched(self: AlertMonitor, store: Any, now: float | None = None) -> Any:
        times.append(store.clock() if now is None else now)
        return evaluate(self, store, now)

    monkeypatch.setattr(AlertMonitor, "evaluate", watched)
    return times


async def test_fault_13_an_unwritable_recording_is_a_lasting_alert(
        bad_server, alert_checks: list[float], request: pytest.FixtureRequest) -> None:
    # A short path: the events line is one line, and a long temporary folder's name (a test
    # worker's) would push the reason past its end.
    short = Path(tempfile.mkdtemp(prefix="et-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    blocker = short / "f"
    blocker.write_text("")
    session = Session(SessionOptions(attach=(bad_server.url,), load=None, poll_interval=0.2))
    recorder = Recorder(session.store, blocker / "rec.jsonl").start()
    assert not recorder.active
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "recording stopped" in screen_text(app), 10,
                    "the recording's failure on screen")
        assert "Not a directory" in screen_text(app)
        # Still there after events have come and gone, and after alerts would clear: once
        # the alerts have been checked later than clear_after_s from now.
        for i in range(12):
            session.store.event("info", f"later event {i}")
        later = session.store.clock() + app.config.alerts.clear_after_s
        await until(pilot, lambda: alert_checks and alert_checks[-1] > later,
                    app.config.alerts.clear_after_s + 10, "an alert check past clear_after_s")
        assert "recording" in session.store.alerts
        assert "recording stopped" in screen_text(app)
        await quit_app(app, pilot)


async def test_fault_14_a_dead_tp_rank_degrades_the_run(tmp_path: Path) -> None:
    scenarios = sim_scenario_file(tmp_path)
    session = Session(SessionOptions(scenario_file=scenarios, start="device",
                                     state_dir=tmp_path / "state", load=None,
                                     poll_interval=0.3))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.state == "ready", 60, "the server to be ready")
        run = session.supervisor.current
        assert run is not None and len(run.members) == 4, run.members
        # Its title (sglang::TP2), or its command line's rank where the members were read
        # before the rank had named itself (a loaded machine).
        rank, what = next((pid, what) for pid, (_, what) in run.members.items()
                          if "TP2" in what or what.endswith("TP rank 2"))
        os.kill(rank, signal.SIGKILL)
        await until(pilot, lambda: "DEGRADED" in screen_text(app), 10, "the header to say so")
        # The session's alert check (twice a second) raises it on its own beat.
        await until(pilot, lambda: "rank-died" in session.store.alerts, 5, "the alert")
        assert f"died: pid {rank} ({what})" in session.store.alerts["rank-died"].message
        await quit_app(app, pilot)
    assert not run.proc.group_members(), "the server outlived the dashboard"


def test_fault_15_a_failed_start_names_its_phase(cli: Cli, tmp_path: Path) -> None:
    scenarios = sim_scenario_file(tmp_path, 'args = ["--fail-at", "kv_pool"]\n')
    res = cli.run("switch", str(scenarios), "--to", "device", "--wait-ready", timeout=90)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 1
    assert "exited with code 1 during kv_pool" in res.stderr, res.stderr
    assert "during failed" not in res.stderr
