"""A port for a server of ours is taken below the kernel's ephemeral range, where outgoing
connections do not draw theirs from; and a server that lost its port in the second before
it bound it says so, not uvicorn's traceback."""

from __future__ import annotations

from types import SimpleNamespace

from engram_top.live import polling
from scenarios import ports, prometheus
from scenarios.supervisor import Supervisor


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    # The session's (a scenario's port), Prometheus's and the fleet demo's exporters' alike.
    assert polling.free_port is ports.free_port is prometheus.free_port
    low = ports.ephemeral_start()
    drawn = {ports.free_port() for _ in range(20)}
    assert len(drawn) > 1 and all(0 < p < 65536 for p in drawn)
    if low - ports.OURS >= 1000:  # else no room below it: bind(0)'s, as before
        assert all(ports.OURS <= p < low for p in drawn)  # above the tests' own band


def test_a_taken_port_is_named_as_the_cause_of_a_failed_start() -> None:
    lines = ["[t] INFO:     Application startup complete.",
             "[t] ERROR:    [Errno 98] error while attempting to bind on address "
             "('127.0.0.1', 60537): address already in use",
             "[t] Shutting down.", "Traceback (most recent call last):", "SystemExit: 3"]
    run = SimpleNamespace(lines=[(0.0, ln) for ln in lines],
                          scenario=SimpleNamespace(engine=SimpleNamespace(
                              error_markers=("Traceback", "Error:"))))
    said = Supervisor._last_error(run)  # type: ignore[arg-type]
    assert said == ("; its port was taken by another process: [t] ERROR:    [Errno 98] error "
                    "while attempting to bind on address ('127.0.0.1', 60537): address "
                    "already in use")
    run.lines = [(0.0, "Traceback (most recent call last):"), (0.0, "ValueError: x")]
    said = Supervisor._last_error(run)  # type: ignore[arg-type]
    assert said == "; last error in the log: ValueError: x"
