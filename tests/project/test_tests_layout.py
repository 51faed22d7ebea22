"""tests/ mirrors the product: a package's tests are in the folder of its name, so the
tests of what you change are found where its code is. Beside the packages: docs/ (the
README's own tier), faults/ (the fault matrix, through the real CLI) and project/ (the
project's own rules: layering, faces, types, sizes). Support modules (helpers.py, scene.py,
...) stay at the top, where every folder's tests import them by name, so no two test modules
may share a name either.

tests/collectors/ and tests/scenarios/ are named like the product's packages and hold no
__init__.py: under pytest the real packages win (the root is on the path, and a regular
package beats a namespace folder wherever it stands), but a script of your own that puts
tests/ on sys.path without the root imports the empty folder instead."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
BESIDE = {"docs", "faults", "project"}


def _packages() -> set[str]:
    inner = {p.parent.name for p in (ROOT / "engram_top").glob("*/__init__.py")}
    return inner | {"collectors", "scenarios"}


def _test_modules() -> list[Path]:
    return [p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts]


def test_every_test_module_is_in_its_packages_folder() -> None:
    allowed = _packages() | BESIDE
    misplaced = sorted(str(p.relative_to(ROOT)) for p in _test_modules()
                       if p.parent == TESTS or p.relative_to(TESTS).parts[0] not in allowed)
    assert not misplaced, f"not in a package's folder: {misplaced}"


def test_no_two_test_modules_share_a_name() -> None:
    # tests/ has no __init__.py: pytest imports each module by its bare name.
    twice = [n for n, k in Counter(p.name for p in _test_modules()).items() if k > 1]
    assert not twice, twice


def test_the_check_sees_the_tests() -> None:
    folders = {p.relative_to(TESTS).parts[0] for p in _test_modules()}
    assert {"collectors", "scenarios", "app", "model", "docs", "faults"} <= folders
    assert len(_test_modules()) > 100
