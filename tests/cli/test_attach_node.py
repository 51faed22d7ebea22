"""`attach` to a server on the simulated node sees the node: its virtual GPUs (another
tenant's HBM among their processes), its host RAM and NUMA nodes, the server's placement and
Engram row, whether the server names its node folder (/server_info, on loopback) or the user
does (`--node-dir`). Real servers on 127.0.0.1; the dashboard through Pilot, `snapshot`
headless as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import ENGRAM_TOP, GIB, ServerSpec, SimServer, screen_text, until

from engram_top.cli.dashboards import run_attach
from engram_top.cli.parser import build_parser
from engram_top.live.attach_node import named_node_dir, node_dir_problem
from engram_top.live.session import Session, SessionOptions
from engram_top.sim.tenant import NEIGHBOUR_NAME

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


@pytest.fixture(scope="module")
def node_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    """A host-placement server with a neighbour holding 8 GiB of GPU 1, on its own node."""
    server = SimServer("attached", ServerSpec("host", 0.02, (
        "--neighbour-hbm", "8", "--neighbour-gpus", "1")), tmp_path_factory.mktemp("attach"))
    try:
        yield server.wait_ready()
    finally:
        assert not server.stop(grace=5.0).survivors


def test_a_simulated_server_names_its_node_on_loopback_only(node_server: SimServer) -> None:
    info = httpx.get(f"{node_server.url}/server_info", timeout=5).json()
    named = info["simulated"]["node_dir"]
    assert Path(named) == node_server.node_dir.resolve()
    assert info["simulated"]["env"]["SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE"] == "1"
    simulated = info["simulated"]
    assert named_node_dir(node_server.url, simulated) == Path(named)
    # Another machine's folder means nothing here; nor does a folder that is not a node's.
    assert named_node_dir("http://10.0.0.7:30000", simulated) is None
    assert named_node_dir(node_server.url, {"node_dir": "/"}) is None
    assert named_node_dir(node_server.url, {"node_dir": "rel/dir"}) is None
    assert named_node_dir(node_server.url, {"node_dir": 7}) is None
    assert named_node_dir(node_server.url, None) is None  # not a simulated server
    assert named_node_dir(node_server.url, {"simulated": "x"}) is None


async def test_attach_shows_the_simulated_node_in_the_dashboard(node_server: SimServer,
                                                                 tmp_path: Path) -> None:
    from engram_top.app.main import EngramTopApp
    session = Session(SessionOptions(attach=(node_server.url,), load=None, poll_interval=0.5))
    app = EngramTopApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        store = session.store
        await until(pilot, lambda: session.node_dir is not None, 20, "the node to be followed")
        await until(pilot, lambda: (g := store.data("gpu")) is not None
                    and g.backend == "simulated", 10, "the node's GPUs")
        gpus = store.data("gpu")
        assert [d.name for d in gpus.devices] == ["NVIDIA B200"] * 4
        neighbours = [(d.index, p.used_bytes) for d in gpus.devices for p in d.processes
                      if p.name == NEIGHBOUR_NAME]
        assert neighbours == [(1, 8 * GIB)]
        await until(pilot, lambda: (h := store.data("host")) is not None
                    and h.total_bytes == 2048 * GIB, 10, "the node's host")
        assert store.node == "simulated 4x NVIDIA B200" == store.run.node
        await until(pilot, lambda: store.run.placement == "host", 10, "the placement read")
        assert store.run.engram is not None and store.run.engram.placement == "host"
        assert store.run.engram.layout == "shared"
        # The server's own processes found by its port: its share of the host is its own.
        await until(pilot, lambda: store.data("host").server_tree is not None, 10,
                    "the server's tree")
        tree = store.data("host").server_tree
        assert tree.root_pid == node_server.pid and len(tree.pids) == 5  # main + 4 ranks
        assert tree.rss_shmem_bytes >= 180 * GIB  # the tables, on the virtual host
        # The HBM panel shows the node's GPUs, not this machine's missing driver.
        await until(pilot, lambda: "no NVIDIA driver" not in (t := screen_text(app))
                    and "B200" in t, 10, lambda: f"the node's GPUs on screen:\n"
                    f"{screen_text(app)}")
        assert any("is a simulated server" in e.text for e in store.events)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 15, "the app to quit")


def test_snapshot_attach_with_node_dir_reads_the_node(node_server: SimServer,
                                                      tmp_path: Path) -> None:
    out = subprocess.run([*ENGRAM_TOP, "snapshot", "--attach", node_server.url, "--node-dir",
                          str(node_server.node_dir), "--after", "1", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")})
    assert out.returncode == 0, out.stderr
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("engram-top-")]
    snap = json.loads((folder / "snapshot.json").read_text())
    assert [g["name"] for g in snap["gpus"]] == ["NVIDIA B200"] * 4
    procs = {p["name"]: p["used_bytes"] for p in snap["gpus"][1]["processes"]}
    assert procs[NEIGHBOUR_NAME] == 8 * GIB
    assert snap["host"]["total_bytes"] == 2048 * GIB
    assert snap["run"]["placement"] == "host"
    assert snap["engram"]["placement"] == "host"
    summary = (folder / "summary.md").read_text()
    assert "on simulated 4x NVIDIA B200" in summary
    assert f"{NEIGHBOUR_NAME} (pid " in summary  # the HBM ledger names the other tenant


@pytest.mark.parametrize("argv", [
    ["attach", "http://127.0.0.1:9", "--node-dir", "{tmp}/missing"],
    ["attach", "http://127.0.0.1:9", "--node-dir", "{tmp}/bad"],
])
def test_attach_node_dir_that_is_not_a_node_is_refused(argv: list[str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "node.json").write_text("{not json")
    args = build_parser().parse_args([a.format(tmp=tmp_path) for a in argv])
    assert run_attach(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("engram-top: --node-dir ")
    assert "node.json" in err and "Traceback" not in err
    assert node_dir_problem(tmp_path / "bad") is not None


def test_snapshot_node_dir_without_attach_is_refused(tmp_path: Path) -> None:
    out = subprocess.run([*ENGRAM_TOP, "snapshot", "--demo", "--node-dir", str(tmp_path),
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--node-dir it is for --attach" in out.stderr
