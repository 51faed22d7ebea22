"""The key footer makes its keys again only when what it shows changes, and then shows it."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input
from textual.widgets._footer import FooterKey

from engram_top.app.footer import KeyFooter


class Keys(App[None]):
    BINDINGS = [Binding("q", "quit", "Quit", id="quit"), Binding("1", "pick", "Pick"),
                Binding("x", "stop", "Stop")]
    can_stop = False

    def compose(self) -> ComposeResult:
        yield DataTable()
        yield Input()
        yield KeyFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.can_stop if action == "stop" else True

    def action_pick(self) -> None:
        pass

    def action_stop(self) -> None:
        pass


def shown(app: Keys) -> list[str]:
    footer = app.query_one(KeyFooter)
    return [str(key.description) for key in footer.query(FooterKey)]


async def test_the_same_keys_are_not_made_again_and_new_ones_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    original = KeyFooter.recompose

    async def counted(footer: KeyFooter) -> None:
        made.append(1)
        await original(footer)

    monkeypatch.setattr(KeyFooter, "recompose", counted)
    app = Keys()
    async with app.run_test(size=(100, 10)) as pilot:
        # Made once, at the first signal (as Textual's; keys composed with the first frame
        # cost that frame 0.1 s); the start's other signals make nothing again.
        await pilot.pause()
        assert shown(app) == ["Quit", "Pick", "palette"] and made == [1]
        for _ in range(5):  # what the dashboard's start sends: nothing shown changes
            app.refresh_bindings()
        app.query_one(DataTable).focus()  # its keys are hidden ones
        await pilot.pause()
        await pilot.pause()
        assert made == [1] and shown(app) == ["Quit", "Pick", "palette"]

        app.can_stop = True  # a key that appears: made again, once, for three signals
        app.refresh_bindings()
        app.refresh_bindings()
        app.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert made == [1, 1]
        assert shown(app) == ["Quit", "Pick", "Stop", "palette"]

        app.set_keymap({"quit": "ctrl+q"})  # a remap changes what a key reads
        await pilot.pause()
        await pilot.pause()
        assert len(made) == 3
        keys = {k.key for k in app.query_one(KeyFooter).query(FooterKey)}
        assert keys == {"ctrl+q", "1", "x", "ctrl+p"}
