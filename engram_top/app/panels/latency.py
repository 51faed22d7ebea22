"""The latency panel: TTFT, TPOT (the inter-token latency) and end to end over the server's
window (p50, p99, mean; a bucket's bounds where it is too wide for a figure), vLLM's
per-request TPOT apart, the output and request rates, and the demo load's counts."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from collectors import latency, rate
from engram_top import model
from engram_top.app.panels.drawing import (
    columns,
    quantile,
    recent,
    source_rows,
    sparkline,
    unavailable,
    waiting,
)
from engram_top.model import RunStore, SeriesName, SourceName

# What it is drawn from: it is redrawn when one of these has a new version in the store.
SOURCES = (SourceName.SERVER,)


def latency_panel(store: RunStore, rows: int | None = None,
                  cols: int | None = None) -> Group:
    out = source_rows(store, SourceName.SERVER, model.engine_of(store))
    lat = model.latency_facts(store)
    if lat is None:
        return waiting(out, "no latency yet (the server reports once it serves)")
    table: list[list[Text | str]] = [[Text(h, style="bold") for h in ("", "p50", "p99", "mean")]]
    shown = [(lat.ttft, "TTFT"), (lat.itl, "TPOT (ITL)"), (lat.e2e, "end to end")]
    if lat.tpot is not None:  # vLLM's per-request figure, apart from the inter-token one
        shown.insert(2, (lat.tpot, "TPOT/request"))
    for q, label in shown:
        if q is None:
            table.append([Text(label, style="bold"), "–", "–", "–"])
        else:
            table.append([Text(label, style="bold"), quantile(q, "p50"), quantile(q, "p99"),
                          latency(q.mean)])
    out += columns(table, "lrrr")
    output = rate(lat.output_tokens_per_s, "tok/s")
    # The trend takes what the line leaves (label, figure, two blanks), 24 at most: cut
    # short, it would end in an ellipsis and read as a value.
    spark = 24 if cols is None else max(0, min(24, cols - 10 - len(output) - 2))
    trend = recent(store, SeriesName.OUTPUT_TOKENS_PER_S)
    figures: list[list[Text | str]] = [
        [Text("output", style="bold"),
         Text.assemble(f"{output}  ", sparkline(trend, spark)) if spark else Text(output)],
        [Text("requests", style="bold"), rate(lat.requests_per_s, "req/s")]]
    load = store.load
    if load:
        figures.append([Text("demo load", style="bold"),
                        f"{load['concurrency']} streams · {load['completed']} done · "
                        f"{load['failed']} failed"])
        if load.get("last_error"):
            figures.append(["", Text(load["last_error"][:80], style="red")])
    out += columns(figures)
    out += unavailable(lat.unavailable)
    out.append(Text(f"window {lat.window_s or 0:.0f} s, from {lat.engine}'s histograms",
                    style="dim"))
    return Group(*out)
