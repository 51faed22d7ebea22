"""The user's key remaps, checked against what they would take away: no remap may leave
quit without a key (Textual drops a binding whose key another one is remapped to, so
`help = "q"` would silently leave the dashboard without its q)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual.binding import Binding

QUIT = "quit"


def keep_a_quit_key(keymap: dict[str, str], bindings: Iterable[Any], where: str) -> list[str]:
    """Remove from ``keymap`` the remaps that would take quit's every key, and say each one
    (FILE: keys.ID: ...); the rest of the keymap stands."""
    default = next((b.key for b in bindings if isinstance(b, Binding) and b.id == QUIT), "")
    quit_keys = {k.strip() for k in keymap.get(QUIT, default).split(",") if k.strip()}
    taken = {key.strip(): binding_id for binding_id, keys in keymap.items()
             if binding_id != QUIT for key in keys.split(",")}
    if not quit_keys or quit_keys - taken.keys():
        return []
    problems = []
    for key in sorted(quit_keys):
        binding_id = taken[key]
        if keymap.pop(binding_id, None) is not None:
            problems.append(f"{where}: keys.{binding_id}: {key!r} is quit's key, and quit would "
                            "have no other: not applied (give quit another key too, e.g. "
                            'quit = "q,ctrl+q")')
    return problems
