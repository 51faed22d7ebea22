"""`engram-top why PATH`: why the servers in a recording or a snapshot died, as the session
that watched them classified each death (engram_top.model.death): its class, evidence and
the next action. Exit 0 where a death was found, 1 where none was recorded, 2 where PATH
cannot be read."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from engram_top.cli.output import print_json
from engram_top.model.death import Death, death_lines
from engram_top.record.file_format import RecordingError, decode_typed
from engram_top.record.reader import facts_from_recording, is_recording

SNAPSHOT = "snapshot.json"


class WhyError(Exception):
    pass


def _from_snapshot(path: Path) -> tuple[list[Death], int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WhyError(f"{path}: not a snapshot's JSON ({exc})") from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise WhyError(f"{path}: no 'runs' list: not a snapshot.json")
    deaths = []
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            continue
        earlier = run.get("earlier_deaths")  # a server restarted on its URL: oldest first
        values = [*(earlier if isinstance(earlier, list) else ()), run.get("death")]
        for j, value in enumerate(values):
            if value is None:
                continue
            where = f"runs[{i}].earlier_deaths[{j}]" if j < len(values) - 1 else \
                f"runs[{i}].death"
            try:
                deaths.append(decode_typed(value, Death, f"{path}: {where}"))
            except ValueError as exc:
                raise WhyError(str(exc)) from None
    return deaths, len(runs)


def _from_recording(path: Path, notes: list[str]) -> tuple[list[Death], int]:
    try:
        runs = facts_from_recording(path, notes)
    except (OSError, RecordingError, ValueError) as exc:
        raise WhyError(f"{path}: {exc}") from None
    return [d for r in runs for d in r.deaths], len(runs)


def _files(path: Path) -> list[Path]:
    """The files PATH names: a snapshot folder's snapshot.json, a recordings folder's
    recordings (the agent's), or the file itself."""
    if path.is_dir():
        if (path / SNAPSHOT).is_file():
            return [path / SNAPSHOT]
        found = sorted(p for p in path.iterdir() if p.is_file() and is_recording(p))
        if not found:
            raise WhyError(f"{path}: no {SNAPSHOT} and no recording in it")
        return found
    if not path.exists():
        raise WhyError(f"{path}: no such file or folder")
    return [path]


def why(path: Path, as_json: bool) -> int:
    notes: list[str] = []
    deaths: list[tuple[Path, Death]] = []
    runs = 0
    try:
        for file in _files(path):
            if file.suffix == ".json":
                found, n = _from_snapshot(file)
            elif is_recording(file):
                found, n = _from_recording(file, notes)
            else:
                raise WhyError(f"{file}: neither a recording nor a snapshot.json")
            deaths += [(file, d) for d in found]
            runs += n
    except WhyError as exc:
        print(f"engram-top why: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"engram-top why: {note}", file=sys.stderr)
    if as_json:
        print_json({"runs": runs, "deaths": [_plain(f, d) for f, d in deaths]})
    elif not deaths:
        print(f"No death recorded in {path}: {runs} run{'s' * (runs != 1)}, each stopped, "
              f"still running or ended before engram-top classified deaths.")
    else:
        for file, death in deaths:
            print(f"{file}:")
            print("\n".join(death_lines(death)))
    return 0 if deaths else 1


def _plain(file: Path, death: Death) -> dict[str, Any]:
    return {"file": str(file), **dataclasses.asdict(death)}  # kind: a StrEnum, its value
