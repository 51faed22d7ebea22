"""The commands that open the dashboard (demo, run, attach, replay), each over its session;
a live one is recorded unless --no-record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_top.cli.lifetime import (
    run_dashboard,
    say,
    without_terminal,
)
from engram_top.cli.sessions import (
    demo_options,
    history_behind,
    load_probe,
    say_which_credential,
    session_options,
)
from engram_top.settings.paths import state_base

if TYPE_CHECKING:  # the app's modules (Textual) load only for a command that draws
    from engram_top.app.main import EngramTopApp
    from engram_top.app.sessions import DashboardSession


def run_demo(args: argparse.Namespace) -> int:
    from engram_top.live.demo import DemoSession
    app = dashboard_app(DemoSession(demo_options(args)), args)
    if app is None or without_terminal(app.session, args.command):
        return 2
    return run_recorded(app, args, None)


def dashboard_app(session: DashboardSession, args: argparse.Namespace,
                  **kw: Any) -> EngramTopApp | None:
    """The dashboard over a session, with the options every dashboard command takes; None
    (and the reason on stderr) when a --compare-with file cannot be read."""
    from engram_top.app.main import EngramTopApp
    from engram_top.probe.report import ProbeFileError
    from engram_top.settings.user_config import load_config
    runs = []
    if args.compare_with:  # the file readers (and the recording's) only when asked for
        from engram_top.compare.runs import from_file
        from engram_top.record.importers import BenchFileError, load_runs
        notes: list[str] = []
        try:
            # Each file's runs name it: their own columns, apart from the live runs'.
            runs = [r for path in args.compare_with
                    for r in from_file(load_runs(path, notes=notes), path)]
        except BenchFileError as exc:
            print(f"engram-top: --compare-with: {exc}", file=sys.stderr)
            return None
        for note in notes:  # a recording's lines skipped: said where the user looks
            session.store.event("warning", f"--compare-with: {note}")
    try:
        probe = load_probe(args.probe)
    except ProbeFileError as exc:
        print(f"engram-top: --probe: {exc}", file=sys.stderr)
        return None
    config, error = load_config(args.config)
    return EngramTopApp(session, compare_with=runs, price_per_gpu_hour=args.price_per_gpu_hour,
                        config=config, config_error=error, snapshot_dir=args.snapshot_dir,
                        own_process=True, probe=probe, **kw)


def run_recorded(app: EngramTopApp, args: argparse.Namespace,
                 state_dir: Path | None) -> int:
    """Run the dashboard; its session is recorded unless --no-record."""
    recorder = None
    if not args.no_record:
        # With its redaction's patterns: ~9 ms of a start, so only when recording.
        from engram_top.record import recorder as recording
        path = args.record or recording.default_path(state_dir)
        if args.record is not None:
            path = recording.fresh_path(path)  # one session per file, never appended
        # A default folder is kept within the config's [recordings] retain; what a user
        # asked for with --record is never touched.
        keep = app.config.recordings if args.record is None else None
        recorder = recording.Recorder(app.session.store, path, keep=keep,
                                      keep_files=recording.KEEP_RECORDINGS).start()
        if recorder.active:
            moved = "" if path == args.record or args.record is None else \
                f" ({args.record} already holds a recording)"
            app.session.store.event("info", f"recording to {path}{moved}")
    try:
        return run_dashboard(app, state_dir or state_base())
    finally:
        if recorder is not None:
            recorder.close()
            say(f"engram-top: recording stopped: {recorder.path}: {recorder.error}"
                if recorder.error else f"engram-top: recorded to {recorder.path}")


def run_replay(args: argparse.Namespace) -> int:
    from engram_top.record.file_format import RecordingError
    from engram_top.record.replay import ReplaySession
    try:
        # Open at once; the rest is read while it plays.
        session = ReplaySession(args.path, speed=args.speed, paused=args.paused,
                                session=args.session, lazy=True)
    except RecordingError as exc:
        print(f"engram-top replay: {exc}", file=sys.stderr)
        return 2
    app = dashboard_app(session, args, clock=session.clock)
    if app is None or without_terminal(session, args.command):
        return 2
    return run_dashboard(app, state_base())


def run_file(args: argparse.Namespace) -> int:
    from engram_top.live.session import Session
    options = session_options(args, start=args.start, leave_running=args.leave_running)
    if options is None:
        return 2
    session = Session(options)
    names = session.scenarios.scenarios if session.scenarios is not None else {}
    if args.start is not None and args.start not in names:
        known = ", ".join(names)
        print(f"engram-top: --start: no scenario '{args.start}' in {options.scenario_file} "
              f"(known: {known})", file=sys.stderr)
        return 2
    lock = session.state_lock
    try:
        acquired = lock is None or lock.try_acquire()
    except OSError as exc:
        print(f"engram-top: cannot use the state folder {options.state_dir}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    if not acquired and lock is not None:  # said now, not inside the dashboard
        print(f"engram-top: {lock.busy_error()}", file=sys.stderr)
        return 2
    app = dashboard_app(session, args)
    if app is None:
        session.close_now()
        return 2
    if without_terminal(session, args.command):
        return 2
    return run_recorded(app, args, options.state_dir)


def run_attach(args: argparse.Namespace) -> int:
    from engram_top.live.attach_node import node_dir_problem
    from engram_top.live.session import Session, SessionOptions
    if args.node_dir is not None and (problem := node_dir_problem(args.node_dir)):
        print(f"engram-top: --node-dir {problem}", file=sys.stderr)
        return 2
    session = Session(SessionOptions(attach=tuple(args.urls), api_key=args.api_key,
                                     engine=args.engine, load=None, node_dir=args.node_dir))
    say_which_credential(session, args.urls, args.api_key)
    history_behind(session, args.urls)  # what an agent on this node recorded
    app = dashboard_app(session, args)
    if app is None or without_terminal(app.session, args.command):
        return 2
    return run_recorded(app, args, None)

