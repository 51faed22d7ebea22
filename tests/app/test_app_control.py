"""The dashboard's control keys over the simulated node, as a user presses them: Enter starts
or switches to the selected scenario, x stops, a confirm screen guards a server that is
serving requests, a refused start says why. Real server processes, real HTTP, Textual's
Pilot; every test ends with q and checks that no process of any run is left."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psutil
import pytest
from helpers import DEMO, GIB, alive, quit_app, screen_text, until
from textual.widgets import DataTable, RichLog

from engram_top.app.dialogs import ConfirmScreen
from engram_top.app.main import EngramTopApp
from engram_top.live.load import LoadSpec
from engram_top.live.session import Session, SessionOptions
from engram_top.model import facts, in_flight
from scenarios.load_process import LoadProcess
from scenarios.ports import port_in_use

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

SIZE = (150, 45)


def make_session(tmp_path: Path, *, start: str | None = "device",
                 load: LoadSpec | None = None) -> Session:
    return Session(SessionOptions(scenario_file=DEMO, start=start, state_dir=tmp_path / "state",
                                  free_ports=True, time_scale=0.02, poll_interval=0.5,
                                  load=load))


def process_tree(pid: int) -> list[int]:
    """The server and every process under it (the simulated TP ranks)."""
    return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]


def strays(tmp_path: Path) -> list[str]:
    """Live processes launched for this test: their argv names its node folder."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if str(tmp_path) in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(f"{proc.info['pid']}: {cmd}")
    return out


class Tracker:
    """Every process of every run the session launched, recorded while they run."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.pids: set[int] = set()

    def record(self) -> list[int]:
        run = self.session.supervisor.current
        assert run is not None and run.alive
        tree = process_tree(run.pid)
        self.pids.update(tree)
        self.pids.update(run.proc.group_members())
        return tree

    def left(self) -> list[int]:
        return sorted(p for p in self.pids if alive(p))


def row(app: EngramTopApp, name: str) -> list[str]:
    table = app.query_one("#scenarios", DataTable)
    for i in range(table.row_count):
        cells = [str(c) for c in table.get_row_at(i)]
        if cells[0].strip(" ▶") == name:
            return cells
    raise AssertionError(f"no row {name} in {app._rows}")


def state_of(app: EngramTopApp, name: str) -> str:
    return row(app, name)[1]


def log_pane(app: EngramTopApp) -> str:
    return "\n".join(strip.text for strip in app.query_one("#log", RichLog).lines)


def notifications(app: EngramTopApp) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


def events(session: Session) -> list[str]:
    return [f"{e.level}: {e.text}" for e in session.store.events]


def ready(session: Session, name: str) -> Callable[[], bool]:
    def check() -> bool:
        run = session.store.run
        return run is not None and run.scenario == name and run.state == "ready"
    return check


def serving(session: Session) -> Callable[[], bool]:
    """The last /metrics reading shows requests running or queued."""
    def check() -> bool:
        kv = facts.kv_facts(session.store)
        return kv is not None and (kv.running or 0) + (kv.queued or 0) > 0
    return check


def idle(session: Session) -> Callable[[], bool]:
    """The last /metrics reading shows nothing in flight (the warm-up request is done)."""
    def check() -> bool:
        kv = facts.kv_facts(session.store)
        return kv is not None and (kv.running or 0) + (kv.queued or 0) == 0
    return check


def control_done(app: EngramTopApp) -> bool:
    """The start, switch or stop a key asked for has ended (succeeded or refused)."""
    return not [w for w in app.workers if w.group == "control" and not w.is_finished]


def load_goes_on(session: Session) -> Callable[[], bool]:
    """More requests sent from now on: time passes with the server serving."""
    sent = session.store.load.get("sent", 0)
    return lambda: session.store.load.get("sent", 0) > sent


# --------------------------------------------------------------------------- switch and stop


@pytest.mark.timeout(90)
async def test_enter_switches_and_x_stops(tmp_path: Path) -> None:
    session = make_session(tmp_path)
    app = EngramTopApp(session)
    tracker = Tracker(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app._rows) == 3, 10, "the scenario table")
        assert [r[0].strip(" ▶") for r in app._rows] == ["device", "host", "host-prefetch"]
        await until(pilot, ready(session, "device"), 30, "device to be ready")
        await until(pilot, lambda: state_of(app, "device") == "ready", 2, "the device row")
        assert row(app, "device")[0] == "▶ device"
        assert state_of(app, "host") == "–"
        device = session.store.run
        device_tree = tracker.record()
        assert len(device_tree) == 5  # the server and its four TP ranks
        assert any(f" {device.pid}:" in f" {line}" for line in strays(tmp_path))
        # Held by device, in the first GPU reading taken after it was ready (the one before may
        # have come before the ranks loaded: a loaded machine's poll lags).
        await until(pilot, lambda: session.store.latest["gpu"].at > device.ready_at, 5,
                    "a GPU reading after ready")
        gpus = session.store.latest["gpu"].data.devices
        assert len(gpus) == 4 and all(d.used_bytes > 100 * GIB for d in gpus), gpus

        # The log pane: SGLang's start-up lines, not our own /health and /metrics polls.
        await until(pilot, lambda: "The server is fired up and ready to roll!"
                    in log_pane(app), 5, "the ready line in the log pane")
        await until(pilot, lambda: '"GET /metrics HTTP' in Path(device.log_path).read_text(),
                    5, "a /metrics poll in the server's log file")
        pane = log_pane(app)
        assert "Load weight end" in pane
        assert "DSV4 pool sizes: full=11840000" in pane  # DeepSeek-V4's pools, not one
        assert f"── device: {device.log_path}" in pane
        file_text = Path(device.log_path).read_text()
        assert '"GET /health HTTP' in file_text
        assert "GET /health" not in pane
        assert "GET /metrics" not in pane

        await until(pilot, idle(session), 5, "no requests in flight")
        await pilot.press("down", "down")
        assert app._selected() == "host-prefetch"
        await pilot.press("enter")  # nothing in flight (no load): no confirm screen
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) or any(
            "switching to host-prefetch" in n for n in notifications(app)), 5,
            "the switch to begin, or a question")
        assert not isinstance(app.screen, ConfirmScreen)
        await until(pilot, ready(session, "host-prefetch"), 40, "host-prefetch to be ready")
        new = session.store.run
        assert new is not device
        assert [p for p in device_tree if alive(p)] == []
        assert device.state == "stopped"
        # The HBM-release guard ran before the launch: the new run's baseline is an empty node.
        assert sorted(new.baseline_gpu_used) == [0, 1, 2, 3]
        assert all(used < 0.5 * GIB for used in new.baseline_gpu_used.values()), \
            new.baseline_gpu_used
        assert device.ended_at is not None and device.ended_at <= new.launched_at
        tracker.record()
        await until(pilot, lambda: "42.70M tokens" in screen_text(app), 5, "the new KV pool")
        assert "11.84M tokens" not in screen_text(app)  # device's pool left with its server
        await until(pilot, lambda: state_of(app, "device") == "stopped"
                    and state_of(app, "host-prefetch") == "ready", 2, "the table rows")
        assert row(app, "host-prefetch")[0] == "▶ host-prefetch"
        assert f"── host-prefetch: {new.log_path}" in log_pane(app)
        assert f"── device: {device.log_path}" not in log_pane(app)

        # x: no requests in flight, so it stops at once.
        run = session.supervisor.current
        await until(pilot, idle(session), 5, "no requests in flight")
        sc = session.scenario("host-prefetch")
        await pilot.press("x")
        await until(pilot, lambda: new.state == "stopped", 15, "the stop")
        assert not isinstance(app.screen, ConfirmScreen)
        assert not run.alive
        assert tracker.left() == []
        assert not port_in_use(sc.host, sc.port)
        await until(pilot, lambda: state_of(app, "host-prefetch") == "stopped", 2,
                    "the stopped row")
        assert "info: stopped host-prefetch" in events(session)
        assert app.is_running
        await quit_app(app, pilot)
    # The quit stopped them; a loaded machine may take a moment to show them gone.
    await until(None, lambda: not tracker.left() and not strays(tmp_path), 1,
                lambda: f"the runs' processes to go: {tracker.left()} {strays(tmp_path)}")


# --------------------------------------------------------------------------- confirm screen


@pytest.fixture
async def other_client() -> AsyncIterator[Callable[[str], Awaitable[LoadProcess]]]:
    """Another client's requests on a server (a process of its own, as a user's benchmark
    would be): started by the test, stopped here on every way out."""
    loads: list[LoadProcess] = []

    async def start(url: str) -> LoadProcess:
        load = LoadProcess(url, concurrency=3, input_len=64, output_len=256)
        loads.append(load)
        await load.start()
        return load

    yield start
    for load in loads:
        await load.stop()


def others_serving(session: Session) -> Callable[[], bool]:
    """The last /metrics reading shows more requests than the dashboard's own load has."""
    return lambda: in_flight.others_in_flight(session.store) > 0


def goes_on(load: LoadProcess) -> Callable[[], bool]:
    sent = load.stats.sent
    return lambda: load.stats.sent > sent


@pytest.mark.timeout(90)
async def test_x_asks_before_stopping_a_server_with_other_clients_requests(
        tmp_path: Path, other_client: Callable[[str], Awaitable[LoadProcess]]) -> None:
    session = make_session(tmp_path)
    app = EngramTopApp(session)
    tracker = Tracker(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, ready(session, "device"), 30, "device to be ready")
        run = session.supervisor.current
        facts_ = session.store.run
        tracker.record()
        other = await other_client(session.scenario("device").url)
        await until(pilot, others_serving(session), 15, "another client's requests in flight")

        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 2,
                    "the confirm screen")
        question = app.screen.question
        assert question.startswith("Stop device? ")
        assert "requests from other clients are running or queued" in question
        assert "this dashboard's load" not in question  # it has none
        await pilot.press("n")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), 2,
                    "the confirm screen to close")
        await until(pilot, goes_on(other), 10, "the other client's requests to go on")
        assert control_done(app)
        assert run.state == "ready" and run.alive
        assert session.store.run is facts_ and facts_.state == "ready"
        assert "info: stopped device" not in events(session)

        # Enter on another scenario asks too (a switch stops this server), and n keeps it.
        await until(pilot, others_serving(session), 10, "requests in flight")
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 2,
                    "the confirm screen")
        assert app.screen.question.startswith("Stop device (")
        assert app.screen.question.endswith(
            "requests from other clients are running or queued) and start host?")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), 2,
                    "the confirm screen to close")
        await until(pilot, goes_on(other), 10, "the other client's requests to go on")
        assert control_done(app)
        assert run.state == "ready" and run.alive
        assert session.supervisor.current is run and "host" not in session.store.history

        await until(pilot, others_serving(session), 10, "requests in flight")
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), 2,
                    "the confirm screen")
        await pilot.press("y")
        await until(pilot, lambda: run.state == "stopped", 15, "the stop")
        assert not isinstance(app.screen, ConfirmScreen)
        assert tracker.left() == []
        await until(pilot, lambda: state_of(app, "device") == "stopped", 2, "the row")
        await quit_app(app, pilot)
    # The quit stopped them; a loaded machine may take a moment to show them gone.
    await until(None, lambda: not tracker.left() and not strays(tmp_path), 1,
                lambda: f"the runs' processes to go: {tracker.left()} {strays(tmp_path)}")


@pytest.mark.timeout(90)
async def test_the_dashboards_own_load_never_asks(tmp_path: Path) -> None:
    """The demo's load (and run's) is this dashboard's own: a switch with its requests in
    flight goes ahead at once, and the load starts again on the new server; a stop too."""
    session = make_session(tmp_path, load=LoadSpec(concurrency=4, input_len=64,
                                                   output_len=256))
    app = EngramTopApp(session)
    tracker = Tracker(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, ready(session, "device"), 30, "device to be ready")
        device = session.store.run
        tracker.record()
        await until(pilot, serving(session), 15, "the load's requests in flight")
        assert in_flight.own_streams(session.store) == 4
        assert in_flight.why_ask(session.store) is None
        await pilot.press("3")  # host-prefetch, the third row
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) or any(
            "switching to host-prefetch" in n for n in notifications(app)), 5,
            "the switch to begin, or a question")
        assert not isinstance(app.screen, ConfirmScreen)
        await until(pilot, ready(session, "host-prefetch"), 40, "host-prefetch to be ready")
        assert device.state == "stopped"
        tracker.record()
        await until(pilot, serving(session), 15, "the load again, on the new server")
        assert session.load is not None
        await pilot.press("x")
        await until(pilot, lambda: session.store.run.state == "stopped", 15, "the stop")
        assert not isinstance(app.screen, ConfirmScreen)
        assert session.load is None
        await quit_app(app, pilot)
    await until(None, lambda: not tracker.left() and not strays(tmp_path), 1,
                lambda: f"the runs' processes to go: {tracker.left()} {strays(tmp_path)}")


# --------------------------------------------------------------------------- refused starts


def occupy(session: Session, name: str) -> socket.socket:
    sc = session.scenario(name)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((sc.host, sc.port))
    sock.listen()
    return sock


@pytest.mark.timeout(60)
async def test_a_refused_start_says_why_and_launches_nothing(tmp_path: Path) -> None:
    session = make_session(tmp_path, start=None)
    app = EngramTopApp(session)
    port = session.scenario("host").port
    blocker = occupy(session, "host")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app._rows) == 3 and hasattr(session, "supervisor"),
                        10, "the session")
            await pilot.press("down")
            assert app._selected() == "host"
            await pilot.press("enter")
            await until(pilot, lambda: any("start failed" in n for n in notifications(app)),
                        5, "the error notification")
            note = next(n for n in notifications(app) if "start failed" in n)
            assert f"port {port} is in use by pid " in note
            assert "give scenario 'host' another port" in note
            assert any(e.startswith(f"error: start failed: port {port} is in use")
                       for e in events(session))
            await until(pilot, lambda: control_done(app), 5, "the refused start to end")
            assert app.is_running
            assert session.store.run is None and session.supervisor.current is None
            assert list((tmp_path / "state" / "logs").iterdir()) == []
            assert state_of(app, "host") == "–"
            await quit_app(app, pilot)
    finally:
        blocker.close()
    assert strays(tmp_path) == []


@pytest.mark.timeout(60)
async def test_a_refused_switch_leaves_the_running_server_alone(tmp_path: Path) -> None:
    session = make_session(tmp_path)
    app = EngramTopApp(session)
    tracker = Tracker(session)
    port = session.scenario("host").port
    blocker = occupy(session, "host")
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, ready(session, "device"), 30, "device to be ready")
            run = session.supervisor.current
            device_tree = tracker.record()
            await until(pilot, idle(session), 5, "no requests in flight")
            await pilot.press("down", "enter")
            await until(pilot, lambda: any("switch failed" in n
                                              for n in notifications(app)),
                        15, "the error notification")
            note = next(n for n in notifications(app) if "switch failed" in n)
            assert f"port {port} is in use by pid " in note
            assert "give scenario 'host' another port" in note
            assert any(e.startswith(f"error: switch failed: port {port} is in use")
                       for e in events(session))
            assert "info: stopped device" not in events(session)
            await until(pilot, lambda: control_done(app), 5, "the refused switch to end")
            assert app.is_running
            # Nothing was launched for host, and device was not stopped for nothing.
            assert session.supervisor.current is run
            assert "host" not in session.store.history
            assert [p for p in device_tree if alive(p)] == device_tree
            assert run.state == "ready"
            assert len(list((tmp_path / "state" / "logs").iterdir())) == 1
            await until(pilot, lambda: state_of(app, "device") == "ready"
                        and state_of(app, "host") == "–", 2, "the table rows")
            await quit_app(app, pilot)
    finally:
        blocker.close()
    # The quit stopped them; a loaded machine may take a moment to show them gone.
    await until(None, lambda: not tracker.left() and not strays(tmp_path), 1,
                lambda: f"the runs' processes to go: {tracker.left()} {strays(tmp_path)}")


@pytest.mark.timeout(90)
async def test_a_start_up_says_what_it_waits_for_and_a_stop_marks_the_last_figures(
        tmp_path: Path) -> None:
    """Through a normal start-up nothing says "connection refused": the KV and latency
    panels wait for the server's port, by its phase. After a deliberate stop its figures
    are marked as its last, and the header no longer reads like a countdown."""
    session = Session(SessionOptions(scenario_file=DEMO, start="host", state_dir=tmp_path / "s",
                                     free_ports=True, time_scale=0.05, poll_interval=0.5,
                                     load=None))
    app = EngramTopApp(session)
    seen: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        def starting_screen() -> bool:
            seen.append(screen_text(app))
            return "waiting for the server's port (loading weights)" in seen[-1]

        await until(pilot, starting_screen, 30, "the panels to wait for the port")
        await until(pilot, lambda: (seen.append(screen_text(app)) or True)
                    and ready(session, "host")(), 60, "the server to be ready")
        assert not any("connection refused" in text for text in seen)
        assert not any("connection refused" in e for e in events(session))
        await until(pilot, idle(session), 15, "the warm-up request to finish")
        await until(pilot, lambda: "READY in" in screen_text(app), 5, "the header")
        await pilot.press("x")
        await until(pilot, lambda: session.store.run.state == "stopped", 30, "the stop")
        await until(pilot, lambda: "server stopped: the figures below are its last"
                    in screen_text(app), 10, "the last figures marked")
        text = screen_text(app)
        assert "STOPPED in" not in text and "it had been ready in" in text
        # A 503 while it shuts down does not read as a start.
        assert not any("is starting" in e for e in events(session))
        await quit_app(app, pilot)
    assert not strays(tmp_path)


@pytest.mark.timeout(90)
async def test_through_a_launch_the_scenario_row_s_host_delta_is_the_host_ram_panel_s(
        tmp_path: Path) -> None:
    """Once, 3 s into a launch, the row read +6.5 GiB while the panel read +17.5 GiB. While
    the host placement's tables grow, every frame shows one figure in both places."""
    import re
    session = Session(SessionOptions(scenario_file=DEMO, start="host", state_dir=tmp_path / "s",
                                     free_ports=True, time_scale=0.05, poll_interval=0.5,
                                     load=None))
    app = EngramTopApp(session)
    seen: list[tuple[str, str, str]] = []  # (run state, panel's Δ, row's host Δ)

    def look() -> bool:
        run = session.store.run
        found = re.search(r"│ ?Δ +(?:server )?(–|[+-][\d,.]+ GiB)", screen_text(app))
        if run is not None and run.scenario == "host" and found and app._rows:
            seen.append((str(run.state), found.group(1), row(app, "host")[5]))
        return ready(session, "host")()

    async with app.run_test(size=SIZE) as pilot:  # 150 columns: the list shows host Δ
        await until(pilot, look, 60, "the server to be ready")
        growing = {panel for state, panel, _ in seen if state == "starting" and panel != "–"}
        assert len(growing) >= 3, seen  # the tables grew while we looked
        assert [s for s in seen if s[1] != s[2]] == [], seen
        await quit_app(app, pilot)
    assert not strays(tmp_path)
