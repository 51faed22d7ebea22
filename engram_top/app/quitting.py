"""The dashboard's quit: it stops what this session started (load, server, polls) and
leaves. A server an earlier engram-top started, which the session adopted, is the user's to
keep: asked about first (leave it running, the default; stop it; or stay). A signal quits
without asking (no one is there to answer), and leaves such a server running."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work

from engram_top import model
from engram_top.app.dialogs import QuitAdoptedScreen
from engram_top.app.mixin import AppMixin
from engram_top.app.sessions import DashboardSession


class QuitsAsking(AppMixin):
    """For the dashboard's App: its action_quit (its session, stopped_by, _show and
    close_session are the app's)."""

    session: DashboardSession
    stopped_by: signal.Signals | None
    _quitting = False  # a quit is under way (its dialog answered, or none needed)

    if TYPE_CHECKING:  # the App's own
        def _show(self, selector: str, content: Text) -> None: ...
        async def close_session(self) -> None: ...

    async def action_quit(self) -> None:
        """Stop what we started, then leave; an adopted server is asked about first."""
        if self.stopped_by is None and not self._quitting:
            adopted = [s for s in self.session.left_running() if s.adopted and not s.asked]
            if adopted:
                if not isinstance(self.screen, QuitAdoptedScreen):
                    run = self.session.store.run
                    watched = run is not None and run.owned and run.pid == adopted[0].pid
                    serving = model.why_ask(self.session.store) if watched else None
                    self.push_screen(QuitAdoptedScreen(adopted[0], serving), self._quit_as)
                return
        await self._quit()

    def _quit_as(self, choice: str | None) -> None:
        """The quit dialog's answer: leave the adopted server, stop it, or stay (None)."""
        if choice == "leave":
            self.call_later(self._quit)
        elif choice == "stop":
            self._stop_then_quit()

    @work(group="quit", exit_on_error=False)
    async def _stop_then_quit(self) -> None:
        """Stop the adopted server as `x` would (the screen goes on drawing meanwhile), then
        quit on the app's message loop (exit() from a worker would wait on itself)."""
        self._quitting = True
        self._show("#header", Text("stopping the server…", style="bold"))
        try:
            await self.session.stop_scenario()
        except Exception as exc:  # said; the quit goes on (the CLI names what is left)
            self.session.store.event("error", f"stop failed: {exc}")
        self.call_later(self._quit)

    async def _quit(self) -> None:
        self._quitting = True
        left = self.session.left_running()
        self._show("#header", Text(f"quitting: leaving {left[0].scenario} running…" if left
                                   else "stopping the server…", style="bold"))
        await self.close_session()
        self.exit(0)
