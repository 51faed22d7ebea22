"""The tests' own free ports (helpers.free_port): each xdist worker hands out ports of its
own residue only, for any number of workers. bind(0) gives even ports first, so a worker of
an odd residue used to wait on it for ever (`-n 2`'s second worker hung 300 s)."""

from __future__ import annotations

import pytest
from helpers import TEST_PORTS, free_port


@pytest.mark.parametrize(("worker", "workers"), [(1, 2), (3, 4), (2, 3), (0, 1)])
def test_each_worker_draws_ports_of_its_own_residue(monkeypatch: pytest.MonkeyPatch,
                                                    worker: int, workers: int) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    ports = [free_port() for _ in range(20)]
    assert all(p % workers == worker for p in ports), ports
    assert len(set(ports)) == len(ports)  # never the same one twice in a session
    # Below the product's own band and the ephemeral range (outgoing connections' ports).
    assert all(TEST_PORTS[0] <= p < TEST_PORTS[1] for p in ports), ports
