"""`engram-top diff A B`: what changed between two recordings (a dashboard's, or the newest of
an agent's folder), two snapshots, or one of each: what the server ran as first (its
fingerprint: engine and version, arguments, switches, driver, node), then its memory (HBM
per GPU and ledger line, host RAM per line and NUMA node), its KV capacity, its latency
(engram_top.cli.diff_side). Two bench reports are set side by side scenario by scenario,
with intervals (engram_top.cli.diff_bench). Markdown, or --json. Exit 0, or 2 where a side
cannot be read or a bench report is set against another kind."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from collectors.units import GIB, gib
from engram_top.cli import diff_bench
from engram_top.cli.diff_side import DiffError, Side, read_recording
from engram_top.cli.diff_snapshot import read_snapshot, snapshot_file
from engram_top.cli.output import print_json
from engram_top.model.fingerprint import Change, changes


def _pct(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a"
    if a == 0:
        return "=" if b == 0 else "new"
    return f"{(b - a) / abs(a) * 100:+.2f}%"


def _num(v: float | None, in_gib: bool) -> str:
    if v is None:
        return "n/a"
    return gib(v) if in_gib else f"{v:,.2f}".rstrip("0").rstrip(".")


def _rows(a: dict[str, float | None], b: dict[str, float | None], in_gib: bool) -> list[str]:
    """Every row of figures; of memory (in GiB), only the lines that moved by 0.05 GiB."""
    out = []
    for key in [*a, *(k for k in b if k not in a)]:
        x, y = a.get(key), b.get(key)
        moved = (x is None) != (y is None) or (
            x is not None and y is not None and abs(x - y) >= 0.05 * GIB)
        if in_gib and not moved:
            continue
        out.append(f"| {key} | {_num(x, in_gib)} | {_num(y, in_gib)} | {_pct(x, y)} |")
    return out


def _name(s: Side) -> str:
    return f"{s.path} {s.when} ({s.scenario or 'no run'})"


def markdown(a: Side, b: Side, found: list[Change]) -> str:
    lines = ["# engram-top diff", "", f"- A: {_name(a)}", f"- B: {_name(b)}", "",
             "## What it ran as", ""]
    if a.fingerprint is None or b.fingerprint is None:
        lines.append("No fingerprint on " + " and ".join(
            s.path.name for s in (a, b) if s.fingerprint is None)
            + " (a recording from before engram-top kept one): what ran is not compared.")
    elif not found:
        lines.append("The same: engine and version, arguments, switches, driver and node.")
    else:
        lines += ["| what | A | B |", "|---|---|---|"]
        lines += [f"| {c.what} | {c.before} | {c.after} |" for c in found]
    for title, key, in_gib in (("HBM (GiB; lines that moved by 0.05 GiB or more)", "hbm", True),
                            ("Host RAM (GiB; lines that moved by 0.05 GiB or more)", "host",
                             True),
                            ("KV pool and latency", "figures", False)):
        rows = _rows(getattr(a, key), getattr(b, key), in_gib)
        lines += ["", f"## {title}", ""]
        lines += (["| | A | B | change |", "|---|---|---|---|", *rows] if rows
                  else ["No change."])
    return "\n".join(lines) + "\n"


def read_side(path: Path) -> Side:
    """A recording's side or a snapshot's, by what PATH holds."""
    snapshot = snapshot_file(path)
    return read_snapshot(snapshot) if snapshot is not None else read_recording(path)


def diff(path_a: Path, path_b: Path, as_json: bool) -> int:
    try:
        for path in (path_a, path_b):
            if not path.exists():
                raise DiffError(f"{path}: no such file or folder")
        reports = [diff_bench.report_file(p) for p in (path_a, path_b)]
        if reports[0] is not None and reports[1] is not None:
            return _benches(reports[0], reports[1], as_json)
        for path, report in zip((path_a, path_b), reports, strict=True):
            if report is not None:
                raise DiffError(f"{path}: a bench report, and the other side is not: a bench "
                                "report is set against another bench report")
        a, b = read_side(path_a), read_side(path_b)
    except DiffError as exc:
        print(f"engram-top diff: {exc}", file=sys.stderr)
        return 2
    found = changes(a.fingerprint, b.fingerprint) \
        if a.fingerprint is not None and b.fingerprint is not None else []
    if as_json:
        print_json({"a": _plain(a), "b": _plain(b),
                    "fingerprint_changes": [[c.what, c.before, c.after] for c in found]})
    else:
        sys.stdout.write(markdown(a, b, found))
    return 0


def _benches(path_a: Path, path_b: Path, as_json: bool) -> int:
    a, b = diff_bench.read_bench(path_a), diff_bench.read_bench(path_b)
    if as_json:
        print_json(diff_bench.to_json(a, b))
    else:
        sys.stdout.write(diff_bench.markdown(a, b))
    return 0


def _plain(s: Side) -> dict[str, Any]:
    return {"path": str(s.path), "when": s.when, "scenario": s.scenario,
            "hbm_bytes": s.hbm, "host_bytes": s.host, "figures": s.figures}
