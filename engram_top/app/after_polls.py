"""The dashboard's redraw just after each round of polls, rather than at an interval of its
own: the session polls its sources on one grid of the poll interval (collectors.until_next),
so a redraw AFTER_POLLS_S past each point finds that second's readings all landed, shows
each a fifth of a second after it was taken, and reads what is derived from them while the
headline figures and the alerts (which come then too) have it worked out."""

from __future__ import annotations

from collections.abc import Callable

from collectors import AFTER_POLLS_S, until_next
from engram_top.app.mixin import AppMixin


class RedrawsAfterPolls(AppMixin):
    """For an App with a ``refresh_panels``: redraw_after_polls(every_s) starts the redraws;
    they end with the app (a timer of its own), or when ``_session_closed`` is set."""

    _redraw_s = 1.0
    # The app's own (annotations alone: nothing here shadows them).
    _session_closed: bool
    refresh_panels: Callable[[], None]

    def redraw_after_polls(self, every_s: float) -> None:
        self._redraw_s = every_s
        self._next_redraw()

    def _next_redraw(self) -> None:
        every = self._redraw_s
        self.set_timer(until_next(every, AFTER_POLLS_S, at_least=every / 2), self._redraw)

    def _redraw(self) -> None:
        if self._session_closed:
            return
        try:
            self.refresh_panels()
        finally:
            self._next_redraw()
