"""engram-top's command line. With no arguments it opens the demo: the live dashboard of a
simulated 4x B200 node serving DeepSeek-V4.1-Flash.

The grammar is engram_top.cli.parser; each command lives with its kind: dashboards (demo,
run, attach, replay), headless (switch, stop, bench), snapshot, files (compare, inspect-*),
fleet. A command's module is imported when it runs, so a dashboard's first frame waits on
no other command's imports."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys

from engram_top.cli.lifetime import (
    run_until_signal,
    say,
    size_from_the_terminal,
    write_crash_report,
)
from engram_top.cli.output import visible_output
from engram_top.cli.parser import build_parser, settle_demo_load

# The commands that are a dashboard of the process's own: the garbage collector stays off
# until its first frame (engram_top.cli.start).
DASHBOARDS = ("demo", "run", "attach", "replay")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    size_from_the_terminal()
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
    if args.command not in DASHBOARDS:
        gc.enable()  # off while the program started (cli.start); no dashboard to wait for
    settle_demo_load(args)
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
    if args.command in DASHBOARDS:
        from engram_top.cli import dashboards
        return {"demo": dashboards.run_demo, "run": dashboards.run_file,
                "attach": dashboards.run_attach, "replay": dashboards.run_replay,
                }[args.command](args)
    if args.command == "snapshot" and args.fleet_demo and args.fail_on:
        print("engram-top snapshot: --fail-on is for one node (--demo, --attach, --recording); "
              "a fleet's alerts are per node, in its snapshot.json", file=sys.stderr)
        return 2
    if args.command == "snapshot" and args.fleet_demo:
        from engram_top.cli.fleet import take_fleet_snapshot
        return run_until_signal(lambda: take_fleet_snapshot(args), "snapshot")
    if args.command == "snapshot":
        from engram_top.cli.snapshot import take_snapshot
        return run_until_signal(lambda: take_snapshot(args), "snapshot")
    if args.command == "agent":
        from engram_top.cli.agent import run_agent
        return asyncio.run(run_agent(args))
    if args.command == "fleet":
        from engram_top.cli.fleet import run_fleet
        return run_fleet(args)
    if args.command in ("switch", "stop", "bench"):
        from engram_top.cli import headless
        command = {"switch": headless.switch, "stop": headless.stop,
                   "bench": headless.bench}[args.command]
        return run_until_signal(lambda: command(args), args.command)
    if args.command == "compare":
        from engram_top.cli.files import compare_files
        return compare_files(args)
    if args.command == "probe":
        from engram_top.probe import gpu as probe
        return probe.run(args)
    if args.command == "diff":
        from engram_top.cli.diff import diff
        return diff(args.a, args.b, args.json)
    if args.command == "health":
        from engram_top.cli.agent_health import health
        return health(args)
    if args.command == "why":
        from engram_top.cli.why import why
        return why(args.path, args.json)
    if args.command == "inspect-log":
        from engram_top.cli.files import inspect_log
        return inspect_log(args.file, args.engine)
    if args.command == "inspect-metrics":
        from engram_top.cli.files import inspect_metrics
        return inspect_metrics(args.source, args.engine)
    parser.print_help()
    return 2

