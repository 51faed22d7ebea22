"""`engram-top snapshot`'s exit codes for scripts and pagers: the worst active alert with
`--fail-on`, and an attached URL that nothing on this node serves, given up on at once
rather than after `--ready-timeout`.

The pure parts (which code, which process would serve a port) run in-process; the command
runs as a user runs it, against a dead port and against a port a process was started to
serve but does not listen on yet (a server loading its weights)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ENGRAM_TOP, ServerSpec, SimServer, free_port

from collectors.engine_http import WINDOW_S
from collectors.server_process import might_serve, names_port
from engram_top.alerts.monitor import Alert
from engram_top.alerts.thresholds import Thresholds, first_judged_s
from engram_top.cli.snapshot import alert_code
from engram_top.model.store import RunStore


def _alert(severity: str, name: str) -> Alert:
    return Alert(id=name, severity=severity, message=f"{name} fired", since=time.time(),
                 started_at=time.monotonic())


@pytest.mark.parametrize(("active", "fail_on", "code"), [
    ((), "warning", 0),
    (("warning",), None, 0),  # without --fail-on: 0 once written, as ever
    (("warning",), "warning", 3),
    (("warning",), "error", 0),  # a warning is under --fail-on error
    (("warning", "error"), "warning", 4),  # the worst decides
    (("error",), "error", 4),
])
def test_the_worst_active_alert_at_or_above_fail_on_sets_the_code(
        active: tuple[str, ...], fail_on: str | None, code: int) -> None:
    store = RunStore()
    store.alerts = {f"a{i}": _alert(sev, f"a{i}") for i, sev in enumerate(active)}
    assert alert_code(store, fail_on) == code


@pytest.mark.parametrize(("argv", "port", "serves"), [
    (["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30401"],
     30401, True),
    (["python3", "-m", "sglang.launch_server", "--port=30401"], 30401, True),
    (["python3", "-m", "sglang.launch_server", "--port", "30402"], 30401, False),
    (["python3", "-m", "sglang.launch_server", "--model-path", "m"], 30000, True),  # default
    (["vllm", "serve", "m"], 8000, True),
    (["vllm", "serve", "m"], 30000, False),
    (["bash"], 30401, False),
])
def test_a_command_line_names_the_port_it_will_serve(argv: list[str], port: int,
                                                     serves: bool) -> None:
    assert names_port(argv, port) is serves


def test_a_listening_socket_serves_and_a_remote_url_cannot_be_told() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert might_serve(f"http://127.0.0.1:{port}") is True
    port = free_port()
    assert might_serve(f"http://127.0.0.1:{port}") is False, _who_serves(port)
    assert might_serve("http://10.1.2.3:30000") is None  # another host: unknown, so waited


def _who_serves(port: int) -> str:
    """What on this host listens on ``port`` or names it on its command line (it failed
    once, in a run beside other tests, with no word of what it had found)."""
    import psutil
    found = [f"pid {c.pid} listens" for c in psutil.net_connections(kind="tcp")
             if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]
    for proc in psutil.process_iter(["cmdline"]):
        argv = [str(a) for a in proc.info.get("cmdline") or []]
        if names_port(argv, port):
            found.append(f"pid {proc.pid}: {' '.join(argv)[:300]}")
    return f"port {port}: " + ("; ".join(found) or "nothing found now")


def _snapshot(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGRAM_TOP, "snapshot", "--attach", url, "--out",
                           str(tmp_path / "snaps"), *extra],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_dead_url_is_given_up_on_with_what_was_seen(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    # A minute's --ready-timeout: the command ends well before it, saying why.
    done = _snapshot(url, tmp_path, "--ready-timeout", "60")
    assert done.returncode == 1, done.stderr
    assert f"not waiting: nothing listens at {url} and no process on this node was started " \
           f"to serve on port {url.rsplit(':', 1)[1]}" in done.stderr
    assert "did not become ready" not in done.stderr and "Traceback" not in done.stderr
    (folder,) = (tmp_path / "snaps").iterdir()
    summary = (folder / "summary.md").read_text()
    assert f"Run: {url}, state attached, not answering (no server at {url} (connection " \
           "refused))." in summary


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_server_started_but_not_yet_listening_is_waited_for(tmp_path: Path) -> None:
    port = free_port()
    # A process whose command line serves the port but does not listen (yet): as an engine
    # loading its weights. The snapshot waits its --ready-timeout out.
    loading = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                "--port", str(port)])
    try:
        done = _snapshot(f"http://127.0.0.1:{port}", tmp_path, "--ready-timeout", "4")
    finally:
        loading.kill()
        loading.wait(10)
    assert done.returncode == 1, done.stderr
    assert "the server did not become ready within 4 s (state: attached, not answering: " \
           f"no server at http://127.0.0.1:{port} (connection refused))" in done.stderr
    assert "not waiting" not in done.stderr


def test_every_alert_judges_a_whole_window_before_wait_alerts_ends() -> None:
    # The server's 30 s window is the longest by default; one evaluation to see it.
    assert first_judged_s(Thresholds(), WINDOW_S) == 31.0
    # A longer queue-growth window, and a hold before the slo alert fires, add up.
    t = Thresholds(queue_growth_window_s=60.0, slo_for_s=10.0)
    assert first_judged_s(t, WINDOW_S) == 71.0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_wait_alerts_watches_until_every_window_is_judged(tmp_path: Path) -> None:
    server = SimServer("watched", ServerSpec("device", 0.02), tmp_path)
    try:
        server.wait_ready()
        done = _snapshot(server.url, tmp_path, "--wait-alerts", "--fail-on", "warning")
    finally:
        server.stop()
    # An idle server raises nothing over its windows: written, and 0.
    assert done.returncode == 0, done.stderr
    assert "watching 31 s, until every alert has judged a whole window (--wait-alerts)" in \
        done.stderr
    (folder,) = (tmp_path / "snaps").iterdir()
    source = json.loads((folder / "snapshot.json").read_text())["source"]
    assert source["after_s"] == 31.0 and source["kind"] == "attach"
