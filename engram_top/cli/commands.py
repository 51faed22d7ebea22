"""engram-top's command line. With no arguments it opens the demo: the live dashboard of a
simulated 4x B200 node serving DeepSeek-V4.1-Flash."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

from engram_top.cli.lifetime import (
    run_dashboard,
    run_until_signal,
    say,
    without_terminal,
    write_crash_report,
)
from engram_top.cli.output import visible_output
from engram_top.cli.ranges import (
    AFTER_S,
    AT_S,
    CONCURRENCY,
    GPUS,
    INTERVAL_S,
    NODES,
    PRICE,
    READY_TIMEOUT_S,
    SERVE_SCALE,
    SESSION,
    SPEED,
    TIME_SCALE,
    WINDOW,
)
from engram_top.seed import reference
from engram_top.settings.paths import state_base

DEFAULT_TIME_SCALE = 0.1  # the device placement is ready in 12.5 s instead of 125 s


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--placement", choices=reference.PLACEMENTS, default="device",
                   help="where the Engram tables live (default: device)")
    p.add_argument("--time-scale", type=TIME_SCALE, default=DEFAULT_TIME_SCALE,
                   help=f"scale of the start-up phases (default {DEFAULT_TIME_SCALE}: 10x faster)")
    p.add_argument("--serve-scale", type=SERVE_SCALE, default=1.0,
                   help="scale of request service times (default 1: node time)")
    p.add_argument("--concurrency", type=CONCURRENCY, default=8,
                   help="demo load: streams in flight (1 to 1024)")
    p.add_argument("--no-load", action="store_true", help="start no synthetic load")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engram-top",
        description="Where should DeepSeek-V4.1-Flash's Engram tables live? Watch HBM, the KV "
                    "pool, host RAM and latency of SGLang placements. With no command: the demo.")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="live dashboard of the simulated node (the default)")
    _demo_arguments(demo)
    _record_arguments(demo)
    _dashboard_arguments(demo)

    snap = sub.add_parser("snapshot", help="write a snapshot folder without a terminal: "
                                           "screen.svg, snapshot.json, timeseries, summary.md")
    # Where the readings come from: one of the three.
    source = snap.add_mutually_exclusive_group(required=True)
    source.add_argument("--demo", action="store_true",
                        help="take it from the simulated node")
    source.add_argument("--attach", metavar="URL", default=None,
                        help="take it from a running SGLang server (never stopped)")
    source.add_argument("--recording", type=Path, metavar="PATH", default=None,
                        help="take it from a recording, at --at seconds (default: its end)")
    source.add_argument("--fleet-demo", action="store_true",
                        help="take it from --nodes simulated nodes through a real Prometheus "
                             "(its snapshot.json has a `nodes` list)")
    snap.add_argument("--nodes", type=NODES, default=8, metavar="N",
                      help="with --fleet-demo: how many simulated nodes (default 8)")
    snap.add_argument("--at", type=AT_S, default=None, metavar="S",
                      help="with --recording: the moment, in seconds from its start")
    snap.add_argument("--session", type=SESSION, default=None, metavar="N",
                      help="with --recording: which session of the file (default: the last)")
    snap.add_argument("--api-key", default=None,
                      help="with --attach: the server's key (default: $ENGRAM_TOP_API_KEY)")
    _engine_argument(snap, "with --attach: the engine the server runs", detected=True)
    _demo_arguments(snap)
    snap.add_argument("--after", type=AFTER_S, default=5.0,
                      help="seconds to keep watching after the server is ready (default 5)")
    snap.add_argument("--ready-timeout", type=READY_TIMEOUT_S, default=None,
                      help="give up if not ready by then (default: 3x the expected start-up)")
    snap.add_argument("--out", type=Path, default=Path("snapshots"),
                      help="the snapshot folder is made under this one (default: ./snapshots)")

    fl = sub.add_parser("fleet", help="many nodes through Prometheus: placement, HBM, KV, host "
                                      "RAM, latency and alerts, a row per node")
    where = fl.add_mutually_exclusive_group(required=True)
    where.add_argument("--prometheus", metavar="URL", default=None,
                       help="a Prometheus (or anything speaking its query API) that scrapes "
                            "dcgm-exporter, node-exporter and SGLang's /metrics")
    where.add_argument("--demo", action="store_true",
                       help="start --nodes simulated nodes and a real Prometheus scraping them")
    fl.add_argument("--nodes", type=NODES, default=8, metavar="N",
                    help="with --demo: how many simulated nodes (default 8)")
    fl.add_argument("--interval", type=INTERVAL_S, default=5.0, metavar="S",
                    help="seconds between refreshes, 1 to 86400 (default 5)")
    fl.add_argument("--window", type=WINDOW, default=None, metavar="RANGE",
                    help="PromQL range of the latency and throughput rates (default 1m; "
                         "with --demo 20s)")
    fl.add_argument("--prometheus-token-file", type=Path, default=None, metavar="PATH",
                    help="send the token on this file's first line as a bearer token "
                         "(default: $ENGRAM_TOP_PROMETHEUS_TOKEN; a URL's user:password@ is "
                         "basic auth, its password may come from "
                         "$ENGRAM_TOP_PROMETHEUS_PASSWORD)")
    fl.add_argument("--config", type=Path, default=None, metavar="PATH",
                    help="the config file whose [alerts] thresholds apply")

    run = sub.add_parser("run", help="the dashboard over a scenario file: start, stop, switch")
    run.add_argument("scenario_file", type=Path)
    run.add_argument("--start", metavar="NAME", help="start this scenario right away")
    run.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    run.add_argument("--leave-running", action="store_true",
                     help="on quit, leave the server running (a later run or switch finds it)")
    run.add_argument("--no-load", action="store_true", help="start no synthetic load")
    run.add_argument("--concurrency", type=CONCURRENCY, default=8,
                     help="load: streams in flight (1 to 1024)")
    _record_arguments(run)
    _dashboard_arguments(run)

    att = sub.add_parser("attach", help="watch servers someone else started (never stops them)")
    att.add_argument("urls", nargs="+", metavar="URL")
    _engine_argument(att, "the engine the servers run", detected=True)
    att.add_argument("--api-key", default=None,
                     help="for servers started with --api-key (default: $ENGRAM_TOP_API_KEY, "
                          "which, unlike this option, `ps` does not show)")
    _record_arguments(att)
    _dashboard_arguments(att)

    rp = sub.add_parser("replay", help="play a recording in the dashboard (play, pause, seek, "
                                       "speed); no node needed")
    rp.add_argument("path", type=Path, metavar="PATH")
    rp.add_argument("--speed", type=SPEED, default=1.0, help="0.25 to 16 (default 1)")
    rp.add_argument("--paused", action="store_true", help="open paused at the start")
    rp.add_argument("--session", type=SESSION, default=None, metavar="N",
                    help="for a file that holds several sessions: play the Nth "
                         "(default: the last)")
    _dashboard_arguments(rp)

    sw = sub.add_parser("switch", help="headless: stop the file's running server, wait for "
                                       "its HBM to return, start another (left running)")
    sw.add_argument("scenario_file", type=Path)
    sw.add_argument("--to", required=True, metavar="NAME",
                    help="the scenario (a [scenarios.NAME] table of the file) to start")
    sw.add_argument("--wait-ready", action="store_true",
                    help="wait until it is ready; exit 1 if it fails")
    sw.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)

    bench = sub.add_parser("bench", help="headless: the controlled benchmark of a plan file; "
                                         "writes report.md, report.json, requests.csv")
    bench.add_argument("plan", type=Path)
    bench.add_argument("--out", type=Path, required=True,
                       help="folder for report.md, report.json and requests.csv (nothing "
                            "else goes there)")
    bench.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)

    cmp_ = sub.add_parser("compare", help="the seed-style comparison of runs from bench reports "
                                          "(report.json) and sglang.bench_serving files (.jsonl)")
    cmp_.add_argument("files", type=Path, nargs="+")
    cmp_.add_argument("--baseline", required=True, help="the scenario the others are compared to")
    cmp_.add_argument("--price-per-gpu-hour", type=PRICE, default=None)
    cmp_.add_argument("--gpus", type=GPUS, default=None,
                      help="GPUs of the imported bench_serving runs (for the cost row)")
    cmp_.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    _probe_argument(cmp_)

    pr = sub.add_parser("probe", help="time what each Engram placement costs per decode step "
                                      "on this machine's GPU (needs torch); writes probe.json "
                                      "and probe.md")
    from engram_top.probe import gpu as probe
    probe.add_arguments(pr)

    stop = sub.add_parser("stop", help="headless: stop the server a scenario file's run or "
                                       "switch left running")
    stop.add_argument("scenario_file", type=Path)
    stop.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)

    log = sub.add_parser("inspect-log", help="print what the startup-log parser extracts, as JSON")
    log.add_argument("file", type=Path)
    _engine_argument(log, "the engine whose log it is")
    met = sub.add_parser("inspect-metrics",
                         help="print what the metrics parser extracts from a page or URL, as JSON")
    met.add_argument("source", help="a file with a /metrics page, or an http:// URL")
    _engine_argument(met, "the engine whose page it is")

    sim = sub.add_parser("sim", help="the simulated node")
    simsub = sim.add_subparsers(dest="sim_command", required=True)
    from engram_top.sim import options
    options.add_arguments(simsub.add_parser(
        "serve", help="run one simulated server (SGLang's dialect, or vLLM's)"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # What a command prints quotes servers, labels and files: every line goes out with its
    # controls made visible (a simulated server's own log, `sim`, is written as it is).
    with contextlib.nullcontext() if argv[:1] == ["sim"] else visible_output():
        try:
            return _main(argv)
        except KeyboardInterrupt:  # before or after a command's own handling: no traceback
            say("engram-top: interrupted")
            return 130
        except BrokenPipeError:
            # Whoever read our output has gone (`| head`): nothing left to say to anyone.
            # The descriptor goes to /dev/null, or Python's exit would flush it again.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        except Exception as exc:  # a bug, or a fault no message was written for yet
            where = write_crash_report(None, exc)
            say(f"engram-top: internal error: {type(exc).__name__}: {exc}"
                + (f". Details: {where}" if where else ""))
            return 1


def _main(argv: list[str]) -> int:
    parser = build_parser()
    # No command is the demo, options included: `engram-top --no-record` is the demo's.
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["demo", *argv]
    args = parser.parse_args(argv)
    from engram_top.cli.credentials import check_args
    problem = check_args(args)
    if problem:
        print(f"engram-top {args.command}: {problem}", file=sys.stderr)
        return 2
    if getattr(args, "engine", None) is not None:
        from scenarios import engines
        try:
            engines.get(args.engine)
        except engines.EngineError as exc:
            parser.exit(2, f"engram-top {args.command}: --engine: {exc}\n")
    if args.command == "sim":
        from engram_top.sim import server
        return server.main(args=args)
    if args.command == "demo":
        return run_demo(args)
    if args.command == "snapshot" and args.fleet_demo:
        from engram_top.cli.fleet import take_fleet_snapshot
        return run_until_signal(lambda: take_fleet_snapshot(args), "snapshot")
    if args.command == "snapshot":
        return run_until_signal(lambda: take_snapshot(args), "snapshot")
    if args.command == "fleet":
        from engram_top.cli.fleet import run_fleet
        return run_fleet(args)
    if args.command == "run":
        return run_file(args)
    if args.command == "attach":
        return run_attach(args)
    if args.command == "switch":
        return run_until_signal(lambda: switch(args), "switch")
    if args.command == "stop":
        return run_until_signal(lambda: stop(args), "stop")
    if args.command == "bench":
        return run_until_signal(lambda: bench(args), "bench")
    if args.command == "compare":
        return compare_files(args)
    if args.command == "probe":
        from engram_top.probe import gpu as probe
        return probe.run(args)
    if args.command == "inspect-log":
        return inspect_log(args.file, args.engine)
    if args.command == "inspect-metrics":
        return inspect_metrics(args.source, args.engine)
    if args.command == "replay":
        return run_replay(args)
    parser.print_help()
    return 2


def _options(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from engram_top.live.session import DemoOptions, LoadSpec
    load = None if args.no_load else LoadSpec(concurrency=args.concurrency)
    return DemoOptions(placement=args.placement, time_scale=args.time_scale,
                       serve_scale=args.serve_scale, load=load)


def run_demo(args: argparse.Namespace) -> int:
    from engram_top.live.session import DemoSession
    app = _app(DemoSession(_options(args)), args)
    if app is None or without_terminal(app.session, args.command):
        return 2
    return _run_recorded(app, args, None)


# --------------------------------------------------------------------------- recording, replay


def _dashboard_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compare-with", type=Path, nargs="+", default=[], metavar="FILE",
                   help="runs for the comparison screen from recordings, bench reports "
                        "(report.json) or sglang.bench_serving files (.jsonl)")
    p.add_argument("--price-per-gpu-hour", type=PRICE, default=None, metavar="P",
                   help="adds cost per million output tokens to the comparison")
    p.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="the config file (default: $ENGRAM_TOP_CONFIG, else "
                        "~/.config/engram-top/config.toml)")
    p.add_argument("--snapshot-dir", type=Path, default=Path("snapshots"), metavar="DIR",
                   help="where the s key writes snapshot folders (default: ./snapshots)")
    _probe_argument(p)


def _probe_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", type=Path, default=None, metavar="PROBE_JSON",
                   help="adds a column of the TPOT changes an `engram-top probe` predicted "
                        "(its probe.json) beside the measured runs")


def _load_probe(path: Path | None):  # type: ignore[no-untyped-def]
    """The --probe file's predictions; None without one. Raises ProbeFileError."""
    from engram_top.probe.report import load_probe
    return None if path is None else load_probe(path)


def _app(session, args: argparse.Namespace, **kw):  # type: ignore[no-untyped-def]
    """The dashboard over a session, with the options every dashboard command takes; None
    (and the reason on stderr) when a --compare-with file cannot be read."""
    from engram_top.app.main import EngramTopApp
    from engram_top.probe.report import ProbeFileError
    from engram_top.settings.user_config import load_config
    runs = []
    if args.compare_with:  # the file readers (and the recording's) only when asked for
        from engram_top.record.importers import BenchFileError, load_runs
        notes: list[str] = []
        try:
            runs = [r for path in args.compare_with for r in load_runs(path, notes=notes)]
        except BenchFileError as exc:
            print(f"engram-top: --compare-with: {exc}", file=sys.stderr)
            return None
        for note in notes:  # a recording's lines skipped: said where the user looks
            session.store.event("warning", f"--compare-with: {note}")
    try:
        probe = _load_probe(args.probe)
    except ProbeFileError as exc:
        print(f"engram-top: --probe: {exc}", file=sys.stderr)
        return None
    config, error = load_config(args.config)
    return EngramTopApp(session, compare_with=runs, price_per_gpu_hour=args.price_per_gpu_hour,
                        config=config, config_error=error, snapshot_dir=args.snapshot_dir,
                        own_process=True, probe=probe, **kw)


STATE_DIR_HELP = ("the scenario file's state folder: server logs, start-up history, the "
                  "server left running, its lock (default: one per file, under "
                  "$XDG_STATE_HOME/engram-top, by default ~/.local/state/engram-top)")


def _record_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", type=Path, default=None, metavar="PATH",
                   help="record readings and events to this JSON-lines file (default: a new "
                        "file in recordings/ of the scenario file's state folder for run, of "
                        "$XDG_STATE_HOME/engram-top, by default ~/.local/state/engram-top, "
                        "for demo and attach; the newest 50 are kept)")
    p.add_argument("--no-record", action="store_true", help="record nothing")


def _run_recorded(app, args: argparse.Namespace,  # type: ignore[no-untyped-def]
                  state_dir: Path | None) -> int:
    """Run the dashboard; its session is recorded (issue 5) unless --no-record."""
    recorder = None
    if not args.no_record:
        # With its redaction's patterns: ~9 ms of a start, so only when recording.
        from engram_top.record import recorder as recording
        path = args.record or recording.default_path(state_dir)
        if args.record is None:
            recording.prune(path.parent, recording.KEEP_RECORDINGS - 1)
        else:
            path = recording.fresh_path(path)  # one session per file, never appended
        recorder = recording.Recorder(app.session.store, path).start()
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
    app = _app(session, args, clock=session.clock)
    if app is None or without_terminal(session, args.command):
        return 2
    return run_dashboard(app, state_base())


def user_thresholds():  # type: ignore[no-untyped-def]
    """The alert thresholds of the user's config file, for a command without a dashboard
    (which reads it itself and shows a broken one as an event); a broken file is said."""
    from engram_top.settings.user_config import load_config
    config, error = load_config()
    if error:
        say(f"engram-top: warning: alerts use the default thresholds: {error}")
    return config.alerts


def _session_options(args: argparse.Namespace, *, headless: bool = False,
                     **extra):  # type: ignore[no-untyped-def]
    """Options for a session over a scenario file; a bad file ends here with its message.
    A bench plan stands for its scenario file (`stop PLAN` stops what its bench left)."""
    from engram_top.live.session import LoadSpec, SessionOptions
    from engram_top.settings.paths import default_state_dir
    from scenarios import scenario_file as config
    path = _scenario_file_of(args.scenario_file)
    try:
        sf = config.load(path)
    except config.ScenarioError as exc:
        print(f"engram-top: {exc}", file=sys.stderr)
        return None
    if headless:  # a dashboard shows them as events instead, and reads its own config
        for warning in sf.warnings:
            say(f"engram-top: warning: {warning}")
        extra["thresholds"] = user_thresholds()
    state_dir = args.state_dir or default_state_dir(path)
    load = None if getattr(args, "no_load", True) else LoadSpec(
        concurrency=getattr(args, "concurrency", 8))
    return SessionOptions(scenario_file=path, state_dir=state_dir, load=load, **extra)


def _scenario_file_of(path: Path) -> Path:
    """A bench plan's scenarios_file; any other file as it is (the loader judges it)."""
    import tomllib

    from scenarios.bounds import read_toml
    try:
        raw = read_toml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return path
    bench = raw.get("bench")
    if isinstance(bench, dict) and isinstance(bench.get("scenarios_file"), str) \
            and "scenarios" in bench and "workload" in raw:
        return (path.parent / bench["scenarios_file"]).resolve()
    return path


def run_file(args: argparse.Namespace) -> int:
    from engram_top.live.session import Session
    options = _session_options(args, start=args.start, leave_running=args.leave_running)
    if options is None:
        return 2
    session = Session(options)
    if args.start is not None and args.start not in session.scenarios.scenarios:
        known = ", ".join(session.scenarios.scenarios)
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
    if not acquired:  # said now, not inside the dashboard
        print(f"engram-top: {lock.busy_error()}", file=sys.stderr)  # type: ignore[union-attr]
        return 2
    app = _app(session, args)
    if app is None:
        session.close_now()
        return 2
    if without_terminal(session, args.command):
        return 2
    return _run_recorded(app, args, options.state_dir)


def run_attach(args: argparse.Namespace) -> int:
    from engram_top.live.session import Session, SessionOptions
    session = Session(SessionOptions(attach=tuple(args.urls), api_key=args.api_key,
                                     engine=args.engine, load=None))
    _say_which_credential(session, args.urls, args.api_key)
    app = _app(session, args)
    if app is None or without_terminal(app.session, args.command):
        return 2
    return _run_recorded(app, args, None)


def _say_which_credential(session, urls, key: str | None) -> None:  # type: ignore[no-untyped-def]
    """An attached URL with user:password@ and an API key: the events line says the key is
    what is sent."""
    from engram_top.cli.credentials import attach_note
    for url in urls:
        if (note := attach_note(url, key)) is not None:
            session.store.event("warning", note)


LOCK_WAIT_S = 600.0  # how long a headless command waits for another one on the same file


async def switch(args: argparse.Namespace) -> int:
    """Stop whatever this file's state folder says is running, then start --to; leave it.
    Interrupted before it is done (a signal), it stops what it started instead."""
    from engram_top.live.session import Session
    from scenarios.statelock import StateBusy
    from scenarios.supervisor import SupervisorError
    options = _session_options(args, headless=True, leave_running=True, poll_interval=2.0,
                               command="switch", lock_wait_s=LOCK_WAIT_S)
    if options is None:
        return 2
    session = Session(options)
    if args.to not in session.scenarios.scenarios:
        known = ", ".join(session.scenarios.scenarios)
        print(f"engram-top switch: --to: no scenario '{args.to}' in {options.scenario_file} "
              f"(known: {known})", file=sys.stderr)
        return 2
    session.announce = lambda text: say(f"engram-top switch: {text}")
    # Alerts as the session raises them (the user's thresholds), as a dashboard would toast.
    session.alerts.listeners.append(
        lambda c: say(f"engram-top switch: alert: {c.alert.message}")
        if c.change == "raised" else None)
    code = 0
    leave = True
    try:
        await session.start()
        run = await session.switch(args.to)
        print(f"started {run.scenario.name} (pid {run.pid}) on {run.scenario.url}; "
              f"log: {run.log_path}", flush=True)
        if args.wait_ready:
            ok = await session.supervisor.wait_ready(run)
            if ok:
                print(f"{run.scenario.name} ready after {run.ready_s:.1f} s")
            else:
                print(f"engram-top switch: {run.scenario.name} did not become ready: "
                      f"{run.failure or run.state}; log: {run.log_path}", file=sys.stderr)
                code = 1
    except (SupervisorError, StateBusy) as exc:
        print(f"engram-top switch: {exc}", file=sys.stderr)
        code = 1
    except asyncio.CancelledError:
        leave = False  # a signal: take back what this switch started
        raise
    finally:
        await session.close(leave_running=leave)
    return code


async def bench(args: argparse.Namespace) -> int:
    from engram_top.bench import runner
    from engram_top.export import snapshot
    from scenarios.statelock import StateBusy
    from scenarios.supervisor import SupervisorError
    try:
        plan = runner.load_plan(args.plan)
        snapshot.check_writable(args.out)
    except (runner.PlanError, snapshot.SnapshotError) as exc:
        print(f"engram-top bench: {exc}", file=sys.stderr)
        return 2
    try:
        report = await runner.run_bench(plan, args.out, state_dir=args.state_dir,
                                        thresholds=user_thresholds(),
                                        lock_wait_s=LOCK_WAIT_S)
    except (SupervisorError, StateBusy) as exc:
        print(f"engram-top bench: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out / 'report.md'}, report.json, requests.csv")
    failed = [r for r in report["results"] if not r.get("completed")]
    return 1 if failed else 0


def compare_files(args: argparse.Namespace) -> int:
    from engram_top.compare.comparison import compare, to_json, to_markdown
    from engram_top.probe.report import ProbeFileError
    from engram_top.record.importers import BenchFileError, load_runs, report_price
    notes: list[str] = []
    try:
        results = [r for path in args.files
                   for r in load_runs(path, gpus=args.gpus, notes=notes)]
        probe = _load_probe(args.probe)
    except (BenchFileError, ProbeFileError) as exc:
        print(f"engram-top compare: {exc}", file=sys.stderr)
        return 2
    for note in notes:  # a recording's lines skipped: the comparison is of the rest
        print(f"engram-top compare: {note}", file=sys.stderr)
    if args.baseline not in {r.scenario for r in results}:
        known = ", ".join(sorted({r.scenario for r in results}))
        print(f"engram-top compare: no runs of '{args.baseline}' (runs: {known})",
              file=sys.stderr)
        return 2
    price = args.price_per_gpu_hour
    if price is None:  # the price the bench reports were written with, if they agree
        prices = {p for path in args.files if (p := report_price(path)) is not None}
        if len(prices) > 1:
            shown = ", ".join(f"{p:g}" for p in sorted(prices))
            print(f"engram-top compare: the reports were priced differently ({shown} per "
                  "GPU-hour): give --price-per-gpu-hour", file=sys.stderr)
            return 2
        price = prices.pop() if prices else None
    c = compare(results, args.baseline, price_per_gpu_hour=price,
                reference=reference.default(), probe=probe)
    if args.json:
        _print_json(to_json(c))
    else:
        print(to_markdown(c))
    return 0


async def stop(args: argparse.Namespace) -> int:
    from engram_top.live.session import Session
    from scenarios.statelock import StateBusy
    from scenarios.supervisor import SupervisorError
    options = _session_options(args, headless=True, poll_interval=2.0, command="stop",
                               lock_wait_s=LOCK_WAIT_S)
    if options is None:
        return 2
    session = Session(options)
    session.announce = lambda text: say(f"engram-top stop: {text}")
    try:
        try:
            await session.start()  # finds the server left running, if any
        except (StateBusy, SupervisorError) as exc:
            print(f"engram-top stop: {exc}", file=sys.stderr)
            return 1
        run = session.run
        if run is None or not run.alive:
            print("nothing of this scenario file is running")
            return 0
        await session.stop_scenario()
        result = run.stop_result
        if result is not None and result.survivors:
            print(f"engram-top stop: processes survived: {list(result.survivors)}",
                  file=sys.stderr)
            return 1
        print(f"stopped {run.scenario.name} (pid {run.pid})"
              + (" after SIGKILL" if result is not None and result.killed else ""))
        return 0
    finally:
        await session.close()


async def take_snapshot(args: argparse.Namespace) -> int:
    from engram_top.app.headless import render_svg
    from engram_top.export import snapshot
    try:
        snapshot.check_writable(args.out)  # fail now, not after a whole start-up
    except snapshot.SnapshotError as exc:
        print(f"engram-top snapshot: {exc}", file=sys.stderr)
        return 1
    from engram_top.record.file_format import RecordingError
    try:
        session, timeout, describe = _snapshot_source(args)
    except RecordingError as exc:
        print(f"engram-top snapshot: {exc}", file=sys.stderr)
        return 2
    notes = getattr(session, "notes", [])  # a recording's: its sessions, lines skipped
    for note in notes:
        print(f"engram-top snapshot: {note}", file=sys.stderr)
    try:
        await session.start()
        ready = await session.wait_ready(timeout)
        if not ready:
            run = session.store.run
            state = run.state if run else "unknown"
            print(f"engram-top snapshot: the server did not become ready within {timeout:.0f} s "
                  f"(state: {state}); writing what was seen", file=sys.stderr)
        await asyncio.sleep(args.after if ready and not args.recording else 0)
        try:
            svg: str | None = await render_svg(session)
        except Exception as exc:  # the readings are still worth writing without the screen
            print(f"engram-top snapshot: no screen.svg: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            svg = None
        # Written before close: closing stops the server, and the run would read "stopped".
        path = snapshot.write_folder(
            args.out, session.store, session.ref, svg=svg,
            extra={"source": describe, **({"notes": notes} if notes else {})},
            secrets=[getattr(getattr(session, "options", None), "api_key", None) or ""])
    except snapshot.SnapshotError as exc:
        print(f"engram-top snapshot: {exc}", file=sys.stderr)
        return 1
    finally:
        await session.close()
    print(path)
    return 0 if ready else 1


def _snapshot_source(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The session a snapshot watches, how long to wait for its server, and a description
    for snapshot.json. A source is a session object (start, wait_ready, close, store, ref)."""
    from engram_top.live.session import DemoSession, Session, SessionOptions
    if args.attach:
        from collectors.pages import split_userinfo
        describe = {"kind": "attach", "url": split_userinfo(args.attach)[0],
                    "after_s": args.after}
        session = Session(SessionOptions(attach=(args.attach,), api_key=args.api_key,
                                         engine=args.engine, load=None,
                                         thresholds=user_thresholds()))
        _say_which_credential(session, (args.attach,), args.api_key)
        return session, args.ready_timeout or 30.0, describe
    if args.recording:
        from engram_top.record.file_format import RecordingError
        describe = {"kind": "recording", "path": str(args.recording), "at_s": args.at}
        source = _RecordingSource(args.recording, args.at, args.session)
        length = source.replay.duration
        if args.at is not None and args.at > length:  # not its end, silently
            raise RecordingError(f"{args.recording}: --at {args.at:g} s is past its end: the "
                                 f"recording is {length:.1f} s long")
        return source, 0.0, describe
    expected = reference.default().placements[args.placement].ready_s * args.time_scale
    timeout = args.ready_timeout or max(30.0, 3 * expected)
    describe = {"kind": "demo", "placement": args.placement, "time_scale": args.time_scale,
                "serve_scale": args.serve_scale, "after_s": args.after}
    options = dataclasses.replace(_options(args), thresholds=user_thresholds())
    return DemoSession(options), timeout, describe


class _RecordingSource:
    """A recording as a snapshot source: paused at --at seconds (default: its end)."""

    def __init__(self, path: Path, at: float | None, session: int | None = None) -> None:
        from engram_top.record.replay import ReplaySession
        # RecordingError: the caller says it.
        self.replay = ReplaySession(path, paused=True, session=session,
                                    thresholds=user_thresholds())
        self.notes = self.replay.notes
        self.store = self.replay.store
        self.alerts = self.replay.alerts
        self.store.clock = self.replay.clock
        self.ref = reference.default()
        self.at = at

    async def start(self) -> None:
        self.replay.seek(self.replay.duration if self.at is None else self.at)

    async def wait_ready(self, timeout: float) -> bool:
        return True

    async def close(self) -> None:
        await self.replay.close()


def _engine_argument(parser: argparse.ArgumentParser, what: str, *,
                     detected: bool = False) -> None:
    # The kinds are checked once parsed (_main), not listed as choices here: listing them
    # would look up every installed package's entry points at each start, for every
    # command, a tenth of a second before a dashboard's first frame.
    from scenarios import engines
    default = (f"the one whose names the server's /metrics page has, else {engines.DEFAULT}"
               if detected else engines.DEFAULT)
    parser.add_argument("--engine", default=None if detected else engines.DEFAULT,
                        metavar="KIND",
                        help=f"{what} (default: {default}; built in: "
                             f"{', '.join(engines.BUILT_IN)}; plugins add theirs)")


def inspect_log(path: Path, kind: str) -> int:
    from scenarios import engines
    parser = engines.get(kind).parser()
    try:
        # Line by line: a log of many launches can be larger than memory wants to hold.
        with path.open(errors="replace") as lines:
            for line in lines:
                parser.feed(line)
    except OSError as exc:
        print(f"engram-top inspect-log: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 1
    _print_json(parser.facts().to_dict())
    return 0


def inspect_metrics(source: str, kind: str) -> int:
    from scenarios import engines
    engine = engines.get(kind)
    try:
        if source.startswith(("http://", "https://")):
            base = source.rstrip("/")
            text = asyncio.run(_fetch(base if base.endswith("/metrics") else base + "/metrics",
                                      engine.page_limit("/metrics")))
        else:
            # As it came over HTTP: a CR inside a label value is no line end.
            with open(source, errors="replace", newline="") as f:
                text = f.read()
    except TimeoutError:
        print(f"engram-top inspect-metrics: {source}: no whole page within {FETCH_DEADLINE_S:g} "
              "s", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"engram-top inspect-metrics: cannot read {source}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # httpx errors: name the URL and the reason, no traceback
        print(f"engram-top inspect-metrics: {source}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    try:
        out = engine.inspect_metrics(text)
    except ValueError as exc:  # a page that is not Prometheus text, line named
        print(f"engram-top inspect-metrics: {source}: {exc}", file=sys.stderr)
        return 1
    _print_json(out)
    return 0


FETCH_DEADLINE_S = 5.0


async def _fetch(url: str, limit_bytes: int) -> str:
    """A page, whole within FETCH_DEADLINE_S and the size a /metrics page can have (a server
    that drips, or streams without end, is cut off)."""
    import httpx

    from collectors.base import get_bounded
    async with httpx.AsyncClient(timeout=5.0) as client:
        resp = await get_bounded(client, url, deadline_s=FETCH_DEADLINE_S,
                                 limit_bytes=limit_bytes)
        return resp.raise_for_status().text


def _print_json(data: object) -> None:
    """Standard JSON on stdout: NaN and infinities as null."""
    from engram_top.model.facts import finite_json
    print(json.dumps(finite_json(data), indent=2, default=str, allow_nan=False))
