"""Deaths on the simulated node, end to end: a real session starts a simulated server that
dies one way (`sim serve --fail-as`), the session classifies the death from what it can read
then (the log, the exit status, the node's kernel records and counter, the last host
reading), puts it on the run's facts, the events, the header and summary.md, the recorder
writes it, and `engram-top why` reads it back from the recording."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import sim_scenario_file, until

from engram_top.cli.commands import main
from engram_top.export.summary import summary_markdown
from engram_top.live.session import Session, SessionOptions
from engram_top.model.death import Death, DeathKind
from engram_top.model.store import RunStore
from engram_top.record.recorder import Recorder
from engram_top.sim import kernel

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


async def died(tmp_path: Path, name: str, placement: str, *args: str,
               timeout: float = 90) -> tuple[Death, RunStore, Path, Session]:
    """Start the scenario in a session with a recorder; wait for its death to be classified.
    The caller closes the session (the fixture-like `finally` of each test)."""
    path = sim_scenario_file(tmp_path, name, placement, *args)
    session = Session(SessionOptions(scenario_file=path, start=name, state_dir=tmp_path / "state",
                                     free_ports=True, load=None, poll_interval=0.5))
    record = tmp_path / "deaths.jsonl"
    await session.start()
    recorder = Recorder(session.store, record).start()
    try:
        store = session.store
        await until(None, lambda: store.run is not None and store.run.death is not None,
                    timeout, lambda: f"its death classified; events: "
                    f"{[e.text for e in store.events][-5:]}")
        assert store.run is not None and store.run.death is not None
        return store.run.death, store, record, session
    finally:
        recorder.close()


def why(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["why", str(path)])
    return code, capsys.readouterr().out


@pytest.mark.timeout(150)
async def test_an_hbm_oom_at_start_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = None
    try:
        death, store, record, session = await died(tmp_path, "oom", "device",
                                                   "--fail-as", "oom-kv-pool")
        assert death.kind == DeathKind.HBM_OOM_STARTUP
        assert death.evidence[0].startswith("log") and "OutOfMemoryError" in death.evidence[0]
        assert death.evidence[1] == "during start-up, in kv pool"
        assert "--mem-fraction-static" in death.action
        said = [e.text for e in store.events]
        assert any(t.startswith("oom died: out of GPU memory during start-up. log")
                   and "Next: a lower --mem-fraction-static" in t for t in said), said
        summary = summary_markdown(store, {"taken_at": "now", "run": None}, "")
        assert "## Deaths" in summary
        assert "- **oom** died: out of GPU memory during start-up (`hbm-oom-startup`)" in summary
    finally:
        if session is not None:
            await session.close()
    # The recorder wrote it with the run's facts: `why` reads it back, word for word.
    code, out = why(record, capsys)
    assert code == 0, out
    assert out.splitlines()[1] == ("- **oom** died: out of GPU memory during start-up "
                                   "(`hbm-oom-startup`)")
    assert "  - during start-up, in kv pool" in out.splitlines()


@pytest.mark.timeout(150)
async def test_a_server_stopped_as_asked_did_not_die(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    session = Session(SessionOptions(scenario_file=sim_scenario_file(tmp_path, "fine", "device"),
                                     start="fine", state_dir=tmp_path / "state",
                                     free_ports=True, load=None, poll_interval=0.5))
    record = tmp_path / "fine.jsonl"
    try:
        await session.start()
        recorder = Recorder(session.store, record).start()
        store = session.store
        await until(None, lambda: store.run is not None and store.run.state == "ready", 90,
                    "ready")
        # Its fingerprint: what ran, on what (the simulated node's GPUs, host and kernel).
        # One taken once the server answered (one taken at launch has no layout yet).
        await until(None, lambda: store.run is not None and store.run.fingerprint is not None
                    and "tp_size" in store.run.fingerprint.parallel, 30, "its fingerprint")
        fp = store.run.fingerprint
        assert fp is not None
        assert (fp.placement, fp.gpus, fp.thp, fp.numa_nodes) == (
            "device", "4x NVIDIA B200, 179.1 GiB", "madvise", 2)
        assert fp.engine.startswith("SGLang (simulated)") and fp.parallel["tp_size"] == 4
        assert fp.server_args["mem_fraction_static"] and "port" not in fp.server_args
        summary = summary_markdown(store, {"taken_at": "now", "run": None}, "")
        assert "## Fingerprint" in summary and "placement device · TP4" in summary
        await session.close()
        recorder.close()
        assert store.run is not None and store.run.death is None
    finally:
        await session.close()
    code, out = why(record, capsys)
    assert code == 1 and out.startswith(f"No death recorded in {record}: 1 run")



# Each way the simulated server dies while serving (`sim serve --fail-as KIND --fail-after
# S`), the class the session reads from what is left, and a piece of evidence it must name.
RUNNING = {
    "host-oom-kill": (DeathKind.HOST_OOM_KILL, "kernel: Out of memory: Killed process "),
    "cgroup-oom-kill": (DeathKind.CGROUP_OOM_KILL,
                        "the cgroup whose limit was hit: /system.slice/sglang.service"),
    "hbm-oom-running": (DeathKind.HBM_OOM_RUNTIME, "CUDA out of memory. Tried to allocate"),
    "shm-full": (DeathKind.SHM_FULL, "No space left on device"),
    "killed": (DeathKind.SIGNAL, "its process ended by SIGTERM (exit status -15)"),
}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kind", list(RUNNING))
async def test_a_death_while_serving_is_classified(tmp_path: Path, kind: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    expected, words = RUNNING[kind]
    session = None
    try:
        death, store, record, session = await died(
            tmp_path, "dies", "host", "--fail-as", kind, "--fail-after", "3")
        said = [e.text for e in store.events]
        assert death.kind == expected, (death, said[-8:])
        assert any(words in line for line in death.evidence), death.evidence
        assert any(t.startswith(f"dies died: {death.title}.") for t in said), said[-8:]
    finally:
        if session is not None:
            await session.close()
    if kind == "host-oom-kill":
        # Which line grew: rank 0's heap (40 GiB in a second), not the pinned tables it
        # held all along; and the kernel named a pid of the server's.
        assert death.action.startswith("pageable memory grew"), death.action
        grew = next(line for line in death.evidence if line.startswith("since ready"))
        assert grew.startswith("since ready: pageable +"), grew
        assert kernel.read_oom_kills(tmp_path / "state" / "node") == 1
    code, out = why(record, capsys)
    assert code == 0 and f"(`{expected.value}`)" in out
