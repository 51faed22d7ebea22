"""The serving engines engram-top can launch and watch, looked up by a scenario's kind.

Adding an engine: one module beside these (a subclass of base.Engine and an instance of it)
and one line below that registers it. Nothing else in engram-top names an engine. An engine
in a package of its own registers through the entry-point group "engram_top.engines"
(name = "module:INSTANCE"), found the first time a kind is looked up.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

from scenarios.engines import sglang, simulated, vllm
from scenarios.engines.base import (
    PLACEMENTS,
    Engine,
    EngineError,
    LogEvent,
    LogParser,
    Readiness,
    ServerCollector,
    Signal,
)

__all__ = ["BUILT_IN", "DEFAULT", "PLACEMENTS", "Engine", "EngineError", "LogEvent", "LogParser",
           "Readiness", "ServerCollector", "Signal", "get", "kinds", "register", "speaking",
           "unregister"]

_ENGINES: dict[str, Engine] = {}
PLUGIN_GROUP = "engram_top.engines"
# Plugins that would not load, said where a kind is missing rather than raised at import.
plugin_problems: list[str] = []
_plugins_loaded = False


def register(engine: Engine) -> Engine:
    if not engine.kind:
        raise ValueError(f"{type(engine).__name__} has no kind")
    _ENGINES[engine.kind] = engine
    return engine


def unregister(kind: str) -> None:
    _ENGINES.pop(kind, None)


def get(kind: str) -> Engine:
    if kind not in _ENGINES:
        _load_plugins()
    try:
        return _ENGINES[kind]
    except KeyError:
        why = "".join(f"; {p}" for p in plugin_problems)
        raise EngineError(f"no engine of kind '{kind}' (known: {', '.join(kinds())}){why}") \
            from None


def kinds() -> tuple[str, ...]:
    _load_plugins()
    return tuple(_ENGINES)


def speaking(name: str) -> Engine | None:
    """The first engine whose servers speak ``name``'s dialect ("vLLM"), or None."""
    return next((e for e in map(get, kinds()) if e.speaks == name), None)


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    if not _may_declare_plugins():
        return
    # Loaded here: importlib.metadata (email, csv, zipfile behind it) costs a start 27 ms
    # of a core and 1.4 MiB, and a built-in kind never needs it.
    from importlib.metadata import entry_points
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            engine = ep.load()
            register(engine() if isinstance(engine, type) else engine)
        except Exception as exc:  # a broken plugin is said, and the built-in engines work
            plugin_problems.append(f"engine plugin '{ep.name}' ({ep.value}) did not load: "
                                   f"{type(exc).__name__}: {exc}")


def _may_declare_plugins() -> bool:
    """Whether an installed package may declare an engine: the group's name is in one of
    sys.path's packages' entry_points.txt. Conservative: a path entry that is a file (a zip)
    or a finder of distributions other than Python's own says yes, and importlib.metadata
    decides, as it reads the same files."""
    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return True
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except NotADirectoryError:
            return True
        except OSError:  # a path entry that is not there (python311.zip), as the finder does
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(entry or ".", name, "entry_points.txt"), "rb") as f:
                    if PLUGIN_GROUP.encode() in f.read():
                        return True
            except OSError:  # most packages declare no entry points
                continue
    return False


register(sglang.ENGINE)
register(simulated.ENGINE)
register(vllm.ENGINE)
register(simulated.VLLM_ENGINE)
BUILT_IN = tuple(_ENGINES)
# What an attached server or a log read on its own is taken to speak, unless told.
DEFAULT = sglang.ENGINE.kind
