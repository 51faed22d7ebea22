"""No engine is told apart by its name outside the engines' own packages: a string literal
naming an engine ("sglang", "SGLang", "vllm", "vLLM") compared with ==, in or startswith, or
given as a default, is a place the next engine would have to be added by hand. Each engine
declares its words, prefixes and series once (collectors/<engine>/, scenarios/engines/);
everything else asks it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("engram_top", "collectors", "scenarios")
# The engines' own packages: there, naming the engine is the point.
ENGINE_PACKAGES = ("collectors/sglang", "collectors/vllm", "scenarios/engines", "engram_top/sim")
# Display-only text that a scan would take for a comparison or a default: (file, the
# literal), each with why. Keep it short.
ALLOWED: set[tuple[str, str]] = set()
ENGINE_NAME = re.compile(r"sglang|vllm", re.IGNORECASE)
# Calls whose string argument compares or defaults: x.startswith("vllm:"), d.get(k, "SGLang").
COMPARING_CALLS = {"startswith", "endswith", "removeprefix", "removesuffix"}
DEFAULTING_CALLS = {"get", "setdefault", "getattr", "pop"}


def _names(node: ast.AST | None) -> list[str]:
    """The engine-naming string literals in ``node`` itself or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if ENGINE_NAME.search(node.value) else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for e in node.elts for n in _names(e)]
    return []


def offences(source: str) -> list[tuple[int, str, str]]:
    """(line, what, the literal) for each engine name compared or defaulted in ``source``."""
    out: list[tuple[int, str, str]] = []

    def add(node: ast.AST, what: str, found: list[str]) -> None:
        out.extend((getattr(node, "lineno", 0), what, name) for name in found)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                add(node, "compared", _names(side))
        elif isinstance(node, ast.MatchValue):
            add(node, "matched", _names(node.value))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                node.func.id if isinstance(node.func, ast.Name) else ""
            if name in COMPARING_CALLS:
                for arg in node.args:
                    add(node, f"{name}()", _names(arg))
            elif name in DEFAULTING_CALLS and len(node.args) >= 2:
                add(node, f"the default of {name}()", _names(node.args[-1]))
            for kw in node.keywords:
                if kw.arg == "default":
                    add(node, "a default=", _names(kw.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in (*node.args.defaults, *node.args.kw_defaults):
                add(node, "an argument's default", _names(default))
        elif isinstance(node, ast.ClassDef):
            for item in node.body:  # a field's default: `engine: str = "SGLang"`
                if isinstance(item, (ast.AnnAssign, ast.Assign)):
                    add(item, "a field's default", _names(item.value))
        elif isinstance(node, ast.IfExp):
            for branch in (node.body, node.orelse):
                add(node, "a conditional's fallback", _names(branch))
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                add(node, "an `or` fallback", _names(value))
    return out


def _product_files() -> list[Path]:
    out = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not any(rel == p or rel.startswith(p + "/") for p in ENGINE_PACKAGES):
                out.append(path)
    return out


def test_no_engine_name_is_compared_or_defaulted_outside_the_engines() -> None:
    found = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, what, name in offences(path.read_text()):
            if (rel, name) not in ALLOWED:
                found.append(f"{rel}:{line}: {name!r} {what}")
    assert not found, ("engine names outside the engines' packages (ask the engine, or its "
                       "collectors' package, instead):\n" + "\n".join(found))


def test_the_scan_sees_each_form() -> None:
    """The scan itself: each way a name gets compared or defaulted is caught, and display
    text is not (so the test above can fail, and only for what it is about)."""
    caught = {
        'if engine == "vLLM": pass': "compared",
        'ok = "sglang" in name.lower()': "compared",
        'ok = kind in ("sglang", "other")': "compared",
        'ok = name.startswith(("vllm:", "x"))': "startswith()",
        'e = d.get("engine", "SGLang")': "the default of get()",
        'def f(engine: str = "SGLang") -> None: pass': "an argument's default",
        'class A:\n    engine: str = "SGLang"': "a field's default",
        'e = run.engine if run else "SGLang"': "a conditional's fallback",
        'e = run.engine or "vllm"': "an `or` fallback",
        'match e:\n    case "vllm": pass': "matched",
        'p.add_argument("--engine", default="sglang")': "a default=",
    }
    for source, what in caught.items():
        assert [w for _, w, _ in offences(source)] == [what], source
    shown = ('print(f"{engine}\'s metrics give no weights")\n'
             'HELP = "watch an SGLang or vLLM server"\n'
             'x = ("SGLang", "vLLM")\n')
    assert offences(shown) == []
    assert len(_product_files()) > 50  # the tree was found


def test_the_kv_panel_speaks_the_watched_engines_word() -> None:
    """The same pressure on the KV cache in each engine's own word, as the engine declares
    it: SGLang retracts, vLLM preempts."""
    from rich.console import Console
    from scene import scene_store

    from engram_top.app import panels
    from scenarios import engines

    def requests_row(kind: str) -> str:
        store = scene_store()
        assert store.run is not None
        engine = engines.get(kind)
        store.run.engine, store.run.words = engine.speaks, dict(engine.words)
        console = Console(width=100, record=True)
        console.print(panels.kv_panel(store, cols=100))
        return next(line for line in console.export_text().splitlines()
                    if line.startswith("requests"))

    assert requests_row("sglang").endswith("0 queued · 0 retracted")
    assert requests_row("vllm").endswith("0 queued · 0 preempted")
