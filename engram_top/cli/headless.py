"""The commands without a terminal over a scenario file's servers: switch, stop, bench.
Each waits its turn at the file's state folder for at most LOCK_WAIT_S."""

from __future__ import annotations

import argparse
import asyncio
import sys

from engram_top.cli.lifetime import (
    say,
    say_left,
)
from engram_top.cli.sessions import session_options, user_thresholds

LOCK_WAIT_S = 600.0  # how long a headless command waits for another one on the same file


async def switch(args: argparse.Namespace) -> int:
    """Stop whatever this file's state folder says is running, then start --to; leave it,
    and say so. Interrupted before it is done (a signal), it stops what it started instead;
    a server an earlier command left that it had not stopped yet is left, and named."""
    from engram_top.live.session import Session
    from scenarios.statelock import StateBusy
    from scenarios.supervisor import DoesNotFit, SupervisorError
    options = session_options(args, headless=True, leave_running=True, poll_interval=2.0,
                               command="switch", lock_wait_s=LOCK_WAIT_S)
    if options is None:
        return 2
    session = Session(options)
    names = session.scenarios.scenarios if session.scenarios is not None else {}
    if args.to not in names:
        known = ", ".join(names)
        print(f"engram-top switch: --to: no scenario '{args.to}' in {options.scenario_file} "
              f"(known: {known})", file=sys.stderr)
        return 2
    session.announce = lambda text: say(f"engram-top switch: {text}")
    # Its warnings as the session records them: what --force overrode, a placement that fits
    # only in part (tables spilling to another NUMA node), HBM slow to return.
    session.store.listeners.append(lambda what, payload: say(
        f"engram-top switch: {payload.level}: {payload.text}")
        if what == "event" and payload.level in ("warning", "error") else None)
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
    except DoesNotFit as exc:  # the figures, nothing stopped; --force goes ahead
        print(f"engram-top switch: {exc}", file=sys.stderr)
        code = 2
    except (SupervisorError, StateBusy) as exc:
        print(f"engram-top switch: {exc}", file=sys.stderr)
        code = 1
    except asyncio.CancelledError:
        leave = False  # a signal: take back what this switch started
        raise
    finally:
        await session.close(leave_running=leave)
        say_left(session, "engram-top switch")
    return code


async def stop(args: argparse.Namespace) -> int:
    from engram_top.live.session import Session
    from scenarios.statelock import StateBusy
    from scenarios.supervisor import SupervisorError
    options = session_options(args, headless=True, poll_interval=2.0, command="stop",
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
        say_left(session, "engram-top stop")  # interrupted before it could stop it


async def bench(args: argparse.Namespace) -> int:
    from engram_top.bench import plan as bench_plan
    from engram_top.bench import runner
    from engram_top.export import snapshot
    from scenarios.statelock import StateBusy
    from scenarios.supervisor import DoesNotFit, SupervisorError
    try:
        plan = bench_plan.load_plan(args.plan)
        if args.quick:
            plan = bench_plan.quick_plan(plan)
        snapshot.check_writable(args.out)
    except (bench_plan.PlanError, snapshot.SnapshotError) as exc:
        print(f"engram-top bench: {exc}", file=sys.stderr)
        return 2
    try:
        report = await runner.run_bench(plan, args.out, state_dir=args.state_dir,
                                        thresholds=user_thresholds(),
                                        lock_wait_s=LOCK_WAIT_S, force=args.force,
                                        say_left=lambda s: say_left(s, "engram-top bench"))
    except DoesNotFit as exc:
        print(f"engram-top bench: {exc}", file=sys.stderr)
        return 2
    except (SupervisorError, StateBusy) as exc:
        print(f"engram-top bench: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.out / 'report.md'}, report.json, requests.csv")
    failed = [r for r in report["results"] if not r.get("completed")]
    return 1 if failed else 0

