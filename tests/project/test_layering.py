"""The package layering (README, "Layout"), checked by the import contracts in pyproject.toml."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or \
        shutil.which("lint-imports")
    assert exe, "import-linter is part of the test extra"
    # Every contract pyproject.toml declares, however many: one added there is checked here.
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    assert contracts, "pyproject.toml declares no import contract"
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(contracts)} kept, 0 broken" in out.stdout, out.stdout
    for contract in contracts:
        assert f"{contract['name']} KEPT" in out.stdout, contract["name"]
