"""The product type-checks: mypy over engram_top, collectors, scenarios and seeds with
pyproject.toml's [tool.mypy] reports no error, and every `# type: ignore` left in the product
names its error code and says why.

In process (mypy.api), so the quick tier runs it: its cache (.mypy_cache, kept by git out of
the tree) makes a rerun a few seconds; a cold run on 2 cores takes about ten.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("engram_top", "collectors", "scenarios", "seeds")
# `# type: ignore[code]  # why` (or several codes): a code, then a comment that says why.
IGNORE = re.compile(r"#\s*type:\s*ignore\b")
EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z0-9-]+(?:,\s*[a-z0-9-]+)*\]\s+#\s*\S")


@pytest.mark.timeout(600)
def test_mypy_reports_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # [tool.mypy]'s files and its cache are the checkout's
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml")])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 0 and not errors, (
        f"mypy (exit {status}): {len(errors)} error(s)\n{out}{err}")


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    bare = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if IGNORE.search(line) and not EXPLAINED.search(line)]
    assert not bare, ("each `# type: ignore` names its code and says why: "
                      "`# type: ignore[code]  # why`\n" + "\n".join(bare))


def test_the_ignore_check_tells_a_reason_from_none() -> None:
    assert EXPLAINED.search("x = f()  # type: ignore[misc]  # Textual's stub lacks it")
    assert EXPLAINED.search("class T(b):  # type: ignore[valid-type, misc]  # a base at run time")
    for bare in ("x = f()  # type: ignore", "x = f()  # type: ignore[misc]",
                 "x = f()  # type: ignore  # why", "x = f()  # type: ignore[misc] #"):
        assert IGNORE.search(bare) and not EXPLAINED.search(bare), bare
