"""`engram-top snapshot` of one node: a demo, an attached server or a recording, watched
until ready (or a given second) and written as a snapshot folder."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from collectors.source import SourceName
from engram_top.cli.sessions import (
    demo_options,
    history_behind,
    say_which_credential,
    user_thresholds,
)
from engram_top.seed import reference
from scenarios.runstate import SERVING

if TYPE_CHECKING:
    from engram_top.alerts.monitor import AlertWatch
    from engram_top.model.store import RunStore


class _Watched(Protocol):
    """What a snapshot watches and draws: a demo's or an attached server's session, or a
    recording (_RecordingSource)."""

    @property
    def store(self) -> RunStore: ...
    @property
    def alerts(self) -> AlertWatch: ...
    @property
    def ref(self) -> reference.Reference: ...
    @property
    def secrets(self) -> tuple[str, ...]: ...
    @property
    def gave_up(self) -> str | None: ...  # why wait_ready stopped waiting early

    async def start(self) -> None: ...
    async def wait_ready(self, timeout: float) -> bool: ...
    async def close(self) -> None: ...


async def take_snapshot(args: argparse.Namespace) -> int:
    from engram_top.app.headless import render_svg
    from engram_top.export import snapshot
    try:
        snapshot.check_writable(args.out)  # fail now, not after a whole start-up
    except snapshot.SnapshotError as exc:
        print(f"engram-top snapshot: {exc}", file=sys.stderr)
        return 1
    if args.node_dir is not None:
        from engram_top.live.attach_node import node_dir_problem
        problem = ("it is for --attach (the node of a simulated server)" if not args.attach
                   else node_dir_problem(args.node_dir))
        if problem:
            print(f"engram-top snapshot: --node-dir {problem}", file=sys.stderr)
            return 2
    from engram_top.record.file_format import RecordingError
    try:
        session, timeout, describe = _snapshot_source(args)
    except RecordingError as exc:
        print(f"engram-top snapshot: {exc}", file=sys.stderr)
        return 2
    # A recording's: its sessions, lines skipped.
    notes = session.notes if isinstance(session, _RecordingSource) else []
    for note in notes:
        print(f"engram-top snapshot: {note}", file=sys.stderr)
    try:
        await session.start()
        ready = await session.wait_ready(timeout)
        if not ready and session.gave_up:
            print(f"engram-top snapshot: not waiting: {session.gave_up}; writing what was seen",
                  file=sys.stderr)
        elif not ready:
            print(f"engram-top snapshot: the server did not become ready within {timeout:.0f} s "
                  f"(state: {run_state(session.store)}); writing what was seen", file=sys.stderr)
        after = args.after
        if args.wait_alerts and ready and not args.recording:
            from collectors.engine_http import WINDOW_S
            from engram_top.alerts.thresholds import first_judged_s
            after = max(after, first_judged_s(session.alerts.thresholds, WINDOW_S))
            print(f"engram-top snapshot: watching {after:.0f} s, until every alert has judged "
                  "a whole window (--wait-alerts)", file=sys.stderr)
        if not args.recording:
            describe["after_s"] = after  # what it watched after ready, as it watched
        await asyncio.sleep(after if ready and not args.recording else 0)
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
            secrets=session.secrets)
    except snapshot.SnapshotError as exc:
        print(f"engram-top snapshot: {exc}", file=sys.stderr)
        return 1
    finally:
        await session.close()
    print(path)
    return 1 if not ready else alert_code(session.store, args.fail_on)


# `--fail-on`: a snapshot written of a ready server exits by the worst alert active in it.
ALERT_CODES = {"warning": 3, "error": 4}


def alert_code(store: RunStore, fail_on: str | None) -> int:
    """0, or ALERT_CODES' code for the worst active alert at or above ``fail_on``."""
    if fail_on is None:
        return 0
    worst = max((ALERT_CODES.get(a.severity, 0) for a in store.alerts.values()), default=0)
    return worst if worst >= ALERT_CODES[fail_on] else 0


def run_state(store: RunStore) -> str:
    """The run's state as seen: an attached server whose polls fail is not answering."""
    run = store.run
    if run is None:
        return "unknown"
    failed = store.latest.get(SourceName.SERVER)
    if run.state in SERVING and failed is not None and not failed.ok:
        return f"{run.state}, not answering: {failed.message}"
    return str(run.state)


def _snapshot_source(args: argparse.Namespace) -> tuple[_Watched, float, dict[str, object]]:
    """The session a snapshot watches, how long to wait for its server, and a description
    for snapshot.json. A source is a session object (start, wait_ready, close, store, ref)."""
    from engram_top.live.demo import DemoSession
    from engram_top.live.session import Session, SessionOptions
    if args.attach:
        from collectors.pages import split_userinfo
        describe = {"kind": "attach", "url": split_userinfo(args.attach)[0],
                    "after_s": args.after}
        session = Session(SessionOptions(attach=(args.attach,), api_key=args.api_key,
                                         engine=args.engine, load=None,
                                         thresholds=user_thresholds(),
                                         node_dir=args.node_dir))
        say_which_credential(session, (args.attach,), args.api_key)
        history_behind(session, (args.attach,))  # what an agent on this node recorded
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
    options = dataclasses.replace(demo_options(args), thresholds=user_thresholds())
    describe = {"kind": "demo", "placement": args.placement, "time_scale": args.time_scale,
                "serve_scale": options.serve_scale, "after_s": args.after}
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
        self.secrets: tuple[str, ...] = ()  # a recording holds its keys redacted already
        self.gave_up: str | None = None  # a recording is never waited for
        self.at = at

    async def start(self) -> None:
        self.replay.seek(self.replay.duration if self.at is None else self.at)

    async def wait_ready(self, timeout: float) -> bool:
        return True

    async def close(self) -> None:
        await self.replay.close()

