"""The recording file's format: how readings, run facts and events become JSON lines and
come back exactly. engram_top.record.recorder writes and reads files;
engram_top.record.replay plays them.

The file. Line 1 is a header {"type": "header", "format": 1, ...}: engram-top's version, the
node, wall and monotonic clocks at the start, the scenario definitions as plain data. Every
other line is one record with "t", seconds since the recording started (monotonic, so a
replay on another machine needs nothing of this one's clock). A file holds one session; one
that an older engram-top appended a second session to holds a second header, and reads as
two sessions:

  reading  {"kind": "gpu"|"host"|"server"|"NODE/SOURCE", "reading": {...}}   a Reading with
           its typed data; data of a type without a format here as {"type": "other",
           "kind": its type, "fields": {...}}, read back as OtherData
  event    {"wall", "level", "text"}
  run      {"run": "r1", "set": bool, "facts": {...}}   RunFacts fields that changed (all of them
           the first time); "set": it became the run on screen (RunStore.set_run)
  log      {"run": "r1", "lines": [[t, line], ...]}      new server log lines of that run
  load     {"load": {...}}                                 the synthetic load's counters
  end      {}                                              the recorder closed cleanly

Monotonic fields (Reading.at, failing_since, RunFacts.launched_at/ready_at/ended_at, log
times) are stored relative to the recording's start too. Readings round-trip exactly:
dataclasses are written as their fields and read back by their type hints (tuples, the Status
enum, int dict keys); values typed Any keep tuples and non-string keys with "$tuple"/"$items".
A run's start-up facts and Engram setting are typed the same way; a recording made before
they were kept them as plain data, which is read back into the types (decode_typed).

Reading a file back: a line that is not JSON, or a record that does not decode, stops with
RecordingError "PATH:LINE: what is wrong", except a last line without its newline: that is
the half line a killed process can leave, and it is skipped and counted (`skipped`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin

from collectors.figure_bounds import bounded
from collectors.readings import GpuData, HostData, OtherData, Reading, ServerData
from engram_top.model.redact import redact
from engram_top.model.store import RunFacts
from engram_top.record.typed_json import (
    decode,
    decode_fields,
    encode,
    loose,
    own_json,
    type_hints,
    unloose,
)

FORMAT = 1
TICK_S = 0.25  # how often a running load's figures are sampled
# How often run facts mutated in place are looked at (a change told through the store is
# written at once): encoding every run's facts to find what changed was a fifth of an idle
# agent's time at four times a second.
FACTS_S = 1.0
LOG_KEEP = 400  # log lines a replayed run keeps, as the supervisor does
MIN_SPEED, MAX_SPEED = 0.25, 16.0
DATA_TYPES: dict[str, type] = {c.__name__: c for c in (GpuData, HostData, ServerData)}
OTHER = "other"  # a reading's data of any other type, as its plain fields
# RunFacts fields on the monotonic clock: stored relative to the recording start.
MONO_FIELDS = ("launched_at", "ready_at", "ended_at")
# Not recorded: the log deque goes as "log" records, and a replay counts the lines it feeds.
SKIP_FIELDS = ("log_lines", "lines_seen")
# A record later than this after the recording's start is damage, not a long session.
MAX_T = 366 * 24 * 3600.0
MAX_WALL = 253402300799.0  # 9999-12-31T23:59:59Z: a wall clock later is damage
# Dict fields written as a patch of their changed keys: the start-up facts change with every
# log line (last line time, decode stats) and are a few KB whole.
PATCH_FIELDS = ("startup", "results", "phase_durations")
# Typed fields an older recording kept as plain data: decoded from either (decode_typed).
TYPED_FIELDS = ("startup", "engram")


class RecordingError(ValueError):
    """A recording that cannot be read: the message names PATH:LINE."""


def plain_fields(data: Any) -> Any:
    """A reading's data of a type without a format of its own, as plain JSON fields."""
    if isinstance(data, OtherData):
        return loose(data.fields)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return loose({f.name: getattr(data, f.name) for f in dataclasses.fields(data)})
    if isinstance(data, Mapping):
        return loose({str(k): v for k, v in data.items()})
    return {"value": loose(data)}


def encode_reading(reading: Reading[Any], origin: float = 0.0) -> dict[str, Any]:
    """A Reading as JSON data; monotonic times relative to ``origin``."""
    data = reading.data
    if data is None:
        encoded = None
    elif type(data).__name__ in DATA_TYPES:
        encoded = {"type": type(data).__name__, **encode(data, type(data))}
    else:  # kept as plain fields, read back as OtherData: never left out
        encoded = {"type": OTHER, "kind": getattr(data, "kind", type(data).__name__),
                   "fields": plain_fields(data)}
    return {
        "source": reading.source, "status": reading.status.value,
        "data": encoded,
        "message": reading.message, "at": reading.at - origin, "wall": reading.wall,
        "failing_since": None if reading.failing_since is None
        else reading.failing_since - origin,
    }


def decode_reading(obj: Any, origin: float = 0.0, where: str = "reading") -> Reading[Any]:
    """Inverse of encode_reading; monotonic times become ``origin`` + the stored ones."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object")
    data = obj.get("data")
    value = None
    if isinstance(data, dict) and data.get("type") == OTHER:
        if not isinstance(data.get("kind"), str) or not isinstance(data.get("fields"), dict):
            raise ValueError(f"{where}.data: an {OTHER} reading needs 'kind' and 'fields'")
        value = OtherData(data["kind"], unloose(data["fields"]))
    elif data is not None:
        if not isinstance(data, dict) or data.get("type") not in DATA_TYPES:
            kind = data.get("type") if isinstance(data, dict) else data
            raise ValueError(f"{where}.data: unknown data type {kind!r} "
                             f"(known: {', '.join(DATA_TYPES)})")
        fields = {k: v for k, v in data.items() if k != "type"}
        value = decode_fields(DATA_TYPES[data["type"]], fields, f"{where}.data")
    if isinstance(value, ServerData):
        value = bounded(value)  # NaN or absurd figures of a recording made before the checks
        value = fields_from_extra(value)
    rest = {k: v for k, v in obj.items() if k != "data"}
    missing = [k for k in ("at", "wall") if k not in rest]  # defaults would make up a time
    if missing:
        raise ValueError(f"{where}: missing fields {missing}")
    for key in ("at", "wall", "failing_since"):
        check_time(rest.get(key), f"{where}.{key}")
    reading = decode_fields(Reading, rest, where)
    return dataclasses.replace(
        reading, data=value, at=reading.at + origin,
        failing_since=None if reading.failing_since is None
        else reading.failing_since + origin)


# ServerData's figures a recording made before they were fields kept in its extra dict.
EXTRA_FIELDS = ("server_args", "not_reported", "simulated")


def fields_from_extra(data: ServerData) -> ServerData:
    """An older recording's server data with what its extra dict held of the fields."""
    moved: dict[str, Any] = {k: data.extra[k] for k in EXTRA_FIELDS
                             if isinstance(data.extra.get(k), dict)}
    if not moved:
        return data
    if "not_reported" in moved:
        moved["not_reported"] = {str(k): str(v) for k, v in moved["not_reported"].items()}
    return dataclasses.replace(data, **moved, extra={k: v for k, v in data.extra.items()
                                                     if k not in moved})


def encode_facts(facts: RunFacts, origin: float) -> dict[str, Any]:
    hints = type_hints(RunFacts)
    out = {}
    for f in dataclasses.fields(RunFacts):
        if f.name in SKIP_FIELDS:
            continue
        value = getattr(facts, f.name)
        if f.name in MONO_FIELDS and value is not None:
            value -= origin
        out[f.name] = encode(value, hints[f.name])
    return out


@dataclasses.dataclass(frozen=True)
class Patch:
    """A dict field's change: keys set (to new values) and keys dropped."""

    set: dict[str, Any]
    drop: tuple[str, ...]

    def apply(self, current: Any) -> Any:
        if own_json(type(current)):  # patched in its JSON form, as it was written
            return type(current).from_json(self.apply(current.to_json()))
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            defaults = type(current)()  # a dropped field goes back to its default
            return dataclasses.replace(current, **copy.deepcopy(self.set),
                                       **{d: getattr(defaults, d) for d in self.drop})
        out = {k: v for k, v in current.items() if k not in self.drop}
        out.update(copy.deepcopy(self.set))
        return out


def patch_of(before: Any, now: Any) -> dict[str, Any] | None:
    """The JSON patch from one encoded dict to another, if both are plain objects."""
    plain = (isinstance(before, dict) and isinstance(now, dict)
             and "$items" not in before and "$items" not in now)
    if not plain:
        return None
    return {"$patch": {k: v for k, v in now.items() if k not in before or before[k] != v},
            "$drop": [k for k in before if k not in now]}


def decode_facts_fields(data: Any, origin: float, where: str) -> dict[str, Any]:
    """Some RunFacts fields (as a run record holds them) as values, Patch for a patched dict
    field; monotonic ones rebased."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object")
    hints = type_hints(RunFacts)
    known = {f.name for f in dataclasses.fields(RunFacts)} - set(SKIP_FIELDS)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown}")
    out: dict[str, Any] = {}  # each field's value as its type hint decodes it, or a Patch
    for k, v in data.items():
        hint = hints[k]
        if k in PATCH_FIELDS and isinstance(v, dict) and "$patch" in v:
            drop = v.get("$drop", [])
            if not isinstance(v["$patch"], dict) or not isinstance(drop, list):
                raise ValueError(f"{where}.{k}: a patch needs $patch {{...}} and $drop [...]")
            if own_json(hint):  # checked; a patch applies to the JSON form
                values = decode(v["$patch"], hint, f"{where}.{k}").to_json()
            elif isinstance(hint, type) and dataclasses.is_dataclass(hint):  # field by field
                fields = type_hints(hint)
                values = {name: decode_typed(value, fields[name], f"{where}.{k}.{name}")
                          for name, value in v["$patch"].items() if name in fields}
                drop = [d for d in drop if d in fields]
            else:
                values = decode(v["$patch"], hint, f"{where}.{k}")
            out[k] = Patch(values, tuple(str(d) for d in drop))
        elif k == "engram" and v == {}:
            out[k] = None  # an older recording's "nothing read yet"
        elif k in TYPED_FIELDS:
            out[k] = decode_typed(v, hint, f"{where}.{k}")
        else:
            out[k] = decode(v, hint, f"{where}.{k}")
    for name in (*MONO_FIELDS, "launched_wall"):
        check_time(out.get(name), f"{where}.{name}")
    for name in MONO_FIELDS:
        if out.get(name) is not None:
            out[name] += origin
    return out


def typed_shape(data: Any, hint: Any, where: str) -> Any:
    """JSON data of a typed field (the start-up facts) put in the shape decode() reads,
    whichever recording wrote it: an older one kept these facts as plain data (its tuples
    and integer-keyed dicts as "$tuple" and "$items") with keys since dropped or never
    fields (current_phase), and those are left out here. A figure that is not finite is
    damage: ValueError names it."""
    if isinstance(data, float) and not math.isfinite(data):
        raise ValueError(f"{where}: {data} is not a finite number")
    if hint is Any or hint is object:
        return data  # decode() reads it as plain data
    if isinstance(data, dict) and set(data) == {"$tuple"} and isinstance(data["$tuple"], list):
        data = data["$tuple"]
    elif isinstance(data, dict) and set(data) == {"$items"} and isinstance(data["$items"], list):
        data = {k: v for k, v in (pair for pair in data["$items"]
                                  if isinstance(pair, list) and len(pair) == 2)}
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        return typed_shape(data, rest[0], where) if len(rest) == 1 else data
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(data, dict):
        hints = type_hints(hint)
        return {k: typed_shape(v, hints[k], f"{where}.{k}") for k, v in data.items()
                if k in hints}
    if origin is dict and isinstance(data, dict):
        value_hint = get_args(hint)[1]
        return {k: typed_shape(v, value_hint, f"{where}[{k!r}]") for k, v in data.items()}
    if origin in (tuple, list) and isinstance(data, list):
        args = get_args(hint)
        item = args[0] if args else Any
        return [typed_shape(v, item, f"{where}[{i}]") for i, v in enumerate(data)]
    return data


def decode_typed(data: Any, hint: Any, where: str) -> Any:
    """A typed field of a run record (the start-up facts), as any recording wrote it."""
    return decode(typed_shape(data, hint, where), hint, where)


def check_time(value: Any, where: str) -> None:
    """A time (seconds) must be a finite number: a wall of 1e999 reads as infinity, and
    would reach the screen's clock and snapshot.json."""
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and not math.isfinite(value):
        raise ValueError(f"{where}: {value} is not a time (not a finite number)")
    if where.endswith("wall") and isinstance(value, int | float) \
            and not 0 <= value <= MAX_WALL:  # a clock shown as a date: within the calendar
        raise ValueError(f"{where}: {value} is not a time of day (a date past the year 9999, "
                         "or before 1970)")


def scenarios_plain(scenario_file: Any, found: set[str] | None = None) -> dict[str, Any] | None:
    """The scenario definitions as plain data, secrets (API keys, tokens in the environment)
    redacted: a recording travels. The secret values removed go into `found`."""
    if scenario_file is None or not hasattr(scenario_file, "scenarios"):
        return None
    return redact(unloose(loose(scenario_file)), found)


def engram_top_version() -> str | None:
    from importlib import metadata
    try:
        return metadata.version("engram-top")
    except metadata.PackageNotFoundError:
        return None


def update_facts(facts: RunFacts, fields: dict[str, Any]) -> None:
    for name, value in copied_fields(fields).items():
        setattr(facts, name, value.apply(getattr(facts, name))
                if isinstance(value, Patch) else value)


def copied_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Mutable values copied: the parsed recording stays as read across rebuilds."""
    return {k: copy.deepcopy(v) if isinstance(v, dict | list) else v for k, v in fields.items()}
