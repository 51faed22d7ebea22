"""The fit check before a start or a switch, end to end on the simulated node: the headless
switch refuses what does not fit (exit 2, the figures, nothing stopped) and --force starts it
anyway; the dashboard opens a dialog with the figures whose "cancel" leaves things as they
are and whose "start anyway" starts it. A node with less host memory (its spec) stands for a
host that does not fit; this test's process holding HBM on the node stands for another
tenant on the GPUs. Real server processes, real loopback HTTP; none is left behind."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import DEMO, GIB, alive, quit_app, screen_text, until

from engram_top.app.fit_dialog import FitScreen
from engram_top.app.main import EngramTopApp
from engram_top.live.session import Session, SessionOptions
from engram_top.seed import reference
from engram_top.sim import state
from scenarios.proc_start import start_of

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

SIZE = (150, 45)
CLI = [sys.executable, "-m", "engram_top"]


def scenario_file(tmp_path: Path) -> Path:
    """The demo's scenarios on free-enough ports, 50x faster start-ups."""
    text = DEMO.read_text().replace("time_scale = 0.1", "time_scale = 0.02")
    for old in (30101, 30102, 30103):
        text = text.replace(f"port = {old}", f"port = {old + 700}")
    path = tmp_path / "fit.toml"
    path.write_text(text)
    return path


def node_in(state_dir: Path, **spec: int) -> Path:
    node_dir = state_dir / "node"  # where a session over the file keeps its simulated node
    base = state.NodeSpec.from_reference(reference.default())
    state.write_spec(node_dir, dataclasses.replace(base, **spec))
    return node_dir


def hold_hbm(node_dir: Path, gib: float) -> int:
    """This process as another tenant holding ``gib`` of HBM on every GPU."""
    me = os.getpid()
    state.write_proc(node_dir, state.ProcState(
        pid=me, started=start_of(me) or 0.0, name="other-tenant",
        gpu_bytes={g: int(gib * GIB) for g in range(4)}))
    return me


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def strays(tmp_path: Path) -> list[int]:
    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if str(tmp_path) in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(proc.info["pid"])
    return out


@pytest.fixture
def stopped_after(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Whatever a headless switch left running, stopped at the end."""
    calls: list[tuple[Path, Path]] = []
    yield calls.append
    for file, state_dir in calls:
        cli("stop", str(file), "--state-dir", str(state_dir))
    for pid in strays(tmp_path):  # a stop that failed must not leave a server behind
        psutil.Process(pid).kill()
    assert strays(tmp_path) == []


@pytest.mark.timeout(240)
def test_headless_switch_refuses_what_does_not_fit_and_force_starts_it(
        tmp_path: Path, stopped_after) -> None:  # type: ignore[no-untyped-def]
    file, state_dir = scenario_file(tmp_path), tmp_path / "state"
    node_in(state_dir, host_total_bytes=256 * GIB, host_baseline_used_bytes=80 * GIB)
    stopped_after((file, state_dir))
    args = (str(file), "--state-dir", str(state_dir))

    # Fits: the device placement needs 6.5 GiB of host RAM.
    out = cli("switch", *args, "--to", "device", "--wait-ready")
    assert out.returncode == 0, out.stderr
    assert "device ready after" in out.stdout
    current = json.loads((state_dir / "current.json").read_text())
    assert current["scenario"] == "device"

    # Does not fit on the host: refused before device is stopped, with the figures.
    out = cli("switch", *args, "--to", "host")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "engram-top switch: 'host' does not fit on this node:" in out.stderr
    # MemAvailable is 256 - 80 - device's 6.5 GiB; those 6.5 GiB go when device stops.
    assert "refuse: host: needs 195.4 GiB (Engram tables (shared) 187.4" in out.stderr
    assert "free 176.0 GiB of 256.0 GiB (MemAvailable): short of 19.4 GiB" in out.stderr, \
        out.stderr
    assert "(--force starts it anyway)" in out.stderr
    assert "Traceback" not in out.stderr
    assert alive(current["pid"])  # nothing was stopped
    assert json.loads((state_dir / "current.json").read_text())["pid"] == current["pid"]

    # --force: it goes ahead, and says it did, with what it overrode.
    out = cli("switch", *args, "--to", "host", "--force", "--wait-ready")
    assert out.returncode == 0, out.stderr
    assert "host ready after" in out.stdout
    assert ("engram-top switch: warning: 'host' does not fit on this node, started anyway "
            "(force): refuse: host: needs 195.4 GiB") in out.stderr, out.stderr
    assert not alive(current["pid"])
    assert json.loads((state_dir / "current.json").read_text())["scenario"] == "host"


@pytest.mark.timeout(120)
def test_headless_switch_refuses_hbm_another_tenant_holds(
        tmp_path: Path, stopped_after) -> None:  # type: ignore[no-untyped-def]
    file, state_dir = scenario_file(tmp_path), tmp_path / "state"
    node_dir = node_in(state_dir)
    pid = hold_hbm(node_dir, 30)
    stopped_after((file, state_dir))
    out = cli("switch", str(file), "--state-dir", str(state_dir), "--to", "device")
    assert out.returncode == 2, (out.stdout, out.stderr)
    for gpu in range(4):
        assert (f"refuse: GPU {gpu}: needs 178.6 GiB (context 1.6 + weights 119.0 + KV 20.5"
                in out.stderr), out.stderr
    assert f"other processes hold other-tenant (pid {pid}) 30.0 GiB" in out.stderr
    assert "short of 9.5 GiB before any KV pool" in out.stderr
    assert not (state_dir / "current.json").exists()  # nothing launched
    assert strays(tmp_path) == []


@pytest.mark.timeout(150)
async def test_dashboard_asks_before_a_start_that_does_not_fit(tmp_path: Path) -> None:
    file, state_dir = scenario_file(tmp_path), tmp_path / "state"
    node_in(state_dir, host_total_bytes=256 * GIB, host_baseline_used_bytes=80 * GIB)
    session = Session(SessionOptions(scenario_file=file, state_dir=state_dir, load=None,
                                     poll_interval=0.5))
    app = EngramTopApp(session)
    launched: list[int] = []
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app._rows) == 3, 10, "the scenario table")
        await pilot.press("2")  # host: does not fit on this node's host RAM
        await until(pilot, lambda: isinstance(app.screen, FitScreen), 10, "the fit dialog")
        text = screen_text(app)
        assert "'host' does not fit on this node:" in text
        assert "host: needs 195.4 GiB" in text and "short of 19.4 GiB" in text
        assert "start anyway" in text
        await pilot.press("c")
        await until(pilot, lambda: not isinstance(app.screen, FitScreen), 5, "the dialog gone")
        assert session.supervisor.current is None  # nothing started
        assert any("start host: 'host' does not fit on this node:" in e.text
                   for e in session.store.events)

        await pilot.press("1")  # device fits: no dialog
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.state == "ready", 40, "device ready")
        assert not isinstance(app.screen, FitScreen)
        launched.append(session.supervisor.current.pid)

        await pilot.press("2")  # a switch that does not fit: asked before device stops
        # The switch's check reads the node beside a live server (its guards wait up to
        # 10 s for a reading in flight): on a busy machine that alone can take 10 s.
        await until(pilot, lambda: isinstance(app.screen, FitScreen), 30, "the fit dialog")
        assert session.store.run.scenario == "device" and alive(launched[0])
        await pilot.press("s")  # start anyway
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.scenario == "host"
                    and session.store.run.state == "ready", 60, "host ready")
        launched.append(session.supervisor.current.pid)
        assert not alive(launched[0])
        assert any("started anyway (force)" in e.text for e in session.store.events)
        await quit_app(app, pilot)
    assert [p for p in launched if alive(p)] == []
    assert strays(tmp_path) == []


@pytest.mark.timeout(90)
async def test_dashboard_names_the_tenant_holding_hbm(tmp_path: Path) -> None:
    file, state_dir = scenario_file(tmp_path), tmp_path / "state"
    pid = hold_hbm(node_in(state_dir), 30)
    session = Session(SessionOptions(scenario_file=file, state_dir=state_dir, load=None,
                                     poll_interval=0.5, start="device"))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        # run --start device: refused at the session's start, asked in the dialog.
        await until(pilot, lambda: isinstance(app.screen, FitScreen), 15, "the fit dialog")
        text = " ".join(screen_text(app).split())
        assert "'device' does not fit on this node:" in text
        assert f"other-tenant (pid {pid}) 30.0 GiB" in text
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, FitScreen), 5, "the dialog gone")
        assert session.supervisor.current is None
        await quit_app(app, pilot)
    assert strays(tmp_path) == []
