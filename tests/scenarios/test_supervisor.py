"""The supervisor on real processes: simulated SGLang servers (real HTTP on loopback), and a
stand-in `sglang` package for servers that die, hang or ignore SIGTERM."""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil
import pytest
from helpers import free_port, running, until

from collectors.host import sample as host_sample
from collectors.readings import GpuData, HostData
from engram_top.live.session import Session
from engram_top.seed import reference
from engram_top.sim import state
from engram_top.sim.backends import SimGpuBackend, SimHostBackend
from scenarios import guards, scenario_file
from scenarios.owner import SupervisorOwner
from scenarios.ports import port_in_use
from scenarios.proc_start import start_of
from scenarios.runstate import RunState
from scenarios.scenario_file import Scenario
from scenarios.server_run import Origin, Run
from scenarios.supervisor import Supervisor, SupervisorError

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "data" / "fake_sglang"
GIB = 1024**3


def sim_scenario(name: str, placement: str, **changes: object) -> Scenario:
    demo = scenario_file.load(ROOT / "scenarios" / "demo.toml").get(placement)
    base: dict[str, object] = {"name": name, "port": free_port(), "time_scale": 0.01,
                               "hbm_release_timeout_s": 10.0}
    return dataclasses.replace(demo, **{**base, **changes})


def fake_scenario(tmp_path: Path, **env: str) -> Scenario:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    text = f"""
[scenarios.fake]
kind = "sglang"
python = "{sys.executable}"
model_path = "{model}"
port = {free_port()}
readiness_timeout_s = 60
stop_grace_s = 1
env = {{ PYTHONPATH = "{FAKE}" }}
"""
    path = tmp_path / "fake.toml"
    path.write_text(text)
    sc = scenario_file.load(path).get("fake")
    return dataclasses.replace(sc, env={**sc.env, **env})


@pytest.fixture
def node(tmp_path: Path) -> Path:
    node_dir = tmp_path / "node"
    state.ensure_node(node_dir, reference.default())
    return node_dir


class Owner:
    """The supervisor's owner in these tests: the simulated node's readings; the events as
    lines, and each run's states in the order the supervisor told them."""

    def __init__(self, node: Path, events: list[str]) -> None:
        self.gpu, self.host = SimGpuBackend(node), SimHostBackend(node)
        self.events = events
        self.states: dict[str, list[RunState]] = {}

    def gpu_sample(self) -> GpuData:
        return self.gpu.sample()

    def host_used(self) -> int:
        return host_sample(self.host, None).used_bytes

    def host_shmem(self) -> int:
        return host_sample(self.host, None).shmem_bytes

    def host_sample(self, root_pid: int | None) -> HostData:
        return host_sample(self.host, root_pid)

    def event(self, level: str, text: str) -> None:
        self.events.append(f"{level}: {text}")

    def run_changed(self, run: Run) -> None:
        seen = self.states.setdefault(run.scenario.name, [])
        if not seen or seen[-1] != run.state:
            seen.append(run.state)


def make_supervisor(tmp_path: Path, node: Path, events: list[str]) -> Supervisor:
    return Supervisor(tmp_path / "state", Owner(node, events), node_dir=node)


def test_a_live_session_and_the_tests_owner_are_what_the_supervisor_asks_for() -> None:
    # Structural: every method of the protocol, by name, on the session that owns the
    # supervisor in the product (a method renamed on one side fails here, not mid-run).
    assert issubclass(Session, SupervisorOwner)
    assert issubclass(Owner, SupervisorOwner)
    assert not issubclass(SimGpuBackend, SupervisorOwner)


@pytest.fixture
async def supervisors(tmp_path: Path, node: Path) -> AsyncIterator[Callable[..., Supervisor]]:
    """Supervisors on this test's node: ``supervisors(events)`` makes one. Each is closed
    after the test, and any server it still runs stopped (an adopted one too, which close
    leaves), a failed assertion or not."""
    made: list[Supervisor] = []

    def make(events: list[str] | None = None) -> Supervisor:
        made.append(make_supervisor(tmp_path, node, [] if events is None else events))
        return made[-1]

    yield make
    for sup in made:
        if sup.current is not None and sup.current.alive:
            await sup.stop()
        await sup.close()


def group_alive(pgid: int) -> list[int]:
    import os
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.Error, ProcessLookupError):
            pass
    return out


async def test_start_follows_phases_to_ready_and_stop_leaves_nothing(node,
                                                                      supervisors) -> None:
    sup = supervisors()
    run = await sup.start(sim_scenario("dev", "device"))
    await _followed_to_ready(sup, run, node)


async def _followed_to_ready(sup: Supervisor, run: Run, node: Path) -> None:
    sc = run.scenario
    assert await sup.wait_ready(run, 60), run.failure
    # The phases the log went through, as the parser timed them: a sampler of run.phase
    # could miss a short one on a loaded machine.
    assert {"weights", "kv_pool", "graphs"} <= set(run.parser.facts().phase_durations())
    assert run.ready_s is not None and 0 < run.ready_s < 30
    facts = run.parser.facts()
    assert facts.max_total_num_tokens == 11_840_000
    assert run.baseline_gpu == {0: 0, 1: 0, 2: 0, 3: 0}
    used = [d.used_bytes for d in SimGpuBackend(node).sample().devices]
    assert all(u > 140 * GIB for u in used)
    # A second start while this one runs is refused, naming the running server.
    with pytest.raises(SupervisorError, match="still running"):
        await sup.start(sim_scenario("other", "host"))
    result = await sup.stop()
    assert result is not None and not result.survivors and not result.killed
    assert run.state == "stopped"
    assert not group_alive(run.proc.pgid)
    assert not port_in_use("127.0.0.1", sc.port)
    assert all(d.used_bytes == 0 for d in SimGpuBackend(node).sample().devices)
    assert sup.estimate(sc) == pytest.approx(run.ready_s, abs=0.01)  # remembered
    # The owner heard each change as it happened, in order, and nothing after the stop.
    assert isinstance(sup.owner, Owner)
    assert sup.owner.states[sc.name] == [RunState.STARTING, RunState.READY,
                                         RunState.STOPPING, RunState.STOPPED]


async def test_back_to_back_switches_leave_no_process_or_port(node, supervisors) -> None:
    events: list[str] = []
    sup = supervisors(events)
    scenarios = [sim_scenario("a", "device"), sim_scenario("b", "host-prefetch")]
    runs = []
    for i in range(6):
        run = await sup.switch(scenarios[i % 2])
        runs.append(run)
        assert await sup.wait_ready(run, 60), run.failure
        # The guard let this start only once the previous run's HBM was back at baseline.
        assert all(v == 0 for v in run.baseline_gpu.values())
    await sup.stop()
    for run in runs:
        assert run.state == "stopped"
        assert not group_alive(run.proc.pgid)
    for sc in scenarios:
        assert not port_in_use("127.0.0.1", sc.port)
    assert not list((node / "procs").glob("*.json"))
    assert sum("HBM released" in e or "stopped" in e for e in events) >= 5
    # host-prefetch pins ~196 GiB of shared memory; it went with its server every time.
    assert runs[1].baseline_host_shmem is not None
    assert not [e for e in events if "host shared memory" in e]


async def test_busy_port_is_refused(supervisors) -> None:
    sup = supervisors()
    sc = sim_scenario("dev", "device")
    with socket.socket() as s:
        s.bind(("127.0.0.1", sc.port))
        s.listen()
        with pytest.raises(SupervisorError, match=f"port {sc.port} is in use"):
            await sup.start(sc)
    assert sup.current is None


async def test_a_server_that_dies_during_start_up(supervisors) -> None:
    sup = supervisors()
    sc = sim_scenario("dies", "device", args=("--fail-at", "weights"))
    run = await sup.start(sc)
    assert not await sup.wait_ready(run, 30)
    assert run.state == "failed"
    assert "during weights" in run.failure
    assert "simulated failure during weights" in run.failure  # the last error line of the log
    assert not group_alive(run.proc.pgid)
    assert any("Traceback" in line for _, line in run.lines)  # the log tail is kept


async def test_a_server_that_never_becomes_ready_is_timed_out_and_stopped(tmp_path,
                                                                          supervisors) -> None:
    sup = supervisors()
    sc = dataclasses.replace(fake_scenario(tmp_path), readiness_timeout_s=2.0)
    run = await sup.start(sc)
    assert not await sup.wait_ready(run, 20)
    assert run.state == "failed"
    assert run.failure.startswith("not ready after 2 s (last phase: weights)")
    assert not group_alive(run.proc.pgid)
    assert any("Load weight begin" in line for _, line in run.lines)


async def test_a_server_that_ignores_sigterm_is_killed_with_its_children(tmp_path,
                                                                         supervisors) -> None:
    events: list[str] = []
    sup = supervisors(events)
    sc = fake_scenario(tmp_path, FAKE_IGNORE_TERM="1", FAKE_CHILD="1")
    run = await sup.start(sc)
    await until(None, lambda: len(group_alive(run.proc.pgid)) >= 2, 10,
                "the server and its child")
    assert len(group_alive(run.proc.pgid)) == 2
    started = time.monotonic()
    result = await sup.stop()
    assert result is not None and result.killed and not result.survivors
    assert time.monotonic() - started >= sc.stop_grace_s
    assert not group_alive(run.proc.pgid)
    assert any("ignored SIGTERM" in e for e in events)


async def test_hbm_release_guard_names_the_process_still_holding_memory(node,
                                                                        supervisors) -> None:
    sup = supervisors()
    first = sim_scenario("first", "device", hbm_release_timeout_s=1.0)
    run = await sup.start(first)
    assert await sup.wait_ready(run, 30)
    # Something outside the server's process group holds 40 GiB of GPU 2, as a leaked
    # worker would on a real node.
    with running([sys.executable, "-c", "import time; time.sleep(60)"]) as leak:
        state.write_proc(node, state.ProcState(pid=leak.pid, started=start_of(leak.pid) or 0.0,
                                               name="leaked-worker",
                                               gpu_bytes={2: 40 * GIB}))
        with pytest.raises(SupervisorError) as err:
            await sup.switch(sim_scenario("second", "host"))
        text = str(err.value)
        assert "HBM did not return" in text
        assert f"GPU 2: pid {leak.pid} (leaked-worker) holds 40.0 GiB" in text
        assert sup.current is run and run.state == "stopped"  # nothing new was launched


async def test_host_memory_left_behind_is_warned_of_and_the_switch_goes_on(
        node, supervisors, monkeypatch) -> None:
    """Shared memory that outlives the server (segments left in /dev/shm, a process outside
    its tree) is not the GPU's to wait for: the next run starts, with a warning saying its
    host delta counts from a baseline that holds it."""
    monkeypatch.setattr(guards, "HOST_RELEASE_S", 0.5)
    events: list[str] = []
    sup = supervisors(events)
    run = await sup.start(sim_scenario("first", "device"))
    assert await sup.wait_ready(run, 30)
    with running([sys.executable, "-c", "import time; time.sleep(60)"]) as leak:
        state.write_proc(node, state.ProcState(pid=leak.pid, started=start_of(leak.pid) or 0.0,
                                               name="leftover", host_shmem_bytes=50 * GIB))
        second = await sup.switch(sim_scenario("second", "device"))
        warned = [e for e in events if e.startswith("warning: host shared memory")]
        assert len(warned) == 1
        assert warned[0].startswith("warning: host shared memory is still 50.0 GiB above its "
                                    "level before 'first' launched (0.")
        assert warned[0].endswith("s after the HBM came back; segments left in /dev/shm? "
                                  "Shmem in /proc/meminfo): the next run's host delta counts "
                                  "from here")
        assert sup.current is second
        assert second.baseline_host_shmem == run.baseline_host_shmem + 50 * GIB
        assert await sup.wait_ready(second, 30), second.failure


async def test_a_later_supervisor_adopts_the_server_left_running(tmp_path,
                                                                  supervisors) -> None:
    first = supervisors()
    sc = sim_scenario("dev", "device")
    run = await first.start(sc)
    assert await first.wait_ready(run, 30)
    await first.close(leave_running=True)
    assert run.alive

    assert run.origin is Origin.LAUNCHED

    # Closing a supervisor that adopted it leaves it running, with a loop or without.
    events: list[str] = []
    second = supervisors(events)
    adopted = second.adopt({"dev": sc})
    assert adopted is not None and adopted.pid == run.pid
    assert adopted.origin is Origin.ADOPTED
    assert any("still running" in e for e in events)
    await second.close()
    assert adopted.alive and adopted.state in (RunState.STARTING, RunState.READY)
    assert f"info: left dev running (pid {run.pid}, started by an earlier engram-top)" \
        in events
    assert adopted.left_on_close(False) and not run.left_on_close(False)
    third = supervisors()
    assert third.adopt({"dev": sc}) is not None
    third.close_now()
    assert run.alive and (tmp_path / "state" / "current.json").exists()
    await third.close()  # its follow task: the loop is still here in this test
    assert run.alive
    # As an older engram-top recorded it: its start as create_time, seconds since the epoch.
    current = tmp_path / "state" / "current.json"
    record = json.loads(current.read_text())
    record["create_time"] = psutil.Process(run.pid).create_time()
    del record["started"]
    current.write_text(json.dumps(record))
    older = supervisors()
    assert older.adopt({"dev": sc}) is not None
    await older.close()
    assert run.alive

    # Asked to here (stop, switch), it is stopped.
    events.clear()
    second = supervisors(events)
    adopted = second.adopt({"dev": sc})
    assert adopted is not None
    with pytest.raises(SupervisorError, match="still running"):
        await second.start(dataclasses.replace(sc, port=free_port()))
    result = await second.stop()
    assert result is not None and not result.survivors
    assert not group_alive(run.proc.pgid)
    assert not (tmp_path / "state" / "current.json").exists()
    assert supervisors().adopt({"dev": sc}) is None


async def test_preflight_names_a_missing_interpreter_and_model(tmp_path, supervisors) -> None:
    sup = supervisors()
    sc = fake_scenario(tmp_path)
    with pytest.raises(SupervisorError, match="python '/nonexistent/python' does not exist"):
        await sup.start(dataclasses.replace(sc, python="/nonexistent/python"))
    with pytest.raises(SupervisorError, match="model_path '/nonexistent/model' does not exist"):
        await sup.start(dataclasses.replace(sc, model_path="/nonexistent/model"))
