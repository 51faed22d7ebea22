"""A fleet's snapshot folder: snapshot.json with a top-level `nodes` list (one entry per
node, with its placement and figures as Prometheus gave them), summary.md, the fleet
screen as SVG, and each node's figures as series of one point (timeseries.csv, .parquet).
Written as every snapshot is: atomically, into a new folder, never over one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from collectors.safetext import table_cell, visible
from collectors.units import GIB
from engram_top.compare import comparison as compare
from engram_top.compare.markdown import to_markdown
from engram_top.export.snapshot import Prepared, SeriesPoints
from engram_top.fleet import session as fleet
from engram_top.fleet.words import node_json
from engram_top.model.store import SeriesKey

FIGURES = (("hbm_max", "hbm.used_max"), ("hbm_min", "hbm.used_min"), ("kv_usage", "kv.usage"),
           ("kv_tokens", "kv.capacity"), ("host_used", "host.used"),
           ("host_available", "host.available"), ("ttft_p50", "ttft.p50"),
           ("ttft_p99", "ttft.p99"), ("tpot_p50", "tpot.p50"), ("tpot_p99", "tpot.p99"),
           ("output_tok_s", "output.tok_s"))


def prepare(parent: Path, session: fleet.FleetSession, *, svg: str | None,
            extra: dict[str, Any] | None = None) -> Prepared:
    rows = session.rows()
    now_mono, now_wall = time.monotonic(), time.time()
    runs = fleet.results(rows)
    comparison = None
    if runs:
        names = [r.scenario for r in runs]
        comparison = compare.compare(runs, "device" if "device" in names else names[0],
                                     metrics=fleet.METRICS)
    st = session.prom_status()
    data: dict[str, Any] = {
        "snapshot_version": 1,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now_wall)),
        "prometheus": {"url": session.url, "ok": session.ok,
                       "message": session.status.message if session.status else "",
                       "series": st.series if st else None,
                       "query_ms": round(st.query_ms, 1) if st else None,
                       "rate_window": session.window},
        "nodes": [node_json(r) for r in rows],
        "comparison": compare.to_json(comparison) if comparison else None,
        **(extra or {}),
    }
    texts = {"snapshot.json": json.dumps(data, indent=2) + "\n",
             "summary.md": summary(session, rows, comparison)}
    if svg is not None:
        texts["screen.svg"] = svg
    points: dict[SeriesKey, tuple[float, list[tuple[float, float]]]] = {}
    for r in rows:
        for attr, metric in FIGURES:
            value = getattr(r, attr)
            if value is not None:
                points[SeriesKey(r.node, "fleet", metric)] = (now_mono, [(now_mono, float(value))])
    base = f"engram-top-fleet-{time.strftime('%Y%m%d-%H%M%S')}"
    return Prepared(parent, base, texts, SeriesPoints(points, now_mono, now_mono, now_wall),
                    set())


def summary(session: fleet.FleetSession, rows: list[fleet.FleetRow],
            comparison: compare.Comparison | None) -> str:
    why = session.status.message if session.status else "no answer yet"
    out = [f"# engram-top fleet snapshot, {time.strftime('%Y-%m-%d %H:%M:%S')}", "",
           f"{len(rows)} nodes through Prometheus at {session.url}"
           + ("" if session.ok else f" (not answering: {why})"),
           "", "| node | placement | state | HBM/GPU max GiB | KV usage | KV capacity | "
           "host available GiB | TTFT p99 ms | TPOT p99 ms | out tok/s | alerts |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def f(v: float | None, scale: float = 1.0, digits: int = 1) -> str:
            return "–" if v is None else f"{v / scale:.{digits}f}"
        # Node, placement and alerts are Prometheus labels: one cell each, whatever they hold.
        out.append(f"| {table_cell(r.node)} | {table_cell(r.placement)} | "
                   f"{table_cell(r.state)} | {f(r.hbm_max, GIB)} | "
                   f"{f(None if r.kv_usage is None else 100 * r.kv_usage)}% | "
                   f"{f(r.kv_tokens, 1e6, 2)}M | {f(r.host_available, GIB)} | "
                   f"{f(None if r.ttft_p99 is None else r.ttft_p99 * 1000)} | "
                   f"{f(None if r.tpot_p99 is None else r.tpot_p99 * 1000)} | "
                   f"{f(r.output_tok_s)} | {table_cell(', '.join(r.alerts + r.missing))} |")
    if comparison is not None:
        out += ["", "## Placements across nodes (each node one trial)", "",
                *to_markdown(comparison).rstrip("\n").split("\n")]
    return "\n".join(map(visible, out)) + "\n"

