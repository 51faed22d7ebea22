"""Collectors against live sources, end to end: SglangCollector on the simulated server over
real HTTP (with and without its API key), HostCollector on this machine's /proc (a child, a
spawned worker, a gone root) and on the simulated node's host backend. What the collectors
make of recorded pages, windows and rates included, is tested in-process in
tests/collectors/test_collectors_corpus.py; their handling of misbehaving peers in
tests/collectors/test_collectors_peers.py."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest
from corpus import ManualClock
from helpers import GIB, running

from collectors import settled
from collectors.host import HostCollector, ProcBackend
from collectors.readings import Status
from collectors.sglang.collector import SglangCollector
from engram_top.seed import reference
from engram_top.sim import memory
from engram_top.sim.backends import SimHostBackend

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
    assert data.simulated is not None and data.simulated["placement"] == "device"
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
# until the test closes its stdin (or kills it on the way out). A worker told "take" holds
# 256 MiB (written, so the host's free memory falls by it) before it says its pid.
SPAWNER = """
import subprocess, sys
take = sys.stdin.readline().strip() == "take"  # told to: one worker, from the main thread
kid = subprocess.Popen([sys.executable, "-c", "import sys; held = b'x' * (256 << 20) "
                        "if sys.argv[1] == 'take' else b''; print(flush=True); sys.stdin.read()",
                        "take" if take else "none"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
kid.stdout.readline()  # it holds what it takes
print(kid.pid, flush=True)
sys.stdin.readline()  # told to: the worker ends
kid.kill()
kid.wait()
print("gone", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("takes", [True, False], ids=["takes-memory", "takes-none"])
async def test_host_collector_sees_a_spawned_worker_without_listing_every_poll(
        takes: bool) -> None:
    """A spawn is looked for (each member's children, no walk of /proc) when the host's
    memory moved or the settled parts' age is up: a worker that takes memory is in the next
    poll's tree; one that takes none (so the tree's figures miss nothing) within
    settled.MAX_AGE_S, on the collector's clock."""
    import subprocess
    clock = ManualClock()
    with running([sys.executable, "-c", SPAWNER], stdin=subprocess.PIPE,
                 stdout=subprocess.PIPE, text=True) as root:
        assert root.stdin is not None and root.stdout is not None
        collector = HostCollector(ProcBackend(), root_pid=root.pid, clock=clock)
        for _ in range(3):  # steady: one whole listing of /proc, then the kept one
            tree = (await collector.poll()).data.server_tree
            assert tree is not None and tree.pids == (root.pid,)
        assert collector.members.listings == 1
        root.stdin.write("take\n" if takes else "none\n")
        root.stdin.flush()
        worker = int(root.stdout.readline())
        if not takes:  # (whether it is looked for sooner depends on the host's others)
            clock.advance(settled.MAX_AGE_S)
        tree = (await collector.poll()).data.server_tree
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
