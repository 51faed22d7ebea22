"""Views derived from the store, computed once for all their readers: the alerts, the
session's figures, the panels and the agent's page each ask for the same view every second.
A reading's data is a new object each poll, and a run's derived fields are replaced, not
changed in place, so the identity of what a view reads says whether it can have changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from engram_top.model.store import RunStore

T = TypeVar("T")


def once(store: RunStore, name: str, inputs: tuple[object, ...], compute: Callable[[], T]) -> T:
    """``compute()``, or what it gave last time for the very same ``inputs`` (by identity;
    they are held with the value, so no identity is reused meanwhile). The value is shared
    between readers: it must be immutable."""
    held = store.derived.get(name)
    if held is not None and len(held[0]) == len(inputs) \
            and all(a is b for a, b in zip(held[0], inputs, strict=True)):
        value: T = held[1]
        return value
    value = compute()
    store.derived[name] = (inputs, value)
    return value
