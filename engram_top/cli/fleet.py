"""`engram-top fleet` and `engram-top snapshot --fleet-demo`: the fleet's composition root
(like commands.py, it alone brings the fleet screen and the Prometheus session together)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from engram_top.cli.lifetime import (
    NEEDS_TERMINAL,
    run_dashboard,
    run_until_signal,
    terminal_problem,
    without_terminal,
)
from engram_top.fleet.session import FleetSession

if TYPE_CHECKING:
    from scenarios.fleet_demo import FleetDemo

T = TypeVar("T")

DEMO_SCRAPE_S = 2.0
DEMO_WINDOW = "20s"  # 10 scrapes at the demo's 2 s interval
MAX_DEMO_NODES = 512


def _say(command: str, text: str) -> None:
    print(f"engram-top {command}: {text}", file=sys.stderr)


def _check_nodes(command: str, nodes: int) -> bool:
    if not 1 <= nodes <= MAX_DEMO_NODES:
        _say(command, f"--nodes must be 1 to {MAX_DEMO_NODES}, got {nodes}")
        return False
    return True


async def _start_demo(nodes: int) -> tuple[FleetDemo, str]:
    from scenarios.fleet_demo import FleetDemo
    demo = FleetDemo(nodes, scrape_s=DEMO_SCRAPE_S)
    url = await demo.start()
    return demo, url


def run_fleet(args: argparse.Namespace) -> int:
    from engram_top.app.fleet_screen import FleetApp
    from engram_top.settings.user_config import load_config
    from scenarios.prometheus import PrometheusError

    config, error = load_config(args.config)
    if error:
        _say("fleet", error)
        return 2
    if (args.once or args.json) and (args.demo or not args.once):
        _say("fleet", "--once takes --prometheus URL, and --json takes --once")
        return 2
    url = args.prometheus
    demo = None
    creds = None
    if url is not None:  # basic auth or a bearer token, and the header's words for it
        from engram_top.cli.credentials import CredentialError, prometheus
        try:
            creds = prometheus(url, args.prometheus_token_file)
        except CredentialError as exc:
            _say("fleet", str(exc))
            return 2
        for warning in creds.warnings:
            _say("fleet", f"warning: {warning}")
        url = creds.url
    if args.demo:
        if not _check_nodes("fleet", args.nodes):
            return 2
        if (problem := terminal_problem()) is not None:  # before a node is started
            _say("fleet", NEEDS_TERMINAL.format(problem=problem))
            return 2
        print(f"engram-top fleet: starting {args.nodes} simulated nodes and Prometheus…",
              file=sys.stderr)
        stopped: list[int] = []
        try:
            demo, url = run_until_signal_value(_start_demo(args.nodes), stopped)
        except PrometheusError as exc:
            _say("fleet", str(exc))
            return 1
        if demo is None:
            return stopped[0] if stopped else 130  # 128 + the signal that stopped it
    window = args.window or (DEMO_WINDOW if args.demo else "1m")
    session = FleetSession(url, interval=args.interval, window=window,
                           thresholds=config.alerts, demo=demo,
                           headers=creds.headers if creds else None,
                           auth=creds.auth if creds else None,
                           credential=creds.described if creds else "")
    if args.once:
        return run_until_signal(lambda: print_once(session, as_json=args.json), "fleet")
    if without_terminal(session, "fleet"):
        return 2
    return run_dashboard(FleetApp(session, own_process=True), None)


async def print_once(session: FleetSession, *, as_json: bool) -> int:
    """One refresh, printed for a script: a node a line (its agent's figures under it), or
    JSON. Exit 1, with Prometheus's words on stderr, where the refresh failed."""
    import json

    from engram_top.fleet.words import agent_lines, node_json, stack_line
    try:
        await session.poll_once()
    finally:
        await session.close()
    if not session.ok:
        _say("fleet", session.status.message if session.status else "no answer")
        return 1
    rows = session.rows()
    if as_json:
        print(json.dumps({"prometheus": session.url, "nodes": [node_json(r) for r in rows]},
                         indent=2))
        return 0
    from collectors.safetext import visible
    for r in rows:
        alerts = ", ".join(r.alerts) or "no alerts"
        print(visible(f"{r.node}  {r.placement}  {r.state}  {alerts}"))
        for line in agent_lines(r.agent) if r.agent is not None else ():
            print(visible(f"  {line}"))
        if r.stack is not None:
            print(visible(f"  {stack_line(r.stack)}"))
    return 0


def run_until_signal_value(coro: Coroutine[Any, Any, tuple[T, str]],
                           stopped: list[int] | None = None) -> tuple[T | None, str]:
    """The demo's start under run_until_signal: (None, "") when a signal stopped it (what
    it had started is stopped by its own error path), its exit code then in ``stopped``."""
    box: list[tuple[T, str]] = []

    async def main() -> int:
        box.append(await coro)
        return 0

    code = run_until_signal(main, "fleet")
    if code and stopped is not None:
        stopped.append(code)
    return box[0] if code == 0 and box else (None, "")


async def take_fleet_snapshot(args: argparse.Namespace) -> int:
    from engram_top.app.fleet_screen import render_svg
    from engram_top.export import snapshot
    from engram_top.fleet import export as fleet_export
    from scenarios.fleet_demo import FleetDemo
    from scenarios.prometheus import PrometheusError

    if not _check_nodes("snapshot", args.nodes):
        return 2
    try:
        snapshot.check_writable(args.out)
    except snapshot.SnapshotError as exc:
        _say("snapshot", str(exc))
        return 1
    demo = FleetDemo(args.nodes, scrape_s=DEMO_SCRAPE_S)
    try:
        url = await demo.start()
    except PrometheusError as exc:
        _say("snapshot", str(exc))
        return 1
    session = FleetSession(url, interval=DEMO_SCRAPE_S, window=DEMO_WINDOW, demo=demo)
    try:
        end = time.monotonic() + args.after
        await session.poll_once()
        while time.monotonic() < end:
            await asyncio.sleep(min(DEMO_SCRAPE_S, max(0.0, end - time.monotonic())))
            await session.poll_once()
        if not session.ok:
            _say("snapshot", f"{session.status.message if session.status else 'no answer'}; "
                             "writing what was seen")
        try:
            svg: str | None = await render_svg(session)
        except Exception as exc:  # the figures are still worth writing without the screen
            _say("snapshot", f"no screen.svg: {type(exc).__name__}: {exc}")
            svg = None
        taken = fleet_export.prepare(args.out, session, svg=svg,
                                     extra={"source": f"fleet demo, {args.nodes} nodes"})
        path = await asyncio.to_thread(taken.write)
    except snapshot.SnapshotError as exc:
        _say("snapshot", str(exc))
        return 1
    finally:
        await session.close()
    print(path)
    return 0
