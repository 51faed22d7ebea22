"""`engram-top diff A B`: what changed between two recordings (a dashboard's, or the newest of
an agent's folder): what the server ran as first (its fingerprint: engine and version,
arguments, switches, driver, node), then its memory (HBM per GPU and ledger line, host RAM
per line and NUMA node), its KV capacity, its latency. Each side is read where its watched
server last served: a server that died or was stopped at the end is read before it ended.
Markdown, or --json. Exit 0, or 2 where a side cannot be read."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.readings import Status
from collectors.source import SourceName
from collectors.units import GIB, gib
from engram_top.cli.output import print_json
from engram_top.model.facts import kv_facts
from engram_top.model.fingerprint import Change, Fingerprint, changes
from engram_top.model.ledger import hbm_ledger, host_ledger
from engram_top.model.store import RunFacts, RunStore
from engram_top.record.file_format import RecordingError
from engram_top.record.reader import is_recording
from engram_top.record.replay import ReplaySession


@dataclass
class Side:
    path: Path
    at_s: float
    run: RunFacts | None
    fingerprint: Fingerprint | None
    hbm: dict[str, float | None] = field(default_factory=dict)  # "GPU 0 · KV pool": bytes
    host: dict[str, float | None] = field(default_factory=dict)  # "line" or "NUMA 1 · line"
    figures: dict[str, float | None] = field(default_factory=dict)


class DiffError(Exception):
    pass


def _recording(path: Path) -> Path:
    if path.is_dir():  # an agent's folder: its newest file
        found = sorted((p for p in path.iterdir() if p.is_file() and is_recording(p)),
                       key=lambda p: p.stat().st_mtime)
        if not found:
            raise DiffError(f"{path}: no recording in it")
        return found[-1]
    if not path.exists():
        raise DiffError(f"{path}: no such file or folder")
    if not is_recording(path):
        raise DiffError(f"{path}: not a recording")
    return path


def read_side(path: Path) -> Side:
    path = _recording(path)
    try:
        replay = ReplaySession(path, paused=True)
    except (OSError, RecordingError) as exc:
        raise DiffError(f"{path}: {exc}") from None
    end = replay.duration
    replay.seek(end)
    run = replay.store.run
    if run is not None and run.ended_at is not None:
        # Its server's last good reading before it ended: the figures it last served with.
        ended = run.ended_at - replay.origin
        good = [t for t, kind, payload in replay.recording.records
                if kind == "reading" and t <= ended and _server_ok(payload)]
        end = good[-1] if good else ended
        replay.seek(end)
        run = replay.store.run
    return _side(path, end, replay.store, run)


def _server_ok(payload: Any) -> bool:
    key, reading = payload
    return getattr(key, "source", None) == SourceName.SERVER and reading.status == Status.OK


def _side(path: Path, at_s: float, store: RunStore, run: RunFacts | None) -> Side:
    side = Side(path, at_s, run, run.fingerprint if run is not None else None)
    for gpu in hbm_ledger(store):
        for line in gpu.lines:
            side.hbm[f"GPU {gpu.index} · {line.name}"] = line.bytes
        side.hbm[f"GPU {gpu.index} · unexplained"] = gpu.unexplained_bytes
        side.hbm[f"GPU {gpu.index} · NVML used"] = gpu.used_bytes
    host = host_ledger(store)
    if host is not None:
        for line in host.lines:
            side.host[line.name] = line.bytes
        for node, lines in sorted(host.per_node.items()):
            for line in lines:
                side.host[f"NUMA {node} · {line.name}"] = line.bytes
        side.host["available"] = host.available_bytes
    kv = kv_facts(store)
    figures = run.results if run is not None else None
    side.figures = {
        "KV capacity (tokens)": kv.capacity_tokens if kv is not None else None,
        "TTFT p50 (ms)": _ms(figures.ttft_p50_s if figures else None),
        "TTFT mean (ms)": _ms(figures.ttft_mean_s if figures else None),
        "TPOT p50 (ms)": _ms(figures.itl_p50_s if figures else None),
        "output tokens/s": figures.output_tok_s if figures else None,
        "ready (s, node time)": run.node_seconds(run.ready_s) if run is not None else None,
    }
    return side


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000


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
    return f"{s.path} at {s.at_s:.0f} s ({s.run.scenario if s.run else 'no run'})"


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


def diff(path_a: Path, path_b: Path, as_json: bool) -> int:
    try:
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


def _plain(s: Side) -> dict[str, Any]:
    return {"path": str(s.path), "at_s": s.at_s,
            "scenario": s.run.scenario if s.run is not None else None,
            "hbm_bytes": s.hbm, "host_bytes": s.host, "figures": s.figures}
