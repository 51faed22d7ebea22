"""Fixtures of the fault matrix: the CLI with its own folders and tag (faultkit.Cli), and
the misbehaving servers (badserver.BadServer, badprom.BadProm) on a thread of the test's
process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from badprom import BadProm
from badserver import BadServer
from faultkit import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    c = Cli(tmp_path)
    try:
        yield c
    finally:
        left = c.close()
        assert not left, f"processes outlived the test: {left}"


@pytest.fixture
def bad_server() -> Iterator[BadServer]:
    with BadServer() as server:
        yield server


@pytest.fixture
def bad_prom() -> Iterator[BadProm]:
    with BadProm() as prom:
        yield prom
