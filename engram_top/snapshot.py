"""snapshot.json: every current reading and the run's facts, written without a terminal."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from engram_top import facts
from engram_top.reference import Reference
from engram_top.store import RunStore

SNAPSHOT_VERSION = 1


class SnapshotError(Exception):
    """The snapshot could not be written; the message names the path and the reason."""


def build(store: RunStore, ref: Reference) -> dict[str, Any]:
    now = time.monotonic()
    run = store.run
    readings = {}
    for kind in store.latest:
        good = store.last_ok.get(kind)
        readings[kind] = {**facts.source_status(store, kind, now),
                          "data": facts.plain(good.data) if good else None}
    placement = run.placement if run else None
    return {
        "snapshot_version": SNAPSHOT_VERSION,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run": facts.run_facts(store),
        "gpus": facts.gpu_facts(store),
        "host": facts.host_facts(store),
        "kv": facts.kv_facts(store),
        "latency": facts.latency_facts(store),
        "load": dict(store.load),
        "readings": readings,
        "events": [{"wall": e.wall, "level": e.level, "text": e.text} for e in store.events],
        "reference": {
            "file": ref.path.name,
            "placement": (ref.figures()["placements"].get(placement) if placement else None),
            "deltas": {k: v.to_dict() for k, v in ref.deltas(placement).items()}
            if placement else {},
        },
    }


def check_writable(out_dir: Path) -> None:
    """Create the folder and prove a file can be written there; SnapshotError if not."""
    probe = out_dir / f".engram-top-probe.{os.getpid()}"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise SnapshotError(f"cannot write into {out_dir}: {exc.strerror or exc}") from exc


def write(out_dir: Path, snapshot: dict[str, Any]) -> Path:
    """Write DIR/snapshot.json atomically: a temporary file, then a rename."""
    target = out_dir / "snapshot.json"
    tmp = out_dir / f".snapshot.json.{os.getpid()}.tmp"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(snapshot, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise SnapshotError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return target
