"""The commands that read files and print: compare (runs side by side), inspect-log and
inspect-metrics (what the parsers extract)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from engram_top.cli.output import print_json
from engram_top.cli.sessions import load_probe
from engram_top.seed import reference


def compare_files(args: argparse.Namespace) -> int:
    from engram_top.compare.comparison import compare, to_json
    from engram_top.compare.markdown import to_markdown
    from engram_top.compare.verdict import verdict
    from engram_top.probe.report import ProbeFileError
    from engram_top.record.importers import BenchFileError, load_runs, report_price
    notes: list[str] = []
    try:
        results = [r for path in args.files
                   for r in load_runs(path, gpus=args.gpus, notes=notes)]
        probe = load_probe(args.probe)
    except (BenchFileError, ProbeFileError) as exc:
        print(f"engram-top compare: {exc}", file=sys.stderr)
        return 2
    for note in notes:  # a recording's lines skipped: the comparison is of the rest
        print(f"engram-top compare: {note}", file=sys.stderr)
    if args.baseline is None and results:  # the first scenario, and said so
        args.baseline = results[0].scenario
        print(f"engram-top compare: baseline: {args.baseline} (the first scenario; "
              "--baseline NAME picks another)", file=sys.stderr)
    if args.baseline not in {r.scenario for r in results}:
        known = ", ".join(sorted({r.scenario for r in results}))
        print(f"engram-top compare: no runs of '{args.baseline}' (runs: {known})",
              file=sys.stderr)
        return 2
    price = args.price_per_gpu_hour
    if price is None:  # the price the bench reports were written with, if they agree
        prices = {p for path in args.files if (p := report_price(path)) is not None}
        if len(prices) > 1:
            shown = ", ".join(f"{p:g}" for p in sorted(prices))
            print(f"engram-top compare: the reports were priced differently ({shown} per "
                  "GPU-hour): give --price-per-gpu-hour", file=sys.stderr)
            return 2
        price = prices.pop() if prices else None
    c = compare(results, args.baseline, price_per_gpu_hour=price,
                reference=reference.default(), probe=probe)
    found = verdict(c, warming=c.warming)
    if args.json:
        print_json({**to_json(c), "verdict": found.to_json()})
    else:
        print(found.markdown())  # the verdict first: what the table below says, axis by axis
        print(to_markdown(c))
    return 0


def capped_lines(stream: TextIO, cap: int) -> Iterator[str]:
    """A text's lines, each at most ``cap`` characters and "...": a longer one is given as
    the log follower gives it, its start cut (a 2 GB line without a newline took over 4 GB
    to read whole)."""
    while line := stream.readline(cap):
        if line.endswith("\n") or len(line) < cap:
            yield line
            continue
        while not line.endswith("\n") and (piece := stream.readline(cap)):
            line = (line + piece)[-cap:]
        yield "..." + line


def inspect_log(path: Path, kind: str) -> int:
    from scenarios import engines
    from scenarios.logtail import MAX_LINE
    parser = engines.get(kind).parser()
    try:
        # Line by line: a log of many launches can be larger than memory wants to hold.
        with path.open(errors="replace") as lines:
            for line in capped_lines(lines, MAX_LINE):
                parser.feed(line)
    except OSError as exc:
        print(f"engram-top inspect-log: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 1
    print_json(parser.facts().to_dict())
    return 0


def inspect_metrics(source: str, kind: str) -> int:
    from scenarios import engines
    engine = engines.get(kind)
    try:
        if source.startswith(("http://", "https://")):
            base = source.rstrip("/")
            text = asyncio.run(_fetch(base if base.endswith("/metrics") else base + "/metrics",
                                      engine.page_limit("/metrics")))
        else:
            # As it came over HTTP: a CR inside a label value is no line end.
            with open(source, errors="replace", newline="") as f:
                text = f.read()
    except TimeoutError:
        print(f"engram-top inspect-metrics: {source}: no whole page within {FETCH_DEADLINE_S:g} "
              "s", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"engram-top inspect-metrics: cannot read {source}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # httpx errors: name the URL and the reason, no traceback
        print(f"engram-top inspect-metrics: {source}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    try:
        out = engine.inspect_metrics(text)
    except ValueError as exc:  # a page that is not Prometheus text, line named
        print(f"engram-top inspect-metrics: {source}: {exc}", file=sys.stderr)
        return 1
    print_json(out)
    return 0


FETCH_DEADLINE_S = 5.0


async def _fetch(url: str, limit_bytes: int) -> str:
    """A page, whole within FETCH_DEADLINE_S and the size a /metrics page can have (a server
    that drips, or streams without end, is cut off)."""
    import httpx

    from collectors.base import get_bounded
    async with httpx.AsyncClient(timeout=5.0) as client:
        resp = await get_bounded(client, url, deadline_s=FETCH_DEADLINE_S,
                                 limit_bytes=limit_bytes)
        return resp.raise_for_status().text

