"""The dashboard rendered headless over a session that is already running, for snapshots
taken without a terminal (`engram-top snapshot`)."""

from __future__ import annotations

from typing import Any, Protocol

from engram_top.alerts import AlertWatch
from engram_top.app.main import EngramTopApp
from engram_top.model import RunStore


class Drawable(Protocol):
    """What a headless drawing needs of the session it borrows (read only)."""

    @property
    def store(self) -> RunStore: ...
    @property
    def alerts(self) -> AlertWatch: ...


class BorrowedSession:
    """A running session lent to a headless app, as a DashboardSession that steers nothing:
    the app's mount starts its session and its unmount closes it, but this one belongs to
    the caller, whose server must keep running."""

    replay = None  # drawn as the moment it is at, without a replay's controls
    poll_interval = 1.0  # the drawing is refreshed by hand (render_svg), not on a timer
    secrets: tuple[str, ...] = ()  # the app takes no snapshot of it: its caller does
    attaching: tuple[str, ...] = ()

    def __init__(self, session: Drawable) -> None:
        self.store = session.store
        self.alerts = session.alerts
        self.slos: tuple[Any, ...] = ()

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def close_now(self) -> None:
        return None

    def left_running(self) -> tuple[()]:
        return ()  # its caller's servers are its caller's to name

    async def start_scenario(self, name: str, force: bool = False) -> None:
        raise RuntimeError("a borrowed session starts nothing")

    async def switch(self, name: str, force: bool = False) -> None:
        raise RuntimeError("a borrowed session switches nothing")

    async def stop_scenario(self) -> None:
        raise RuntimeError("a borrowed session stops nothing")

    async def attach(self, url: str) -> None:
        raise RuntimeError("a borrowed session attaches to nothing")


async def render_svg(session: Drawable, size: tuple[int, int] = (120, 40)) -> str:
    """The screen as the dashboard draws it now, as SVG. `session` only needs a `store` and
    its `alerts`."""
    app = EngramTopApp(BorrowedSession(session))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_panels()  # draw what the store holds now, not at the next 0.5 s tick
        await pilot.pause()
        return app.export_screenshot()
