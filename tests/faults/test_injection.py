"""Terminal escape injection: a compromised server, exporter or file puts an OSC that sets
the terminal's title, CSI sequences that clear and colour it, every C0 and C1 control and the
bidi controls into the strings it gives us: Prometheus labels and error answers, server log
lines, /server_info and /metrics, scenario names, recordings. Each source is driven into each
screen and export, and what the terminal would be sent is checked: every text segment the
screen paints (the compositor's strips: what Textual writes between its own escape codes),
the SVG, each file and each line a command prints hold no control, and the controls show as
their escapes (\\x1b]0;pwned\\x07)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from badserver import INJECT
from drive import SIZE
from faultkit import PLAN, Cli, no_traceback, scenario_file
from helpers import free_port, quit_app, until, wait_until
from textual.app import App

from collectors.safetext import unsafe_in, visible
from engram_top.app.main import EngramTopApp

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

OSC = "\x1b]0;pwned\x07"
OSC_SHOWN = visible(OSC)  # \x1b]0;pwned\x07 as text: what the screen says instead
# A name a file or a label can hold (every C0 but the newline, DEL, every C1, bidi).
EVIL = f"evil{INJECT}"


def painted(app: App[Any]) -> str:
    """The screen as the terminal would be sent it, less Textual's own escape codes: every
    segment of every line of the top screen; fails if any holds a control. The SVG export
    is checked too."""
    strips = app.screen._compositor.render_strips()
    raw = [seg.text for strip in strips for seg in strip if unsafe_in(seg.text)]
    assert not raw, f"{type(app.screen).__name__} paints controls: {[ascii(t) for t in raw[:4]]}"
    svg = app.export_screenshot()
    assert not unsafe_in(svg, "\n"), f"screen SVG: {unsafe_in(svg, chr(10))[:8]}"
    return "\n".join(strip.text for strip in strips)


def assert_clean_file(path: Path) -> str:
    """A file's text holds no control but its line ends (and no lone surrogate: UTF-8)."""
    text = path.read_bytes().decode("utf-8")
    found = unsafe_in(text, "\n\r" if path.suffix == ".csv" else "\n")
    assert not found, f"{path.name}: {[ascii(c) for c in found[:8]]}"
    return text


def assert_clean_output(*texts: str) -> None:
    for text in texts:
        found = unsafe_in(text, "\n\t")
        assert not found, f"printed controls: {[ascii(c) for c in found[:8]]} in {text[:300]!r}"


# --------------------------------------------------------------------------- Prometheus


class Prometheus:
    """A Prometheus HTTP API on 127.0.0.1 whose labels hold INJECT: node, placement, the GPU
    model and an instance; `error` set, every query is refused with an error quoting it."""

    def __init__(self) -> None:
        self.error: str | None = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                url = urlsplit(self.path)
                query = parse_qs(url.query).get("query", [""])[0]
                if owner.error is not None:
                    status, body = 400, {"status": "error", "errorType": "bad_data",
                                         "error": owner.error}
                else:
                    status, body = 200, owner.answer(query, url.path.endswith("query_range"))
                data = json.dumps(body).encode()
                with contextlib.suppress(ConnectionError):  # a client that gave up waiting
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Prometheus:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    @staticmethod
    def samples(query: str) -> list[tuple[dict[str, str], float]]:
        nodes = [{"node": EVIL, "placement": f"host{INJECT}"},
                 {"node": "node-b", "placement": "device"}]
        out: list[tuple[dict[str, str], float]] = []
        for i, base in enumerate(nodes):
            if "DCGM_FI" in query:
                for name, v in (("DCGM_FI_DEV_FB_USED", 120_000), ("DCGM_FI_DEV_FB_FREE", 63_000),
                                ("DCGM_FI_DEV_FB_RESERVED", 500), ("DCGM_FI_DEV_GPU_UTIL", 80)):
                    out.append(({**base, "__name__": name, "gpu": "0",
                                 "modelName": f"B200{INJECT}",
                                 "instance": f"10.0.0.{i}:9400{INJECT}"}, v))
            elif "node_memory" in query:
                for name, v in (("node_memory_MemTotal_bytes", 2048 * 2**30),
                                ("node_memory_MemAvailable_bytes", 1500 * 2**30),
                                ("node_memory_Shmem_bytes", 190 * 2**30)):
                    out.append(({**base, "__name__": name}, v))
            elif "histogram_quantile" in query:
                for figure, v in (("ttft_p50", 0.3), ("ttft_p99", 0.9), ("tpot_p50", 0.02),
                                  ("tpot_p99", 0.05), ("output_tok_s", 200.0)):
                    out.append(({**base, "figure": figure}, v))
            elif "sglang" in query:
                for name, v in (("sglang:token_usage", 0.4), ("sglang:num_running_reqs", 3),
                                ("sglang:max_total_num_tokens", 11_840_000),
                                ("sglang:gen_throughput", 200.0)):
                    out.append(({**base, "__name__": name}, v))
            elif query.startswith("up"):
                out.append(({**base, "__name__": "up", "job": f"sglang{INJECT}",
                             "instance": f"10.0.0.{i}:30000{INJECT}"}, 1 if i else 0))
        return out

    def answer(self, query: str, ranged: bool) -> dict[str, Any]:
        now = time.time()
        if ranged:
            result = [{"metric": m, "values": [[now - 60 + t, str(v)] for t in range(0, 60, 15)]}
                      for m, v in self.samples(query)]
            return {"status": "success", "data": {"resultType": "matrix", "result": result}}
        result = [{"metric": m, "value": [now, str(v)]} for m, v in self.samples(query)]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}


async def test_fleet_labels_and_prometheus_errors_are_shown_never_sent(tmp_path: Path) -> None:
    from engram_top.app.fleet_screen import FleetApp
    from engram_top.fleet import export as fleet_export
    from engram_top.fleet.session import FleetSession

    with Prometheus() as prom:
        session = FleetSession(prom.url, interval=0.5)
        app = FleetApp(session)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: len(session.rows()) == 2, 20, "two nodes")
            await pilot.pause()
            table = painted(app)
            # The columns cut them: what fits is the escapes' text.
            assert "evil\\x1b" in table and "host\\x1b]0;p" in table and "node-b" in table

            await pilot.press("enter")  # the evil node sorts first: its detail
            await until(pilot, lambda: "NodeScreen" in type(app.screen).__name__, 10, "detail")
            await until(pilot, lambda: "asking" not in app.screen.history_note, 20, "history")
            await pilot.pause()
            detail = painted(app)
            assert f"evil{OSC_SHOWN}" in detail, detail

            await pilot.press("h")
            await until(pilot, lambda: "HistoryScreen" in type(app.screen).__name__, 10,
                        "history charts")
            painted(app)
            await pilot.press("escape")
            await pilot.press("escape")
            await until(pilot, lambda: len(app.screen_stack) == 1, 10, "the fleet table")

            await pilot.press("c")
            await until(pilot, lambda: len(app.screen_stack) == 2, 10, "the comparison")
            await pilot.pause()
            assert OSC_SHOWN in painted(app)
            await pilot.press("escape")
            await until(pilot, lambda: len(app.screen_stack) == 1, 10, "the fleet table")

            # The export, as `s` of a fleet snapshot writes it.
            folder = fleet_export.prepare(tmp_path, session, svg=app.export_screenshot()).write()

            # Prometheus refuses, its error quoting a control sequence: the header says so.
            prom.error = f"parse error at char 3: {INJECT}"
            await until(pilot, lambda: not session.ok, 20, "the error answer")
            await pilot.pause()
            header = painted(app)  # the long message wraps: its start, and the escapes
            assert "parse error at char 3:" in header and OSC_SHOWN in header
            await pilot.press("q")
            await until(pilot, lambda: not app.is_running, 20, "the app to quit")

    names = {p.name for p in folder.iterdir()}
    assert {"summary.md", "snapshot.json", "screen.svg", "timeseries.csv"} <= names, names
    for path in folder.iterdir():
        if path.suffix in (".md", ".json", ".svg", ".csv"):
            assert_clean_file(path)
    summary = (folder / "summary.md").read_text()
    assert f"evil{OSC_SHOWN}" in summary
    rows = [line for line in summary.splitlines() if line.startswith("| ")]
    head = rows[0]
    for row in rows[1:]:  # no label adds a cell or a line
        if row.startswith("| evil") or row.startswith("| node-b"):
            assert row.replace("\\|", "").count("|") == head.count("|"), row
    # JSON keeps the data: the exact label, escaped by JSON itself.
    data = json.loads((folder / "snapshot.json").read_text())
    assert EVIL in [n["node"] for n in data["nodes"]]
    assert f"evil{OSC_SHOWN}" in (folder / "timeseries.csv").read_text()


# --------------------------------------------------------------------------- a live server

TOML_NAME = "evil\\u001b]0;pwned\\u0007\\u009b31m\\u202e[/]"  # as a TOML key spells it
NAME = "evil\x1b]0;pwned\x07\x9b31m\u202e[/]"


@pytest.fixture
def evil_scenarios(tmp_path: Path) -> Path:
    return scenario_file(tmp_path, f"""
[scenarios."{TOML_NAME}"]
port = {free_port()}
args = ["--fault", "log=inject", "--fault", "info=inject", "--fault", "metrics=inject"]
""")


async def test_a_server_and_a_scenario_file_through_the_dashboard_and_its_snapshot(
        tmp_path: Path, evil_scenarios: Path) -> None:
    from engram_top.live.session import Session, SessionOptions

    session = Session(SessionOptions(scenario_file=evil_scenarios, start=NAME, load=None,
                                     state_dir=tmp_path / "state", poll_interval=0.3))
    app = EngramTopApp(session, snapshot_dir=tmp_path / "snaps")
    async with app.run_test(size=(120, 40)) as pilot:
        run = lambda: session.store.run  # noqa: E731
        await until(pilot, lambda: run() is not None and run().state == "ready"
                    and any("injected" in line for _, line in run().log_lines), 60,
                    "the server ready, its log read")
        server = lambda: session.store.latest.get("server")  # noqa: E731
        await until(pilot, lambda: server() is not None and server().ok, 20, "its pages read")
        # Every frame on the way is checked too (painted fails on a control).
        await until(pilot, lambda: f"injected: {OSC_SHOWN}" in painted(app), 10, "the log pane")
        screen = painted(app)
        assert f"bare {OSC_SHOWN}" in screen
        assert visible(NAME) in screen  # the header; the scenario list cuts it

        await pilot.press("ctrl+p")  # the palette lists a command per scenario
        await until(pilot, lambda: len(app.screen_stack) == 2, 10, "the command palette")
        await pilot.press(*"evil")
        await until(pilot, lambda: "Start or switch to evil\\x1b" in painted(app), 10,
                    "the scenario's command")
        await pilot.press("escape")
        await until(pilot, lambda: len(app.screen_stack) == 1, 10, "the dashboard")

        for key in ("h", "c", "question_mark"):
            await pilot.press(key)
            await until(pilot, lambda: len(app.screen_stack) == 2, 10, f"the screen of {key}")
            await pilot.pause()
            painted(app)
            await pilot.press("escape")
            await until(pilot, lambda: len(app.screen_stack) == 1, 10, "the dashboard")

        await pilot.press("s")
        snaps = tmp_path / "snaps"
        await until(pilot, lambda: snaps.exists() and any(
            (p / "summary.md").exists() for p in snaps.iterdir()), 30, "the snapshot")
        # The toast that says where it went: a path is outside text too.
        await until(pilot, lambda: "snapshot written" in painted(app), 10, "the toast")
        await quit_app(app, pilot)

    (folder,) = [p for p in snaps.iterdir() if not p.name.startswith(".")]
    for path in folder.iterdir():
        if path.suffix in (".md", ".json", ".svg", ".csv"):
            assert_clean_file(path)
    summary = (folder / "summary.md").read_text()
    assert visible(NAME) in summary
    assert "\\x1b" in (folder / "screen.svg").read_text()


def test_a_bad_name_in_a_scenario_file_is_quoted_visibly(cli: Cli, tmp_path: Path) -> None:
    path = scenario_file(tmp_path, f"""
[scenarios.ok]
port = {free_port()}
"{TOML_NAME}" = 1
""")
    res = cli.run("run", str(path))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode != 0
    assert_clean_output(res.stdout, res.stderr)
    assert visible(NAME) in res.stderr, res.stderr


# --------------------------------------------------------------------------- recordings


def evil_recording(path: Path) -> Path:
    """A recording of a node and two scenarios named with controls, a server log line, an
    error event quoting a server's answer, and one reading."""
    from collectors.readings import Reading, Status
    from engram_top.model.figures import RunFigures
    from engram_top.model.store import RunFacts, RunStore
    from engram_top.record.recorder import Recorder

    store = RunStore()
    store.node = EVIL
    recorder = Recorder(store, path).start()
    now, wall = time.monotonic(), time.time()
    for i, name in enumerate(("base", f"ho|st\n{INJECT}")):
        store.set_run(RunFacts(
            scenario=name, placement=f"host{INJECT}" if i else "device", node=EVIL,
            time_scale=1.0, launched_wall=wall, launched_at=now, state="ready",
            ready_at=now + 100, results=RunFigures(
                gpus=4, weights_gb=119.0 - 46 * i, kv_tokens=11_840_000 * (1 + 2 * i),
                ready_s=100.0 + 50 * i, ttft_mean_s=0.35 + 0.05 * i, itl_mean_s=0.026,
                output_tok_s=224.0 - 30 * i),
            log_lines=deque([(now, f"[2026-12-01 00:00:00] replayed {INJECT}")])))
    store.add("server", Reading("sglang http://127.0.0.1:1", Status.ERROR, None,
                                f"HTTP 500: {INJECT}"))
    # The latest event: beside the verdict strip the events line has one row, for it.
    store.event("error", f"server said: {INJECT}")
    recorder.close()
    return path


async def test_a_recording_replayed_and_compared(cli: Cli, tmp_path: Path) -> None:
    from engram_top.record.replay import ReplaySession

    rec = evil_recording(tmp_path / "evil.jsonl")
    app = EngramTopApp(ReplaySession(rec, paused=True))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("greater_than_sign")  # to its end: every record read
        # At 100x30 the log pane is 30 columns: its line is cut within the escape, shown.
        await until(pilot, lambda: app.session.store.run is not None
                    and "replayed \\x1b]0;" in painted(app), 10, "the runs and the log")
        screen = painted(app)  # the events line, the verdict strip, the panels' source lines
        assert f"server said: {OSC_SHOWN}" in screen and screen.count(OSC_SHOWN) >= 4
        await pilot.press("c")
        await until(pilot, lambda: len(app.screen_stack) == 2, 10, "the comparison")
        await pilot.pause()
        assert "ho|st\\n" in painted(app)
        await pilot.press("escape")
        await quit_app(app, pilot)

    # engram-top compare of the same file: Markdown whose rows stay rows.
    res = cli.run("compare", str(rec), "--baseline", "base")
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert_clean_output(res.stdout, res.stderr)
    table = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert len({line.replace("\\|", "").count("|") for line in table}) == 1, table
    assert "ho\\|st\\n\\x1b]0;pwned\\x07" in table[0]


# --------------------------------------------------------------------------- commands


def test_inspect_log_and_inspect_metrics_print_no_control(cli: Cli, tmp_path: Path) -> None:
    import badserver

    log = tmp_path / "server.log"
    log.write_text(f"[2026-12-01 00:00:00] server_args=ServerArgs(model_path='{INJECT}')\n"
                   f"[2026-12-01 00:00:01] {INJECT}\n")
    res = cli.run("inspect-log", str(log))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert_clean_output(res.stdout, res.stderr)

    page = tmp_path / "metrics.txt"
    page.write_text(badserver.metrics_page("inject"))
    res = cli.run("inspect-metrics", str(page))
    assert res.returncode == 0, res.stderr
    assert_clean_output(res.stdout, res.stderr)

    # A line it cannot read beside one it can: read around it, the line quoted escaped.
    page.write_text(f"sglang:num_running_reqs{{}} 1\n{INJECT} 2\n")
    res = cli.run("inspect-metrics", str(page))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert_clean_output(res.stdout, res.stderr)
    assert "\\x1b]0;pwned" in res.stdout and "(skipped)" in res.stdout
    page.write_text(f"{INJECT} 2\n")  # a page that is not one: refused, the line escaped
    res = cli.run("inspect-metrics", str(page))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 1
    assert_clean_output(res.stdout, res.stderr)
    assert "\\x1b]0;pwned" in res.stderr, res.stderr


def test_a_command_prints_outside_text_visibly(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    """Every line a command prints goes through one filter: an error quoting a file's name
    (any outside text) shows its controls as escapes, in the same process as a user runs."""
    from engram_top.cli import commands as cli

    missing = tmp_path / f"no{OSC}such.log"
    assert cli.main(["inspect-log", str(missing)]) == 1
    out = capsys.readouterr()
    assert_clean_output(out.out, out.err)
    assert f"no{OSC_SHOWN}such.log" in out.err
    assert cli.main(["replay", str(missing)]) != 0
    out = capsys.readouterr()
    assert_clean_output(out.out, out.err)



# --------------------------------------------------------------------------- a real terminal


def test_the_bytes_a_terminal_gets_from_the_fleet_hold_no_injected_control(cli: Cli) -> None:
    """`engram-top fleet` on a pseudo-terminal: what it writes there (Textual's own codes
    and the screen) never holds the labels' OSC, CSI, C1 or bidi controls; their escapes'
    text is there instead."""
    with Prometheus() as prom:
        term = cli.terminal("fleet", "--prometheus", prom.url)
        try:
            wait_until(lambda: "node-b" in term.output and "serving" in term.output, 30,
                       "the fleet's rows")
            term.press("q")
            assert term.wait(30) == 0, term.output[-3000:]
        finally:
            term.kill()
    out = term.output
    assert "\x1b]0;pwned" not in out and "pwned\x07" not in out
    assert not any(ch in out for ch in "\x9b\x9d\x85\u202e\u2066\ufeff")
    assert "host\\x1b]0;p" in out  # the placement's cell, cut by its column
    no_traceback(out)


def test_a_frame_is_cleaned_of_any_control_a_widget_was_given() -> None:
    """Behind the widgets: whatever reaches a frame by a path not made safe is dropped from
    it before the terminal is written to, and the line keeps its cells."""
    from rich.segment import Segment
    from textual._compositor import ChopsUpdate, LayoutUpdate
    from textual.strip import Strip

    from engram_top.app.safe import clean_update

    raw = Strip([Segment("ok "), Segment(f"a{INJECT}b\udc9b", None)])
    clean = Strip([Segment("ok ")])
    layout = clean_update(LayoutUpdate([[raw, clean]], region=None))  # type: ignore[arg-type]
    (line,) = layout.strips
    texts = [s.text for s in line]
    assert not unsafe_in("".join(texts)) and texts[0].startswith("ok a]0;pwned[2J")
    assert line[1] is clean  # a clean line is left as it is
    assert line[0].cell_length == raw.cell_length
    assert texts[0].endswith("b?")  # a lone surrogate took a cell: it keeps it
    chops = clean_update(ChopsUpdate([{0: raw, 5: None}], [(0, 0, 10)], [[5, 10]]))
    assert not unsafe_in(chops.chops[0][0].text) and chops.chops[0][5] is None


def test_a_bench_report_and_its_requests_stay_rows(cli: Cli, tmp_path: Path) -> None:
    """A bench of a stand-in server named with controls whose pages quote them: report.md's
    tables keep their cells, requests.csv its rows, and nothing printed holds a control."""
    scenarios = scenario_file(tmp_path, f"""
[scenarios.ok]
port = {free_port()}
[scenarios."{TOML_NAME}"]
port = {free_port()}
args = ["--fault", "log=inject", "--fault", "info=inject", "--fault", "metrics=inject"]
""")
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(scenarios=scenarios, names=f'["ok", "{TOML_NAME}"]'))
    out = tmp_path / "out"
    res = cli.run("bench", str(plan), "--out", str(out), timeout=120)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    assert_clean_output(res.stdout, res.stderr)
    report = assert_clean_file(out / "report.md")
    # Every section quotes the name, shown: the comparison, the verdict's sentences, the
    # paired A/B's order and rows, the per-level rows.
    sections = {s.split("\n", 1)[0]: s for s in report.split("\n## ")[1:]}
    for title in ("Verdict", "Paired A/B over rounds", "Per level"):
        assert visible(NAME) in sections[title], (title, sections.keys())
    assert f"in the order ok {visible(NAME)};" in sections["Paired A/B over rounds"]
    for table in report.split("\n\n"):
        rows = [line.replace("\\|", "") for line in table.splitlines() if line.startswith("|")]
        assert len({row.count("|") for row in rows}) <= 1, table
    assert_clean_file(out / "requests.csv")
    assert visible(NAME) in (out / "requests.csv").read_text()
    data = json.loads((out / "report.json").read_text())
    assert NAME in [r["scenario"] for r in data["results"]]  # the data itself, JSON-escaped
    assert NAME in data["paired"]["scenarios"] and f"ok {NAME}" == data["paired"]["order"]
    assert NAME in [
        f["scenario"] for f in data["verdict"]["findings"]]
    # engram-top compare of that report: its verdict and table printed with the name shown.
    res = cli.run("compare", str(out / "report.json"), "--baseline", "ok")
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert_clean_output(res.stdout, res.stderr)
    assert res.stdout.startswith("## Verdict\n"), res.stdout
    assert f"\n- TTFT: no verdict: {visible(NAME)} " in res.stdout, res.stdout
