"""The key footer, made again only when the keys it shows change.

Textual's Footer makes all its keys again (a recompose, then a layout pass of the screen)
on every bindings signal, and a screen sends one for each focus change, keymap, app focus
and our own refresh_bindings (the scenario list's numbered keys): four at the dashboard's
start, 0.12 s of a core and as much again in layouts, after its first frame. What the
footer would show is a handful of tuples; it is compared before anything is made.
"""

from __future__ import annotations

from collections.abc import Hashable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    """A Footer whose bindings signal makes its keys again at most once per refresh, and
    only when what they would show (keys, labels, enabled, tooltips, groups) differs."""

    # Its keys come at the first bindings signal, after the first frame, as Textual's do:
    # composed with the first frame (ten widgets mounted and styled) they cost it 0.1 s.
    _shown: Hashable = None  # what the last compose showed
    _pending = False  # a look at the bindings is due after the next refresh

    def _showing(self) -> Hashable:
        """What compose() would show now, as a value to compare."""
        if not self._bindings_ready:  # Textual's flag: compose shows nothing until set
            return None
        app = self.app
        active = self.screen.active_bindings
        shown = [(b, enabled, tooltip) for _, b, enabled, tooltip in active.values() if b.show]
        if self.show_command_palette and app.ENABLE_COMMAND_PALETTE \
                and app.COMMAND_PALETTE_BINDING in active:  # shown whatever its show says
            _, b, enabled, tooltip = active[app.COMMAND_PALETTE_BINDING]
            shown.append((b, enabled, tooltip))
        return (self.compact, tuple(
            (b.key, app.get_key_display(b), b.description, b.action, b.group, b.tooltip,
             enabled, tooltip) for b, enabled, tooltip in shown))

    def compose(self) -> ComposeResult:
        self._shown = self._showing()
        yield from super().compose()

    def bindings_changed(self, screen: Screen[object]) -> None:
        self._bindings_ready = True
        if not screen.app.app_focus or self._pending:
            return
        if self.is_attached and screen is self.screen:
            self._pending = True
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        self._pending = False
        if self.is_attached and self._showing() != self._shown:
            await self.recompose()
