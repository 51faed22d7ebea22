"""No module of the product passes 500 lines: past that, a file holds more than one job and
its reader loses the thread. A file that grows past it is split where its jobs part."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 500


def test_no_product_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n
            for folder in ("engram_top", "collectors", "scenarios")
            for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > LIMIT}
    assert not long, f"over {LIMIT} lines: {long}"


def test_the_check_sees_the_product() -> None:
    # A renamed folder must not leave the check above reading nothing.
    assert len(list((ROOT / "engram_top").rglob("*.py"))) > 50
    assert (ROOT / "collectors" / "sglang" / "startup_log.py").is_file()
