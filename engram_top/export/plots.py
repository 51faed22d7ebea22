"""Charts for the bench folder and for snapshots, as PNG and SVG, drawn with matplotlib's Agg
backend (no display needed). matplotlib is imported here only, and this module only when a
chart is drawn, so the dashboard's start never pays for it.

Modelled levels (the simulator's model, not measured) are drawn hollow and dashed, and
every chart that has them says so in its legend.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collectors.safetext import visible
from engram_top.compare.slo import LevelStats

COLOURS = {"device": "#1f77b4", "host": "#ff7f0e", "host-prefetch": "#2ca02c"}
OTHER = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _pyplot() -> Any:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _colour(name: str, i: int) -> str:
    return COLOURS.get(name, OTHER[i % len(OTHER)])


def _plain_text(fig: Any) -> None:
    """Every text of the figure read as it is written: names come from files and servers,
    so their controls are made visible, and a $ is a dollar sign, never the start of
    matplotlib's mathtext (a name holding "$\\frac" would end the chart's drawing)."""
    from matplotlib.text import Text
    for artist in fig.findobj(Text):
        text = artist.get_text()
        shown = visible(text, "\n").replace("$", r"\$")
        if shown != text:
            artist.set_text(shown)


def _save(fig: Any, out: Path, stem: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    _plain_text(fig)
    files = []
    for ext in ("png", "svg"):
        path = out / f"{stem}.{ext}"
        # metadata without a date: the same figures draw the same file.
        fig.savefig(path, dpi=110, bbox_inches="tight",
                    metadata={"Date": None} if ext == "svg" else None)
        files.append(path.name)
    return files


def _unit(levels: dict[str, list[LevelStats]]) -> str:
    kinds = {lv.kind for lvs in levels.values() for lv in lvs}
    return "requests/s (node time)" if kinds == {"rate"} else "concurrent requests"


def _series(ax: Any, lvs: Sequence[LevelStats], value: Any, colour: str, label: str,
            style: str = "-") -> None:
    """One placement's line: measured points solid, modelled ones hollow on a dashed line."""
    pts = [(lv.load, value(lv), lv.modelled) for lv in lvs if value(lv) is not None]
    if not pts:
        return
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    ax.plot(xs, ys, style, color=colour, label=label, linewidth=1.6)
    live = [(x, y) for x, y, m in pts if not m]
    model = [(x, y) for x, y, m in pts if m]
    if live:
        ax.plot(*zip(*live, strict=True), "o", color=colour, markersize=5)
    if model:
        ax.plot(*zip(*model, strict=True), "o", markerfacecolor="white", color=colour,
                markersize=5)


def _legend_note(ax: Any, levels: dict[str, list[LevelStats]]) -> None:
    if any(lv.modelled for lvs in levels.values() for lv in lvs):
        ax.plot([], [], "o", markerfacecolor="white", color="grey",
                label="hollow: modelled (simulator)")
        ax.plot([], [], "o", color="grey", label="filled: measured over HTTP")
    _legend(ax, 8)


def _legend(ax: Any, size: int) -> None:
    """A legend where something is labelled (a chart of unlabelled lines needs none, and
    matplotlib warns on an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size)


def goodput_chart(out: Path, levels: dict[str, list[LevelStats]],
                  summary: dict[str, Any] | None) -> list[str]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (name, lvs) in enumerate(levels.items()):
        colour = _colour(name, i)
        _series(ax, lvs, lambda lv: lv.goodput_rps, colour, name)
        spans = [(lv.load, lv.interval) for lv in lvs if lv.interval is not None]
        if spans:
            ax.fill_between([x for x, _ in spans], [iv[0] for _, iv in spans],
                            [iv[1] for _, iv in spans], color=colour, alpha=0.12)
    for name, c in ((summary or {}).get("crossover") or {}).items():
        if c.get("at") is not None:
            ax.axvline(c["at"], color="black", linestyle=":", linewidth=1.2)
            ax.annotate(f"crossover {name}\nover {c['over']}: {c['at']:.3g}",
                        (c["at"], ax.get_ylim()[1] * 0.92), fontsize=8, ha="left")
    slos = (summary or {}).get("slo") or []
    ax.set_title("Goodput vs load" + (f" (SLO: {'; '.join(slos)})" if slos else ""),
                 fontsize=10)
    ax.set_xlabel(f"load, {_unit(levels)}")
    ax.set_ylabel("goodput, requests/s within every SLO")
    ax.grid(alpha=0.3)
    _legend_note(ax, levels)
    files = _save(fig, out, "goodput")
    plt.close(fig)
    return files


def latency_chart(out: Path, levels: dict[str, list[LevelStats]]) -> list[str]:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, title in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        for i, (name, lvs) in enumerate(levels.items()):
            colour = _colour(name, i)
            for p, style in (("p50", "-"), ("p99", "--")):
                _series(ax, lvs, lambda lv, m=metric, q=p: _ms(lv.latency[m][q]), colour,
                        f"{name} {p}", style)
        ax.set_yscale("log")
        ax.set_title(f"{title} p50 and p99 vs load", fontsize=10)
        ax.set_xlabel(f"load, {_unit(levels)}")
        ax.set_ylabel("ms (log scale)")
        ax.grid(alpha=0.3, which="both")
        _legend_note(ax, levels)
    files = _save(fig, out, "latency")
    plt.close(fig)
    return files


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or seconds <= 0 else seconds * 1000


def kv_chart(out: Path, levels: dict[str, list[LevelStats]]) -> list[str]:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, (name, lvs) in enumerate(levels.items()):
        colour = _colour(name, i)
        _series(axes[0], lvs, lambda lv: None if lv.kv_usage_max is None
                else lv.kv_usage_max * 100, colour, f"{name} max")
        _series(axes[0], lvs, lambda lv: None if lv.kv_usage_mean is None
                else lv.kv_usage_mean * 100, colour, f"{name} mean", "--")
        _series(axes[1], lvs, lambda lv: lv.queue_mean_s, colour, name)
    axes[0].set_title("KV pool usage vs load", fontsize=10)
    axes[0].set_ylabel("% of the full pool")
    axes[0].set_ylim(0, 105)
    axes[1].set_title("Queue time (arrival to admission) vs load", fontsize=10)
    axes[1].set_ylabel("mean, s")
    for ax in axes:
        ax.set_xlabel(f"load, {_unit(levels)}")
        ax.grid(alpha=0.3)
        _legend_note(ax, levels)
    files = _save(fig, out, "kv_queue")
    plt.close(fig)
    return files


HEADLINES = ("ttft_mean_ms", "tpot_mean_ms", "output_tok_s")


def deltas_chart(out: Path, comparison: Any, baseline: str) -> list[str]:
    """The seed's picture: each placement's change against the baseline in TTFT, TPOT and
    throughput, with its 95% interval, and the seed's own figure beside it."""
    rows = [r for r in comparison.rows if r.metric.key in HEADLINES]
    others = [s for s in comparison.scenarios if s != baseline]
    if not rows or not others:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / (len(others) * 2)
    for j, row in enumerate(rows):
        for k, name in enumerate(others):
            cell = row.cells.get(name)
            if cell is None or cell.delta is None:
                continue
            x = j + (2 * k) * width - 0.4 + width / 2
            err = None
            if cell.interval is not None:
                err = [[cell.delta * 100 - cell.interval.lo * 100],
                       [cell.interval.hi * 100 - cell.delta * 100]]
            ax.bar(x, cell.delta * 100, width, yerr=err, capsize=3,
                   color=_colour(name, k), label=name if j == 0 else None)
            placement = comparison.placements.get(name)
            seed = next((f for f in row.reference if f.is_delta and f.placement == placement),
                        None)
            value = None if seed is None else seed.value
            if value is not None:
                ax.bar(x + width, value * 100, width, color=_colour(name, k), alpha=0.35,
                       hatch="//", label=f"{name}: the seed's" if j == 0 else None)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [r.metric.label for r in rows], fontsize=9)
    ax.set_ylabel(f"change vs {baseline}, % (95% interval)")
    # A quick bench's picture says so on itself: it travels without the report around it.
    ax.set_title("Headline deltas against the baseline" + (
        "\n--quick: a first look, intervals too wide to quote" if comparison.quick else ""),
        fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    _legend(ax, 8)
    files = _save(fig, out, "deltas")
    plt.close(fig)
    return files


def bench_charts(out: Path, levels: dict[str, list[LevelStats]],
                 summary: dict[str, Any] | None, comparison: Any,
                 baseline: str) -> tuple[dict[str, list[str]], str]:
    """Every chart the bench folder gets: {name: [png, svg]}, and why there are none when
    there are none (matplotlib missing, nothing to draw)."""
    try:
        _pyplot()
    except ImportError as exc:
        return {}, f"charts: matplotlib cannot be imported ({exc}); pip install matplotlib"
    charts: dict[str, list[str]] = {}
    if any(len(lvs) for lvs in levels.values()):
        if any(lv.goodput_rps is not None for lvs in levels.values() for lv in lvs):
            # Goodput counts requests within the SLOs: without [slo] there is no such chart.
            charts["goodput"] = goodput_chart(out, levels, summary)
        charts["latency"] = latency_chart(out, levels)
        charts["kv_queue"] = kv_chart(out, levels)
    deltas = deltas_chart(out, comparison, baseline)
    if deltas:
        charts["deltas"] = deltas
    return charts, "" if charts else "charts: nothing to draw (no level ran)"


def history_png(path: Path, panels: dict[str, tuple[str, dict[str, list[tuple[float, float]]]]]
                ) -> None:
    """A 2x2 picture of time series, one chart per panel: {title: (y label, {line: [(seconds
    before now, value)]})}. The object API, not pyplot: a snapshot writes it on a worker
    thread while the dashboard goes on."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 6))
    FigureCanvasAgg(fig)
    for i, (title, (ylabel, lines)) in enumerate(list(panels.items())[:4]):
        ax = fig.add_subplot(2, 2, i + 1)
        for j, (name, pts) in enumerate(lines.items()):
            if pts:
                ax.plot([t for t, _ in pts], [v for _, v in pts], linewidth=1.1,
                        color=COLOURS.get(name, OTHER[j % len(OTHER)]), label=name)
        if not any(lines.values()):
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xlabel("seconds before the snapshot", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            _legend(ax, 7)
    _plain_text(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
