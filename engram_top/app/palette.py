"""The dashboard's keys as the user finds them: the help screen (the bindings in force,
remaps included) and the command palette's entries (every action that applies here, and a
start-or-switch per scenario)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.app import SystemCommand
from textual.binding import Binding
from textual.markup import escape as escape_markup
from textual.screen import ModalScreen, Screen

from collectors import visible
from engram_top.app.dialogs import HelpScreen
from engram_top.app.mixin import AppMixin
from engram_top.app.sessions import ReplayControls

# Textual's own palette entries cover quitting; the rest of our keys get one each.
_NOT_IN_PALETTE = {"quit"}
# Palette titles where the key's own label would read as one of Textual's commands ("Keys").
_PALETTE_TITLES = {"help": "Help: keys and panels"}
_PALETTE_HELP = {
    "start_selected": "start the highlighted scenario, or switch to it",
    "stop": "stop the server this dashboard started",
    "compare": "every scenario's runs side by side against a baseline",
    "help": "the keys, generated from the bindings in force",
    "history": "plots of HBM, KV, host RAM, latency and PCIe per GPU; GPU memory by process",
    "snapshot": "write the screen, readings, series and comparison to a folder under "
                "snapshots/ (secrets redacted)",
}


class KeysShown(AppMixin):
    """For the dashboard's App (before App in its bases: the palette adds to Textual's own
    commands): its BINDINGS, replay, and which actions apply."""

    replay: ReplayControls | None = None

    if TYPE_CHECKING:  # the App's own
        def _applies(self, action: str) -> bool: ...
        def _scenario_names(self) -> list[str]: ...
        def _start_named(self, name: str) -> None: ...

    def action_help(self) -> None:
        """The keys in force (remaps included), the app's and the screen's; a widget's own
        cursor keys are left to the widget."""
        by_action: dict[str, tuple[list[str], str]] = {}
        for active in self.screen.active_bindings.values():
            b = active.binding
            if not b.description or b.action.startswith("scenario(") or not (
                    active.node is self or isinstance(active.node, Screen)):
                continue
            keys, _ = by_action.setdefault(b.action, ([], b.description))
            if (shown := self.get_key_display(b)) not in keys:
                keys.append(shown)
        lines = [(", ".join(k), d) for k, d in by_action.values()]
        lines.append(("1-9", "start or switch to scenario 1-9 of the list"))
        lines.append(("↑/↓, click", "select a scenario (click it again, or ⏎, to start it)"))
        self.push_screen(HelpScreen(lines))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every action of ours that applies here, once each, beside Textual's own (themes,
        keys, quit): a live dashboard lists no replay controls, a replay nothing that starts
        or stops a server."""
        titles: set[str] = set()
        for command in super().get_system_commands(screen):
            titles.add(command.title)
            yield command
        if isinstance(screen, ModalScreen):
            return  # a dialog's own keys are its commands
        for b in self.BINDINGS:
            if not isinstance(b, Binding) or not b.description or b.id in _NOT_IN_PALETTE \
                    or b.action.startswith("scenario("):
                continue
            title = _PALETTE_TITLES.get(b.action, b.description)
            if title in titles or not self._applies(b.action.split("(")[0]):
                continue
            titles.add(title)
            yield SystemCommand(title, _PALETTE_HELP.get(b.action, b.description),
                                partial(self.run_action, b.action))
        if self.replay is not None:
            return
        for name in self._scenario_names():
            shown = escape_markup(visible(name))  # the palette reads titles as markup
            yield SystemCommand(f"Start or switch to {shown}", f"stop the running server "
                                f"if any, then start {shown}",
                                partial(self._start_named, name))
