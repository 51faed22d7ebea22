"""The panels' aligned columns, exactly: widths by cells on screen (a CJK character is
two), left and right justification, no padding after the last cell, each styled cell's
style as a span over it and its own spans moved with it, and the control codes Rich
drops (a bell) dropped."""

from __future__ import annotations

from rich.text import Span, Text

from engram_top.app.panels.drawing import columns


def test_cells_line_up_with_their_styles_where_they_land() -> None:
    gpu = Text("GPU", style="bold")
    bar = Text("██", style="green")
    bar.append("░", style="grey37")
    rows: list[list[Text | str]] = [
        [gpu, Text("GiB", style="bold"), Text("", style="dim"), "x"],
        ["0", "71.5", bar, "日本"],
        ["12", "\a7", "", "y"],
    ]
    lines = columns(rows, "lr")
    assert [line.plain for line in lines] == [
        "GPU  GiB     x",
        "0   71.5 ██░ 日本",
        "12     7     y",
    ]
    assert lines[0].spans == [Span(0, 3, "bold"), Span(5, 8, "bold"), Span(9, 9, "dim")]
    # The bar's own style is its base: over all of it, its last cell's grey on top.
    assert lines[1].spans == [Span(9, 12, "green"), Span(11, 12, "grey37")]
    assert lines[2].spans == []
    assert all(line.no_wrap and line.overflow == "ellipsis" for line in lines)


def test_one_column_and_no_rows() -> None:
    assert [line.plain for line in columns([["a"], ["bcd"]], "r")] == ["  a", "bcd"]
    assert columns([]) == []
