"""The agent's /health page and `engram-top health`: the page's verdict is its worst active
alert, and the command exits by it (0, 3, 4, as `snapshot --fail-on`), 1 where no agent
answers, 2 where what answers is no agent; a page's text never acts on the terminal. Served
here by a real HTTP server on loopback; the agent's own page is read in
tests/cli/test_agent.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engram_top.alerts.monitor import Alert
from engram_top.cli.agent_health import health_text, verdict
from engram_top.cli.commands import main


def alert(id: str, severity: str, message: str) -> Alert:
    return Alert(id, severity, message, since=0.0, started_at=0.0)


def test_the_page_leads_with_the_worst_alert_and_lists_them_worst_first() -> None:
    text = health_text([alert("kv", "warning", "KV pool 97% used"),
                        alert("hbm:gpu2", "error", "GPU 2 HBM 99.1% used (> 98%)"),
                        alert("host-available", "warning", "host RAM available 3%")],
                       watching="http://127.0.0.1:30000 (ready)", recording="/var/lib/a")
    assert text.splitlines() == [
        "engram-top agent: error", "watching: http://127.0.0.1:30000 (ready)",
        "recording: /var/lib/a", "error: hbm:gpu2: GPU 2 HBM 99.1% used (> 98%)",
        "warning: host-available: host RAM available 3%", "warning: kv: KV pool 97% used"]
    assert verdict(text) == "error"
    quiet = health_text([], watching="u", recording="off")
    assert quiet.splitlines()[0] == "engram-top agent: ok" and verdict(quiet) == "ok"
    # A message carries what a server said: one line each, whatever it holds.
    odd = health_text([alert("slo", "warning", "p99\nengram-top agent: ok\x1b[2J")],
                      watching="u", recording="off")
    assert len(odd.splitlines()) == 4 and "\\x1b" in odd and verdict(odd) == "warning"


class Page(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize(("worst", "fail_on", "code"), [
    ("ok", "warning", 0), ("warning", "warning", 3), ("error", "warning", 4),
    ("warning", "error", 0), ("error", "error", 4)])
def test_the_command_exits_by_the_agents_verdict(server: ThreadingHTTPServer, worst: str,
                                                 fail_on: str, code: int,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    alerts = [] if worst == "ok" else [alert("kv", worst, "KV pool 99% used")]
    Page.body = health_text(alerts, watching="u (ready)", recording="off").encode()
    port = server.server_address[1]
    assert main(["health", f"127.0.0.1:{port}", "--fail-on", fail_on]) == code
    out = capsys.readouterr()
    assert out.out == Page.body.decode() and out.err == ""


def test_what_is_no_agent_and_an_agent_not_there(server: ThreadingHTTPServer,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    port = server.server_address[1]
    Page.body = b"OK\x1b[31m\n"
    assert main(["health", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err == (f"engram-top health: 127.0.0.1:{port}/health is not an engram-top agent's "
                   "(it begins 'OK\\x1b[31m\\n')\n")
    server.shutdown()
    server.server_close()
    assert main(["health", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"engram-top health: no agent answering on 127.0.0.1:{port} (")
    assert "refused" in err
