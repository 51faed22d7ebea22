"""The history screen: the braille chart renderer on tiny inputs, exact output, and the
screen itself over a store filled by hand (no processes), at the smallest supported
terminal (100x30) and a large one (200x60)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import screen_text, until
from rich.style import Style
from textual.app import App
from textual.content import Content
from textual.strip import Strip
from textual.visual import Visual
from textual.widgets import DataTable, Static

import engram_top.app as app_package
from collectors.readings import (
    GpuData,
    GpuDevice,
    GpuProcess,
    HostData,
    Quantiles,
    Reading,
    ServerData,
    Status,
)
from engram_top.app.charts import Line, ago, chart, nice_max, rate_unit, split_gaps
from engram_top.app.history_screen import (
    ChartView,
    HistoryScreen,
    process_rows,
    window_points,
)
from engram_top.app.panel import one_row
from engram_top.model.store import RunStore, Series

GIB = 1024**3
NOW = 10_000.0


def rows_of(text) -> list[str]:  # type: ignore[no-untyped-def]
    return text.plain.split("\n")


# --------------------------------------------------------------------------- charts


def test_flat_line_at_half_range_exact_output() -> None:
    # 3 plot rows = 12 dot rows; 50 of 0..100 is dot 5.5 -> 6 from the bottom: the middle
    # row's second dot from its top, in both dot columns of each cell (0x02 | 0x10).
    out = chart([Line("a", [(0.0, 50.0), (10.0, 50.0)])], width=14, height=5, t_window=10,
                now=10, y_max=100, title="t")
    assert rows_of(out) == [
        "t  ■ a 50",
        "100┤          ",
        " 50┤⠒⠒⠒⠒⠒⠒⠒⠒⠒⠒",
        "  0┤          ",
        "    -10s   now",
    ]


def test_flat_steep_clamped_and_broken_lines_together_exact_output() -> None:
    """A flat line (drawn straight into the cells), a steep one beyond the axis both ways
    (joined column by column, clamped at its edges) and one broken by a gap, in one chart:
    every dot and colour as drawn a dot at a time before the charts marked spans of rows.
    The flat line's point after ``now`` is left out; the later lines' colours win a cell."""
    lines = [Line("flat", [(-5.0, 30.0), (0.0, 30.4), (4.0, 31.0), (8.0, 30.5), (12.0, 30.0),
                           (16.0, 30.2), (25.0, 30.0)], "cyan", 5.0),
             Line("steep", [(1.0, 0.0), (3.0, 100.0), (4.0, 500.0), (6.0, -20.0), (9.0, 60.0)],
                  "red", 5.0),
             Line("gap", [(12.0, 80.0), (13.0, 75.0), (19.0, 90.0), (20.0, 70.0), (21.0, 10.0)],
                  "green", 3.0)]
    out = chart(lines, width=20, height=8, t_window=20, now=20, y_max=100, title="mixed")
    assert rows_of(out) == [
        "mixed  ■ flat  +2",
        "100┤  ⢸⠉⡇         ⢠⡀",
        "   │  ⡏ ⡇    ⠐⠆    ⢧",
        " 50┤ ⢀⡇ ⢹ ⢀⡆        ",
        "   │ ⢸  ⢸ ⣸         ",
        "   │⠉⣹⠉⠉⢹⢩⠏⠉⠉⠉⠉⠉⠉   ",
        "  0┤ ⡇  ⢸⡼          ",
        "    -20s  -10s   now",
    ]
    coloured = [(out.plain[s.start:s.end], s.style) for s in out.spans
                if s.style in ("cyan", "red", "green")]
    assert coloured == [
        ("■ ", "cyan"), ("⢸⠉⡇", "red"), ("⢠⡀", "green"), ("⡏", "red"), ("⡇", "red"),
        ("⠐⠆", "green"), ("⢧", "green"), ("⢀⡇", "red"), ("⢹", "red"), ("⢀⡆", "red"),
        ("⢸", "red"),
        ("⢸", "red"), ("⣸", "red"), ("⠉", "cyan"), ("⣹", "red"), ("⠉⠉", "cyan"),
        ("⢹⢩⠏", "red"), ("⠉⠉⠉⠉⠉⠉", "cyan"), ("⡇", "red"), ("⢸⡼", "red")]


@pytest.mark.parametrize("height", [5, 7, 8, 20])
@pytest.mark.parametrize(("y_min", "y_max"), [(0.0, 100.0), (100.0, 200.0), (0.0, 179.0)])
def test_half_range_lands_on_the_labelled_middle_row(height: int, y_min: float,
                                                     y_max: float) -> None:
    mid = (y_min + y_max) / 2
    out = chart([Line("a", [(0.0, mid), (60.0, mid)])], width=30, height=height,
                t_window=60, now=60, y_min=y_min, y_max=y_max, title="x")
    plot = rows_of(out)[1:-1]
    drawn = [i for i, row in enumerate(plot) if row.split("┤")[-1].split("│")[-1].strip()]
    assert len(drawn) == 1
    row = plot[drawn[0]]
    # The drawn row carries the middle label, with the half-way value.
    assert row.split("┤")[0].strip() == f"{mid:.3g}"
    if len(plot) % 2:
        assert drawn[0] == len(plot) // 2
    # Top and bottom rows carry the fixed axis' ends.
    assert plot[0].split("┤")[0].strip() == f"{y_max:.3g}"
    assert plot[-1].split("┤")[0].strip() == f"{y_min:.3g}"


def test_values_outside_a_fixed_axis_are_drawn_at_its_edge() -> None:
    out = chart([Line("a", [(0.0, 500.0), (10.0, 500.0)])], width=14, height=5,
                t_window=10, now=10, y_max=100)
    assert rows_of(out)[1] == "100┤" + "⠉" * 10  # top dot row of the top row


def test_a_pause_longer_than_gap_s_is_left_blank() -> None:
    points = [(float(t), 50.0) for t in (0, 1, 2, 3, 7, 8, 9, 10)]
    joined = chart([Line("a", points, gap_s=10)], width=15, height=5, t_window=10, now=10,
                   y_max=100)
    gapped = chart([Line("a", points, gap_s=1.5)], width=15, height=5, t_window=10, now=10,
                   y_max=100)
    # 11 cells = 22 dot columns over 10 s: t=3 is dot 6.3 (cell 3, left), t=7 dot 14.7
    # (cell 7, right): cells 4-6 stay blank.
    assert rows_of(joined)[2] == " 50┤" + "⠒" * 11
    assert rows_of(gapped)[2] == " 50┤" + "⠒⠒⠒⠂" + "   " + "⠐⠒⠒⠒"
    # With no gap_s, 3x the usual spacing (here 1 s) decides: the same gap.
    auto = chart([Line("a", points)], width=15, height=5, t_window=10, now=10, y_max=100)
    assert rows_of(auto)[2] == rows_of(gapped)[2]


def test_split_gaps_runs() -> None:
    pts = [(0.0, 1.0), (1.0, 1.0), (5.0, 1.0), (6.0, 1.0), (20.0, 1.0)]
    assert split_gaps(pts, 2.0) == [pts[:2], pts[2:4], pts[4:]]
    assert split_gaps(pts, 100.0) == [pts]
    # With no gap_s: 3x the median step. Steps 1, 1, 1, 7, 1, 1: only the 7 s one is a gap.
    even = [(float(t), 0.0) for t in (0, 1, 2, 3, 10, 11, 12)]
    assert split_gaps(even, None) == [even[:4], even[4:]]
    assert split_gaps([], 1.0) == []


def test_a_line_from_before_the_window_enters_at_the_left_edge() -> None:
    # 0 at t=-10 rising to 100 at t=10: at the window's start (t=0) it is at 50.
    out = chart([Line("a", [(-10.0, 0.0), (10.0, 100.0)])], width=14, height=5,
                t_window=10, now=10, y_max=100)
    plot = rows_of(out)[1:4]
    assert plot[1][4] != " "  # first cell, middle row
    assert plot[2][4:] == " " * 10  # nothing of the part before the window


def test_auto_axis_nice_max_and_labels() -> None:
    out = chart([Line("TTFT", [(0.0, 0.12), (5.0, 0.37)])], width=30, height=5, t_window=10,
                now=10, title="TTFT p50 (ms)")
    lines = rows_of(out)
    assert lines[0] == "TTFT p50 (ms)  ■ TTFT 0.37"
    assert [ln.split("┤")[0].strip() for ln in lines[1:4]] == ["0.5", "0.25", "0"]
    assert lines[4].split() == ["-10s", "-5s", "now"]


def test_nice_max_rate_unit_and_ago() -> None:
    assert [nice_max(v) for v in (0, -3, 0.37, 1, 2.2, 3, 26, 180, 1234)] == \
        [1, 1, 0.5, 1, 2.5, 5, 50, 200, 2000]
    assert rate_unit(2.5e9) == (1e9, "GB/s")
    assert rate_unit(5e8) == (1e6, "MB/s")
    assert rate_unit(2e3) == (1e3, "kB/s")
    assert rate_unit(0) == (1.0, "B/s")
    assert (ago(300, 300), ago(150, 300), ago(900, 1800), ago(7200, 7200)) == \
        ("-300s", "-150s", "-15m", "-2h")


def test_several_lines_have_distinct_colours_and_a_legend() -> None:
    lines = [Line("GPU0", [(0.0, 10.0), (10.0, 10.0)], "cyan"),
             Line("GPU1", [(0.0, 90.0), (10.0, 90.0)], "magenta")]
    out = chart(lines, width=40, height=5, t_window=10, now=10, y_max=100, title="HBM")
    assert rows_of(out)[0] == "HBM  ■ GPU0 10  ■ GPU1 90"
    styles = {str(span.style) for span in out.spans
              if out.plain[span.start:span.end].strip("■ ") and
              set(out.plain[span.start:span.end]) <= set(chr(c) for c in range(0x2801, 0x2900))}
    assert styles == {"cyan", "magenta"}
    # Too narrow for the values: labels alone; narrower: the GPUs by their index; narrower
    # still: the keys that fit and how many more, never a label cut in two ("G…").
    assert rows_of(chart(lines, width=21, height=5, t_window=10, now=10, y_max=100,
                         title="HBM"))[0] == "HBM  ■ GPU0  ■ GPU1"
    assert rows_of(chart(lines, width=15, height=5, t_window=10, now=10, y_max=100,
                         title="HBM"))[0] == "HBM  ■ 0  ■ 1"
    assert rows_of(chart(lines, width=12, height=5, t_window=10, now=10, y_max=100,
                         title="HBM"))[0] == "HBM  ■ 0  +1"
    # No styled run begins with a blank (an SVG viewer may drop it and glue the words).
    out = chart(lines, width=40, height=5, t_window=10, now=10, y_max=100, title="HBM")
    first = out.plain.split("\n")[0]
    for span in out.spans:
        if span.end <= len(first) and span.start > 0:
            assert not out.plain[span.start].isspace(), (span, out.plain[span.start:span.end])


def test_no_data_in_the_window_says_so() -> None:
    old = Line("a", [(0.0, 5.0), (1.0, 5.0)])
    out = chart([old], width=40, height=5, t_window=60, now=1000, title="TPOT p50 (ms)")
    assert "no data in this window" in rows_of(out)[2]
    assert rows_of(out)[1].lstrip().startswith("1┤")  # auto axis with nothing to show: 0..1


def test_too_small_a_box_gives_the_title_alone() -> None:
    out = chart([Line("a", [(0.0, 1.0)])], width=40, height=1, t_window=10, now=10,
                title="HBM")
    assert out.plain == "HBM  ■ a 1"


# --------------------------------------------------------------------------- data helpers


def test_window_points_use_the_fine_tier_when_it_covers_the_window() -> None:
    s = Series(fine_len=10, coarse_every=5, coarse_len=100)
    for t in range(50):
        s.add(float(t), float(t))
    # Fine holds t=40..49 (1 s apart): a 5 s window is all fine, the point before included.
    pts, gap = window_points(s, start=45.0, now=49.0, scale=2.0)
    assert pts == [(44.0, 88.0), (45.0, 90.0), (46.0, 92.0), (47.0, 94.0), (48.0, 96.0),
                   (49.0, 98.0)]
    assert gap == 3.0
    # A 30 s window reaches into the coarse tier (one point per 5 s): its step sets the gap.
    pts, gap = window_points(s, start=19.0, now=49.0)
    assert pts[:3] == [(14.0, 12.0), (19.0, 17.0), (24.0, 22.0)]
    assert pts[-1] == (49.0, 49.0)
    assert gap == 15.0
    assert window_points(None, 0.0, 1.0) == ([], None)


def test_process_rows_sorted_by_gpu_then_memory_with_unreported_last() -> None:
    rows = process_rows(gpu_data())
    assert rows == [
        ("0", "4242", "python3", "120.00", "66.7%"),
        ("0", "4300", "sglang::scheduler", "2.00", "1.1%"),
        ("0", "999", "–", "not reported", "–"),
        ("1", "4243", "python3", "90.00", "50.0%"),
    ]
    assert process_rows(None) == []


# --------------------------------------------------------------------------- the screen


def gpu_data(rx: float = 0.0) -> GpuData:
    procs0 = (GpuProcess(999, None, ""), GpuProcess(4300, 2 * GIB, "sglang::scheduler"),
              GpuProcess(4242, 120 * GIB, "python3"))
    devs = (
        GpuDevice(index=0, name="NVIDIA B200", uuid="GPU-0", total_bytes=180 * GIB,
                  reserved_bytes=GIB, used_bytes=123 * GIB, free_bytes=56 * GIB,
                  pcie_rx_bytes_per_s=rx, pcie_tx_bytes_per_s=4e8, processes=procs0),
        GpuDevice(index=1, name="NVIDIA B200", uuid="GPU-1", total_bytes=180 * GIB,
                  reserved_bytes=GIB, used_bytes=91 * GIB, free_bytes=88 * GIB,
                  pcie_rx_bytes_per_s=rx / 2, pcie_tx_bytes_per_s=2e8,
                  processes=(GpuProcess(4243, 90 * GIB, "python3"),)),
    )
    return GpuData("570.00", devs)


def host_data(used: int) -> HostData:
    return HostData(total_bytes=1024 * GIB, available_bytes=1024 * GIB - used,
                    used_bytes=used, free_bytes=0, cached_bytes=0, shmem_bytes=0,
                    hugepages_total=0, hugepages_free=0, hugepage_size_bytes=2 << 20,
                    anon_hugepages_bytes=0, swap_total_bytes=0, swap_used_bytes=0,
                    swap_in_bytes=0, swap_out_bytes=0)


def filled_store() -> RunStore:
    """Five minutes of readings every 2 s; the server stops answering for a minute."""
    store = RunStore()
    for k in range(0, 300, 2):
        t = NOW - 300 + k
        store.add("gpu", Reading("nvml", Status.OK, gpu_data(rx=3e9 * k / 300), at=t))
        store.add("host", Reading("host", Status.OK, host_data(200 * GIB + k * GIB // 10), at=t))
        if not 120 <= k < 180:
            store.add("server", Reading("sglang", Status.OK, ServerData(
                url="http://127.0.0.1:1", healthy=True, token_usage=k / 600,
                ttft=Quantiles(0.4, 0.9, 0.45, 10), itl=Quantiles(0.028, 0.05, 0.03, 10)),
                at=t))
    return store


class Host(App[None]):
    CSS_PATH = Path(app_package.__file__).parent / "app.tcss"

    def __init__(self, store: RunStore) -> None:
        super().__init__()
        self.store = store

    def on_mount(self) -> None:
        self.push_screen(HistoryScreen(self.store, lambda: NOW))


def table_cells(app: App[None]) -> list[list[str]]:
    table = app.screen.query_one("#procs-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


TITLES = ("HBM used (GiB of 180)", "KV cache usage (%)", "Host RAM used (GiB of 1,024)",
          "TTFT p50 (ms, interpolated)", "TPOT p50 (ms, interpolated)", "PCIe receive (GB/s)",
          "PCIe transmit (MB/s)", "GPU memory by process")


@pytest.mark.parametrize(("size", "columns", "scheduler"), [
    ((100, 30), 2, "sglang::s…"),  # names are cut to what the table's cell leaves them
    ((200, 60), 3, "sglang::scheduler"),
])
async def test_history_screen_shows_charts_and_the_process_table(
        size: tuple[int, int], columns: int, scheduler: str) -> None:
    app = Host(filled_store())
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(table_cells(app)) == 4, what="the process table")
        screen = app.screen
        assert isinstance(screen, HistoryScreen)
        text = screen_text(app)
        for title in TITLES:
            assert title in text, title
        assert "History · last 5 min" in text
        assert "-300s" in text and "-150s" in text and "now" in text
        assert table_cells(app) == [
            ["0", "4242", "python3", "120.00", "66.7%"],
            ["0", "4300", scheduler, "2.00", "1.1%"],
            ["0", "999", "–", "not reported", "–"],
            ["1", "4243", "python3", "90.00", "50.0%"],
        ]
        # The charts fill their grid cells: width and height come from the terminal.
        views = list(screen.query(ChartView))
        assert len(views) == 7
        grid_w = screen.query_one("#history-grid").content_size.width
        for view in views:
            assert view.content_size.width >= grid_w // columns - 3
            assert view.content_size.height >= 5
            lines = view.render().plain.split("\n")
            assert len(lines) == view.content_size.height
            assert lines[-1].endswith("now")
            assert len(lines[-1]) == view.content_size.width


def cells(strip: Strip) -> list[tuple[object, ...]]:
    """What a terminal shows of a row, cell by cell: the character, its colours as the
    terminal gets them (a named colour and its number alike) and its attributes."""
    out = []
    for segment in strip:
        st = segment.style or Style.null()
        look = (None if st.color is None else st.color.get_truecolor().hex,
                None if st.bgcolor is None else st.bgcolor.get_truecolor().hex,
                st.bold, st.dim, st.italic, st.underline, st.blink, st.reverse, st.strike,
                st.link)
        out += [(ch, look) for ch in segment.text]
    return out


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
async def test_chart_rows_drawn_from_their_segments_are_textuals_own(theme: str) -> None:
    """ChartView draws a row straight from its segments (panel.one_row): every row of every
    chart shows the cells Textual's own drawing of it shows, in either theme."""
    app = Host(filled_store())
    async with app.run_test(size=(200, 60)) as pilot:
        app.theme = theme
        await until(pilot, lambda: len(app.screen.query(ChartView)) == 7, what="the charts")
        await pilot.pause()
        rows = 0
        for view in app.screen.query(ChartView):
            width, height = view.content_size
            drawn = [view.render_line(y) for y in range(height)]
            assert len(view._chart_lines) == height
            for y, line in enumerate(view._chart_lines):
                textuals = Visual.to_strips(view, Content.from_rich_text(line, console=app.console),
                                            width, 1, view.visual_style, apply_selection=False)
                assert one_row(view, line, width) is not None, (view.id, y)
                assert cells(drawn[y]) == cells(textuals[0]), (view.id, y, line.plain)
                assert drawn[y].cell_length == textuals[0].cell_length <= width
                rows += 1
        assert rows >= 7 * 10


async def test_fixed_axes_on_screen_and_the_server_gap() -> None:
    app = Host(filled_store())
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, lambda: len(table_cells(app)) == 4, what="the process table")
        screen = app.screen

        def plot(key: str) -> list[str]:
            return screen.query_one(f"#chart-{key}", ChartView).render().plain.split("\n")

        hbm, kv, ttft = plot("hbm"), plot("kv"), plot("ttft")
        assert hbm[1].startswith("180┤") and hbm[-2].strip().startswith("0┤")
        assert "90┤" in "".join(hbm)
        assert kv[1].startswith("100┤") and "50┤" in "".join(kv)
        assert "■ GPU0 123  ■ GPU1 91" in hbm[0]  # latest values in the legend
        # TTFT is flat at 400 ms on an auto axis of 0..500; the minute the server did not
        # answer (k = 120..178 s of 300) is a blank stretch of its row.
        assert ttft[1].startswith("500┤")
        bodies = [re.split("[┤│]", row, maxsplit=1)[1] for row in ttft[1:-1]]
        drawn = [body for body in bodies if body.strip()]
        assert len(drawn) == 1
        body = drawn[0]
        blank = max(len(m) for m in re.findall(r" +", body.rstrip()))
        assert 0.15 < blank / len(body) < 0.25  # about 60 s of the 300 s window


async def test_window_keys_resize_and_close() -> None:
    app = Host(filled_store())
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, lambda: len(table_cells(app)) == 4, what="the process table")
        screen = app.screen
        grid = screen.query_one("#history-grid")
        assert (grid.styles.grid_size_columns, grid.styles.grid_size_rows) == (3, 3)
        assert table_cells(app)[1][2] == "sglang::scheduler"
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: "last 10 min" in screen_text(app), what="a longer window")
        assert "-10m" in screen_text(app) and "-5m" in screen_text(app)
        await pilot.press("minus", "left_square_bracket")
        await until(pilot, lambda: "last 2 min" in screen_text(app), what="a shorter window")
        assert "-120s" in screen_text(app)
        wide = screen.query_one("#chart-hbm", ChartView).content_size.width
        await pilot.resize_terminal(100, 30)
        # The grid drops to two columns and the process names are cut to the new cell.
        await until(pilot, lambda: table_cells(app)[1][2] == "sglang::s…", what="names re-cut")
        assert (grid.styles.grid_size_columns, grid.styles.grid_size_rows) == (2, 4)
        narrow = screen.query_one("#chart-hbm", ChartView).content_size.width
        assert 40 <= narrow < wide
        await pilot.press("plus")
        await until(pilot, lambda: "last 5 min" in screen_text(app), what="the window back")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HistoryScreen), what="the close")


async def test_a_failing_gpu_source_and_no_data_are_said() -> None:
    store = RunStore()
    app = Host(store)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "no GPU reading yet" in screen_text(app), what="the title")
        text = screen_text(app)
        assert "GPU memory by process · no GPU reading yet" in text
        assert "no data in this window" in text
        store.add("gpu", Reading("nvml", Status.OK, gpu_data(), at=NOW - 20))
        store.add("gpu", Reading("nvml", Status.ERROR, message="NVML: GPU is lost",
                                 at=NOW - 1, failing_since=NOW - 15))
        # The last good reading's processes are listed, its failure beside the title.
        await until(pilot, lambda: len(table_cells(app)) == 4, what="the next redraw")
        title = app.screen.query_one("#procs-title", Static).content
        assert str(title) == "GPU memory by process · NVML: GPU is lost (as of 20 s ago)"
        assert "GPU is lost" in screen_text(app)
