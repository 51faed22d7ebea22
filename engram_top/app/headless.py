"""The dashboard rendered headless over a session that is already running, for snapshots
taken without a terminal (`engram-top snapshot`)."""

from __future__ import annotations

from typing import Any

from engram_top.app.main import EngramTopApp
from engram_top.model.store import RunStore


class BorrowedSession:
    """A running session lent to a headless app: the app's mount starts its session and its
    unmount closes it, but this one belongs to the caller, whose server must keep running."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.store: RunStore = session.store

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:  # the rest (scenario, ...) reads through
        return getattr(self._session, name)


async def render_svg(session: Any, size: tuple[int, int] = (120, 40)) -> str:
    """The screen as the dashboard draws it now, as SVG. `session` only needs a `store`."""
    app = EngramTopApp(BorrowedSession(session))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_panels()  # draw what the store holds now, not at the next 0.5 s tick
        await pilot.pause()
        return app.export_screenshot()
