"""A side of `engram-top diff` read from a snapshot (its folder or its snapshot.json): the
watched run's fingerprint, the HBM and host ledgers, KV capacity and latency as the snapshot
wrote them, in the same terms as a recording's side, so a snapshot diffs against a snapshot
or a recording. A file someone edited is read field by field: a field of the wrong kind
stops the diff with its name, never a traceback."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from engram_top.cli.diff_side import DiffError, Side, figures
from engram_top.model.figures import RunFigures
from engram_top.model.fingerprint import Fingerprint
from engram_top.record.file_format import decode_typed

SNAPSHOT = "snapshot.json"


def snapshot_file(path: Path) -> Path | None:
    """PATH's snapshot.json where PATH is a snapshot (its folder, or the file), else None."""
    if path.is_dir():
        return path / SNAPSHOT if (path / SNAPSHOT).is_file() else None
    named = path.name == SNAPSHOT or path.suffix == ".json" and _reads_as_snapshot(path)
    return path if named else None


def _reads_as_snapshot(path: Path) -> bool:
    """A .json file of another name is a snapshot if it reads as one (a copy renamed)."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return b'"snapshot_version"' in head


def read_snapshot(path: Path) -> Side:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DiffError(f"{path}: not a snapshot's JSON ({exc})") from None
    if not isinstance(data, dict) or "snapshot_version" not in data:
        raise DiffError(f"{path}: no 'snapshot_version': not a snapshot.json")
    shown = _object(data.get("run"), f"{path}: run", optional=True)
    scenario = shown.get("scenario") if shown else None
    fingerprint, results = _watched_facts(path, data, shown)
    side = Side(path, f"taken {_text(data.get('taken_at'), f'{path}: taken_at')}",
                scenario if isinstance(scenario, str) else None, fingerprint)
    for i, gpu in enumerate(_list(data.get("hbm_ledger"), f"{path}: hbm_ledger", optional=True)):
        where = f"{path}: hbm_ledger[{i}]"
        gpu = _object(gpu, where)
        index = _number(gpu.get("index"), f"{where}.index")
        for j, line in enumerate(_list(gpu.get("lines"), f"{where}.lines")):
            line = _object(line, f"{where}.lines[{j}]")
            side.hbm[f"GPU {index:g} · {_text(line.get('name'), f'{where}.lines[{j}].name')}"] = \
                _maybe(line.get("bytes"), f"{where}.lines[{j}].bytes")
        side.hbm[f"GPU {index:g} · unexplained"] = _maybe(
            gpu.get("unexplained_bytes"), f"{where}.unexplained_bytes")
        side.hbm[f"GPU {index:g} · NVML used"] = _maybe(
            gpu.get("used_bytes"), f"{where}.used_bytes")
    host = _object(data.get("host_ledger"), f"{path}: host_ledger", optional=True)
    if host:
        _lines(side.host, host.get("lines"), "", f"{path}: host_ledger.lines")
        per_node = _object(host.get("per_node"), f"{path}: host_ledger.per_node", optional=True)
        for node, lines in sorted((per_node or {}).items()):
            _lines(side.host, lines, f"NUMA {node} · ", f"{path}: host_ledger.per_node.{node}")
        side.host["available"] = _maybe(host.get("available_bytes"),
                                         f"{path}: host_ledger.available_bytes")
    kv = _object(data.get("kv"), f"{path}: kv", optional=True)
    side.figures = figures(
        _maybe(kv.get("capacity_tokens"), f"{path}: kv.capacity_tokens") if kv else None,
        results,
        _maybe(shown.get("ready_s_node"), f"{path}: run.ready_s_node") if shown else None)
    return side


def _watched(path: Path, data: dict[str, Any], shown: dict[str, Any] | None
             ) -> tuple[int, dict[str, Any]] | None:
    """The watched run's entry in 'runs': the one launched when the shown run was."""
    if not shown:
        return None
    runs = _list(data.get("runs"), f"{path}: runs", optional=True)
    found = None
    for i, run in enumerate(runs):
        run = _object(run, f"{path}: runs[{i}]")
        if run.get("scenario") == shown.get("scenario"):
            found = (i, run)  # the latest of its scenario, unless one matches the launch
            if run.get("launched_wall") == shown.get("launched_wall"):
                return found
    return found


def _watched_facts(path: Path, data: dict[str, Any], shown: dict[str, Any] | None
                   ) -> tuple[Fingerprint | None, RunFigures | None]:
    """The watched run's fingerprint and figures, each None where the snapshot has none."""
    watched = _watched(path, data, shown)
    if watched is None:
        return None, None
    i, run = watched
    where = f"{path}: runs[{i}]"
    try:
        fp = None if run.get("fingerprint") is None else decode_typed(
            run["fingerprint"], Fingerprint, f"{where}.fingerprint")
    except ValueError as exc:
        raise DiffError(str(exc)) from None
    try:
        figures = None if run.get("results") is None else RunFigures.from_json(run["results"])
    except ValueError as exc:
        raise DiffError(f"{where}.results: {exc}") from None
    return fp, figures


def _lines(out: dict[str, float | None], lines: Any, prefix: str, where: str) -> None:
    for j, line in enumerate(_list(lines, where)):
        line = _object(line, f"{where}[{j}]")
        out[prefix + _text(line.get("name"), f"{where}[{j}].name")] = \
            _maybe(line.get("bytes"), f"{where}[{j}].bytes")


def _object(value: Any, where: str, optional: bool = False) -> dict[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise DiffError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, where: str, optional: bool = False) -> list[Any]:
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise DiffError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DiffError(f"{where}: expected text, got {type(value).__name__}")
    return value


def _maybe(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DiffError(f"{where}: expected a number, got {value!r:.40}")
    return float(value)
