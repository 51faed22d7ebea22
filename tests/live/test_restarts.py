"""A server someone else restarts, watched by an attached session as an agent watches it:
a simulated server whose rank's host memory grows until the node's kernel kills it, four
seconds after ready (`--fail-as host-oom-kill`), started again on the same port after each
death, as a restart policy does. The session classifies each death, sees the server come
back (its new process found, so that the next death is classified too), and after the
third raises restart-loop with the deaths' class. Real processes; every one is stopped by
the test's finally."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import free_port, until

from engram_top.cli.commands import main
from engram_top.live.session import Session, SessionOptions
from engram_top.model.death import DeathKind
from engram_top.record.recorder import Recorder
from scenarios.process import LaunchSpec, ManagedProcess

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


def _serve(port: int, node: Path, log: Path) -> ManagedProcess:
    return ManagedProcess.start(LaunchSpec(
        [sys.executable, "-m", "engram_top", "sim", "serve", "--placement", "device",
         "--port", str(port), "--time-scale", "0.02", "--node-dir", str(node),
         "--fail-as", "host-oom-kill", "--fail-after", "4"], log))


@pytest.mark.timeout(300)
async def test_a_server_restarted_after_each_death_raises_restart_loop(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    node = tmp_path / "node"
    servers: list[ManagedProcess] = []
    session = Session(SessionOptions(attach=(url,), load=None, poll_interval=0.5,
                                     state_dir=tmp_path / "state"))
    record = tmp_path / "restarts.jsonl"
    recorder: Recorder | None = None
    try:
        servers.append(_serve(port, node, tmp_path / "server-0.log"))
        await session.start()
        recorder = Recorder(session.store, record).start()
        store = session.store
        facts = store.run  # an attached server's facts: the same through its restarts
        assert facts is not None
        for n in range(1, 4):
            await until(None, lambda: facts.death is not None, 90,
                        lambda n=n: f"death {n} classified (events: "
                                    f"{[e.text for e in store.events][-4:]})")
            assert facts.death is not None and facts.death.kind == DeathKind.HOST_OOM_KILL
            assert servers[-1].popen is not None and servers[-1].popen.poll() is not None
            if n == 3:
                break
            servers.append(_serve(port, node, tmp_path / f"server-{n}.log"))
            # It answers again: restarted, its death kept, its new process looked for.
            await until(None, lambda n=n: len(facts.earlier_deaths) == n
                        and facts.death is None and session.host.root_pid == servers[-1].pid,
                        90, lambda n=n: f"restart {n} seen (root pid {session.host.root_pid}, "
                                        f"new {servers[-1].pid})")
            assert any(e.text.startswith(f"{url} answers again after it died (killed by the "
                                         "kernel's OOM killer (host memory))"
                                         f": restarted; deaths seen: {n}") for e in store.events)
        await until(None, lambda: "restart-loop" in store.alerts, 10, "the restart-loop alert")
        message = store.alerts["restart-loop"].message
        assert message.startswith(f"{url} died 3 times in "), message
        assert "(>= 3 in 10 min: host-oom-kill ×3); last: killed by the kernel's OOM killer " \
               "(host memory); each restart meets the same end: " in message, message
    finally:
        if recorder is not None:
            recorder.close()
        await session.close()
        for server in servers:
            await server.stop(5)
    # The recording keeps every death, the restarts' earlier ones too: `why` lists three.
    assert main(["why", str(record)]) == 0
    out = capsys.readouterr().out
    assert out.count("died: killed by the kernel's OOM killer (host memory)") == 3, out
