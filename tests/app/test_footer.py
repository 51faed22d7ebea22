"""The key footer makes its keys again only when what it shows changes, and then shows it."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input
from textual.widgets._footer import FooterKey

from engram_top.app.footer import KeyFooter


class Keys(App[None]):
    BINDINGS = [Binding("q", "quit", "Quit", id="quit"), Binding("1", "pick", "Pick"),
                Binding("x", "stop", "Stop")]
    ENABLE_COMMAND_PALETTE = False
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


async def test_the_same_keys_are_not_made_again_and_new_ones_are() -> None:
    app = Keys()
    async with app.run_test(size=(100, 10)) as pilot:
        await pilot.pause()
        footer = app.query_one(KeyFooter)
        assert shown(app) == ["Quit", "Pick"]
        made = []
        original = footer.recompose

        async def counted() -> None:
            made.append(1)
            await original()

        footer.recompose = counted  # type: ignore[method-assign]
        for _ in range(5):  # what the dashboard's start sends: nothing shown changes
            app.refresh_bindings()
        app.query_one(DataTable).focus()
        await pilot.pause()
        await pilot.pause()
        assert made == [] and shown(app) == ["Quit", "Pick"]

        app.can_stop = True  # a key that appears: made again, once, for three signals
        app.refresh_bindings()
        app.refresh_bindings()
        app.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert made == [1]
        assert shown(app) == ["Quit", "Pick", "Stop"]

        app.set_keymap({"quit": "ctrl+q"})  # a remap changes what a key reads
        await pilot.pause()
        await pilot.pause()
        assert len(made) == 2
        assert {k.key for k in app.query_one(KeyFooter).query(FooterKey)} == {"ctrl+q", "1", "x"}
