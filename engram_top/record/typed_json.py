"""Typed values as JSON data and back: a dataclass by its fields' type hints, untyped data
(`loose`) keeping what JSON would lose. How each type is written and read is worked out once
a type (functools.cache), not walked anew for every value: a recording writes three readings
a second, and an attach reads an agent's hour of them back.
"""

from __future__ import annotations

import dataclasses
import types
from collections import deque
from collections.abc import Callable
from enum import Enum
from functools import cache
from pathlib import PurePath
from typing import Any, Union, get_args, get_origin, get_type_hints


@cache
def type_hints(cls: type) -> dict[str, Any]:
    # Once a class: get_type_hints evaluates every annotation's text anew on each call, and a
    # recording encodes three readings a second.
    return get_type_hints(cls)


def encode(value: Any, hint: Any) -> Any:
    """A value of type ``hint`` as JSON data (the inverse of decode)."""
    return _encoder(hint)(value)


def _same(value: Any) -> Any:
    return value


@cache
def _encoder(hint: Any) -> Callable[[Any], Any]:
    """How a value of type ``hint`` is encoded, worked out once a type: a recording encodes
    three readings a second, and walking the hints anew for every field of every reading was
    most of an idle agent's recording time."""
    if hint is Any or hint is object:
        return loose
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        inner = _encoder(rest[0] if len(rest) == 1 else Any)
        if inner is _same:  # float | None and the like: None is itself too
            return _same
        return lambda v: None if v is None else inner(v)
    if origin is tuple or origin is list:
        args = get_args(hint)
        if origin is list or (len(args) == 2 and args[1] is Ellipsis):
            item = _encoder(args[0] if args else Any)
            return lambda v: [item(x) for x in v]
        items = [_encoder(a) for a in args]

        def fixed(v: Any) -> list[Any]:
            if len(v) != len(items):
                raise ValueError(f"expected {len(items)} items, got {len(v)}")
            return [f(x) for f, x in zip(items, v, strict=True)]
        return fixed
    if origin is dict:
        value_of = _encoder(get_args(hint)[1])
        return lambda v: {str(k): value_of(x) for k, x in v.items()}
    if own_json(hint):
        return lambda v: v.to_json()
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = type_hints(hint)
        # A plain field (a number, a string, None) is taken as it is, without a call: a GPU
        # reading has thirty of them a device, and a recording writes one a second.
        names = [(f.name, None if (enc := _encoder(hints[f.name])) is _same else enc)
                 for f in dataclasses.fields(hint)]
        return lambda v: {name: getattr(v, name) if f is None else f(getattr(v, name))
                          for name, f in names}
    if isinstance(hint, type) and issubclass(hint, Enum):
        return lambda v: hint(v).value  # a plain "ready" where a RunState is typed: the same
    return _same


def decode(data: Any, hint: Any, where: str) -> Any:
    """JSON data back to a value of type ``hint``; ValueError names the field (``where``)."""
    return _decoder(hint)(data, where)


# Where a value sits, for a message: the root's name, then (parent, piece) pairs built as a
# decoder descends (a field's name, a list index, a dict key), joined only for an error: an
# hour of an agent's recording read back formatted a path for every field of every reading.
Where = Any


def _where(w: Where) -> str:
    pieces: list[str] = []
    while isinstance(w, tuple):
        w, piece = w
        pieces.append(f"[{piece}]" if isinstance(piece, int) else
                      f"[{piece[1]!r}]" if isinstance(piece, tuple) else f".{piece}")
    return str(w) + "".join(reversed(pieces))


Decoder = Callable[[Any, Where], Any]


@cache
def _decoder(hint: Any) -> Decoder:
    """How JSON data of type ``hint`` is read back, worked out once a type."""
    if hint is Any or hint is object:
        return lambda d, w: unloose(d)
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            inner = _decoder(rest[0])
            return lambda d, w: None if d is None else inner(d, w)

        def either(d: Any, w: Where) -> Any:
            if d is not None and not any(is_scalar(d, a) for a in rest):
                raise ValueError(f"{_where(w)}: unexpected {type(d).__name__} {d!r}")
            return d
        return either
    if origin is tuple or origin is list:
        return _sequence_decoder(hint, origin)
    if origin is dict:
        key_hint, value_hint = get_args(hint)
        value_of = _decoder(value_hint)

        def mapping(d: Any, w: Where) -> Any:
            if not isinstance(d, dict):
                raise ValueError(f"{_where(w)}: expected an object, got {type(d).__name__}")
            out = {}
            for k, v in d.items():
                try:
                    key = int(k) if key_hint is int else k
                except ValueError:
                    raise ValueError(f"{_where(w)}: key {k!r} is not an integer") from None
                out[key] = value_of(v, (w, ("key", k)))
            return out
        return mapping
    if own_json(hint):
        def own(d: Any, w: Where) -> Any:
            try:
                return hint.from_json(d)
            except ValueError as exc:
                raise ValueError(f"{_where(w)}: {exc}") from None
        return own
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _fields_decoder(hint, ())
    if isinstance(hint, type) and issubclass(hint, Enum):
        def enum(d: Any, w: Where) -> Any:
            try:
                return hint(d)
            except ValueError:
                known = ", ".join(str(m.value) for m in hint)
                raise ValueError(f"{_where(w)}: {d!r} is not one of {known}") from None
        return enum

    def scalar(d: Any, w: Where) -> Any:
        if not is_scalar(d, hint):
            raise ValueError(f"{_where(w)}: expected {getattr(hint, '__name__', hint)}, "
                             f"got {type(d).__name__} {d!r}")
        return d
    return scalar


def _sequence_decoder(hint: Any, origin: Any) -> Decoder:
    args = get_args(hint)
    variadic = origin is list or (len(args) == 2 and args[1] is Ellipsis)
    items = [_decoder(args[0] if args else Any)] if variadic else [_decoder(a) for a in args]

    def sequence(d: Any, w: Where) -> Any:
        if not isinstance(d, list):
            raise ValueError(f"{_where(w)}: expected a list, got {type(d).__name__}")
        if not variadic and len(d) != len(items):
            raise ValueError(f"{_where(w)}: expected {len(items)} items, got {len(d)}")
        if variadic:
            out = [items[0](v, (w, i)) for i, v in enumerate(d)]
        else:
            out = [f(v, (w, i)) for i, (f, v) in enumerate(zip(items, d, strict=True))]
        return tuple(out) if origin is tuple else out
    return sequence


def own_json(hint: Any) -> bool:
    """A type that writes itself (to_json, from_json): RunFigures keeps the JSON form that
    recordings have always had, whatever its fields are named."""
    return isinstance(hint, type) and hasattr(hint, "from_json") and hasattr(hint, "to_json")


def decode_fields(cls: type, data: Any, where: str, skip: tuple[str, ...] = ()) -> Any:
    return _fields_decoder(cls, tuple(skip))(data, where)


@cache
def _fields_decoder(cls: type, skip: tuple[str, ...]) -> Decoder:
    hints = type_hints(cls)
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields} - set(skip)
    required = [f.name for f in fields if f.name in names
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]
    field_of = {name: _decoder(hints[name]) for name in names}

    def read(d: Any, w: Where) -> Any:
        if not isinstance(d, dict):
            raise ValueError(f"{_where(w)}: expected an object, got {type(d).__name__}")
        unknown = [k for k in d if k not in field_of]
        if unknown:
            raise ValueError(f"{_where(w)}: unknown fields {sorted(unknown)}")
        missing = [n for n in required if n not in d]
        if missing:
            raise ValueError(f"{_where(w)}: missing fields {missing}")
        return cls(**{k: field_of[k](v, (w, k)) for k, v in d.items()})
    return read


def is_scalar(data: Any, hint: Any) -> bool:
    if hint is float:  # JSON writes 2.0 as 2.0, but a producer may have stored an int
        return isinstance(data, int | float) and not isinstance(data, bool)
    if hint is int:
        return isinstance(data, int) and not isinstance(data, bool)
    if isinstance(hint, type):
        return isinstance(data, hint)
    return True


def loose(value: Any) -> Any:
    """Untyped data as JSON, keeping what JSON would lose: tuples, non-string keys."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | deque):
        return [loose(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [loose(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: loose(v) for k, v in value.items()}
        return {"$items": [[loose(k), loose(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return loose({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, Enum):
        return loose(value.value)
    if isinstance(value, PurePath):
        return str(value)
    return repr(value)  # something a JSON file cannot hold: at least say what it was


def unloose(data: Any) -> Any:
    if isinstance(data, list):
        return [unloose(v) for v in data]
    if isinstance(data, dict):
        if set(data) == {"$tuple"}:
            return tuple(unloose(v) for v in data["$tuple"])
        if set(data) == {"$items"}:
            return {unloose(k): unloose(v) for k, v in data["$items"]}
        return {k: unloose(v) for k, v in data.items()}
    return data
