"""The fleet on the nodes' agents: eight simulated nodes over the three placements, an
`engram-top agent` on each, a real Prometheus scraping the agents, and the fleet reading
them: each node's placement as its agent reads it, the fit of every scenario there, its
free memory per NUMA node and its unexplained HBM; `fleet --once` prints the same."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import GIB, Fleet, ServerSpec, SimServer, installed_script, running, until, wait_until

from engram_top.fleet.session import FleetRow, FleetSession
from scenarios.prometheus import Prometheus, Target, free_port

SCENARIOS = Path(__file__).parents[2] / "scenarios" / "demo.toml"


@contextlib.contextmanager
def agents(servers: dict[str, SimServer]) -> Iterator[dict[str, int]]:
    """An agent on each server's node, serving /metrics with the file's fit checks: the
    port of each, once each serves its fit check."""
    ports = {name: free_port() for name in servers}
    with contextlib.ExitStack() as stack:
        for name, server in servers.items():
            stack.enter_context(running(
                [str(installed_script()), "agent", server.url, "--node-dir",
                 str(server.node_dir), "--listen", f"127.0.0.1:{ports[name]}",
                 "--no-record", "--scenarios", str(SCENARIOS)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True))

        def serving() -> bool:
            try:
                return all("engram_top_fit_level{" in httpx.get(
                    f"http://127.0.0.1:{p}/metrics", timeout=5).text for p in ports.values())
            except httpx.HTTPError:
                return False
        wait_until(serving, 120, "each agent's fit check on its /metrics")
        yield ports


def _agents_read(session: FleetSession, nodes: int) -> bool:
    rows = session.rows()
    return len(rows) == nodes and all(r.agent is not None and r.agent.fits and r.agent.numa_free
                                      for r in rows)


# The nodes of the test's own, by name, and their placements: with the shared device node,
# eight (three device, three host, two host-prefetch), as a small fleet is. On device-3
# another tenant holds 1,820 of the node's 2,048 GiB of host RAM: no room for the tables.
OWN = {"device-2": "device", "device-3": "device", "host": "host", "host-2": "host",
       "host-3": "host", "host-prefetch": "host-prefetch", "host-prefetch-2": "host-prefetch"}
EXTRA = {"device-3": ("--host-hog", "1820")}
NODES = len(OWN) + 1


@pytest.fixture
def own_nodes(tmp_path: Path) -> Iterator[dict[str, SimServer]]:
    """Seven nodes of this test's own: the shared fleet's host nodes are used up (stopped)
    by another test, which may run first on the same worker. Launched together, so their
    start-ups overlap."""
    servers: dict[str, SimServer] = {}
    try:
        for name, placement in OWN.items():
            servers[name] = SimServer(name, ServerSpec(placement, 0.02, EXTRA.get(name, ())),
                                      tmp_path / "nodes")
        yield {name: server.wait_ready() for name, server in servers.items()}
    finally:
        left = {name: server.stop(grace=5.0).survivors for name, server in servers.items()}
        assert not any(left.values()), f"survivors: {left}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_fleet_reads_each_nodes_agent_through_a_real_prometheus(
        fleet: Fleet, own_nodes: dict[str, SimServer], tmp_path: Path) -> None:
    servers = {"device": fleet.ready("device"), **own_nodes}  # the shared device: read only
    with agents(servers) as ports:
        # The device node's scrape config says its placement too: the agent's own label is
        # then Prometheus's exported_placement, and read as the agent's.
        prom = Prometheus(tmp_path / "prom", [
            Target("engram-top", f"127.0.0.1:{port}",
                   {"node": f"node-{name}", **({"placement": "device"} if name == "device"
                                               else {})})
            for name, port in ports.items()], scrape_s=1.0)
        prom.start()

        async def read() -> dict[str, FleetRow]:
            session = FleetSession(prom.url, interval=1.0, window="10s")
            try:
                await prom.wait_ready()
                await prom.wait_scraped(3)
                await session.start()  # its own refreshes, every second
                await until(None, lambda: _agents_read(session, NODES), 90,
                            lambda: f"the agents' figures of {NODES} nodes: {session.rows()}")
                return {r.node: r for r in session.rows()}
            finally:
                await session.close()
        try:
            rows = asyncio.run(read())
            once = subprocess.run([str(installed_script()), "fleet", "--prometheus", prom.url,
                                   "--once", "--json"], capture_output=True, text=True,
                                  timeout=60)
            text = subprocess.run([str(installed_script()), "fleet", "--prometheus", prom.url,
                                   "--once"], capture_output=True, text=True, timeout=60)
        finally:
            prom.stop_now()

    # Each node's placement: the config's label for one, the agent's own for the others
    # (no longer inferred from host memory).
    assert {n: (r.placement, r.placement_inferred) for n, r in rows.items()} == {
        "node-device": ("device", False),
        **{f"node-{name}": (placement, False) for name, placement in OWN.items()}}
    assert Counter(r.placement for r in rows.values()) == {"device": 3, "host": 3,
                                                           "host-prefetch": 2}
    for node, r in rows.items():
        a = r.agent
        assert a is not None
        hogged = node == "node-device-3"
        # Every scenario of the file fits each of these nodes in place of its server (the
        # scenario's own placement read whatever the config's label), except the host
        # placements where another tenant holds the host's memory: 2, does not fit.
        short = 2 if hogged else 0
        assert [(f.scenario, f.placement, f.level) for f in a.fits] == [
            ("device", "device", 0), ("host", "host", short),
            ("host-prefetch", "host-prefetch", short)], node
        assert all(f.room_bytes is not None for f in a.fits)
        assert [n for n, _ in a.numa_free] == ["0", "1"]
        # The hog's memory is on NUMA node 0: that node's alert, and the host's.
        assert [(n, b < 10 * GIB) for n, b in a.numa_free] == [("0", hogged), ("1", False)]
        assert all(b < 2048 * GIB for _, b in a.numa_free)
        assert [i for i, _ in a.alerts] == (
            ["host-available", "numa-available:node0"] if hogged else []), node
        assert [g for g, _ in a.hbm_unexplained] == ["0", "1", "2", "3"]
        assert a.unexplained_max is not None and 0 <= a.unexplained_max < 8 * GIB
    # The host placement's tables take host memory the device placement does not: on the
    # device node the host scenario would leave ~190 GiB less of it, as the check counts.
    d = {f.scenario: f.room_bytes for f in rows["node-device"].agent.fits}  # type: ignore[union-attr]
    assert d["device"] is not None and d["host"] is not None
    assert 150 * GIB < d["device"] - d["host"] < 230 * GIB

    # The same for a script, in one refresh.
    assert once.returncode == 0, once.stderr
    nodes = {n["node"]: n for n in json.loads(once.stdout)["nodes"]}
    assert set(nodes) == set(rows)
    fits = nodes["node-host"]["agent"]["fits"]
    assert [(f["scenario"], f["level"]) for f in fits] == [
        ("device", "fits"), ("host", "fits"), ("host-prefetch", "fits")]
    assert text.returncode == 0, text.stderr
    assert "node-host  host  " in text.stdout
    assert "  fits: device fits (host room " in text.stdout
    hog = text.stdout.split("node-device-3 ")[1].split("\nnode-")[0]
    assert "host-available, numa-available:node0" in hog.splitlines()[0], hog
    assert " · host does not fit (host short " in hog, hog
    assert [f["level"] for f in nodes["node-device-3"]["agent"]["fits"]] == [
        "fits", "does not fit", "does not fit"]
    assert "  free per NUMA node: 0: " in text.stdout


@pytest.mark.slow
def test_fleet_once_says_a_prometheus_that_does_not_answer() -> None:
    done = subprocess.run([str(installed_script()), "fleet", "--prometheus",
                           f"http://127.0.0.1:{free_port()}", "--once"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("engram-top fleet: Prometheus: 127.0.0.1:")
    assert done.stderr.rstrip().endswith("connection refused")
    bad = subprocess.run([str(installed_script()), "fleet", "--demo", "--once"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--once takes --prometheus URL" in bad.stderr
