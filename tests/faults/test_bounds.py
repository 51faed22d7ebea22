"""Every number a user gives engram-top has bounds, checked before anything starts: each
numeric option of every command (found by walking the parser, so a new one cannot be
missed) refuses out-of-range values, NaN, the infinities, 1e400 and a 400-digit integer with
exit 2, the option and its range named, and no traceback; the same through the console
script, in scenario files and bench plans; `snapshot --at` past a recording's end says its
length; and the fleet at its shortest interval still ends on q, SIGTERM and a closed
terminal, leaving no process."""

from __future__ import annotations

import argparse
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import Cli, no_traceback, sim_scenario_file
from helpers import free_port, wait_until

from engram_top.cli import commands as cli_module
from engram_top.model.store import RunStore
from engram_top.record.recorder import Recorder
from scenarios.bounds import IntList, PromDuration, Range

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

HUGE = "9" * 400
# What reaches each command's options before they are parsed: its positional arguments.
PREFIX = {("demo",): [], ("snapshot",): ["--demo"], ("fleet",): ["--demo"],
          ("run",): ["x.toml"], ("attach",): ["http://127.0.0.1:9"], ("replay",): ["x.jsonl"],
          ("compare",): ["x.json", "--baseline", "b"], ("probe",): [], ("sim", "serve"): []}


def options(parser: argparse.ArgumentParser,
            path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, (*path, name))
        else:
            yield path, action


def _fmt(x: float) -> str:
    return repr(x) if not float(x).is_integer() else str(int(x))


def bad_values(kind: object) -> list[str]:
    common = ["nan", "inf", "-inf", "1e400", "-1e400", HUGE, f"-{HUGE}", "abc", ""]
    if isinstance(kind, Range):
        below = kind.lo - 1 if kind.whole or kind.lo == 0 else kind.lo / 2
        above = kind.hi + 1 if kind.whole else kind.hi * 2
        return [_fmt(below), _fmt(above), *common]
    if isinstance(kind, IntList):
        return ["0", "1,0", f"1,{_fmt(kind.each.hi + 1)}", "1,nan", f"8,{HUGE}",
                ",".join(["1"] * (kind.most + 1)), *common]
    assert isinstance(kind, PromDuration)
    return ["0s", "2d", "1m]) or vector(1)", "1.5m", "1m1h", *common]


def numeric_options() -> list[tuple[tuple[str, ...], str, object]]:
    found = []
    for path, action in options(cli_module.build_parser()):
        assert action.type not in (int, float), \
            f"{' '.join(path)} {action.option_strings}: a number without bounds"
        if isinstance(action.type, Range | IntList | PromDuration):
            found.append((path, action.option_strings[-1], action.type))
    return found


NUMERIC = numeric_options()


def test_the_walk_finds_every_command_and_the_options_the_tester_named() -> None:
    named = {(p, o) for p, o, _ in NUMERIC}
    for wanted in [(("fleet",), "--interval"), (("fleet",), "--window"),
                   (("demo",), "--concurrency"), (("snapshot",), "--at"),
                   (("compare",), "--gpus"), (("probe",), "--batch"),
                   (("sim", "serve"), "--port"), (("replay",), "--speed")]:
        assert wanted in named
    assert {p for p, _, _ in NUMERIC} == set(PREFIX)


@pytest.mark.parametrize(("path", "option", "kind"), NUMERIC,
                         ids=[f"{' '.join(p)} {o}" for p, o, _ in NUMERIC])
def test_every_numeric_option_refuses_what_is_out_of_its_range(
        path: tuple[str, ...], option: str, kind: object,
        capsys: pytest.CaptureFixture[str]) -> None:
    what = kind.describe() if isinstance(kind, Range) else \
        f"each from {_fmt(kind.each.lo)} to {_fmt(kind.each.hi)}" \
        if isinstance(kind, IntList) else "a PromQL duration from"
    for value in bad_values(kind):
        with pytest.raises(SystemExit) as exit_:
            cli_module.main([*path, *PREFIX[path], f"{option}={value}"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2, (option, value, err)
        no_traceback(err)
        assert f"argument {option}" in err and what in err, (value, err)
        assert HUGE not in err  # a 400-digit number is said, not echoed


def test_the_ends_of_each_range_are_taken() -> None:
    parser = cli_module.build_parser()
    for path, option, kind in NUMERIC:
        if isinstance(kind, Range):
            for end in (kind.lo, kind.hi):
                args = parser.parse_args([*path, *PREFIX[path], f"{option}={_fmt(end)}"])
                assert getattr(args, option.lstrip("-").replace("-", "_")) == end


@pytest.mark.parametrize(("args", "option", "says"), [
    (["fleet", "--prometheus", "http://127.0.0.1:9", "--interval", "1e-9"], "--interval",
     "should be a number of seconds from 1 to 86400"),
    (["demo", "--concurrency=0"], "--concurrency", "from 1 to 1024"),
    (["demo", "--concurrency=-5"], "--concurrency", "from 1 to 1024"),
    (["compare", "x.json", "--baseline", "b", "--gpus=-3"], "--gpus", "from 1 to 1024"),
    (["probe", "--batch", "99999999999999999999"], "--batch", "each from 1 to 65536"),
    (["snapshot", "--demo", "--after", "1e400"], "--after", "from 0 to 86400"),
    (["fleet", "--demo", "--nodes", HUGE], "--nodes", "from 1 to 512"),
    (["sim", "serve", "--port", "70000"], "--port", "from 1 to 65535"),
])
def test_the_console_script_refuses_them_too(cli: Cli, args: list[str], option: str,
                                             says: str) -> None:
    res = cli.run(*args)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 2, res.stderr
    assert f"argument {option}" in res.stderr and says in res.stderr
    assert res.stdout == ""


def test_numbers_in_scenario_files_and_plans_are_bounded(cli: Cli, tmp_path: Path) -> None:
    for key, value in (("time_scale", HUGE), ("readiness_timeout_s", "1e300"),
                       ("stop_grace_s", "nan"), ("tp", HUGE), ("serve_scale", "-inf")):
        scenarios = sim_scenario_file(tmp_path, f"{key} = {value}\n")
        res = cli.run("stop", str(scenarios))
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 2, res.stderr
        assert f"scenarios.device.{key}: " in res.stderr and " from " in res.stderr, res.stderr
        assert HUGE not in res.stderr
    scenarios = sim_scenario_file(tmp_path)
    for table, line in (("workload", f"levels = [{{ concurrency = {HUGE}, requests = 3 }}]"),
                        ("workload", "levels = [{ rate = 1e300, requests = 3 }]"),
                        ("workload", "request_timeout_s = 1e300"),
                        ("bench", f"trials = {HUGE}"), ("bench", "price_per_gpu_hour = inf")):
        plan = tmp_path / "plan.toml"
        bench = f'scenarios_file = "{scenarios}"\nscenarios = ["device"]\nbaseline = "device"\n'
        workload = "levels = [{ concurrency = 1, requests = 3 }]\n"
        if table == "bench":
            bench += line + "\n"
        else:
            workload = line + "\n" + ("" if "levels" in line else workload)
        plan.write_text(f"[bench]\n{bench}[workload]\n{workload}")
        res = cli.run("bench", str(plan), "--out", str(tmp_path / "out"))
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 2, res.stderr
        assert f"{plan}: {table}." in res.stderr and " from " in res.stderr, res.stderr
        assert HUGE not in res.stderr
    bench = f'scenarios_file = "{scenarios}"\nscenarios = ["device"]\nbaseline = "device"\n'
    plan.write_text(f"[bench]\n{bench}[workload]\nseed = {'9' * 5000}\n")
    res = cli.run("bench", str(plan), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "A number too long to read (at line 6" in res.stderr
    no_traceback(res.stderr)


def recording(path: Path, seconds: int) -> Path:
    now = [1000.0]
    store = RunStore()
    recorder = Recorder(store, path, clock=lambda: now[0]).start()
    for i in range(seconds):
        now[0] += 1
        store.event("info", f"second {i}")
    recorder.close()
    return path


def test_snapshot_at_past_the_end_of_a_recording_says_how_long_it_is(cli: Cli,
                                                                     tmp_path: Path) -> None:
    rec = recording(tmp_path / "rec.jsonl", 20)
    res = cli.run("snapshot", "--recording", str(rec), "--at", "1e12", "--out",
                  str(tmp_path / "snaps"))
    assert res.returncode == 2 and "argument --at: '1e12' is out of range" in res.stderr
    res = cli.run("snapshot", "--recording", str(rec), "--at", "1000", "--out",
                  str(tmp_path / "snaps"))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 2
    assert f"{rec}: --at 1000 s is past its end: the recording is 20.0 s long" in res.stderr
    assert not (tmp_path / "snaps").exists() or not list((tmp_path / "snaps").iterdir())
    res = cli.run("snapshot", "--recording", str(rec), "--at", "12", "--out",
                  str(tmp_path / "snaps"))
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip(), "snapshot.json").exists()


@pytest.mark.parametrize("how", ["q", "SIGTERM", "closed terminal"])
def test_the_fleet_at_its_shortest_interval_ends_every_way(cli: Cli, how: str) -> None:
    """1 s is the shortest --interval: against a Prometheus that refuses every connection it
    keeps polling, and still quits on q, ends on SIGTERM and on a closed terminal."""
    url = f"http://127.0.0.1:{free_port()}"
    term = cli.terminal("fleet", "--prometheus", url, "--interval", "1")
    wait_until(lambda: "connection refused" in term.output, 30, "the refusal on screen")
    if how == "q":
        term.press("q")
    elif how == "SIGTERM":
        term.proc.send_signal(signal.SIGTERM)
    else:
        term.hang_up()
    code = term.wait(30)
    expected = {"q": 0, "SIGTERM": 128 + signal.SIGTERM,
                "closed terminal": 128 + signal.SIGHUP}[how]
    assert code == expected, term.output[-2000:]
    no_traceback(term.output)
    # And the cli fixture: no process of this test left.
