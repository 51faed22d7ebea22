"""Fault classes 1-5: a user never sees a traceback, and a dashboard that ends, however it
ends, leaves nothing running and nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from drive import SIZE, make_recording, strict_json
from faultkit import CRASH_HOOK, Cli, no_traceback, sim_scenario_file
from helpers import ENGRAM_TOP, quit_app, running, screen_text, until, wait_until

from engram_top.app.compare_screen import CompareScreen
from engram_top.app.main import EngramTopApp
from engram_top.compare.run_result import RunResult
from engram_top.live.session import Session, SessionOptions
from engram_top.record.importers import load_runs
from engram_top.record.recorder import Recorder
from engram_top.record.replay import ReplaySession

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


def snapshot_json(cli: Cli, *source: str) -> dict:
    res = cli.run("snapshot", *source, "--out", str(cli.tmp / "snaps"), timeout=60)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    return strict_json(Path(res.stdout.strip()) / "snapshot.json")


# --------------------------------------------------------------------------- 1


async def test_fault_01_nan_and_inf_gauges_read_na_with_their_rank(bad_server, cli: Cli,
                                                                  tmp_path: Path) -> None:
    bad_server.faults["metrics"] = "nan"
    session = Session(SessionOptions(attach=(bad_server.url,), load=None, poll_interval=0.2))
    recording = tmp_path / "nan.jsonl"
    recorder = Recorder(session.store, recording).start()
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "running n/a: NaN from rank 0" in screen_text(app), 20,
                    "the NaN gauge shown as n/a with its rank")
        bad_server.faults["metrics"] = "inf"
        await until(pilot, lambda: "usage n/a: +Inf from rank 0" in screen_text(app), 20,
                    "the +Inf gauge shown as n/a")
        await quit_app(app, pilot)
    recorder.close()

    # The recording snapshots, and its snapshot.json is JSON any reader takes.
    data = snapshot_json(cli, "--recording", str(recording))
    assert data["kv"]["running"] is None and data["kv"]["token_usage"] is None
    assert data["kv"]["unavailable"]["running"] == "n/a: +Inf from rank 0"
    # So does the live server.
    data = snapshot_json(cli, "--attach", bad_server.url, "--after", "0.5")
    assert data["kv"]["unavailable"]["usage"] == "n/a: +Inf from rank 0"

    # A recording made before values were checked holds bare NaNs: it still replays.
    old = tmp_path / "old.jsonl"
    lines = []
    for line in recording.read_text().splitlines():
        record = json.loads(line)
        data_ = (record.get("reading") or {}).get("data") or {}
        if data_.get("type") == "ServerData":
            data_["num_running_reqs"] = float("nan")
            data_.pop("unavailable", None)
        lines.append(json.dumps(record))  # Python writes NaN bare, as it used to
    old.write_text("\n".join(lines) + "\n")
    assert "NaN" in old.read_text()
    data = snapshot_json(cli, "--recording", str(old))
    assert data["kv"]["running"] is None and data["kv"]["unavailable"]["running"] == "n/a: NaN"
    replay = ReplaySession(old, paused=True)
    app = EngramTopApp(replay, clock=replay.clock)
    async with app.run_test(size=SIZE) as pilot:
        replay.seek(replay.duration)
        await until(pilot, lambda: "running n/a: NaN" in screen_text(app), 10,
                    "the replayed NaN shown as n/a")
        await quit_app(app, pilot)


# --------------------------------------------------------------------------- 2


def _report(path: Path, rows: list[tuple[str, int, float]]) -> Path:
    results = [RunResult(scenario=name, placement=name, source="bench", trial=trial, gpus=4,
                         weights_gb=None, kv_tokens=None, host_delta_gib=None, ready_s=None,
                         ttft_mean_s=ttft, tpot_mean_s=0.026, itl_mean_s=None, e2e_mean_s=None,
                         ttft_p99_s=None, tpot_p99_s=None, output_tok_s=200.0,
                         request_per_s=None, completed=8).to_dict()
               for name, trial, ttft in rows]
    path.write_text(json.dumps({"results": results}))
    return path


async def test_fault_02_compare_takes_files_whose_trials_repeat(cli: Cli, tmp_path: Path) -> None:
    a = _report(tmp_path / "a.json", [("device", 0, 0.35), ("host", 0, 0.40)])
    b = _report(tmp_path / "b.json", [("device", 0, 0.36), ("host", 0, 0.41)])
    recording = make_recording(tmp_path / "rec.jsonl")
    for files in ([a, b], [recording, a], [recording, recording]):
        res = cli.run("compare", *map(str, files), "--baseline", "device")
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 0, res.stderr
        assert "device (baseline)" in res.stdout and "mean TTFT" in res.stdout

    # The dashboard with --compare-with, and c.
    replay = ReplaySession(recording, paused=True)
    app = EngramTopApp(replay, clock=replay.clock,
                       compare_with=[*load_runs(a), *load_runs(b)])
    async with app.run_test(size=SIZE) as pilot:
        replay.seek(replay.duration)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), 10, "the comparison")
        await until(pilot, lambda: "KV capacity (tokens)" in screen_text(app), 10, "its rows")
        # At 100x30 the verdict's lines come first: the latency rows are a page down.
        await pilot.press("pagedown")
        await until(pilot, lambda: "mean TTFT" in screen_text(app), 10, "its latency rows")
        [row] = [line for line in screen_text(app).splitlines() if "mean TTFT" in line]
        # The recording's columns, then the two reports' repeated trials as one column each,
        # compared with their own device column (another workload than the recording's).
        assert [c.strip() for c in row.split("│") if c.strip()][1:] \
            == ["350.0", "400.0 +14.3%", "355.0", "405.0 +14.1%"], row
        await pilot.press("escape")
        await quit_app(app, pilot)


# --------------------------------------------------------------------------- 3


@pytest.mark.parametrize("how", ["crash", "SIGTERM", "SIGHUP", "closed terminal"])
def test_fault_03_a_dashboard_ending_any_way_stops_what_it_started(cli: Cli, tmp_path: Path,
                                                                  how: str) -> None:
    trigger = tmp_path / "crash-now"
    env = ({"PYTHONPATH": str(CRASH_HOOK), "ENGRAM_TOP_TEST_CRASH_FILE": str(trigger)}
           if how == "crash" else {})
    term = cli.terminal("demo", "--no-record", "--no-load", "--time-scale", "0.02", env=env)
    wait_until(lambda: len(cli.servers()) == 5, 60, "the demo server and its 4 TP ranks")
    wait_until(lambda: list(cli.tmpdir.glob("engram-top-*")), 10, "its temporary folder")
    if how == "crash":
        trigger.touch()
    elif how == "closed terminal":
        term.hang_up()
    else:
        term.proc.send_signal(getattr(signal, how))
    code = term.wait(60)
    output = term.output
    no_traceback(output)
    assert not cli.servers(), "the demo's servers outlived it"
    assert not list(cli.tmpdir.glob("engram-top-*")), "its temporary folder was left behind"
    expected = {"crash": 1, "SIGTERM": 128 + signal.SIGTERM, "SIGHUP": 128 + signal.SIGHUP,
                "closed terminal": 128 + signal.SIGHUP}[how]
    assert code == expected, output[-2000:]
    if how == "crash":
        assert "internal error: RuntimeError: injected fault" in output
        (report,) = (cli.state / "engram-top").glob("crash-*.txt")
        assert "injected fault" in report.read_text() and "Traceback" in report.read_text()
        assert report.stat().st_mode & 0o077 == 0
    elif how != "closed terminal":
        assert f"stopped by {how}" in output


# --------------------------------------------------------------------------- 4


def test_fault_04_bad_files_and_arguments_get_a_message(cli: Cli, tmp_path: Path) -> None:
    def refused(*args: str, says: str, code: int = 2) -> None:
        res = cli.run(*args)
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == code, res.stdout + res.stderr
        assert says in res.stderr, res.stderr

    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'# plan\n[scenarios.d\xe9vice]\nkind = "simulated"\n')
    for command in (["run"], ["stop"], ["switch", "--to", "device"]):
        refused(command[0], str(latin1), *command[1:], says=f"{latin1}:2: not UTF-8 text")

    good = sim_scenario_file(tmp_path)
    refused("switch", str(good), "--to", "nope", says="no scenario 'nope'")
    refused("run", str(good), "--start", "nope", says="known: device")
    # A state folder that cannot be made (a file in its way; root ignores read-only modes).
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    for command, code in ((["switch", "--to", "device"], 1), (["stop"], 1), (["run"], 2)):
        refused(command[0], str(good), *command[1:], "--state-dir", str(blocker / "state"),
                says="cannot use the state folder", code=code)

    deep = "[" * 100_000 + "]" * 100_000 + "\n"
    for name in ("deep.jsonl", "deep.json"):
        (tmp_path / name).write_text(deep)
        refused("compare", str(tmp_path / name), "--baseline", "device",
                says="nested too deeply")
    refused("replay", str(tmp_path / "deep.jsonl"), says="nested too deeply")
    (tmp_path / "deep.toml").write_text("a = " + deep)
    refused("switch", str(tmp_path / "deep.toml"), "--to", "device", says="nested too deeply")
    refused("bench", str(tmp_path / "deep.toml"), "--out", str(tmp_path / "o"),
            says="nested too deeply")

    recording = make_recording(tmp_path / "good.jsonl")
    lines = recording.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"type":"reading"' in line)
    for name, path, says in (("wall", ("reading", "wall"), "reading.wall: inf is not a time"),
                             ("future", ("t",), "'t' is 1e+300")):
        record = json.loads(lines[at])
        target = record
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = 12345.678  # a marker, written out as the damaged number
        line = json.dumps(record).replace("12345.678", "1e999" if name == "wall" else "1e300")
        damaged = tmp_path / f"{name}.jsonl"
        damaged.write_text("\n".join([*lines[:at], line, *lines[at + 1:]]) + "\n")
        # The damaged record is skipped and named; the rest is read (tests/faults/
        # test_recordings.py tries the whole pattern).
        res = cli.run("snapshot", "--out", str(tmp_path / "s"), "--recording", str(damaged))
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 0, res.stderr
        assert f"{damaged}:{at + 1}: skipped: " in res.stderr and says in res.stderr
        replay = ReplaySession(damaged, paused=True)
        assert any(f"{damaged}:{at + 1}: skipped: " in n and says in n for n in replay.notes)


# --------------------------------------------------------------------------- 5


def test_fault_05_output_into_a_closed_pipe_is_no_traceback(cli: Cli, tmp_path: Path) -> None:
    page = tmp_path / "big.prom"
    page.write_text("".join(f"# TYPE sglang:family_{i} gauge\nsglang:family_{i} {i}\n"
                            for i in range(20_000)))  # a JSON answer far past a pipe's 64 KiB
    with running([*ENGRAM_TOP, "inspect-metrics", str(page)], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, env=cli.env, cwd=tmp_path) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()  # `| head -1`
        proc.stdout.close()
        err = proc.stderr.read().decode()
        proc.wait(30)
    no_traceback(err)
    assert "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 128 + signal.SIGPIPE


# The bare file's thread dies of its EIO, as Textual's does: that is the cause shown.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_fault_03_a_terminal_gone_mid_frame_does_not_hold_up_the_quit() -> None:
    """A hung-up terminal fails every write with EIO. Textual's output thread died of the
    first one, its queue of 30 writes filled, and quitting waited for ever on it (seen when
    a closed window and a redraw met): the dashboard outlived its terminal. Through the
    apps' driver the writes fail quietly, the thread lives, and the quit goes through."""
    import errno
    import io
    import threading

    from textual.drivers._writer_thread import WriterThread

    from engram_top.app.fleet_screen import FleetApp
    from engram_top.app.terminal import GoneTolerant
    from engram_top.fleet.session import FleetSession

    class HungUp(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.EIO, "Input/output error")

    def stops(file: object, within: float) -> bool:
        """Frames written, then the quit's stop, on a daemon thread (it may hang)."""
        def draw_and_quit() -> None:
            writer = WriterThread(file)  # type: ignore[arg-type]
            writer.start()
            for _ in range(100):  # more than the queue holds, as a redraw queues them
                writer.write("\x1b[H frame")
            writer.stop()

        quit_ = threading.Thread(target=draw_and_quit, daemon=True)
        quit_.start()
        quit_.join(within)
        return not quit_.is_alive()

    assert not stops(HungUp(), 2), "the cause: a bare file stops the thread at its first EIO"
    gone = GoneTolerant(HungUp())
    assert stops(gone, 20) and gone.gone
    for app in (EngramTopApp(Session(SessionOptions(attach=("http://127.0.0.1:9",), load=None))),
                FleetApp(FleetSession("http://127.0.0.1:9"))):
        driver = app.driver_class(app, size=(80, 24))
        assert isinstance(driver._file, GoneTolerant)  # type: ignore[attr-defined]
