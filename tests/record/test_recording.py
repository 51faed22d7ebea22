"""Recording and replay (issue 5): a real demo session recorded while it switches from the
device placement to host-prefetch, then replayed with no simulated node running, into the
store and into the dashboard. Plus the file's failure modes: a truncated last line, a garbled
middle line, an unwritable path, a full disk, and a recorder killed mid-run."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers import alive, running, screen_text, until
from textual.widgets import DataTable

from collectors.readings import (
    GpuData,
    GpuDevice,
    GpuProcess,
    HostData,
    OtherData,
    ProcessTreeMemory,
    Quantiles,
    Reading,
    ServerData,
    Status,
)
from collectors.startup_facts import RankFacts, ServerArgsFacts, StartupFacts
from engram_top.app.dialogs import ConfirmScreen
from engram_top.app.main import EngramTopApp
from engram_top.app.server_log import log_line
from engram_top.cli import commands, dashboards
from engram_top.compare.runs import run_results, warming_up
from engram_top.live.demo import DemoOptions, DemoSession
from engram_top.live.load import LoadSpec
from engram_top.live.session import Session, SessionOptions
from engram_top.model import facts
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore
from engram_top.record.file_format import (
    RecordingError,
    decode_facts_fields,
    decode_reading,
    encode_facts,
    encode_reading,
)
from engram_top.record.recorder import Recorder, read_recording, runs_from_recording
from engram_top.record.replay import ReplaySession
from engram_top.record.scan import Skip
from engram_top.seed import reference
from engram_top.settings.retention import Retention
from engram_top.settings.user_config import UserConfig
from scenarios import engines

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
DEMO_FILE = ROOT / "scenarios" / "demo.toml"
GIB = 1024**3


# --------------------------------------------------------------------------- the recorded demo


@dataclasses.dataclass
class Demo:
    path: Path
    captures: list[tuple[float, dict[str, Any]]]  # (recording time, what facts showed then)
    pids: set[int]  # every process of both servers
    history: dict[str, tuple[str, RunFigures]]  # scenario -> (state, results) at the end
    events: list[tuple[float, str, str]]
    log_lines: dict[str, list[str]]  # scenario -> its log pane's lines at the end
    node: str


def shown(store: RunStore) -> dict[str, Any]:
    """What the panels compute from the store, as engram_top.model.facts gives it."""
    return {"gpu": facts.gpu_facts(store), "kv": facts.kv_facts(store),
            "host": facts.host_facts(store), "latency": facts.latency_facts(store),
            "run": facts.run_facts(store)}


def ready_moment(captures: list[tuple[float, dict[str, Any]]],
                 name: str) -> tuple[float, dict[str, Any]] | None:
    """The first capture in which server ``name`` was ready with its KV pool and its GPUs'
    weights read (None: none was)."""
    return next(((t, c) for t, c in captures if c["run"] and c["kv"]
                 and (c["run"].scenario, c["run"].state) == (name, "ready")
                 and c["gpu"] and c["gpu"][0].weights_gb is not None), None)


def tree(pid: int) -> set[int]:
    return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}


async def record_demo(base: Path) -> Demo:
    session = DemoSession(DemoOptions(
        placement="device", time_scale=0.02, node_dir=base / "node", run_dir=base / "runs",
        poll_interval=0.25, load=LoadSpec(concurrency=2, input_len=64, output_len=24)))
    path = base / "demo.jsonl"
    recorder = Recorder(session.store, path).start()
    captures: list[tuple[float, dict[str, Any]]] = []

    def capture(what: str, payload: Any) -> None:
        # After the recorder's listener: the file holds everything the store shows now.
        if what == "reading" and recorder.last_t is not None:
            captures.append((recorder.last_t, shown(session.store)))

    session.store.listeners.append(capture)
    pids: set[int] = set()
    with_figures = lambda: session.store.run.results.ttft_mean_s is not None  # noqa: E731
    try:
        await session.start()
        assert await session.wait_ready(60), "the device server never became ready"
        pids |= tree(session.run.pid)
        await until(None, with_figures, 30, "device latency figures")
        # A reading of it ready, for the replay's tests to seek to: on a busy machine the
        # figures can come before any reading after the ready one.
        await until(None, lambda: ready_moment(captures, "device"), 30,
                    "a reading of the ready device server")
        await session.switch("host-prefetch")
        assert await session.wait_ready(60), "host-prefetch never became ready"
        pids |= tree(session.run.pid)
        await until(None, with_figures, 30, "host-prefetch latency figures")
        await until(None, lambda: ready_moment(captures, "host-prefetch"), 30,
                    "a reading of the ready host-prefetch server")
    finally:
        await session.close()
        recorder.close()
    store = session.store
    assert recorder.error is None
    return Demo(path, captures, pids,
                {n: (f.state, f.results) for n, f in store.history.items()},
                [(e.wall, e.level, e.text) for e in store.events],
                {n: [line for _, line in f.log_lines] for n, f in store.history.items()},
                store.node)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    return asyncio.run(record_demo(tmp_path_factory.mktemp("rec")))


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def store_state(store: RunStore) -> dict[str, Any]:
    """Everything a reader of the store can see, comparable with ==."""
    def run(f: RunFacts | None) -> Any:
        if f is None:
            return None
        fields = {k: v for k, v in dataclasses.asdict(
            dataclasses.replace(f, log_lines=None)).items()}
        return fields, list(f.log_lines or ())
    return {
        "latest": dict(store.latest), "last_ok": dict(store.last_ok),
        "series": {k: s.points() for k, s in store.series.items()},
        "run": run(store.run), "history": {k: run(f) for k, f in store.history.items()},
        "runs": [run(f) for f in store.runs],
        "events": [(e.wall, e.level, e.text) for e in store.events],
        "load": store.load, "node": store.node,
    }


# --------------------------------------------------------------------------- replay


async def test_replay_restores_the_demo_without_a_node(demo: Demo) -> None:
    assert demo.pids and not [p for p in demo.pids if alive(p)], "sim processes left"
    assert set(demo.history) == {"device", "host-prefetch"}

    session = ReplaySession(demo.path, paused=True)
    await session.start()
    try:
        store = session.store
        assert store.run is None and not session.playing  # paused at the very start
        session.seek(session.duration)
        assert store.node == demo.node == "simulated 4x NVIDIA B200"
        assert list(store.scenarios.scenarios) == ["device", "host", "host-prefetch"]
        assert {n: (f.state, f.results) for n, f in store.history.items()} == demo.history
        assert [f.scenario for f in store.runs] == ["device", "host-prefetch"]
        assert store.run is store.history["host-prefetch"]
        results = demo.history
        assert results["device"][1].kv_tokens == 11_840_000
        assert results["host-prefetch"][1].kv_tokens == 42_700_288
        assert [(e.wall, e.level, e.text) for e in store.events] == demo.events
        assert any("switch" in text or "stopp" in text for _, _, text in demo.events)
        for name, lines in demo.log_lines.items():
            assert [line for _, line in store.history[name].log_lines] == lines
            assert len(lines) > 10

        # What facts showed at each moment of the live run is what it shows there in replay:
        # every 4th moment, forwards, then some of them again backwards.
        picks = demo.captures[::4]
        assert len(picks) > 10
        for t, expected in picks:
            session.seek(t)
            assert shown(store) == expected, f"at t={t:.3f}"
        for t, expected in reversed(picks[::3]):
            session.seek(t)
            assert shown(store) == expected, f"back at t={t:.3f}"
        # A moment the device server was ready with its KV pool read: looked for in every
        # capture, not only the picks (on a busy machine it may be ready for fewer than four
        # readings before the switch), and sought to again.
        moment = ready_moment(demo.captures, "device")
        assert moment is not None
        t, device_moment = moment
        session.seek(t)
        assert shown(store) == device_moment
        assert device_moment["kv"].capacity_tokens == 11_840_000
        assert device_moment["gpu"][0].weights_gb == pytest.approx(119.043, abs=5e-4)
    finally:
        await session.close()


async def test_seeking_gives_the_store_that_playing_straight_gives(demo: Demo) -> None:
    clock = FakeClock()
    jumper = ReplaySession(demo.path, paused=True, clock=clock)
    stepper = ReplaySession(demo.path, paused=True, clock=clock)
    player = ReplaySession(demo.path, paused=True, clock=clock)
    await player.start()
    try:
        middle = jumper.duration * 0.55
        jumper.seek(jumper.duration)
        jumper.seek(middle)  # backwards: rebuilt from the start
        t = 0.0
        while t < middle:
            t = min(middle, t + 0.2)
            stepper.seek(t)
        assert jumper.position == stepper.position == middle
        assert store_state(jumper.store) == store_state(stepper.store)
        assert jumper.store.run is not None and jumper.store.series

        jumper.seek_by(-3.0)
        jumper.seek_by(+3.0)
        assert store_state(jumper.store) == store_state(stepper.store)

        # Playing: at 16x, the clock moving past the end, the play task feeds everything.
        assert player.set_speed(100) == 16.0 and player.set_speed(0.1) == 0.25
        player.set_speed(16)
        player.play()
        assert player.playing
        clock.now += player.duration / 16 + 1
        await until(None, lambda: not player.playing, 5, "the player to reach the end")
        jumper.seek(jumper.duration)
        assert player.position == player.duration
        assert store_state(player.store) == store_state(jumper.store)
        assert player.clock() == clock.now - (player.duration / 16 + 1) + player.duration

        assert player.toggle() is True  # at the end, play starts over
        assert player.position == 0.0 and player.store.run is None
        assert player.toggle() is False
    finally:
        await player.close()


def test_runs_from_recording_feed_the_comparison(demo: Demo, capsys) -> None:  # type: ignore[no-untyped-def]
    runs = runs_from_recording(demo.path)
    assert [(r.scenario, r.trial, r.source) for r in runs] == [
        ("device", 0, "recording:demo.jsonl"), ("host-prefetch", 0, "recording:demo.jsonl")]
    for r in runs:
        expected = demo.history[r.scenario][1]
        assert r.kv_tokens == expected.kv_tokens
        assert r.weights_gb == expected.weights_gb
        assert r.host_delta_gib == expected.host_delta_gib
        # In node time: the simulator's modelled start-up, and what this machine added.
        planned = reference.default().placements[r.placement].ready_s
        assert r.ready_s == pytest.approx(planned + expected.ready_s - planned * 0.02)
        # A recording's run is judged as a live one: the demo stopped each server a moment
        # after its first latency figures, far short of a whole window, so its latency and
        # throughput are left out, with the reason its window gives.
        why = warming_up(expected)
        assert expected.ttft_mean_s is not None and why is not None
        assert r.ttft_mean_s is None and r.output_tok_s is None
        assert f"warming up: {why}" in r.notes
    assert runs[1].kv_tokens > 3 * runs[0].kv_tokens  # host placement: a far larger KV pool
    # The same run's figures once its window means something: its recorded latency stands.
    facts = RunFacts("device", "device", "n", 1.0, 1.7e9, 5.0, state="ready", ready_at=6.0)
    facts.results = dataclasses.replace(demo.history["device"][1], served_s=31.0,
                                        window_s=30.0, window_requests=40)
    [warm] = run_results([facts], source="recording:demo.jsonl")
    assert warm.ttft_mean_s == demo.history["device"][1].ttft_mean_s

    assert commands.main(["compare", str(demo.path), "--baseline", "device", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["baseline"] == "device"
    assert out["warming"] == {name: warming_up(demo.history[name][1])
                              for name in ("device", "host-prefetch")}
    assert commands.main(["compare", str(demo.path), "--baseline", "device"]) == 0
    table = capsys.readouterr().out
    [ttft_row] = [line for line in table.splitlines() if line.startswith("| mean TTFT")]
    assert ttft_row.count("warming up") == 2, ttft_row
    assert f"device: warming up ({warming_up(demo.history['device'][1])})" in table


async def test_dashboard_shows_the_replay(demo: Demo) -> None:
    session = ReplaySession(demo.path, paused=True)
    app = EngramTopApp(session, clock=session.clock)
    # The first moment each server was ready with its figures on screen, live.
    moments = {name: ready_moment(demo.captures, name) for name in ("device", "host-prefetch")}
    ready_at = {name: moment[0] for name, moment in moments.items() if moment is not None}
    assert len(ready_at) == 2, moments
    async with app.run_test(size=(200, 70)) as pilot:
        await until(pilot, lambda: "preparing the node" in screen_text(app),
                    what="the header before any run")
        # Each seek changes the store; the dashboard shows it at its next refresh.
        session.seek(ready_at["device"])
        await until(pilot, lambda: "device · READY" in screen_text(app),
                    what="the header to show device ready")
        text = screen_text(app)
        assert "11.84M" in text  # the device placement's KV capacity
        assert "119.043" in text  # its weights per GPU
        session.seek(session.duration)
        await until(pilot, lambda: "host-prefetch · STOPPED" in screen_text(app),
                    what="the header to show host-prefetch stopped")  # the session closed it
        text = screen_text(app)
        assert "42.70M" in text and "72.201" in text
        table = app.query_one("#scenarios", DataTable)
        rows = {str(table.get_row_at(i)[0]).strip(" ▶"): [str(c) for c in table.get_row_at(i)]
                for i in range(table.row_count)}
        assert rows["host-prefetch"][1] == "stopped"
        assert rows["host-prefetch"][3:] == ["42.70M", "72.201", "+201.6 GiB"]
        assert rows["device"][3:] == ["11.84M", "119.043", "+6.5 GiB"]
        log = [s.text for s in app.query_one("#log").lines]
        shown_live = [log_line(line).plain for line in demo.log_lines["host-prefetch"]
                      if not facts.is_own_poll(line, engines.get("simulated").own_polls)]
        assert log[0].startswith("── host-prefetch: ")
        assert log[1:] == shown_live[-(len(log) - 1):] and len(log) > 20
        assert any("ready to roll" in line for line in log)
        session.seek(ready_at["host-prefetch"])
        await until(pilot, lambda: "host-prefetch · READY" in screen_text(app),
                    what="the header to show host-prefetch ready")
        assert "+201.6 GiB" in screen_text(app)
        # Going back re-draws the earlier run: the panels follow the rebuilt store.
        session.seek(ready_at["device"])
        await until(pilot, lambda: "device · READY" in screen_text(app),
                    what="the header to show device again")
        assert "11.84M" in screen_text(app)
        # A replay starts and stops nothing: the keys are off. The app refuses their actions
        # (check_action), so no binding takes the keys (what Textual dispatches a key by),
        # while the replay's own keys are on.
        keys = app.screen.active_bindings
        for key, action, parameters in (("3", "scenario", (3,)), ("x", "stop", ())):
            assert app.check_action(action, parameters) is False, key
            assert key not in keys, key
        assert app.check_action("start_selected", ()) is False  # enter's, above the table's
        assert keys["space"].binding.action == "replay_toggle" and keys["space"].enabled
        await pilot.press("3", "x")
        assert not isinstance(app.screen, ConfirmScreen)
        assert "REPLAY ⏸" in screen_text(app) and "×1" in screen_text(app)
        position = session.position
        await pilot.press("full_stop")  # +10 s
        assert session.position == pytest.approx(min(position + 10, session.duration))
        await pilot.press("comma", "comma")  # -20 s
        assert session.position == pytest.approx(max(0.0, min(position + 10,
                                                                session.duration) - 20))
        await pilot.press("plus", "plus", "minus")  # x2 x2 /2
        assert session.speed == 2.0
        await pilot.press("space")
        await until(pilot, lambda: "REPLAY ▶" in screen_text(app), what="the replay to play")
        assert session.playing and "×2" in screen_text(app)
        session.seek(session.duration / 2)
        assert session.position > 2.0
        pressed = time.monotonic()
        await pilot.press("0")
        # Back to the start, and playing on from there: at most as far as the time since.
        assert session.position <= (time.monotonic() - pressed) * session.speed + 0.05
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")
    assert session._task is None  # closed by the app


# --------------------------------------------------------------------------- the file format


def sample_readings(at: float) -> list[tuple[str, Reading[Any]]]:
    dev = GpuDevice(index=1, name="NVIDIA B200", uuid="GPU-1", total_bytes=179 * GIB,
                    reserved_bytes=GIB // 2, used_bytes=140 * GIB + 7, free_bytes=38 * GIB,
                    util_gpu_pct=97, power_w=612.25, pcie_rx_bytes_per_s=2.5e9,
                    processes=(GpuProcess(41, 70 * GIB, "sglang::scheduler"),
                               GpuProcess(42, None)),
                    unsupported=(("power_limit_w", "NotSupported"),))
    host = HostData(total_bytes=2000 * GIB, available_bytes=1700 * GIB, used_bytes=300 * GIB,
                    free_bytes=1600 * GIB, cached_bytes=5, shmem_bytes=190 * GIB,
                    hugepages_total=0, hugepages_free=0, hugepage_size_bytes=2 << 20,
                    anon_hugepages_bytes=3, swap_total_bytes=0, swap_used_bytes=0,
                    swap_in_bytes=0, swap_out_bytes=0,
                    server_tree=ProcessTreeMemory(40, (40, 41, 42), 9, 8, 1, 190 * GIB),
                    backend="simulated")
    server = ServerData(url="http://127.0.0.1:30101", healthy=True, max_total_num_tokens=42,
                        weight_gb=72.201, num_running_reqs=8, token_usage=0.25,
                        ttft=Quantiles(0.05, 0.2, 0.031, 120.0), itl=None,
                        ranks={0: {"weight_gb": 72.2}, 3: {"max_total_num_tokens": 42.0}},
                        extra={"simulated": True, "pair": (1, "a"), "by_rank": {2: [1.5]}})
    return [("gpu", Reading("gpu", Status.OK, GpuData("580.1", (dev,), "simulated"), at=at)),
            ("host", Reading("host", Status.STARTING, host, "warming", at=at, wall=12.5)),
            ("server", Reading("sglang", Status.OK, server, at=at)),
            ("server", Reading("sglang", Status.ERROR, None, "connection refused", at=at,
                               failing_since=at - 3.25))]


def test_readings_round_trip_exactly() -> None:
    for _, reading in sample_readings(500.125):
        data = json.loads(json.dumps(encode_reading(reading, 400.0)))
        assert data["at"] == pytest.approx(100.125)
        back = decode_reading(data, 400.0)
        assert back == reading
        assert type(back.status) is Status
    server = Reading("sglang", Status.OK, ServerData(
        "u", True, ranks={3: {"weight_gb": 1.5}}, extra={"t": (1, 2), "k": {7: "x"}}), at=9.5)
    back = decode_reading(json.loads(json.dumps(encode_reading(server))))
    assert back == server and list(back.data.ranks) == [3] and back.data.extra["t"] == (1, 2)
    assert back.data.extra["k"] == {7: "x"}

    facts_in = RunFacts("device", "device", "n", 0.02, 1.7e9, 1000.5, state="ready",
                        ready_at=1003.0, baseline_gpu_used={0: 5, 3: 9},
                        startup=StartupFacts(ranks={0: RankFacts(rank=0, weights_gb=1.0)}),
                        results=RunFigures(kv_tokens=42, ttft_mean_s=0.35))
    data = json.loads(json.dumps(encode_facts(facts_in, 1000.0)))
    assert data["launched_at"] == 0.5 and "log_lines" not in data
    # The figures keep the JSON form recordings have always had: latencies in ms.
    assert data["results"] == {"kv_tokens": 42, "ttft_mean_ms": 350.0}
    out = RunFacts(**decode_facts_fields(data, 1000.0, "run"))
    assert out == facts_in and out.startup.ranks[0].weights_gb == 1.0


def write_lines(path: Path, records: list[Any]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_damaged_lines_are_skipped_and_named_by_line(demo: Demo, tmp_path: Path) -> None:
    """A line that cannot be read is skipped, named by its line and why; the rest is read.
    A file without any session is refused, named by its first line."""
    lines = demo.path.read_text().splitlines(keepends=True)
    assert json.loads(lines[0])["type"] == "header" and json.loads(lines[-1])["type"] == "end"
    complete = read_recording(demo.path)

    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text("".join(lines[:4]) + '{"type": "reading", "t": 1.0, "ki\n'
                       + "".join(lines[5:]))
    rec = read_recording(garbled)
    assert rec.skips == [Skip(5, "half-written line (it stops before its end)")]
    assert len(rec.records) == len(complete.records) - 1
    assert [text for _, text in rec.notes()] == [
        f"{garbled}:5: skipped: half-written line (it stops before its end); the rest was read"]

    reading = next(i for i, line in enumerate(lines) if '"type":"reading","t"' in line
                   and '"kind":"gpu"' in line)
    record = json.loads(lines[reading])
    record["reading"]["data"]["devices"][0]["used_bytes"] = "lots"
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("".join(lines[:reading]) + json.dumps(record) + "\n"
                     + "".join(lines[reading + 1:]))
    rec = read_recording(wrong)
    assert rec.skips == [Skip(reading + 1, "reading.data.devices[0].used_bytes: expected int, "
                                           "got str 'lots'")]
    assert len(rec.records) == len(complete.records) - 1

    headless = tmp_path / "headless.jsonl"
    headless.write_text("".join(lines[1:]))
    with pytest.raises(RecordingError, match=r"headless.jsonl:1: not an engram-top recording"):
        read_recording(headless)
    unknown = tmp_path / "unknown.jsonl"
    write_lines(unknown, [json.loads(lines[0]), {"type": "snapshot", "t": 1}])
    assert read_recording(unknown).skips == [
        Skip(2, "unknown record type 'snapshot' (from a newer engram-top?)")]


async def test_a_truncated_last_line_is_skipped_and_counted(demo: Demo, tmp_path: Path) -> None:
    text = demo.path.read_text()
    body = text[:text.rindex('{"type":"end"')]  # as if killed: no clean end
    cut = body.rstrip("\n")
    half = tmp_path / "half.jsonl"
    half.write_text(cut[:len(cut) - 40])  # the last line loses its tail and newline
    rec = read_recording(half)
    last = len(cut.splitlines())
    assert rec.skipped == 1
    assert rec.skips == [Skip(last, "half-written last line (was the recording process killed?)")]
    complete = read_recording(demo.path)
    assert len(rec.records) == len(complete.records) - 2  # the cut line and the end record

    session = ReplaySession(half, paused=True)
    await session.start()
    try:
        session.seek(session.duration)
        said = f"half.jsonl:{last}: skipped: half-written last line (was the recording process"
        assert said in session.store.events[0].text
        assert set(session.store.history) == {"device", "host-prefetch"}
        session.seek(1.0)  # backwards: rebuilt, and still said
        assert said in session.store.events[0].text
    finally:
        await session.close()

    # A garbled last line that does end with its newline is damage, not a kill's half line.
    whole = tmp_path / "whole.jsonl"
    whole.write_text(cut[:len(cut) - 40] + "\n")
    assert read_recording(whole).skips == [Skip(last, "half-written line (it stops before its "
                                                      "end)")]


# --------------------------------------------------------------------------- writing failures


def watching_session(tmp_path: Path) -> Session:
    """The simulated node's GPU and host polls, no server: cheap, and it keeps going."""
    return Session(SessionOptions(scenario_file=DEMO_FILE, start=None,
                                  state_dir=tmp_path / "state", free_ports=True,
                                  poll_interval=0.1, load=None))


@pytest.mark.parametrize("where", ["not-a-directory", "disk-full"])
async def test_an_unwritable_recording_stops_and_the_session_goes_on(tmp_path: Path,
                                                                     where: str) -> None:
    if where == "not-a-directory":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "rec.jsonl"
        reason = "Not a directory"
    else:
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        path = Path("/dev/full")
        reason = "No space left on device"
    session = watching_session(tmp_path)
    recorder = Recorder(session.store, path).start()
    await session.start()
    try:
        await until(None, lambda: recorder.error is not None, 5, "the recorder to fail")
        seen = session.store.versions["gpu"]
        await until(None, lambda: session.store.versions["gpu"] > seen + 3, 5, "more GPU readings")
        errors = [e.text for e in session.store.events if e.text.startswith("recording")]
        assert errors == [f"recording stopped: {path}: {reason}"]
        assert recorder.error == reason and not recorder.active
        assert recorder._on_store not in session.store.listeners
    finally:
        await session.close()
        recorder.close()


KILLED = textwrap.dedent("""
    import asyncio, sys, time
    from collectors.readings import HostData, Reading, Status
    from engram_top.record.recorder import Recorder
    from engram_top.model.store import RunStore

    async def main(path, interval):
        store = RunStore()
        Recorder(store, path).start()
        n = 0
        while True:
            n += 1
            store.add("host", Reading("host", Status.OK, HostData(
                n, 0, n, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
            print(n, time.monotonic(), flush=True)
            await asyncio.sleep(interval)

    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
""")


@pytest.mark.parametrize(("interval", "wait_for", "then"), [(0.02, 1, 2.0), (2.5, 1, 1.3)])
def test_a_killed_recorder_leaves_a_readable_file(tmp_path: Path, interval: float,
                                                  wait_for: int, then: float) -> None:
    """Killed with SIGKILL: every reading taken in more than a second before is on disk,
    whether readings come fast (the buffer) or seldom (the flush tick)."""
    path = tmp_path / "killed.jsonl"
    with running([sys.executable, "-c", KILLED, str(path), str(interval)], cwd=ROOT,
                 stdout=subprocess.PIPE, text=True) as proc:
        first = [proc.stdout.readline() for _ in range(wait_for)]
        assert all(first), "the recording process died"
        time.sleep(then)  # what is measured: readings taken over this long must be on disk
        killed_at = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        added = [line.split() for line in first + proc.stdout.read().splitlines()]
    rec = read_recording(path)
    assert rec.skipped in (0, 1)
    on_disk = [p[1].data.total_bytes for _, kind, p in rec.records if kind == "reading"]
    assert on_disk == list(range(1, len(on_disk) + 1))
    due = [int(n) for n, t in added if float(t) <= killed_at - 1.0]
    assert due and set(due) <= set(on_disk), f"lost readings {sorted(set(due) - set(on_disk))}"
    assert rec.header["monotonic"] <= killed_at  # the same clock as ours: same machine


# --------------------------------------------------------------------------- long recordings


def test_an_hour_at_1hz_seeks_back_exactly(tmp_path: Path) -> None:
    """A recording fed with a fake clock: an hour of 1 Hz polls of three sources."""
    clock = FakeClock(5000.0)
    store = RunStore()
    path = tmp_path / "hour.jsonl"
    recorder = Recorder(store, path, clock=clock).start()
    store.set_run(RunFacts("host-prefetch", "host-prefetch", "n", 1.0, 1.7e9, clock.now,
                           state="ready", ready_at=clock.now + 1))
    for second in range(3600):
        clock.now += 1.0
        for kind, reading in sample_readings(clock.now):
            if kind == "server" and reading.ok:  # the server answers now and then
                if second % 600 != 300:
                    continue
                reading = dataclasses.replace(reading, data=dataclasses.replace(
                    reading.data, num_running_reqs=second))
            store.add(kind, reading)
    recorder.close()
    replay = ReplaySession(path, paused=True, clock=FakeClock())
    straight = ReplaySession(path, paused=True, clock=FakeClock())
    assert replay.duration == pytest.approx(3600.0)
    replay.seek(3600)
    replay.seek(1799.5)
    straight.seek(1799.5)
    assert store_state(replay.store) == store_state(straight.store)
    assert replay.store.data("server").num_running_reqs == 1500
    assert len(replay.store.line("gpu", "used", gpu="1").points()) > 600  # fine and coarse


def test_a_recorder_started_late_catches_up(tmp_path: Path) -> None:
    """Attached to a store already in use: its runs, events and latest readings go first.
    A source of a type without a format of its own is recorded all the same, as its plain
    fields, and comes back as such, series included: never dropped."""
    clock = FakeClock(100.0)
    store = RunStore()
    old = RunFacts("device", "device", "n", 1.0, 1.7e9, 90.0, state="stopped", ready_at=95.0,
                   results=RunFigures(kv_tokens=11_840_000))
    store.set_run(old)
    store.set_run(RunFacts("host", "host", "n", 1.0, 1.7e9, 98.0, state="starting"))
    for kind, reading in sample_readings(99.0):
        store.add(kind, reading)
    path = tmp_path / "late.jsonl"
    recorder = Recorder(store, path, clock=clock).start()
    clock.now += 2
    store.add("prom", Reading("prom", Status.OK, {"up": 1}, at=101.0))
    store.add("prom", Reading("prom", Status.OK, {"up": 0}, at=102.0))
    store.history["host"].state = "ready"
    store.history["host"].ready_at = 101.5
    store.bump("run")
    recorder.close()
    assert recorder.error is None

    replay = ReplaySession(path, paused=True, clock=FakeClock(100.0))
    replay.seek(replay.duration)
    r = replay.store
    assert [f.scenario for f in r.runs] == ["device", "host"] and r.run.scenario == "host"
    assert r.history["device"].results == RunFigures(kv_tokens=11_840_000)
    assert r.history["device"].ready_s == pytest.approx(5.0)
    assert r.run.state == "ready" and r.run.ready_s == pytest.approx(3.5)
    assert r.latest["server"] == store.latest["server"]  # same clocks: nothing to rebase
    assert r.last_ok["server"] == store.last_ok["server"]
    assert r.latest["gpu"] == store.latest["gpu"]
    assert r.latest["prom"].data == OtherData("dict", {"up": 0})
    assert r.line("prom", "up").points() == store.line("prom", "up").points() \
        == [(101.0, 1.0), (102.0, 0.0)]
    assert [e.text for e in r.events] == [e.text for e in store.events]


def test_new_log_lines_alone_bump_the_run_so_the_recorder_writes_them() -> None:
    """The session copies a run's state, phase and parsed start-up facts into the store
    (run_facts.sync, on each of the supervisor's run_changed) and bumps "run" when they
    change; the recorder writes run facts on that bump. Lines that change the facts without a
    new phase must bump too, or a replay shows the older facts (a loaded machine batches lines
    so that this happens)."""
    from types import SimpleNamespace

    from collectors.sglang.startup_log import StartupLogParser
    from engram_top.live.run_facts import sync
    store = RunStore()
    seen: dict[str, tuple[float, int, int | None]] = {}
    parser = StartupLogParser()
    run = SimpleNamespace(scenario=SimpleNamespace(name="device"), launched_at=5.0,
                          state="starting", phase="kv_pool", ready_at=None, ended_at=None,
                          exit_code=None, failure=None, lines_seen=0, parser=parser,
                          degraded=None)
    facts = RunFacts("device", "device", "n", 1.0, 1.7e9, 5.0, state="starting")
    store.set_run(facts)

    def feed(line: str) -> None:
        parser.feed(line, at=6.0 + run.lines_seen)
        run.lines_seen += 1

    feed("[2026-11-29 10:00:00 TP0] Load weight begin. avail mem=178.50 GB")
    sync(store, run, seen)
    version = store.versions["run"]
    feed("[2026-11-29 10:00:01 TP0] KV Cache is allocated. #tokens: 11840000, KV size: 8.00 GB")
    assert parser.facts().phase == run.phase == "kv_pool"  # no new phase: lines alone
    sync(store, run, seen)
    assert store.versions["run"] > version
    assert facts.lines_seen == 2 and facts.startup.ranks[0].kv_tokens == 11_840_000
    version = store.versions["run"]
    sync(store, run, seen)  # nothing new: no bump
    assert store.versions["run"] == version


# --------------------------------------------------------------------------- the command line


class FakeApp:
    """What cli.dashboards.run_recorded needs of the dashboard: a session's store and run()."""

    def __init__(self, config: UserConfig | None = None) -> None:
        self.session = StaticSession()
        self.config = config or UserConfig()
        self.return_code = 0

    def run(self) -> None:
        for kind, reading in sample_readings(time.monotonic())[:2]:
            self.session.store.add(kind, reading)


class StaticSession:
    def __init__(self) -> None:
        self.store = RunStore()

    def close_now(self) -> None:
        pass


def test_cli_records_by_default_and_replays(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    args = commands.build_parser().parse_args(["attach", "http://127.0.0.1:1"])
    assert args.record is None and not args.no_record
    assert dashboards.run_recorded(FakeApp(), args, tmp_path / "state") == 0
    [path] = (tmp_path / "state" / "recordings").glob("*.jsonl")
    assert f"recorded to {path}" in capsys.readouterr().err
    rec = read_recording(path)
    # A status change is an event, told before its reading.
    assert [kind for _, kind, _ in rec.records] == ["event", "event", "reading", "event",
                                                     "reading", "end"]
    assert rec.records[0][2].text == f"recording to {path}"

    # The default folder is kept within the config's retention; a --record folder never is.
    older = path.parent / "20200101-000000-1.jsonl"
    older.write_text("{}\n")
    os.utime(older, (1_000_000, 1_000_000))
    (tmp_path / "older.jsonl").write_bytes(older.read_bytes())
    os.utime(tmp_path / "older.jsonl", (1_000_000, 1_000_000))
    args = commands.build_parser().parse_args(["attach", "http://127.0.0.1:1"])
    dashboards.run_recorded(FakeApp(UserConfig(recordings=Retention.parse("30d"))), args,
                            tmp_path / "state")
    assert not older.exists() and path.exists()
    chosen = tmp_path / "mine.jsonl"
    args = commands.build_parser().parse_args(["run", str(DEMO_FILE), "--record", str(chosen)])
    dashboards.run_recorded(FakeApp(), args, tmp_path / "other")
    assert chosen.exists() and not (tmp_path / "other").exists()
    assert (tmp_path / "older.jsonl").exists()
    args = commands.build_parser().parse_args(["demo", "--no-record"])
    dashboards.run_recorded(FakeApp(), args, tmp_path / "none")
    assert not (tmp_path / "none").exists()

    with pytest.raises(SystemExit):
        commands.build_parser().parse_args(["replay", str(chosen), "--speed", "32"])
    assert "0.25 to 16" in capsys.readouterr().err
    args = commands.build_parser().parse_args(["replay", str(chosen), "--speed", "4", "--paused"])
    assert (args.path, args.speed, args.paused) == (chosen, 4.0, True)
    assert commands.main(["replay", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: cannot read" in capsys.readouterr().err


def test_snapshot_of_a_recording_and_the_dashboard_comparing_with_it(demo: Demo,
                                                                     tmp_path: Path) -> None:
    """`engram-top snapshot --recording PATH` needs no node; `--compare-with PATH` puts the
    recording's runs into the dashboard's comparison."""
    assert commands.main(["snapshot", "--recording", str(demo.path), "--out",
                          str(tmp_path / "snaps")]) == 0
    (folder,) = (tmp_path / "snaps").iterdir()
    snap = json.loads((folder / "snapshot.json").read_text())
    assert snap["source"]["kind"] == "recording"
    assert snap["run"]["scenario"] == "host-prefetch"
    assert snap["kv"]["capacity_tokens"] == 42_700_288
    svg = html.unescape((folder / "screen.svg").read_text()).replace("\xa0", " ")
    assert "REPLAY" not in svg and "host-prefetch" in svg and "42.70M" in svg
    summary = (folder / "summary.md").read_text()
    assert "device (baseline)" in summary and "host-prefetch" in summary

    args = commands.build_parser().parse_args(["replay", str(demo.path), "--compare-with",
                                               str(demo.path), "--price-per-gpu-hour", "6"])
    app = dashboards.dashboard_app(ReplaySession(demo.path, paused=True), args)
    assert {r.scenario for r in app.compare_with} == {"device", "host-prefetch"}
    # Each run names its file: in the comparison, columns apart from the live runs'.
    label = f"{demo.path.parent.name}/{demo.path.name}"
    assert all(r.source == f"recording:{label}" for r in app.compare_with)
    assert app.price_per_gpu_hour == 6.0
    bad = commands.build_parser().parse_args(["replay", str(demo.path), "--compare-with",
                                              str(tmp_path / "missing.json")])
    assert dashboards.dashboard_app(ReplaySession(demo.path, paused=True), bad) is None


def test_a_replay_keeps_its_clock_through_a_backward_seek(demo: Demo) -> None:
    session = ReplaySession(demo.path, paused=True)
    session.seek(session.duration)
    session.seek(1.0)  # backwards: the store is rebuilt
    assert session.store.clock() == pytest.approx(session.clock())
    assert abs(session.store.clock() - (session.origin + 1.0)) < 0.01


def test_no_secret_goes_into_a_recording(tmp_path: Path) -> None:
    """A recording travels: the scenario's API key and the tokens in its environment are
    redacted from the header, and scrubbed from events, log lines and run facts."""
    from collections import deque

    from scenarios import scenario_file as config
    key, token = "sk-recorded-secret-9", "hf_recorded_token_9"
    scenario_file = tmp_path / "secret.toml"
    scenario_file.write_text(f'[defaults]\nkind = "simulated"\nhost = "127.0.0.1"\n\n'
                             f'[scenarios.device]\nplacement = "device"\nport = 30998\n'
                             f'api_key = "{key}"\nenv = {{ HF_TOKEN = "{token}" }}\n')
    store = RunStore()
    store.scenarios = config.load(scenario_file)
    path = tmp_path / "rec.jsonl"
    recorder = Recorder(store, path).start()
    store.event("info", f"started with --api-key {key}")  # the first record: before the header
    run = RunFacts(scenario="device", placement="device", node="n", time_scale=1.0,
                   launched_wall=time.time(), launched_at=time.monotonic())
    run.log_lines = deque([(time.monotonic(), f"server_args=ServerArgs(api_key='{key}', "
                                              f"hf_token='{token}')")])
    run.startup = StartupFacts(server_args=ServerArgsFacts(raw={"api_key": key}))
    store.set_run(run)
    recorder.close()
    text = path.read_text()
    assert key not in text and token not in text
    assert "<redacted>" in text and "started with --api-key" in text
    replay = ReplaySession(path, paused=True)
    replay.seek(replay.duration)
    assert replay.store.scenarios.scenarios["device"]["env"] == {"HF_TOKEN": "<redacted>"}


def test_a_secret_that_arrives_in_a_later_change_is_redacted_too(tmp_path: Path) -> None:
    """The recorder compares a run's facts before redaction and redacts only the fields
    that changed: a secret that turns up in a later change (the server args read once the
    server answered) is redacted in that change, and the replayed facts hold every field
    as written, the unchanged ones included."""
    key = "sk-later-secret-77"
    store = RunStore()
    path = tmp_path / "rec.jsonl"
    recorder = Recorder(store, path).start()
    run = RunFacts(scenario="device", placement="device", node="n", time_scale=1.0,
                   launched_wall=time.time(), launched_at=time.monotonic())
    store.set_run(run)
    recorder.sample()
    run.startup = StartupFacts(server_args=ServerArgsFacts(raw={"api_key": key,
                                                                "tp_size": 8}))
    run.model = "deepseek-ai/DeepSeek-V4.1-Flash"
    recorder.sample()
    recorder.sample()  # nothing changed: no record
    recorder.close()
    text = path.read_text()
    assert key not in text
    runs = [json.loads(line) for line in text.splitlines() if '"type":"run"' in line]
    assert len(runs) == 2 and set(runs[1]["facts"]) == {"startup", "model"}
    replay = ReplaySession(path, paused=True)
    replay.seek(replay.duration)
    replayed = replay.store.run
    assert replayed is not None and replayed.model == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert replayed.startup.server_args.raw == {"api_key": "<redacted>", "tp_size": 8}
    assert replayed.scenario == "device" and replayed.placement == "device"


async def test_a_replay_opens_at_once_and_reads_the_rest_while_it_plays(
        demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay` opens a recording lazily: a few lines read at once, the rest on a thread;
    played to its end it gives the store an eager read gives. A damaged line further on
    does not stop the opening: the replay plays up to it and says so."""
    from engram_top.record import replay_file
    monkeypatch.setattr(replay_file, "EAGER_LINES", 5)
    monkeypatch.setattr(replay_file, "CHUNK", 7)
    clock = FakeClock()
    eager = ReplaySession(demo.path, paused=True, clock=clock)
    lazy = ReplaySession(demo.path, paused=True, clock=clock, lazy=True)
    assert lazy.duration == eager.duration  # known at once, from the file's end
    assert lazy.read_fraction < 1 and len(lazy.recording.records) <= 5
    await lazy.start()
    try:
        await until(None, lambda: lazy.read_fraction == 1, 20, "the rest read")
        assert [r[:2] for r in lazy.recording.records] == [r[:2] for r in eager.recording.records]
        lazy.seek(lazy.duration)
        eager.seek(eager.duration)
        assert store_state(lazy.store) == store_state(eager.store)
    finally:
        await lazy.close()

    lines = demo.path.read_text().splitlines(keepends=True)
    late = max(i for i, line in enumerate(lines) if '"type":"reading"' in line)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("".join(lines[:late]) + '{"type":"reading","t":1.0,"ki\n'
                       + "".join(lines[late + 1:]))
    whole = read_recording(damaged)  # the whole read skips it and goes on
    assert [s.line for s in whole.skips] == [late + 1]
    replay = ReplaySession(damaged, clock=clock, lazy=True)  # opens: the damage is far on
    assert replay.notes == []  # not read yet
    await replay.start()
    try:
        clock.now += replay.duration + 1
        said = f"damaged.jsonl:{late + 1}: skipped: half-written line"
        await until(None, lambda: any(said in e.text for e in replay.store.events), 20,
                    "the skipped line said once read")
        await until(None, lambda: replay.position == replay.duration, 20, "played to its end")
        assert [r[:2] for r in replay.recording.records] == [r[:2] for r in whole.records]
        replay.seek(1.0)  # rebuilt: still said
        assert any(said in e.text for e in replay.store.events)
    finally:
        await replay.close()
