"""The apps keep out of Textual's own attributes. An App, Screen or Widget subclass that sets
one of its base's (`_log`, `_closed`, `_running` ...) replaces what Textual itself reads: the
dashboard's `_log` (its server log pane) stood where Textual's logging calls App._log, so
`textual console` raised TypeError, and its `_closed` (its session's) was MessagePump's own,
so the app dropped every message posted to it while its session closed."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
from pathlib import Path
from types import FunctionType

import textual
from helpers import StaticSession
from scene import scene_store
from textual.app import App
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widget import Widget

from engram_top.app.main import EngramTopApp
from engram_top.app.mixin import AppMixin

APP = Path(__file__).resolve().parents[2] / "engram_top" / "app"


def _assigned(node: ast.ClassDef) -> dict[str, int]:
    """Names the class sets: on self in its methods, or in its body (not its defs, which
    override on purpose, and mypy checks them against the base's)."""
    names: dict[str, int] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) \
                and isinstance(sub.value, ast.Name) and sub.value.id == "self":
            names.setdefault(sub.attr, sub.lineno)
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
            [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                names.setdefault(t.id, t.lineno)
    return names


def _textuals(base: type, instance: object, name: str) -> bool:
    """Whether ``name`` is Textual's own on ``base``: state its instances hold, a private
    name, or a method; a reactive or a settable property is there to be set."""
    if name.isupper() or (name.startswith("__") and name.endswith("__")):
        return False  # BINDINGS, CSS ...: declared for Textual to read
    if name in vars(instance):
        return True
    found = inspect.getattr_static(base, name, None)
    if found is None:
        return False
    if isinstance(found, Reactive) or (isinstance(found, property) and found.fset):
        return False
    return name.startswith("_") or isinstance(found, FunctionType | property)


# Textual's own state that a class of ours sets on purpose, and why (each beside the code).
DELIBERATE = {
    # The layout request a whole pass met, the whole repaint a whole paint met
    # (engram_top/app/settled_screen.py).
    "SettledScreen._layout_required",
    "SettledScreen._repaint_required",
}


def test_no_app_widget_or_mixin_sets_an_attribute_of_textuals() -> None:
    bases = {App: App(), Screen: Screen(), Widget: Widget()}
    clashes = []
    for path in sorted(APP.glob("*.py")):
        module = importlib.import_module(f"engram_top.app.{path.stem}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            cls = getattr(module, node.name, None) if isinstance(node, ast.ClassDef) else None
            if not inspect.isclass(cls):
                continue
            mixin = AppMixin in cls.__mro__ and AppMixin is not object
            base = App if mixin or issubclass(cls, App) else Screen if issubclass(
                cls, Screen) else Widget if issubclass(cls, Widget) else None
            if base is None and not mixin:
                continue
            for name, line in _assigned(node).items():
                if _textuals(base, bases[base], name) \
                        and f"{node.name}.{name}" not in DELIBERATE:
                    clashes.append(f"{path.name}:{line}: {node.name}.{name} is Textual's "
                                   f"{base.__name__}.{name}")
    assert not clashes, "\n".join(clashes)


def test_the_check_knows_textuals_own() -> None:
    app, widget = App(), Widget()
    for name in ("_log", "_closed", "_running", "log", "_exit_renderables"):
        assert _textuals(App, app, name), name
    for name in ("theme", "session", "replay", "BINDINGS", "title"):
        assert not _textuals(App, app, name), name
    assert _textuals(Widget, widget, "_closed") and not _textuals(Widget, widget, "border_title")


async def test_textual_log_reaches_textuals_logger_under_the_console(monkeypatch) -> None:
    app = EngramTopApp(StaticSession(scene_store()))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        # As under `textual console`: logging goes through App._log.
        monkeypatch.setattr(EngramTopApp, "_is_devtools_connected", property(lambda _: True))
        textual.log("from a test")  # TypeError while the server log pane was App._log
        app.log.info("from a test")


class _SlowToClose(StaticSession):
    """A session whose close takes a while (a server stopping), asked to do something
    meanwhile."""

    def __init__(self) -> None:
        super().__init__(scene_store())
        self.app: App[int] | None = None
        self.ran: list[str] = []

    async def close(self) -> None:
        assert self.app is not None
        self.app.call_later(self.ran.append, "called later")
        await asyncio.sleep(0.2)
        await super().close()


async def test_the_app_takes_messages_while_its_session_closes() -> None:
    session = _SlowToClose()
    app = session.app = EngramTopApp(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause(0.4)
    assert session.closed and session.ran == ["called later"]
    assert app.return_code == 0
