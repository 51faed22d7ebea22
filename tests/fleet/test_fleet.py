"""The fleet through a real Prometheus (Debian's package): simulated nodes' exporters and this
machine's own node-exporter, scraped at 1 s, read back by the fleet source and screen.

Needs `prometheus` and `prometheus-node-exporter` on PATH (the README's test command installs
them). Outside CI their absence skips these tests, saying why; in CI it fails them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import screen_text, until

from collectors.prometheus import PrometheusSource
from collectors.units import MIB
from engram_top.app.fleet_screen import FleetApp
from engram_top.cli import commands
from engram_top.fleet import session as fleet
from engram_top.fleet.session import FleetSession
from engram_top.seed.reference import default
from engram_top.sim import memory
from scenarios.fleet_demo import FleetDemo

if shutil.which("prometheus") is None and not os.environ.get("CI"):
    pytest.skip("no Prometheus: apt-get install prometheus prometheus-node-exporter",
                allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
NODES = 6
SKIPPED = "sim-004"  # its dcgm-exporter is down: a target Prometheus cannot scrape


@pytest.fixture(scope="module")
def demo() -> Iterator[FleetDemo]:
    d = FleetDemo(NODES, scrape_s=1.0, skip=(f"{SKIPPED}:dcgm",))
    try:
        asyncio.run(d.start())
        yield d
    finally:
        d.stop_now()
    assert not d.exporters or not d.exporters.group_members()
    assert d.prometheus is None or d.prometheus.proc is None \
        or not d.prometheus.proc.group_members()


async def poll_until(session: FleetSession, ok, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(60):
        await session.poll_once()
        if ok():
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def complete(session: FleetSession) -> bool:
    rows = {r.node: r for r in session.rows()}
    return len(rows) == NODES and all(r.ttft_p50 is not None and r.output_tok_s
                                      for r in rows.values())


async def test_every_figure_comes_through_prometheus_as_the_node_exposes_it(demo) -> None:  # type: ignore[no-untyped-def]
    session = FleetSession(demo.url, interval=1.0, window="10s")
    try:
        await poll_until(session, lambda: complete(session), "every node's latency")
        rows = {r.node: r for r in session.rows()}
    finally:
        await session.close()
    ref = default()
    assert sorted(rows) == [f"sim-{i:03d}" for i in range(NODES)]
    for n in demo.nodes:
        r = rows[n.node]
        plan = memory.plan(ref, n.placement)
        assert r.placement == n.placement and not r.placement_inferred
        assert r.state == "serving"
        assert r.kv_tokens == plan.kv_tokens  # 11.84M device, 42.70M host
        assert r.weights_gb == pytest.approx(ref.placements[n.placement].weights_gib)
        if n.node == SKIPPED:
            assert r.hbm_max is None and r.gpus == 0
            assert "dcgm-exporter (GPU figures)" in r.missing
            assert any(m.startswith("dcgm-exporter down (127.0.0.1:") for m in r.missing)
            continue
        assert r.gpus == ref.gpus
        # dcgm-exporter speaks whole MiB: rank 0 holds 256 MiB more than the others.
        assert r.hbm_min == plan.gpu_bytes // MIB * MIB
        assert r.hbm_max == (plan.gpu_bytes + 256 * MIB) // MIB * MIB
        # The total is used + free + reserved, each in whole MiB: up to 2 MiB short.
        assert 0 <= ref.gpu_total_bytes - r.hbm_total < 3 * MIB  # type: ignore[operator]
        assert 0 < r.ttft_p50 < r.ttft_p99  # type: ignore[operator]
        assert 0 < r.tpot_p50 < r.tpot_p99  # type: ignore[operator]
        assert not r.missing
        # Energy per token: the GPUs' draw (350-950 W each in the demo) over the output.
        assert r.power_w is not None and 4 * 350 <= r.power_w <= 4 * 950
        assert r.joules_per_token == pytest.approx(r.power_w / r.output_tok_s)  # type: ignore[operator]
    # The first node's host is this machine, through the real node-exporter.
    assert demo.nodes[0].real_host
    assert rows["sim-000"].host_total == psutil.virtual_memory().total
    assert rows["sim-001"].host_total == ref.host_total_bytes
    # The demo's tenants: sim-001's KV pool is near full, sim-002's host is short.
    assert "kv" in " ".join(rows["sim-001"].alerts)
    assert any(a.startswith("host ") for a in rows["sim-002"].alerts)


async def test_the_placements_compare_across_nodes_with_intervals(demo) -> None:  # type: ignore[no-untyped-def]
    from engram_top.compare.comparison import compare
    session = FleetSession(demo.url, interval=1.0, window="10s")
    try:
        await poll_until(session, lambda: complete(session), "every node's latency")
        runs = fleet.results(session.rows())
    finally:
        await session.close()
    assert sorted({r.scenario for r in runs}) == ["device", "host", "host-prefetch"]
    c = compare(runs, "device", metrics=fleet.METRICS)
    assert c.trials == {"device": 2, "host": 2, "host-prefetch": 2}
    kv = next(row for row in c.rows if row.metric.key == "kv_tokens")
    assert kv.cells["host"].mean == pytest.approx(42_700_288)
    tput = next(row for row in c.rows if row.metric.key == "output_tok_s")
    assert tput.cells["host"].interval is not None  # two trials: a 95% interval


async def test_a_nodes_history_comes_from_range_queries(demo) -> None:  # type: ignore[no-untyped-def]
    session = FleetSession(demo.url, interval=1.0, window="10s")
    try:
        await poll_until(session, lambda: complete(session), "every node's latency")
        points: list = []
        for _ in range(40):  # until Prometheus holds five seconds of this node (a deadline)
            points = await session.history("sim-001", span_s=60.0)
            if len(points) >= 5:
                break
            await asyncio.sleep(0.5)
        detail = session.detail("sim-001")
        assert detail is not None
        note = await session.load_history(detail, span_s=60.0)
        skipped = await session.history(SKIPPED, span_s=60.0)
    finally:
        await session.close()
    ref = default()
    plan = memory.plan(ref, "host")
    assert len(points) >= 5  # scraped every second
    times = [t for t, _ in points]
    assert times == sorted(times) and all(b - a == pytest.approx(1.0) for a, b in
                                          zip(times, times[1:], strict=False))
    assert {d.node for _, d in points} == {"sim-001"}  # this node's series only
    last = points[-1][1]
    assert len(last.gpus) == ref.gpus and last.server["max_total_num_tokens"] == plan.kv_tokens
    assert last.gpus[1].used_bytes == plan.gpu_bytes // MIB * MIB
    assert "readings over the last" in note
    usage = detail.store.line("server", "token_usage")
    assert usage is not None and len(usage.fine) >= len(points)
    # The node whose dcgm-exporter is down: its history has host and server, no GPUs.
    assert skipped and not skipped[-1][1].gpus and skipped[-1][1].host


def text_of(app: FleetApp) -> str:
    from textual.widgets import DataTable, Static
    table = app.query_one("#fleet", DataTable)
    header = str(app.query_one("#fleet-header", Static).render())
    cells = [" ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
    return header + "\n" + "\n".join(cells)


async def test_the_screen_sorts_filters_opens_a_node_and_compares(demo) -> None:  # type: ignore[no-untyped-def]
    from textual.widgets import DataTable
    app = FleetApp(FleetSession(demo.url, interval=1.0, window="10s"))
    async with app.run_test(size=(160, 40)) as pilot:
        await until(pilot, lambda: app.query_one("#fleet", DataTable).row_count == NODES, 30,
                    "every node's row")
        assert f"{NODES} nodes" in text_of(app)
        table = app.query_one("#fleet", DataTable)
        assert str(table.get_row_at(0)[0]) == "sim-000"
        await pilot.press("r")  # reverse: the last node first
        await until(pilot, lambda: str(table.get_row_at(0)[0]) == f"sim-{NODES - 1:03d}",
                    what="the reversed order")
        await pilot.press("slash", *"placement=host-prefetch", "enter")
        await until(pilot, lambda: table.row_count == 2, what="the filter applied")
        assert {str(table.get_row_at(i)[1]) for i in range(2)} == {"host-prefetch"}
        assert "2 shown" in text_of(app)
        await pilot.press("escape", "enter")
        await until(pilot, lambda: type(app.screen).__name__ == "NodeScreen", what="the detail")
        screen = app.screen
        await until(pilot, lambda: "history: " in str(screen.query_one("#node-foot").render())
                    and "asking" not in str(screen.query_one("#node-foot").render()), 20,
                    "the node's history")
        assert "readings over the last 30 min" in str(screen.query_one("#node-foot").render())
        node = str(screen.query_one("#node-head").render()).split()[0]
        assert node in {"sim-002", "sim-005"}  # the host-prefetch nodes (placement by index)
        shown = screen_text(app)
        assert "capacity 42.70M tokens" in shown and "weights 72.201 GB" in shown
        assert all(re.search(rf"│ ?{i} +\d+\.\d/179 ", shown) for i in range(4))  # each GPU
        assert "huge pages 18" in shown  # the Engram tables in hugetlb pages, ~187 GiB
        await pilot.press("h")
        await until(pilot, lambda: type(app.screen).__name__ == "HistoryScreen", what="history")
        await pilot.press("escape")
        await pilot.press("escape", "c")
        await until(pilot, lambda: type(app.screen).__name__ == "CompareScreen",
                    what="the comparison")
        await pilot.press("escape", "q")
    assert app.session._task is not None and app.session._task.done()  # nothing polls on


async def test_a_stopped_prometheus_is_said_and_the_last_figures_stay(tmp_path: Path) -> None:
    d = FleetDemo(2, scrape_s=1.0, real_node_exporter=False, folder=tmp_path)
    await d.start()
    try:
        app = FleetApp(FleetSession(d.url, interval=1.0, window="10s"))
        async with app.run_test(size=(120, 30)) as pilot:
            from textual.widgets import DataTable
            await until(pilot, lambda: app.query_one("#fleet", DataTable).row_count == 2, 30,
                        "both rows")
            assert d.prometheus is not None
            await d.prometheus.stop()
            await until(pilot, lambda: "Prometheus: " in text_of(app), 20, "the outage said")
            text = text_of(app)
            assert "the figures below are the last it gave" in text
            assert "sim-000" in text and "sim-001" in text  # kept, not dropped
            await until(pilot, lambda: "stale" in text_of(app), 30, "the rows marked stale")
    finally:
        await d.stop()


def test_snapshot_fleet_demo_writes_every_node(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = commands.main(["snapshot", "--fleet-demo", "--nodes", "8", "--after", "12",
                          "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    (folder,) = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == [
        "screen.svg", "snapshot.json", "summary.md", "timeseries.csv", "timeseries.parquet"]
    data = json.loads((folder / "snapshot.json").read_text())
    nodes = data["nodes"]
    assert len(nodes) == 8
    assert {n["placement"] for n in nodes} == {"device", "host", "host-prefetch"}
    for n in nodes:
        assert n["hbm_used_per_gpu_bytes"]["max"] > 100 * 1024 ** 3
        assert n["kv"]["capacity_tokens"] in (11_840_000, 42_700_288)
        assert n["host"]["available_bytes"] > 0
    assert data["prometheus"]["ok"] and data["comparison"]["baseline"] == "device"
    assert "sim-007" in (folder / "summary.md").read_text()


def test_fleet_without_a_url_or_demo_is_refused(capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        commands.main(["fleet"])
    assert "one of the arguments --prometheus --demo is required" in capsys.readouterr().err
    assert commands.main(["fleet", "--prometheus", "localhost:9090"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err


async def test_a_bad_query_answer_is_a_reading_not_a_crash(demo) -> None:  # type: ignore[no-untyped-def]
    src = PrometheusSource(demo.url, dialects=fleet.dialects())
    src.queries["gpu"] = "sum(("  # a syntax error: HTTP 400 bad_data
    try:
        out = await src.poll()
    finally:
        await src.close()
    (key, reading), = out
    assert key.source == "prometheus" and not reading.ok
    assert "the gpu query was refused (HTTP 400 bad_data" in reading.message


def test_the_fleet_command_builds_its_screen_with_the_config_thresholds(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from engram_top.cli import fleet as fleet_cli
    conf = tmp_path / "config.toml"
    conf.write_text("[alerts]\nkv_usage_pct = 50\n")
    seen = {}

    def run_dashboard(app, crash_dir):  # type: ignore[no-untyped-def]
        seen["app"] = app
        return 0

    monkeypatch.setattr(fleet_cli, "run_dashboard", run_dashboard)
    monkeypatch.setattr(fleet_cli, "without_terminal", lambda session, command: False)
    assert commands.main(["fleet", "--prometheus", "http://127.0.0.1:9", "--config", str(conf),
                          "--interval", "2"]) == 0
    session = seen["app"].session
    assert session.url == "http://127.0.0.1:9" and session.interval == 2.0
    assert session.thresholds.kv_usage_pct == 50 and session.window == "1m"
    conf.write_text("[alerts]\nkv_usage_pct = 500\n")
    assert commands.main(["fleet", "--prometheus", "http://127.0.0.1:9",
                          "--config", str(conf)]) == 2


async def test_the_full_simulated_node_serves_dcgm_and_node_exporter_pages(tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`sim serve` with its exporters, scraped by a real Prometheus: one node whose GPU and
    host figures are the ones the dashboard's own simulated backends read."""
    from helpers import ServerSpec, SimServer, free_port

    from collectors.host import sample as host_sample
    from engram_top.sim.backends import SimGpuBackend, SimHostBackend
    from scenarios.prometheus import Prometheus, Target

    dcgm, node = free_port(), free_port()
    server = SimServer("exporters", ServerSpec("host", 0.02, (
        "--dcgm-exporter-port", str(dcgm), "--node-exporter-port", str(node),
        "--exporter-hostname", "simnode-a")), tmp_path)
    prom = Prometheus(tmp_path / "prom", [
        Target("dcgm-exporter", f"127.0.0.1:{dcgm}"), Target("node-exporter", f"127.0.0.1:{node}"),
        Target("sglang", f"127.0.0.1:{server.port}")], scrape_s=1.0)
    (tmp_path / "prom").mkdir()
    session = FleetSession(prom.url, interval=1.0, window="10s")
    try:
        server.wait_ready()
        prom.start()
        await prom.wait_ready()
        await prom.wait_scraped(3)
        await poll_until(session, lambda: any(r.kv_tokens for r in session.rows()),
                         "the node's SGLang figures")
        rows = session.rows()
        gpus = SimGpuBackend(server.node_dir).sample()
        host = host_sample(SimHostBackend(server.node_dir), None)
    finally:
        await session.close()
        await prom.stop()
        await server.astop()
    [r] = rows  # dcgm's Hostname names the node; the other two join it by their host
    assert r.node == "simnode-a" and not r.missing
    assert r.gpus == len(gpus.devices) == 4
    used = sorted(d.used_bytes // MIB * MIB for d in gpus.devices)
    assert (r.hbm_min, r.hbm_max) == (used[0], used[-1])
    assert r.host_total == host.total_bytes
    assert r.host_available == host.available_bytes
    assert r.kv_tokens == memory.plan(default(), "host").kv_tokens
    assert r.placement == "host?"  # inferred: the host tables' shared memory, no label


async def test_a_simulated_vllm_node_is_read_by_the_fleet(tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A vLLM node scraped by a real Prometheus: the fleet reads vLLM's own series (its KV
    cache's use, its requests) into the same columns, says whose they are, and does not
    take the node for a silent server."""
    from helpers import ServerSpec, SimServer

    from scenarios.prometheus import Prometheus, Target

    server = SimServer("vllm", ServerSpec("device", 0.02, ("--dialect", "vllm")), tmp_path)
    prom = Prometheus(tmp_path / "prom", [Target("vllm", f"127.0.0.1:{server.port}")],
                      scrape_s=1.0)
    (tmp_path / "prom").mkdir()
    session = FleetSession(prom.url, interval=1.0, window="10s")
    try:
        server.wait_ready()
        prom.start()
        await prom.wait_ready()
        await prom.wait_scraped(1)
        await poll_until(session, lambda: any(r.kv_usage is not None and r.running is not None
                                              for r in session.rows()),
                         "the node's vLLM figures")
        rows = session.rows()
    finally:
        await session.close()
        await prom.stop()
        await server.astop()
    [r] = rows
    assert r.node == "127.0.0.1" and r.engine == "vLLM"
    assert r.kv_usage is not None and 0.0 <= r.kv_usage < 1.0 and r.running == 0
    assert r.state == "idle" and "server silent" not in r.alerts
    assert not any("/metrics" in m for m in r.missing), r.missing
