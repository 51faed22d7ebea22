"""Recordings a crash, a later append or a hostile hand damaged. Every reader (the replay,
`snapshot --recording`, `compare`) reads every whole session and every whole line, skips
what it cannot read and names each skipped line and why; only a file with no session in it
is refused, with a clear message. The files are real recordings made by the Recorder
(drive.make_recording), damaged afterwards."""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from drive import SIZE, make_recording, strict_json
from faultkit import Cli, no_traceback
from helpers import quit_app, screen_text, until

from engram_top.app.main import EngramTopApp
from engram_top.record import replay_file
from engram_top.record.file_format import RecordingError
from engram_top.record.recorder import read_recording
from engram_top.record.replay import ReplaySession

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

# Session A ran device then host; session B, appended after A was cut, host-prefetch.
A_RUNS = {"device": 350.0, "host": 400.0}  # scenario -> mean TTFT (ms), as make_recording
B_RUNS = {"host-prefetch": 350.0}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    folder = tmp_path_factory.mktemp("pristine")
    a = make_recording(folder / "a.jsonl", tuple(A_RUNS)).read_bytes()
    b = make_recording(folder / "b.jsonl", tuple(B_RUNS)).read_bytes()
    return a, b


def lines_of(data: bytes) -> int:
    return data.count(b"\n")


def insert_line(data: bytes, after: int, line: bytes) -> bytes:
    """``line`` as line ``after + 1`` of ``data``."""
    parts = data.split(b"\n")
    return b"\n".join([*parts[:after], line, *parts[after:]])


def blob() -> bytes:
    """Binary data without a newline or a NUL: what a stray write of anything leaves."""
    return bytes(x for x in random.Random(7).randbytes(6000) if x not in (0, 10))


# name -> (file from (a, b), the line named, what it says, the session B is, A's session)
Damage = Callable[[bytes, bytes], bytes]
CASES: dict[str, tuple[Damage, Callable[[bytes], int], str, int]] = {
    "a half line, then an append on the same line": (
        lambda a, b: a[:-30] + b, lines_of,
        "half-written line (it stops before its end); session 2 starts on the same line, "
        "after it", 2),
    "a half line, then an append on the next line": (
        lambda a, b: a[:-30] + b"\n" + b, lines_of,
        "half-written line (it stops before its end); session 2 starts on line {next}", 2),
    "a run of NUL bytes, then an append": (
        lambda a, b: a + b"\0" * 4096 + b, lambda a: lines_of(a) + 1,
        "a run of NUL bytes (what a crash leaves on some filesystems); session 2 starts on "
        "the same line, after it", 2),
    "a binary blob": (
        lambda a, b: a + blob() + b"\n" + b, lambda a: lines_of(a) + 1,
        "not UTF-8 text: binary data, not a record; session 2 starts on line {next}", 2),
    "a JSON list where a record is": (
        lambda a, b: insert_line(a, 3, b"[1, 2, 3]") + b, lambda a: 4,
        "not a record: a JSON list, where a record is an object", 2),
    "invalid UTF-8 in a record": (
        lambda a, b: insert_line(a, 2, b'{"type":"event","t":0.0,"wall":1.0,"level":"info",'
                                       b'"text":"\xff\xfe"}') + b, lambda a: 3,
        "not UTF-8 text: binary data, not a record", 2),
    "an unknown record type": (
        lambda a, b: insert_line(a, 2, b'{"type":"hologram","t":0.0}') + b, lambda a: 3,
        "unknown record type 'hologram' (from a newer engram-top?)", 2),
    "a session of a future format between": (
        lambda a, b: a + b.replace(b'"format":1', b'"format":7', 1) + b,
        lambda a: lines_of(a) + 1,
        "session 2: recording format 7, from a newer engram-top: this engram-top reads "
        "format 1", 3),
}


def damaged_file(tmp_path: Path, pristine: tuple[bytes, bytes], case: str) -> \
        tuple[Path, int, str, int]:
    make, line_of, says, b_session = CASES[case]
    a, b = pristine
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(make(a, b))
    line = line_of(a)
    return path, line, says.format(next=line + 1), b_session


def end_state(path: Path | str, session: int | None = None,
              lazy: bool = False) -> dict[str, Any]:
    """What a session shows at its end: the run on screen and every run's figures."""
    replay = ReplaySession(path, paused=True, session=session, lazy=lazy)
    if lazy:
        replay.recording.load_all()
    replay.seek(replay.duration)
    store = replay.store
    return {"run": store.run.scenario if store.run else None,
            "ttft_ms": {n: f.results.to_json().get("ttft_mean_ms")
                        for n, f in store.history.items()}}


@pytest.mark.parametrize("case", list(CASES))
def test_every_whole_session_is_read_and_the_damage_named(
        pristine: tuple[bytes, bytes], tmp_path: Path, case: str) -> None:
    path, line, says, b_session = damaged_file(tmp_path, pristine, case)
    whole = {"run": "host", "ttft_ms": A_RUNS}
    for lazy in (False, True):  # the snapshot's whole read and the replay's
        assert end_state(path, 1, lazy) == whole
        assert end_state(path, None, lazy) == {"run": "host-prefetch", "ttft_ms": B_RUNS}
        assert end_state(path, b_session, lazy)["run"] == "host-prefetch"
    said = f"{path}:{line}: skipped: {says}" if "future" not in case else \
        f"{path}: 5 lines skipped: {line}-{line + 4} ({says})"
    # Said by whichever session is read when the damage is between sessions; by the one
    # holding it otherwise.
    session = None if "starts" in says or "session 2:" in says else 1
    for lazy in (False, True):
        replay = ReplaySession(path, paused=True, session=session, lazy=lazy)
        if lazy:
            replay.recording.load_all()
        assert f"{said}; the rest was read" in replay.notes, replay.notes
        assert any(said in e.text for e in replay.store.events)
    if "future" in case:
        with pytest.raises(RecordingError, match=f"{line}: session 2: recording format 7"):
            read_recording(path, session=2)


def test_snapshot_and_compare_of_a_damaged_file_say_it(
        pristine: tuple[bytes, bytes], tmp_path: Path, cli: Cli) -> None:
    """Through the real CLI: `snapshot --recording` says the skipped line on stderr and in
    its own files; --session 1 reaches the session before the damage; `compare` takes the
    runs of both sessions and says what it skipped."""
    path, line, says, _ = damaged_file(tmp_path, pristine,
                                       "a half line, then an append on the same line")
    said = f"{path}:{line}: skipped: {says}"
    for session, run, runs in ((None, "host-prefetch", B_RUNS), ("1", "host", A_RUNS)):
        out = tmp_path / f"snaps-{session}"
        res = cli.run("snapshot", "--recording", str(path), "--out", str(out),
                      *(["--session", session] if session else []))
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 0, res.stderr
        assert f"engram-top snapshot: {said}; the rest was read" in res.stderr.splitlines()
        folder = Path(res.stdout.strip())
        snap = strict_json(folder / "snapshot.json")
        assert snap["run"]["scenario"] == run
        assert {r["scenario"]: r["results"]["ttft_mean_ms"] for r in snap["runs"]} == runs
        assert f"{said}; the rest was read" in snap["notes"]
        summary = (folder / "summary.md").read_text()
        assert "## Notes" in summary and f"- {said}; the rest was read" in summary

    res = cli.run("compare", str(path), "--baseline", "device")
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert f"{said}; its runs were read from the rest" in res.stderr
    for name in (*A_RUNS, *B_RUNS):
        assert name in res.stdout

    # A dashboard's --compare-with: the runs of both sessions, and the skip on its events.
    from engram_top.cli import commands as cli_module
    from engram_top.cli.dashboards import dashboard_app
    args = cli_module.build_parser().parse_args(["replay", str(path), "--compare-with",
                                                 str(path)])
    replay = ReplaySession(path, paused=True)
    app = dashboard_app(replay, args)
    assert {r.scenario for r in app.compare_with} == {*A_RUNS, *B_RUNS}
    assert f"--compare-with: {said}; its runs were read from the rest" in \
        [e.text for e in replay.store.events]


async def test_the_replay_shows_the_session_after_the_damage_and_says_it(
        pristine: tuple[bytes, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`engram-top replay FILE --session 1` of a file whose first session ends in a half
    line glued to the next one's header: the dashboard plays session 1 and its events line
    names the line."""
    path, line, _, _ = damaged_file(tmp_path, pristine,
                                    "a half line, then an append on the same line")
    monkeypatch.chdir(tmp_path)  # the name as a user types it: the events line is narrow
    replay = ReplaySession(path.name, paused=True, session=1, lazy=True)
    app = EngramTopApp(replay, clock=replay.clock)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: f"{path.name}:{line}: skipped: half-written line"
                    in screen_text(app), 20, "the skipped line on the events line")
        await until(pilot, lambda: replay.read_fraction == 1, 20, "the session read")
        replay.seek(replay.duration)
        await until(pilot, lambda: replay.store.run is not None
                    and replay.store.run.scenario == "host", 20, "session 1's last run")
        assert f"{path.name}:{line}: skipped" in "\n".join(e.text for e in replay.store.events)
        await quit_app(app, pilot)


async def test_records_out_of_time_order_play_in_time_order(
        pristine: tuple[bytes, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose time is earlier than the one before it (a hand edit, a clock that
    went back): the whole read sorts it into place, the replay's thread hands it over late
    and the replay puts it in place and builds its store again; both say so."""
    monkeypatch.setattr(replay_file, "EAGER_LINES", 2)
    monkeypatch.setattr(replay_file, "CHUNK", 1)
    a, _ = pristine
    lines = a.split(b"\n")
    last = max(i for i, raw in enumerate(lines) if b'"type":"run"' in raw)
    record = json.loads(lines[last])
    record["t"] = 0.0
    lines[last] = json.dumps(record, separators=(",", ":")).encode()
    path = tmp_path / "disorder.jsonl"
    path.write_bytes(b"\n".join(lines))
    said = f"{path}: 1 record earlier than the one before (first on line {last + 1}): " \
           "played in time order"
    eager = ReplaySession(path, paused=True)
    assert said in eager.notes
    assert [r[0] for r in eager.recording.records] == sorted(r[0] for r in eager.recording.records)
    lazy = ReplaySession(path, paused=True, lazy=True)
    await lazy.start()
    try:
        lazy.seek(lazy.duration)  # applied: what it had read, then the rest as it comes
        await until(None, lambda: lazy.read_fraction == 1, 20, "the rest read")
        await until(None, lambda: any(said in e.text for e in lazy.store.events), 20,
                    "the disorder said")
        lazy.seek(lazy.duration)
        assert [r[:2] for r in lazy.recording.records] == [r[:2] for r in
                                                           eager.recording.records]
        eager.seek(eager.duration)
        assert lazy.store.run.scenario == eager.store.run.scenario
        assert {n: f.results for n, f in lazy.store.history.items()} == \
            {n: f.results for n, f in eager.store.history.items()}
    finally:
        await lazy.close()


def test_lines_before_the_first_header_are_skipped(pristine: tuple[bytes, bytes],
                                                   tmp_path: Path) -> None:
    """A session whose header is missing (the file's start lost): its records are outside
    any session, said as one range; the next session reads whole. Without any header the
    file is refused, named by its first line."""
    a, b = pristine
    headless = a.split(b"\n", 1)[1]
    path = tmp_path / "headless.jsonl"
    path.write_bytes(headless + b)
    n = lines_of(headless)
    rec = read_recording(path)
    assert rec.sessions == 1 and rec.header["type"] == "header"
    assert end_state(path) == {"run": "host-prefetch", "ttft_ms": B_RUNS}
    assert rec.notes() == [("warning", f"{path}: {n} lines skipped: 1-{n} (before the first "
                                       "session's header: not part of a session); the rest "
                                       "was read")]
    alone = tmp_path / "no-header.jsonl"
    alone.write_bytes(headless)
    with pytest.raises(RecordingError, match=r"no-header.jsonl:1: not an engram-top "
                                             r"recording \(no header line\)"):
        read_recording(alone)


@pytest.mark.parametrize("what", ["empty", "blank", "folder", "pipe", "binary", "missing"])
def test_what_is_no_recording_is_refused_clearly(tmp_path: Path, cli: Cli, what: str) -> None:
    path = tmp_path / f"{what}.jsonl"
    says = {"empty": f"{path}: empty: not an engram-top recording",
            "blank": f"{path}:4: not a record: a JSON list, where a record is an object",
            "folder": f"{path}: a folder, not a recording file",
            "pipe": f"{path}: not a regular file (a pipe or a device)",
            "binary": f"{path}:1: not UTF-8 text: binary data, not a record",
            "missing": f"{path}: cannot read: No such file or directory"}[what]
    if what == "empty":
        path.write_bytes(b"")
    elif what == "blank":
        path.write_bytes(b"\n  \n\n[]\n")
    elif what == "folder":
        path.mkdir()
    elif what == "pipe":
        os.mkfifo(path)
    elif what == "binary":
        path.write_bytes(blob())
    for command in (["replay", str(path)],
                    ["snapshot", "--recording", str(path), "--out", str(tmp_path / "s")]):
        res = cli.run(*command, timeout=30)
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 2, res.stdout + res.stderr
        assert says in res.stderr, res.stderr
    assert not list((tmp_path / "s").glob("*")), "a snapshot of nothing was written"


MEASURE = """
import resource, sys
from engram_top.cli.commands import main
code = main(sys.argv[1:])
print("maxrss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""


def _snapshot_rss(cli: Cli, path: Path, out: Path) -> tuple[Any, int]:
    import subprocess
    res = subprocess.run([sys.executable, "-c", MEASURE, "snapshot", "--recording", str(path),
                          "--out", str(out)], capture_output=True, text=True, timeout=120,
                         env=cli.env, cwd=cli.tmp)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    rss = int(res.stderr.rsplit("maxrss_kib", 1)[1].split()[0])
    return res, rss


def test_a_hundred_megabytes_of_damage_is_read_in_bounded_memory(
        pristine: tuple[bytes, bytes], tmp_path: Path, cli: Cli) -> None:
    """100 MB of NUL bytes a crash left, then the next session: the snapshot reads the
    session after it without holding the file (a whole read would hold it twice over)."""
    a, b = pristine
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(a + b)
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.write(a)
        for _ in range(100):
            f.write(b"\0" * (1 << 20))
        f.write(b)
    assert big.stat().st_size > 100 * (1 << 20)
    _, base = _snapshot_rss(cli, plain, tmp_path / "s1")
    res, rss = _snapshot_rss(cli, big, tmp_path / "s2")
    line = lines_of(a) + 1
    assert f"{big}:{line}: skipped: a run of NUL bytes (what a crash leaves on some " \
           "filesystems); session 2 starts on the same line, after it" in res.stderr
    snap = strict_json(Path(res.stdout.strip()) / "snapshot.json")
    assert snap["run"]["scenario"] == "host-prefetch"
    assert rss - base < 48 * 1024, f"{(rss - base) / 1024:.0f} MiB more than the plain file"
    assert end_state(big, 1) == {"run": "host", "ttft_ms": A_RUNS}


def shaped_recording(path: Path) -> Path:
    """A recording whose run carries start-up facts and an Engram reading, and a load:
    what the panels read, typed in the store and decoded from the file."""
    import time

    from collectors.engram_setting import EngramSetting
    from collectors.startup_facts import EngramTable, RankFacts, StartupFacts
    from engram_top.model.store import RunFacts, RunStore
    from engram_top.record.recorder import Recorder
    store = RunStore()
    recorder = Recorder(store, path).start()
    table = EngramTable(label="L14", layout="shared", resident_mib=2048.0, huge_mib=2048.0,
                        huge_pct=100.0, pinned=True)
    facts = RunFacts(scenario="host", placement="host", node="n", time_scale=1.0,
                     launched_wall=time.time(), launched_at=time.monotonic(), state="ready",
                     ready_at=time.monotonic(),
                     startup=StartupFacts(
                         ranks={0: RankFacts(rank=0, weights_gb=71.5, kv_tokens=1000)},
                         engram_tables=(table,), startup_timings_s={"weights": 12.5}),
                     engram=EngramSetting("host", "shared", True, "log", "off", ("x",)))
    store.set_run(facts)
    store.load = {"concurrency": 2, "sent": 4, "completed": 3, "failed": 1,
                  "output_tokens": 96, "last_error": "", "good": 3, "slo": [], "node_s": 2.0}
    recorder.sample()
    store.event("info", "an event of the session")
    recorder.close()
    return path


@pytest.mark.parametrize(("where", "value", "says"), [
    (("facts", "startup", "ranks", "0"), 5,
     "run.facts.startup.ranks['0']: expected an object, got int"),
    (("facts", "startup", "engram_tables", 0, "resident_mib"), "lots",
     "run.facts.startup.engram_tables[0].resident_mib: expected float, got str 'lots'"),
    (("facts", "startup", "startup_timings_s", "weights"), [1, "x"],
     "run.facts.startup.startup_timings_s['weights']: expected float, got list [1, 'x']"),
    (("facts", "engram", "reasons"), 7, "run.facts.engram.reasons: expected a list, got int"),
    (("load", "completed"), "many", "load.completed: expected a whole number, got 'many'"),
    (("load",), {"$tuple": [1, 2]}, "load: expected an object"),
    (("wall",), 1e18, "event.wall: 1e+18 is not a time of day (a date past the year 9999, "
                      "or before 1970)"),
])
def test_a_record_of_the_wrong_shape_is_skipped_before_a_panel_reads_it(
        tmp_path: Path, where: tuple[str | int, ...], value: Any, says: str) -> None:
    """A value of the wrong shape deep in a record's free-form data (start-up facts, the
    Engram reading, the load's counters) is named and its line skipped: it never reaches a
    panel, which reads them by shape."""
    from engram_top.app import panels
    from engram_top.export import snapshot
    from engram_top.seed import reference
    path = shaped_recording(tmp_path / "shaped.jsonl")
    lines = path.read_text().splitlines()
    kind = {"load": "load", "wall": "event"}.get(where[0], "run")
    at = max(i for i, line in enumerate(lines) if f'"type":"{kind}"' in line)
    record = json.loads(lines[at])
    target = record
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    lines[at] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    replay = ReplaySession(path, paused=True)
    assert f"{path}:{at + 1}: skipped: {says}; the rest was read" in replay.notes
    replay.seek(replay.duration)
    snapshot.snapshot_data(replay.store, reference.default(), None)
    for panel in (panels.kv_panel, panels.host_panel, panels.latency_panel,
                  panels.hbm_panel, panels.engram_rows):
        panel(replay.store)
