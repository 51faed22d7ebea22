"""SglangCollector against small servers of the test's own that misbehave (a broken page,
a 404, /health's 503 and 500) and against a port nothing listens on: real HTTP on loopback,
from a thread of the test's process, so in the quick tier (no process starts). The
simulated server's own pages: tests/collectors/test_collectors_corpus.py, and live in
tests/collectors/test_collectors_live.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from corpus import ManualClock
from helpers import free_port

from collectors.readings import Reading, ServerData, Status
from collectors.sglang.collector import SglangCollector


async def test_connection_refused_is_an_error_with_a_stable_since() -> None:
    port = free_port()
    clock = ManualClock()
    collector = SglangCollector(f"http://127.0.0.1:{port}", timeout=1.0, clock=clock)
    try:
        one = await collector.poll()
        clock.advance(1.0)
        two = await collector.poll()
    finally:
        await collector.close()
    for r in (one, two):
        assert r.status is Status.ERROR
        assert "connection refused" in r.message
        assert str(port) in r.message
        assert r.data is None
    assert one.failing_since == one.at == two.failing_since
    assert two.at == one.at + 1.0


GOOD_PAGE = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0
"""
BROKEN_PAGE = GOOD_PAGE + """\
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m" 2.0
"""
SERVER_INFO = {"version": "0.5.0-test", "model_path": "m", "tp_size": 1,
               "max_total_num_tokens": 1234, "status": "ready",
               "internal_states": [{"memory_usage": {"weight": 1.5, "kvcache": 0.25,
                                                     "token_capacity": 1234, "graph": 0.1}}]}


class FakeSglang:
    """A tiny HTTP server in a thread whose routes a test sets: (status, content type, body)."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, str, bytes]] = {}
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                status, ctype, body = routes.get(self.path, (404, "text/plain", b"Not Found"))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # A short poll interval: shutdown() waits for it.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def serve(self, path: str, body: str | dict, status: int = 200) -> None:
        if isinstance(body, dict):
            self.routes[path] = (status, "application/json", json.dumps(body).encode())
        else:
            self.routes[path] = (status, "text/plain; version=0.0.4", body.encode())

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake() -> Iterator[FakeSglang]:
    f = FakeSglang()
    f.serve("/health", "")
    f.serve("/server_info", SERVER_INFO)
    try:
        yield f
    finally:
        f.close()


async def test_broken_metrics_page_names_the_line_and_keeps_the_rest(fake: FakeSglang) -> None:
    fake.serve("/metrics", BROKEN_PAGE)
    collector = SglangCollector(fake.url)
    try:
        one = await collector.poll()
        two = await collector.poll()
    finally:
        await collector.close()
    # The broken line costs that line: the reading is good, and says which it left out.
    assert one.status is Status.OK and two.status is Status.OK
    assert one.message.startswith("metrics page: 1 line skipped: line 5: ")
    assert one.data is not None
    assert one.data.healthy is True
    assert one.data.version == "0.5.0-test"
    assert one.data.max_total_num_tokens == 1234
    assert one.data.weight_gb == 1.5
    assert one.data.num_running_reqs == 3.0  # the page's other lines, read
    assert one.data.num_queue_reqs is None  # the broken one's figure: none, not a guess
    assert two.message == one.message and one.failing_since is None


async def test_good_page_after_a_broken_one_recovers(fake: FakeSglang) -> None:
    fake.serve("/metrics", BROKEN_PAGE)
    collector = SglangCollector(fake.url)
    try:
        bad = await collector.poll()
        fake.serve("/metrics", GOOD_PAGE)
        good = await collector.poll()
    finally:
        await collector.close()
    assert bad.status is Status.OK and "line 5" in bad.message
    assert good.status is Status.OK and good.message == ""
    assert good.data is not None and good.data.num_running_reqs == 3.0


async def poll_once(url: str) -> Reading[ServerData]:
    collector = SglangCollector(url)
    try:
        return await collector.poll()
    finally:
        await collector.close()


async def test_metrics_404_says_to_enable_metrics(fake: FakeSglang) -> None:
    reading = await poll_once(fake.url)
    assert reading.status is Status.ERROR
    assert "--enable-metrics" in reading.message
    assert reading.data is not None and reading.data.max_total_num_tokens == 1234


async def test_health_503_is_starting(fake: FakeSglang) -> None:
    fake.serve("/health", "", status=503)
    fake.serve("/metrics", GOOD_PAGE)
    reading = await poll_once(fake.url)
    assert reading.status is Status.STARTING
    assert reading.data is not None and reading.data.healthy is False
    assert "503" in reading.message


async def test_health_500_is_an_error(fake: FakeSglang) -> None:
    fake.serve("/health", "", status=500)
    reading = await poll_once(fake.url)
    assert reading.status is Status.ERROR
    assert "HTTP 500" in reading.message
