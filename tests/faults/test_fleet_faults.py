"""The fleet view against a Prometheus that misbehaves on cue (badprom.BadProm, real HTTP on
127.0.0.1), driven as a user drives it (run_test and Pilot): whatever it answers, the screen
keeps refreshing, says what is wrong and since when, keeps the last figures with their age,
and recovers when Prometheus does; a node's detail survives any history; quitting is clean."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from badprom import BadProm
from drive import strict_json
from faultkit import Cli, no_traceback
from helpers import screen_text, until, wait_until
from textual.widgets import DataTable, Static

from collectors.prometheus import queries
from engram_top.app.fleet_screen import FleetApp
from engram_top.fleet import export as fleet_export
from engram_top.fleet.session import MIN_PAUSE_S, FleetSession, dialects
from scenarios import owned_folder
from scenarios.fleet_demo import FOLDER_PREFIX
from scenarios.proc_start import start_of

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

INTERVAL = 0.1
DEADLINE = 1.0
NODES = ("node-0000", "node-0001", "node-0002")


def app_on(prom: BadProm, interval: float = INTERVAL, deadline: float = DEADLINE) -> FleetApp:
    return FleetApp(FleetSession(prom.url, interval=interval, deadline_s=deadline))


def header(app: FleetApp) -> str:
    return str(app.query_one("#fleet-header", Static).render())


def table(app: FleetApp) -> DataTable:  # type: ignore[type-arg]
    return app.query_one("#fleet", DataTable)


def shown(app: FleetApp) -> dict[str, list[str]]:
    """The table's rows by node: each row's cells as text."""
    t = table(app)
    rows = [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]
    return {r[0]: r for r in rows}


async def healthy(app: FleetApp, pilot, nodes: int = 3) -> None:  # type: ignore[no-untyped-def]
    await until(pilot, lambda: table(app).row_count == nodes and "read at" in header(app), 30,
                lambda: f"every node's row, and 'read at' in: {header(app)}")


async def quit_cleanly(app: FleetApp, pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("q")
    await until(pilot, lambda: not app.is_running, 20, "the app to quit")
    assert app.crash is None, repr(app.crash)
    assert app.return_value == 0
    task = app.session._task
    assert task is not None and task.done()  # nothing polls on


# --------------------------------------------------------------------------- outages

OUTAGES = [
    ("slow", "no whole answer within 1 s"),
    # The gpu query stays in flight while the others fail at once: it is cancelled with
    # them, so the next refresh's gpu query finds its connection free.
    ("slow-one", "is not JSON (HTTP 503, text/plain)"),
    ("stopped", "connection refused"),
    ("html", "is not JSON (HTTP 200, text/html)"),
    ("503", "is not JSON (HTTP 503, text/plain)"),
    ("body-list", "is JSON but not Prometheus's: a list with no status (HTTP 200)"),
    ("no-status", "is JSON but not Prometheus's: an object with no status"),
    ("refused", "query was refused (HTTP 400 bad_data: 1:1: parse error"),
    ("data-null", "has no data object (data is null)"),
    ("data-empty", "has no data object (data is an empty list)"),
    ("data-list", "has no data object (data is a list)"),
    ("data-str", "has no data object (data is a string)"),
    ("result-dict", "has no result list (data.result is an object)"),
    ("deep", "is nested too deeply to be an answer"),
    ("huge", "an answer over 32 MiB"),
]


@pytest.mark.parametrize(("mode", "said"), OUTAGES, ids=[m for m, _ in OUTAGES])
async def test_an_outage_is_said_with_its_time_the_rows_stay_and_the_fleet_recovers(
        bad_prom: BadProm, mode: str, said: str) -> None:
    bad_prom.slow_s = DEADLINE + 1.5
    # An answer over the bound is read up to the bound, on a loaded machine too.
    app = app_on(bad_prom, deadline=10.0 if mode == "huge" else DEADLINE)
    async with app.run_test(size=(160, 30)) as pilot:
        await healthy(app, pilot)
        before = shown(app)
        requests, polls = bad_prom.requests, app.session.polls
        if mode == "stopped":
            bad_prom.stop_listening()
        else:
            bad_prom.mode = mode
        await until(pilot, lambda: said in header(app), 30,
                    lambda: f"{said!r} in the header: {header(app)}")
        text = header(app)
        assert "(since " in text and "the figures below are the last it gave" in text
        assert " s old" in text  # the kept figures' age
        assert shown(app) == before  # every node's last figures, as they were
        # The refreshes go on (two more, failing) and none asks more than its queries.
        now = app.session.polls
        await until(pilot, lambda: app.session.polls >= now + 2, 30, "two more refreshes")
        assert app.is_running and said in header(app)
        per_refresh = len(queries(dialects=dialects()))
        assert bad_prom.requests - requests <= per_refresh * (app.session.polls - polls + 1)

        back = time.monotonic()
        bad_prom.listen("healthy")
        await until(pilot, lambda: "read at" in header(app)
                    and all(app.session.nodes[n][0] > back for n in NODES), 30,
                    lambda: f"the fleet recovered: {header(app)}")
        assert "Prometheus:" not in header(app) and set(shown(app)) == set(NODES)
        await quit_cleanly(app, pilot)


async def test_a_tiny_interval_never_spins(bad_prom: BadProm) -> None:
    """A refresh that fails at once (nothing listens) with an interval of a nanosecond: the
    loop still pauses between refreshes."""
    bad_prom.stop_listening()
    session = FleetSession(bad_prom.url, interval=1e-9)
    started = time.monotonic()
    await session.start()
    try:
        await until(None, lambda: session.polls >= 6, 20, "six refreshes")
    finally:
        await session.close()
    assert time.monotonic() - started >= 5 * MIN_PAUSE_S
    assert session.status is not None and "connection refused" in session.status.message


# --------------------------------------------------------------------------- odd answers

# (mode, whether the header counts odd values) -- node 0's series alone are odd, in its
# history too.
ODD = [
    ('value:"NaN"', False),  # Prometheus's own "no figure": not odd
    ('value:"+Inf"', False),
    ('value:"1e308"', True),
    ("value:1e308", True),
    ("value:-1e300", True),
    ('value:"garbage"', True),
    ("value:" + "9" * 400, True),  # an integer past what a float holds
    ("value:null", True),
    ('value:{"a": 1}', True),
    ('gpu-label:"\\u00b2"', False),  # "²": a digit to str.isdigit(), not to int()
    ('gpu-label:"99999999999999999999999"', False),
    ("result-odd", True),  # results that are no samples, amid good ones
    ("max", False),  # every figure at the top of its plausible range
]


# Whose history charts are drawn too (every figure at its range's top; one left out).
CHARTED = ("max", 'value:"1e308"')


@pytest.mark.parametrize(("mode", "odd"), ODD, ids=[m[:24] for m, _ in ODD])
async def test_odd_series_are_left_out_alone_and_the_node_opens(bad_prom: BadProm, mode: str,
                                                                odd: bool) -> None:
    app = app_on(bad_prom)
    async with app.run_test(size=(160, 30)) as pilot:
        await healthy(app, pilot)
        bad_prom.mode = mode
        polls = app.session.polls
        await until(pilot, lambda: app.session.polls >= polls + 2, 30, "two refreshes")
        await until(pilot, lambda: "read at" in header(app), 10, "a good refresh")
        rows = shown(app)
        assert set(rows) == set(NODES)
        for node in NODES[1:]:  # the other nodes' figures are untouched
            assert rows[node][3] not in ("", "–") and rows[node][2] in ("serving", "idle")
        assert ("odd values left out" in header(app)) == odd, header(app)
        if odd and mode.startswith("value:"):
            assert rows["node-0000"][3] == "–"  # its HBM: left out, never a figure
        if mode.startswith("gpu-label"):  # its four GPUs, the odd one kept under its label
            assert app.session.row_of("node-0000").gpus == 4  # type: ignore[union-attr]
        # Its detail (first row) with its odd history, the history charts, back, and out.
        await pilot.press("enter")
        await until(pilot, lambda: type(app.screen).__name__ == "NodeScreen", 10, "the detail")
        foot = app.screen.query_one("#node-foot", Static)
        await until(pilot, lambda: "asking" not in str(foot.render()), 20, "its history")
        assert "readings over the last 30 min" in str(foot.render())
        assert "node-0000" in screen_text(app)
        if mode in CHARTED:
            await pilot.press("h")
            await until(pilot, lambda: type(app.screen).__name__ == "HistoryScreen", 10,
                        "history")
            assert screen_text(app)
            await pilot.press("escape")
        await pilot.press("escape")
        await until(pilot, lambda: len(app.screen_stack) == 1, 10, "the fleet again")
        await quit_cleanly(app, pilot)


async def test_terminal_controls_in_labels_crash_nothing(bad_prom: BadProm, tmp_path: Path
                                                         ) -> None:
    """Node, placement and instance labels holding an OSC title, CSI sequences, C1 controls
    and CR/LF: the fleet draws them, a node opens (its history query escapes them), and a
    snapshot of it writes."""
    bad_prom.mode = "inject"
    app = app_on(bad_prom)
    async with app.run_test(size=(160, 30)) as pilot:
        await healthy(app, pilot)
        await pilot.press("enter")
        await until(pilot, lambda: type(app.screen).__name__ == "NodeScreen", 10, "the detail")
        foot = app.screen.query_one("#node-foot", Static)
        await until(pilot, lambda: "asking" not in str(foot.render()), 20, "its history")
        assert "readings over the last 30 min" in str(foot.render())  # the query was valid
        assert bad_prom.range_requests == 4
        await pilot.press("escape")
        taken = fleet_export.prepare(tmp_path, app.session, svg=None).write()
        data = strict_json(Path(taken) / "snapshot.json")
        assert len(data["nodes"]) == 3 and all(n["node"].startswith("evil-")
                                               for n in data["nodes"])
        await quit_cleanly(app, pilot)


# --------------------------------------------------------------------------- history

# Odd values in a history come with the odd answers above; here every node's history alike.
HISTORIES = ['range:"1e308"', 'range:"0"', "range-times", "stopped"]


@pytest.mark.parametrize("mode", HISTORIES, ids=[m[:20] for m in HISTORIES])
async def test_a_nodes_detail_survives_any_history(bad_prom: BadProm, mode: str) -> None:
    app = app_on(bad_prom, interval=5.0)  # no refresh meanwhile: the history alone
    async with app.run_test(size=(160, 40)) as pilot:
        await healthy(app, pilot)
        if mode == "stopped":
            bad_prom.stop_listening()
        else:
            bad_prom.mode = mode
        await pilot.press("enter")
        await until(pilot, lambda: type(app.screen).__name__ == "NodeScreen", 10, "the detail")
        foot = app.screen.query_one("#node-foot", Static)
        await until(pilot, lambda: "asking" not in str(foot.render()), 20, "its history")
        note = str(foot.render())
        if mode == "stopped":
            assert "history: none (" in note and "connection refused" in note
        elif mode == "range-times":
            assert "Prometheus holds nothing older" in note
        else:
            assert "readings over the last 30 min" in note, note
        assert "node-0000" in screen_text(app)
        await pilot.press("h")
        await until(pilot, lambda: type(app.screen).__name__ == "HistoryScreen", 10, "history")
        assert screen_text(app)
        await pilot.press("escape", "escape")
        await until(pilot, lambda: len(app.screen_stack) == 1, 10, "the fleet again")
        bad_prom.listen("healthy")
        await quit_cleanly(app, pilot)


# --------------------------------------------------------------------------- size


async def test_two_thousand_nodes_are_drawn_and_the_keys_answer(bad_prom: BadProm) -> None:
    bad_prom.nodes = 2000
    app = app_on(bad_prom, interval=3.0, deadline=20.0)
    async with app.run_test(size=(160, 40)) as pilot:
        await healthy(app, pilot, nodes=2000)
        assert "2000 nodes" in header(app)
        await pilot.press("r")  # reverse: the last node first
        await until(pilot, lambda: str(table(app).get_row_at(0)[0]) == "node-1999", 30,
                    "the reversed order")
        await pilot.press("slash", *"node-1234", "enter")
        await until(pilot, lambda: table(app).row_count == 1, 30, "the filter")
        await pilot.press("enter")
        await until(pilot, lambda: type(app.screen).__name__ == "NodeScreen", 10, "the detail")
        assert "node-1234" in screen_text(app)
        await pilot.press("escape")
        await quit_cleanly(app, pilot)


def test_the_bad_prometheus_answers_as_prometheus_does(bad_prom: BadProm) -> None:
    """The healthy answer is what the fleet's source reads from a real Prometheus: the
    healthy path of every test above is not a shape of our own making."""
    import urllib.request
    with urllib.request.urlopen(bad_prom.url + "/api/v1/query?query=up", timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success" and body["data"]["resultType"] == "vector"
    first = body["data"]["result"][0]
    assert set(first) == {"metric", "value"} and isinstance(first["value"][1], str)


# --------------------------------------------------------------------------- a killed demo


def demo_folders(cli: Cli) -> list[Path]:
    return sorted(cli.tmpdir.glob(f"{FOLDER_PREFIX}*"))


@pytest.mark.timeout(120)
def test_a_sigkilled_fleet_demo_leaves_nothing_the_next_start_does_not_clean(cli: Cli) -> None:
    """`engram-top fleet --demo` killed with SIGKILL (no cleanup of its own runs): its
    children (exporters, node-exporter, Prometheus) die with it, and the temporary folder it
    leaves is removed by the next demo's start, which, stopped, leaves nothing either."""
    term = cli.terminal("fleet", "--demo", "--nodes", "2", "--interval", "1")
    wait_until(lambda: "read at" in term.output and cli.processes("prometheus"), 60,
               "the demo's fleet on screen")
    [left] = demo_folders(cli)
    children = cli.processes()
    assert len(children) >= 3  # engram-top, its exporters, Prometheus (and node-exporter)
    os.kill(term.proc.pid, signal.SIGKILL)
    term.proc.wait(10)
    wait_until(lambda: not cli.processes(), 20, "its children to die with it")
    assert demo_folders(cli) == [left] and (left / "prometheus").is_dir()  # nothing ran

    again = cli.terminal("fleet", "--demo", "--nodes", "2")
    wait_until(lambda: not left.exists(), 30, "the next start to remove the left folder")
    wait_until(lambda: cli.processes("prometheus"), 60, "the next demo's Prometheus")
    again.proc.send_signal(signal.SIGTERM)
    assert again.wait(30) == 143  # SIGTERM: stopped in order
    no_traceback(again.output)
    wait_until(lambda: not cli.processes(), 20, "everything the second demo started to stop")
    assert demo_folders(cli) == []


def test_a_sweep_stops_what_a_dead_owner_left_running_and_spares_the_living(
        tmp_path: Path) -> None:
    """The sweep's own cases, with real processes: a folder whose owner is dead has its
    still-running child stopped and goes; a living owner's folder and a foreign name stay."""
    import subprocess
    import sys

    base = tmp_path
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        gone = base / f"{FOLDER_PREFIX}dead"
        gone.mkdir()
        (gone / owned_folder.OWNER).write_text(json.dumps({
            "pid": dead.pid, "started": time.time() - 5,
            "children": [{"pid": child.pid, "started": start_of(child.pid)}]}))
        living = base / f"{FOLDER_PREFIX}living"
        living.mkdir()
        (living / owned_folder.OWNER).write_text(json.dumps({
            "pid": os.getpid(), "started": start_of(os.getpid()), "children": []}))
        fresh = base / f"{FOLDER_PREFIX}fresh"  # no owner file yet: being made
        fresh.mkdir()
        other = base / "someone-else-dead"
        other.mkdir()
        (other / owned_folder.OWNER).write_text(gone.joinpath(owned_folder.OWNER).read_text())

        assert owned_folder.sweep(FOLDER_PREFIX, base) == [gone]
        assert child.wait(10) is not None  # stopped, not left running
        assert living.exists() and fresh.exists() and other.exists()
    finally:
        child.kill()
        child.wait()
