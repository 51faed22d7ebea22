"""One side of `engram-top diff` in common terms: what ran (its fingerprint), its memory (HBM
per GPU and ledger line, host RAM per line and NUMA node), its KV capacity and latency; read
here from a recording (or an agent's folder: its newest), by engram_top.cli.diff_snapshot
from a snapshot. A recording's side is read where its watched server last served: a server
that died or was stopped at the end is read before it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.readings import Status
from collectors.source import SourceName
from engram_top.model.facts import kv_facts
from engram_top.model.figures import RunFigures
from engram_top.model.fingerprint import Fingerprint
from engram_top.model.ledger import hbm_ledger, host_ledger
from engram_top.model.store import RunFacts, RunStore
from engram_top.record.file_format import RecordingError
from engram_top.record.reader import is_recording
from engram_top.record.replay import ReplaySession


@dataclass
class Side:
    path: Path
    when: str  # "at 95 s" into a recording, "taken 2026-12-04T22:10:03+0000" (a snapshot)
    scenario: str | None
    fingerprint: Fingerprint | None
    hbm: dict[str, float | None] = field(default_factory=dict)  # "GPU 0 · KV pool": bytes
    host: dict[str, float | None] = field(default_factory=dict)  # "line" or "NUMA 1 · line"
    figures: dict[str, float | None] = field(default_factory=dict)


class DiffError(Exception):
    pass


def figures(kv_tokens: float | None, results: RunFigures | None,
            ready_node_s: float | None) -> dict[str, float | None]:
    """The KV pool and latency rows, the same for every kind of side."""
    r = results or RunFigures()
    return {"KV capacity (tokens)": kv_tokens, "TTFT p50 (ms)": _ms(r.ttft_p50_s),
            "TTFT mean (ms)": _ms(r.ttft_mean_s), "TPOT p50 (ms)": _ms(r.itl_p50_s),
            "output tokens/s": r.output_tok_s, "ready (s, node time)": ready_node_s}


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1000


def recording_file(path: Path) -> Path:
    if path.is_dir():  # an agent's folder: its newest file
        found = sorted((p for p in path.iterdir() if p.is_file() and is_recording(p)),
                       key=lambda p: p.stat().st_mtime)
        if not found:
            raise DiffError(f"{path}: no recording and no snapshot.json in it")
        return found[-1]
    if not path.exists():
        raise DiffError(f"{path}: no such file or folder")
    if not is_recording(path):
        raise DiffError(f"{path}: neither a recording, a snapshot nor a bench report")
    return path


def read_recording(path: Path) -> Side:
    path = recording_file(path)
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
    side = Side(path, f"at {at_s:.0f} s", run.scenario if run is not None else None,
                run.fingerprint if run is not None else None)
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
    side.figures = figures(kv.capacity_tokens if kv is not None else None,
                           run.results if run is not None else None,
                           run.node_seconds(run.ready_s) if run is not None else None)
    return side
