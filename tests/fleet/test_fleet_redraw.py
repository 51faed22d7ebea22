"""The fleet screen's redraw after a refresh: a cell whose words and style are the same is
the same cell (a 2,000-node refresh builds only the cells that moved), and one whose words
moved is drawn anew, its style with them."""

from __future__ import annotations

from typing import Any

import pytest
from rich.text import Text
from textual.widgets import DataTable

from collectors.prometheus import group
from engram_top.app import fleet_screen
from engram_top.app.fleet_screen import FleetApp
from engram_top.fleet import session as fleet

DIALECTS = fleet.dialects()


def sample(value: Any, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1_795_000_000.0, str(value)]}


def answers(running: int, placement: str) -> dict[str, list[dict[str, Any]]]:
    labels = {"node": "n1", **({"placement": placement} if placement else {})}
    return {
        "gpu": [], "host": [], "latency": [], "up": [],
        "server": [sample(running, __name__="sglang:num_running_reqs", **labels),
                   sample(0.25, __name__="sglang:token_usage", **labels)],
    }


def read(s: fleet.FleetSession, running: int, placement: str = "device") -> None:
    """A refresh, as a poll leaves it: the node's figures, read now."""
    s.nodes = {n: (s.clock(), d) for n, d in group(answers(running, placement),
                                                    DIALECTS).items()}
    s.polls += 1


async def test_a_redraw_keeps_the_cells_that_did_not_move_and_draws_those_that_did(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []  # the cells made, by their words

    class Counted(Text):
        def __init__(self, text: str = "", *args: Any, **kwargs: Any) -> None:
            if kwargs.get("overflow") == "ellipsis":  # a cell's (the header is a Text() too)
                made.append(text)
            super().__init__(text, *args, **kwargs)

    monkeypatch.setattr(fleet_screen, "Text", Counted)
    s = fleet.FleetSession("http://127.0.0.1:9", interval=3600)
    app = FleetApp(s, borrowed=True)
    async with app.run_test(size=(160, 30)) as pilot:
        read(s, 3)
        app.refresh_fleet()
        await pilot.pause()
        table = app.query_one("#fleet", DataTable)

        def cell(column: str) -> Any:
            return table.get_cell("n1", column)

        before = {c: cell(c) for c in ("node", "placement", "state", "kv")}
        assert before["state"].plain == "serving" and "n1" in made
        made.clear()
        read(s, 3)  # the same figures, read again: no cell made
        app.refresh_fleet()
        await pilot.pause()
        assert made == [] and all(cell(c) is before[c] for c in before)
        read(s, 0)  # its requests done: the state's words move, and only they are made
        app.refresh_fleet()
        await pilot.pause()
        assert made == ["idle"]
        assert cell("state").plain == "idle" and cell("state") is not before["state"]
        assert cell("node") is before["node"] and cell("kv") is before["kv"]
        read(s, 0, placement="")  # no label: worked out from host memory, dim
        app.refresh_fleet()
        await pilot.pause()
        assert (cell("placement").plain, cell("placement").style) == ("?", "dim")
        assert before["placement"].plain == "device" and before["placement"].style == ""
