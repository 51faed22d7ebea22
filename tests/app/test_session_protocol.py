"""The dashboard talks to its session through engram_top.app.sessions' protocols: every
session the dashboard is given (live, demo, replay, a snapshot's borrowed one, the tests'
fixed store) declares the whole of it, methods with the protocol's parameters and kind
(coroutine or not), and so does the fleet's session for the fleet's screens (FleetView);
and the app never asks a session what it has."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

from helpers import StaticSession

from engram_top.app.headless import BorrowedSession
from engram_top.app.sessions import DashboardSession, FleetView, ReplayControls
from engram_top.fleet import FleetSession
from engram_top.live.demo import DemoSession
from engram_top.live.session import Session, SessionOptions
from engram_top.model.store import RunStore
from engram_top.record.recorder import Recorder
from engram_top.record.replay import ReplaySession

APP = Path(__file__).resolve().parents[2] / "engram_top" / "app"


def members(protocol: type) -> list[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n, v in vars(protocol).items()
              if not n.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))}
    return sorted(names)


def problems(obj: object, protocol: type) -> list[str]:
    """Where obj falls short of protocol: a member missing, a method that is not one, of the
    other kind (async or not), or that cannot take the protocol's arguments."""
    found = []
    for name in members(protocol):
        if not hasattr(obj, name):
            found.append(f"no {name}")
            continue
        want, have = vars(protocol).get(name), getattr(obj, name)
        if inspect.isfunction(want):
            if not callable(have):
                found.append(f"{name} is not a method")
                continue
            if inspect.iscoroutinefunction(want) != inspect.iscoroutinefunction(have):
                found.append(f"{name}: async should be {inspect.iscoroutinefunction(want)}")
            params = list(inspect.signature(want).parameters.values())[1:]  # after self
            try:
                inspect.signature(have).bind(*(object() for _ in params))
            except TypeError as exc:
                found.append(f"{name}{inspect.signature(have)}: {exc}")
        elif callable(have) and not isinstance(have, type) and not (
                isinstance(want, property) and want.fget is not None
                and str(want.fget.__annotations__.get("return", "")).startswith("Callable")):
            found.append(f"{name} should be a value, is a method")  # unless a callable one
    return found


def recording(tmp_path: Path) -> Path:
    path = tmp_path / "r.jsonl"
    store = RunStore()
    recorder = Recorder(store, path).start()
    store.event("info", "one event")
    recorder.close()
    return path


def sessions(tmp_path: Path) -> dict[str, Any]:
    live = Session(SessionOptions(attach=("http://127.0.0.1:9",), api_key="k3y", load=None))
    return {
        "live": live,
        "demo": DemoSession(),
        "replay": ReplaySession(recording(tmp_path), paused=True),
        "borrowed": BorrowedSession(live),
        "static": StaticSession(RunStore()),
    }


def test_every_session_declares_what_the_dashboard_uses(tmp_path: Path) -> None:
    made = sessions(tmp_path)
    try:
        for kind, session in made.items():
            assert isinstance(session, DashboardSession), kind
            assert problems(session, DashboardSession) == [], kind
            replay = session.replay
            assert (replay is not None) == (kind == "replay"), kind
            if replay is not None:
                assert isinstance(replay, ReplayControls)
                assert problems(replay, ReplayControls) == []
        assert made["live"].secrets == ("k3y",) and made["demo"].secrets == ()
        assert made["live"].poll_interval == 1.0 and made["replay"].poll_interval == 0.5
    finally:
        for session in made.values():
            session.close_now()


def test_the_fleet_session_declares_what_the_fleet_screens_use() -> None:
    session = FleetSession("http://127.0.0.1:9")
    assert isinstance(session, FleetView)
    assert problems(session, FleetView) == []


class Lacking:
    """Near a session, but not one: a close that is no coroutine, a switch that takes no
    name, no attach."""

    store = RunStore()
    alerts = None
    slos = ()
    replay = None
    poll_interval = 1.0
    secrets = ()

    async def start(self) -> None: ...
    def close(self) -> None: ...
    def close_now(self) -> None: ...
    async def start_scenario(self, name: str) -> None: ...
    async def switch(self) -> None: ...
    async def stop_scenario(self) -> None: ...


def test_the_check_finds_what_a_session_lacks() -> None:
    found = problems(Lacking(), DashboardSession)
    assert "no attach" in found
    assert "close: async should be True" in found
    assert any(p.startswith("switch()") for p in found), found
    assert not isinstance(Lacking(), DashboardSession)  # attach is missing


def test_the_app_never_probes_its_session() -> None:
    """No getattr/hasattr on a session in the app: what it needs is the protocol's."""
    probes = []
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args \
                    and "session" in ast.unparse(node.args[0]).lower():
                probes.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert probes == []
