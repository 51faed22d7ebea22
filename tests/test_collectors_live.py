"""Collectors against live sources: SglangCollector on the simulated server (and on small
local servers that misbehave), HostCollector on this machine's /proc and on the simulated
node's host backend."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import pytest
from helpers import GIB, free_port, running

from collectors.host import HostCollector, ProcBackend
from collectors.readings import Status
from collectors.sglang.collector import SglangCollector
from engram_top.seed import reference
from engram_top.sim import memory
from engram_top.sim.backends import SimHostBackend
from scenarios.workload import ClosedLoopLoad

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

if TYPE_CHECKING:
    from helpers import Fleet, SimServer

REF = reference.default()


# --------------------------------------------------------------------------- SGLang, live


async def test_sglang_collector_reads_the_ready_server(sim_device: SimServer) -> None:
    collector = SglangCollector(sim_device.url)
    try:
        reading = await collector.poll()
    finally:
        await collector.close()
    assert reading.status is Status.OK, reading.message
    assert reading.failing_since is None
    data = reading.data
    assert data is not None
    assert data.healthy is True
    assert data.url == sim_device.url
    assert data.max_total_num_tokens == 11_840_000
    assert data.weight_gb == 119.043  # the metric's full precision, not the log's 119.04
    assert data.kv_cache_gb == pytest.approx(memory.plan(REF, "device").kv_bytes / GIB)
    assert data.tp_size == 4
    assert data.model_path == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert data.version
    assert set(data.ranks) == {0, 1, 2, 3}
    for rank in data.ranks.values():
        assert rank == {"weight_gb": 119.043, "kv_cache_gb": pytest.approx(data.kv_cache_gb),
                        "max_total_num_tokens": 11_840_000}
    assert data.extra["simulated"]["placement"] == "device"
    # One scrape: no window yet.
    assert data.output_tokens_per_s is None


async def test_sglang_collector_with_api_key(sim_apikey: SimServer) -> None:
    with_key = SglangCollector(sim_apikey.url, api_key=sim_apikey.api_key)
    without = SglangCollector(sim_apikey.url)
    try:
        good, bad = await with_key.poll(), await without.poll()
    finally:
        await with_key.close()
        await without.close()
    assert good.status is Status.OK, good.message
    assert good.data is not None and good.data.max_total_num_tokens == 11_840_000
    # Without the key /health and /metrics still answer; /server_info does not.
    assert bad.status is Status.ERROR
    assert "server_info" in bad.message and "401" in bad.message
    assert bad.data is not None and bad.data.healthy and bad.data.num_running_reqs is not None


async def test_latency_and_throughput_follow_the_load(sim_device: SimServer) -> None:
    collector = SglangCollector(sim_device.url, window_s=60.0)
    load = ClosedLoopLoad(sim_device.url, concurrency=4, input_len=200, output_len=24, seed=7)
    try:
        first = await collector.poll()
        assert first.ok, first.message
        t0 = time.monotonic()
        await load.start()
        await asyncio.sleep(1.0)
        during = await collector.poll()
        await asyncio.sleep(1.5)
        tokens_before_last = load.stats.output_tokens
        last = await collector.poll()
        elapsed = time.monotonic() - t0
    finally:
        await load.stop()
        await collector.close()
    assert during.ok and last.ok, (during.message, last.message)
    assert during.data is not None and during.data.num_running_reqs
    data = last.data
    assert data is not None
    s = load.stats
    assert s.failed == 0, s.last_error
    assert s.completed >= 8
    records = list(s.recent)
    client_tpot = statistics.mean(r.tpot for r in records if r.tpot is not None)
    client_ttft = statistics.mean(r.ttft for r in records)
    client_rate = tokens_before_last / elapsed
    assert data.itl is not None and data.ttft is not None and data.e2e is not None
    for q in (data.itl, data.ttft, data.e2e):
        assert q.count > 0
        assert q.p50 is not None and q.p99 is not None and q.mean is not None
        assert 0 < q.p50 <= q.p99
        assert q.mean > 0
    # The server sees the same tokens the client timed: ITL per token ~ client TPOT.
    assert client_tpot / 2 < data.itl.mean < client_tpot * 2
    assert data.ttft.mean < client_ttft * 2
    assert data.e2e.count >= s.completed * 0.5
    assert data.output_tokens_per_s is not None and data.output_tokens_per_s > 0
    assert client_rate / 2 < data.output_tokens_per_s < client_rate * 2
    assert data.requests_per_s is not None and data.requests_per_s > 0
    assert data.window_s == 60.0


async def test_connection_refused_is_an_error_with_a_stable_since() -> None:
    port = free_port()
    collector = SglangCollector(f"http://127.0.0.1:{port}", timeout=1.0)
    try:
        one = await collector.poll()
        await asyncio.sleep(0.02)
        two = await collector.poll()
    finally:
        await collector.close()
    for r in (one, two):
        assert r.status is Status.ERROR
        assert "connection refused" in r.message
        assert str(port) in r.message
        assert r.data is None
    assert one.failing_since is not None
    assert two.failing_since == one.failing_since
    assert two.at > two.failing_since


# --------------------------------------------------------------------------- misbehaving peers


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
    assert one.status is Status.ERROR
    assert "metrics page" in one.message and "line 5" in one.message
    assert one.data is not None
    assert one.data.healthy is True
    assert one.data.version == "0.5.0-test"
    assert one.data.max_total_num_tokens == 1234
    assert one.data.weight_gb == 1.5
    assert one.data.num_running_reqs is None  # nothing from a page that did not parse
    assert two.failing_since == one.failing_since is not None


async def test_good_page_after_a_broken_one_recovers(fake: FakeSglang) -> None:
    fake.serve("/metrics", BROKEN_PAGE)
    collector = SglangCollector(fake.url)
    try:
        bad = await collector.poll()
        fake.serve("/metrics", GOOD_PAGE)
        good = await collector.poll()
    finally:
        await collector.close()
    assert bad.status is Status.ERROR
    assert good.status is Status.OK and good.failing_since is None
    assert good.data is not None and good.data.num_running_reqs == 3.0


async def test_metrics_404_says_to_enable_metrics(fake: FakeSglang) -> None:
    collector = SglangCollector(fake.url)
    try:
        reading = await collector.poll()
    finally:
        await collector.close()
    assert reading.status is Status.ERROR
    assert "--enable-metrics" in reading.message
    assert reading.data is not None and reading.data.max_total_num_tokens == 1234


async def test_health_503_is_starting(fake: FakeSglang) -> None:
    fake.serve("/health", "", status=503)
    fake.serve("/metrics", GOOD_PAGE)
    collector = SglangCollector(fake.url)
    try:
        reading = await collector.poll()
    finally:
        await collector.close()
    assert reading.status is Status.STARTING
    assert reading.data is not None and reading.data.healthy is False
    assert "503" in reading.message


async def test_health_500_is_an_error(fake: FakeSglang) -> None:
    fake.serve("/health", "", status=500)
    collector = SglangCollector(fake.url)
    try:
        reading = await collector.poll()
    finally:
        await collector.close()
    assert reading.status is Status.ERROR
    assert "HTTP 500" in reading.message


# --------------------------------------------------------------------------- host


async def test_host_collector_on_this_machine_sees_a_child() -> None:
    with running([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        collector = HostCollector(ProcBackend(), root_pid=os.getpid())
        reading = await collector.poll()
    assert reading.status is Status.OK, reading.message
    h = reading.data
    assert h is not None and h.backend == "proc"
    assert h.total_bytes > 0 and h.available_bytes > 0 and h.free_bytes > 0
    assert h.used_bytes == h.total_bytes - h.available_bytes > 0
    assert h.available_bytes <= h.total_bytes
    assert h.hugepage_size_bytes > 0
    tree = h.server_tree
    assert tree is not None
    assert tree.root_pid == os.getpid()
    assert os.getpid() in tree.pids and child.pid in tree.pids
    assert tree.rss_bytes >= tree.rss_anon_bytes > 0
    assert tree.rss_bytes == pytest.approx(
        tree.rss_anon_bytes + tree.rss_file_bytes + tree.rss_shmem_bytes, rel=0.05)


# Each step on a line of its stdin; the worker lives until its own stdin closes, the root
# until the test closes its stdin (or kills it on the way out).
SPAWNER = """
import subprocess, sys
sys.stdin.readline()  # told to: one worker, spawned from the main thread
kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                       stdin=subprocess.PIPE)
print(kid.pid, flush=True)
sys.stdin.readline()  # told to: the worker ends
kid.kill()
kid.wait()
print("gone", flush=True)
sys.stdin.read()
"""


async def test_host_collector_sees_a_spawned_worker_without_listing_every_poll() -> None:
    import subprocess
    with running([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE,
                 stdout=subprocess.PIPE, text=True) as root:
        assert root.stdin is not None and root.stdout is not None
        collector = HostCollector(ProcBackend(), root_pid=root.pid)
        for _ in range(3):  # steady: one whole listing of /proc, then the kept one
            tree = (await collector.poll()).data.server_tree
            assert tree is not None and tree.pids == (root.pid,)
        assert collector.members.listings == 1
        root.stdin.write("\n")
        root.stdin.flush()
        worker = int(root.stdout.readline())
        tree = (await collector.poll()).data.server_tree  # the very next poll has it
        assert tree is not None and tree.pids == (root.pid, worker)
        assert collector.members.listings == 2
        root.stdin.write("\n")
        root.stdin.flush()
        assert root.stdout.readline().strip() == "gone"
        tree = (await collector.poll()).data.server_tree  # read gone: dropped, listed again
        assert tree is not None and tree.pids == (root.pid,)
        tree = (await collector.poll()).data.server_tree
        assert tree is not None and tree.pids == (root.pid,)
        assert collector.members.listings == 3


async def test_host_collector_gone_root_gives_no_tree() -> None:
    with running([sys.executable, "-c", "pass"]) as child:
        child.wait(30)
    reading = await HostCollector(ProcBackend(), root_pid=child.pid).poll()
    assert reading.ok and reading.data is not None and reading.data.server_tree is None


@pytest.mark.parametrize(("name", "delta_gib"), [
    ("device-delta", 6.5), ("host", 195.4), ("host-prefetch", 201.6),
])
async def test_sim_host_delta_follows_the_placement(fleet: Fleet, name: str,
                                                   delta_gib: float) -> None:
    server = fleet.ready(name)
    placement = server.placement
    plan = memory.plan(REF, placement)
    collector = HostCollector(SimHostBackend(server.node_dir), root_pid=server.pid)
    reading = await collector.poll()
    assert reading.ok, reading.message
    h = reading.data
    assert h is not None and h.backend == "simulated"
    assert h.used_bytes == h.total_bytes - h.available_bytes
    assert abs((h.used_bytes - server.baseline_host_used) / GIB - delta_gib) < 0.01
    tree = h.server_tree
    assert tree is not None and len(tree.pids) == 5  # the server and its 4 ranks
    if placement == "device":
        assert tree.rss_shmem_bytes < GIB
    else:
        # The Engram tables sit in shared (pinned) host memory, in huge pages.
        assert tree.rss_shmem_bytes >= plan.host_table_bytes
        assert h.anon_hugepages_bytes >= plan.host_table_bytes
        # Pinned, as its log says: VmPin over the tree holds the tables and the staging.
        assert tree.pinned_bytes == tree.rss_shmem_bytes

    result = await server.astop(grace=10.0)
    assert result.survivors == ()
    after = await HostCollector(SimHostBackend(server.node_dir)).poll()
    assert after.data is not None
    assert after.data.used_bytes == server.baseline_host_used
