"""A dashboard that ends without being asked (SIGTERM, SIGHUP, a closed terminal, a crash)
while it watches a server an earlier command left running (here `switch --wait-ready`):
nobody is there to say whether to stop it, so it is left running, the command names it on
stderr with the command that stops it, and the state folder still remembers it for the
next `run` or `stop`. What a dashboard launched itself is stopped on those paths as ever
(test_crashes.py's fault 3). The `q` key's dialog is tests/app/test_quit_adopted.py's."""

from __future__ import annotations

import json
import re
import shlex
import signal
from pathlib import Path

import httpx
import pytest
from faultkit import CRASH_HOOK, Cli, command_line, no_traceback, sim_scenario_file
from helpers import alive, wait_until

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "closed terminal", "crash"])
def test_a_dashboard_ended_unasked_leaves_the_server_it_adopted(cli: Cli, tmp_path: Path,
                                                                how: str) -> None:
    scenarios = sim_scenario_file(tmp_path)
    stop_with = shlex.join(["engram-top", "stop", str(scenarios)])
    res = cli.run("switch", str(scenarios), "--to", "device", "--wait-ready", timeout=90)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    started = re.search(r"started device \(pid (\d+)\) on http://127\.0\.0\.1:(\d+); "
                        r"log: (\S+)", res.stdout)
    assert started, res.stdout
    pid, port, log = int(started[1]), int(started[2]), Path(started[3])
    # switch says what it leaves running, and how to stop it.
    assert (f"engram-top switch: left running: device (pid {pid}) on 127.0.0.1:{port}; "
            f"stop it with `{stop_with}`") in res.stderr, res.stderr

    trigger = tmp_path / "crash-now"
    env = ({"PYTHONPATH": str(CRASH_HOOK), "ENGRAM_TOP_TEST_CRASH_FILE": str(trigger)}
           if how == "crash" else {})
    polls = log.read_text().count('"GET /metrics HTTP')
    term = cli.terminal("run", str(scenarios), "--no-record", "--no-load", env=env)
    wait_until(lambda: log.read_text().count('"GET /metrics HTTP') > polls + 1, 60,
               "the dashboard to adopt the server and poll it")
    if how == "crash":
        trigger.touch()
    elif how == "closed terminal":
        term.hang_up()
    else:
        term.proc.send_signal(getattr(signal, how))
    code = term.wait(60)
    output = term.output
    no_traceback(output)
    expected = {"crash": 1, "SIGTERM": 128 + signal.SIGTERM, "SIGHUP": 128 + signal.SIGHUP,
                "closed terminal": 128 + signal.SIGHUP}[how]
    assert code == expected, output[-2000:]

    # The server outlived the dashboard, and still answers.
    assert alive(pid) and answers(port)
    assert [p.pid for p in cli.servers() if "sim serve" in command_line(p)] == [pid]
    if how != "closed terminal":  # a closed terminal takes what is said with it
        assert (f"engram-top: left running: device (pid {pid}) on 127.0.0.1:{port}, "
                f"adopted; stop it with `{stop_with}`") in output, output[-2000:]
    if how in ("SIGTERM", "SIGHUP"):
        assert f"engram-top: stopped by {how}; what this dashboard started is stopped" \
            in output
    elif how == "crash":
        assert "internal error: RuntimeError: injected fault" in output

    # The state folder still remembers it: `stop` finds it and stops it.
    (current,) = cli.state.glob("engram-top/*/current.json")
    assert json.loads(current.read_text())["pid"] == pid
    res = cli.run("stop", str(scenarios))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0 and res.stdout.startswith(f"stopped device (pid {pid})"), \
        res.stdout + res.stderr
    assert "left running" not in res.stderr
    wait_until(lambda: not cli.processes(), 15, "nothing of it left")
