"""A command killed with SIGKILL cannot clean up after itself: the server it started is left
running, by design (it is the user's to keep or stop), and `engram-top stop FILE` finds it
and stops it. Nothing else of the command outlives it: its synthetic load goes with it.
(`bench` killed so is tests/faults/test_hangs.py's fault 8.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from faultkit import Cli, no_traceback, sim_scenario_file
from helpers import wait_until

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


@pytest.mark.parametrize("command", ["run", "switch"])
def test_a_killed_command_leaves_its_server_and_stop_finds_it(cli: Cli, tmp_path: Path,
                                                              command: str) -> None:
    scenarios = sim_scenario_file(tmp_path)
    if command == "run":  # the dashboard, in a terminal, with its synthetic load
        proc = cli.terminal("run", str(scenarios), "--start", "device").proc
        wait_until(lambda: len(cli.servers()) == 5, 60, "the server and its 4 ranks")
        wait_until(lambda: cli.processes("scenarios.load_process"), 60, "its load running")
    else:  # killed while the server starts: x1, the seed's 125 s
        scenarios.write_text(scenarios.read_text().replace("0.02", "1.0"))
        proc = cli.start("switch", str(scenarios), "--to", "device", "--wait-ready")
        wait_until(lambda: len(cli.servers()) == 5, 60, "the server and its 4 ranks")
    servers = {p.pid for p in cli.servers()}
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)

    assert {p.pid for p in cli.servers()} == servers, "the server did not outlive the kill"
    wait_until(lambda: {p.pid for p in cli.processes()} == servers, 15,
               "nothing but the server left (its load gone with it)")
    res = cli.run("stop", str(scenarios))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0 and res.stdout.startswith("stopped device"), \
        res.stdout + res.stderr
    wait_until(lambda: not cli.processes(), 15, "nothing of it left")
    res = cli.run("stop", str(scenarios))
    assert res.returncode == 0 and "nothing of this scenario file is running" in res.stdout
