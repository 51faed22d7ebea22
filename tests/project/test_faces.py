"""Each package below the app has a face: its __init__.py's __all__, what a package above
reads of it. The contract "the app reads the packages below it through their faces"
(pyproject.toml) holds the app to the faces' modules; here, the faces to their __all__: each
name there is there, none hides a module of its package, and the app imports from a face
nothing it does not list."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = ("collectors", "engram_top.model", "engram_top.alerts", "engram_top.compare",
         "engram_top.export", "engram_top.fleet", "engram_top.probe", "engram_top.seed",
         "engram_top.settings")


def face(name: str) -> ModuleType:
    return importlib.import_module(name)


@pytest.mark.parametrize("name", FACES)
def test_a_face_lists_what_it_gives(name: str) -> None:
    package = face(name)
    listed = getattr(package, "__all__", None)
    assert listed, f"{name}/__init__.py has no __all__"
    assert len(set(listed)) == len(listed), f"{name}.__all__ names one twice"
    missing = [n for n in listed if not hasattr(package, n)]
    assert not missing, f"{name}.__all__ lists what it lacks: {missing}"
    assert all(not isinstance(getattr(package, n), ModuleType) for n in listed), \
        f"{name}.__all__ gives a module: a face gives names"


@pytest.mark.parametrize("name", FACES)
def test_no_name_of_a_face_hides_a_module_of_its_package(name: str) -> None:
    """A face's function named as one of its package's modules (runs.comparison beside the
    comparison module) would stand where that module is looked up as an attribute (``from
    engram_top.compare import comparison``): the face names it apart (compare_runs)."""
    package = face(name)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert not modules & set(package.__all__), \
        f"{name}.__all__ names modules of its own: {sorted(modules & set(package.__all__))}"


def app_imports() -> list[tuple[str, int, str, str]]:
    """(file, line, module, name) of every name the app imports from outside itself."""
    found = []
    for path in sorted((ROOT / "engram_top" / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and not node.module.startswith("engram_top.app"):
                for alias in node.names:
                    found.append((str(path.relative_to(ROOT)), node.lineno, node.module,
                                  alias.name))
    return found


def test_the_app_imports_from_a_face_only_what_it_lists() -> None:
    ours = [i for i in app_imports() if i[2].split(".")[0] in ("engram_top", "collectors",
                                                                "scenarios")]
    assert ours, "the check sees the app's imports"
    wrong = []
    for path, line, module, name in ours:
        if module == "engram_top":  # the package of a face itself: from engram_top import model
            if f"engram_top.{name}" not in FACES:
                wrong.append(f"{path}:{line}: engram_top.{name} is no face")
        elif module not in FACES:
            wrong.append(f"{path}:{line}: {module} is no face")
        elif name not in face(module).__all__:
            wrong.append(f"{path}:{line}: {module} does not list {name}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow  # a fresh interpreter, to import without pynvml
def test_the_command_line_imports_where_nvidia_ml_py_is_not_installed() -> None:
    """`engram-top probe` runs in SGLang's environment, which has torch but need not have
    nvidia-ml-py: nothing on the way to a command may import pynvml at module level (an
    alert's XID text once did, through the collector that polls the events)."""
    code = ("import sys; sys.modules['pynvml'] = None\n"
            "import engram_top.cli.commands, engram_top.probe, engram_top.alerts")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow  # a fresh interpreter, to see what it imports
def test_the_dashboards_side_of_its_load_imports_no_http_client() -> None:
    """The demo's load runs in a process of its own; the dashboard holds its LoadProcess and
    reads its LoadStats. httpx (about 7 MiB and 0.1 s, with click and pygments behind it)
    belongs to the process that sends requests, not to the dashboard."""
    code = ("import sys\n"
            "import engram_top.cli.commands, engram_top.live.session, engram_top.app.main\n"
            "from engram_top.live.load import driver\n"
            "from scenarios.load_process import LoadProcess\n"
            "LoadProcess('http://127.0.0.1:9', concurrency=1).stats.sent\n"
            "print(sorted(m for m in ('httpx', 'click', 'pygments') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
