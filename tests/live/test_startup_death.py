"""A server someone else started that dies in its start-up, before it ever answered,
watched by an attached session as an agent watches one it was started before: a simulated
server whose KV pool allocation runs out of HBM (`--fail-as oom-kv-pool`), its output going
to a log file as `... > server.log 2>&1` sends it. The session finds the process started to
serve on the port while it loads (it does not listen yet), follows its memory, reads its log
from that file after the death and classifies it as an HBM OOM in start-up, in the KV pool's
phase, with the log's words. Real processes, stopped by the test's finally."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import free_port, until

from collectors.readings import Status
from engram_top.live.session import Session, SessionOptions
from engram_top.model.death import DeathKind
from scenarios.process import LaunchSpec, ManagedProcess

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


@pytest.mark.timeout(180)
async def test_a_server_that_dies_before_it_ever_answered_is_classified(
        tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "server.log"
    session = Session(SessionOptions(attach=(url,), load=None, poll_interval=0.5,
                                     state_dir=tmp_path / "state"))
    server: ManagedProcess | None = None
    try:
        await session.start()  # before the server: nothing to find yet
        server = ManagedProcess.start(LaunchSpec(
            [sys.executable, "-m", "engram_top", "sim", "serve", "--placement", "device",
             "--port", str(port), "--time-scale", "0.1", "--node-dir", str(tmp_path / "node"),
             "--fail-as", "oom-kv-pool"], log))
        store = session.store
        facts = store.run
        assert facts is not None
        # Found while it loads: started to serve on the port, not listening, never answered.
        await until(None, lambda: session.host.root_pid == server.pid, 60,
                    lambda: f"the starting server found (root pid {session.host.root_pid}, "
                            f"server {server.pid})")
        reading = store.latest.get("server")
        assert reading is not None and reading.status is not Status.OK
        assert facts.log_path == str(log)
        await until(None, lambda: facts.death is not None, 90,
                    lambda: f"its death classified (events: {[e.text for e in store.events][-4:]})")
        death = facts.death
        assert death is not None and death.kind == DeathKind.HBM_OOM_STARTUP, death
        assert server.popen is not None and server.popen.poll() not in (None, 0)
        assert any("out of memory" in line.lower() for line in death.evidence), death.evidence
        assert "during start-up, in kv pool" in death.evidence, death.evidence
        assert "exit status not known (not our process)" in death.evidence
        assert any(e.text.startswith(f"{url} died: ") for e in store.events), \
            [e.text for e in store.events]
    finally:
        await session.close()
        if server is not None:
            await server.stop(5)

