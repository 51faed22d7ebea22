"""The HTTP and host collectors over the recorded corpus (tests/data/sim-pages/, regenerated
by its capture.py from the simulated node), in-process with a clock of the test's own:
what a page gives, what the windows and rates make of successive pages, the health and
info cadences, a failure's age. The live path (real HTTP on loopback, a real server) keeps
one test per collector in tests/collectors/test_collectors_live.py and tests/sim/test_sim_vllm.py.

Expected figures come from the recorded pages through prometheus_client's parser, not ours,
and from what the load's client measured while they were recorded."""

from __future__ import annotations

import json

import pytest
from corpus import (
    HOST,
    URL,
    ManualClock,
    RecordedProc,
    Recording,
    attach,
    kib,
    played,
    recording,
)
from prometheus_client.parser import text_string_to_metric_families

from collectors import tree_members
from collectors.host import HostCollector, Largest
from collectors.readings import ProcessMemory, Quantiles, ServerData, Status
from collectors.sglang.collector import SglangCollector
from collectors.sglang.startup_log import parse_startup_log
from collectors.units import GIB
from collectors.vllm.collector import VllmCollector
from collectors.vllm.startup_log import VllmLogParser
from engram_top.seed import reference
from engram_top.sim import memory, vllm_log

REF = reference.default()
PLAN = memory.plan(REF, "device")


def total(page: str, sample: str) -> float:
    """A series' value summed over its label sets, as prometheus_client reads the page."""
    return sum(s.value for fam in text_string_to_metric_families(page) for s in fam.samples
               if s.name == sample)


def delta(rec: Recording, sample: str, first: int = 0, last: int = -1) -> float:
    return total(rec.page(last), sample) - total(rec.page(first), sample)


async def replayed(collector: SglangCollector | VllmCollector, rec: Recording,
                   clock: ManualClock) -> list[ServerData]:
    """Each recorded poll given to the collector at its recorded time: its readings' data,
    every one OK."""
    client = attach(collector, clock)
    out = []
    for poll in played(rec, clock):
        client.serve(poll.answers)
        reading = await collector.poll()
        assert reading.status is Status.OK, reading.message
        assert reading.at == clock.t and reading.data is not None
        out.append(reading.data)
    return out


def measured(q: Quantiles | None) -> Quantiles:
    assert q is not None and q.count > 0
    assert q.p50 is not None and q.p99 is not None and q.mean is not None
    assert 0 < q.p50 <= q.p99 and q.mean > 0
    return q


# --------------------------------------------------------------------------- SGLang


async def test_sglang_collector_reads_the_recorded_ready_server() -> None:
    rec, clock = recording("sglang-device"), ManualClock()
    collector = SglangCollector(URL, clock=clock)
    client = attach(collector, clock)
    client.serve(rec.polls[0].answers)
    reading = await collector.poll()
    assert reading.status is Status.OK, reading.message
    assert reading.failing_since is None and reading.at == clock.t
    data = reading.data
    assert data is not None
    assert data.healthy is True and data.url == URL
    assert data.max_total_num_tokens == 11_840_000
    assert data.weight_gb == 119.043  # the metric's full precision, not the log's 119.04
    assert data.kv_cache_gb == pytest.approx(PLAN.kv_bytes / GIB)
    assert data.tp_size == 4
    assert data.model_path == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert data.version
    assert set(data.ranks) == {0, 1, 2, 3}
    for rank in data.ranks.values():
        assert rank == {"weight_gb": 119.043, "kv_cache_gb": pytest.approx(data.kv_cache_gb),
                        "max_total_num_tokens": 11_840_000}
    assert data.simulated is not None and data.simulated["placement"] == "device"
    assert data.output_tokens_per_s is None  # one scrape: no window yet
    assert client.asked == ["/health", "/server_info", "/metrics"]


async def test_sglang_latency_and_throughput_follow_the_recorded_load() -> None:
    rec, clock = recording("sglang-device"), ManualClock()
    collector = SglangCollector(URL, window_s=60.0, clock=clock)
    first, during, last = await replayed(collector, rec, clock)
    assert first.num_running_reqs == 0 and during.num_running_reqs
    # The window spans the first poll to the last: the pages' own deltas over its time.
    span = rec.polls[-1].t - rec.polls[0].t
    assert last.output_tokens_per_s == pytest.approx(
        delta(rec, "sglang:generation_tokens_total") / span)
    assert last.requests_per_s == pytest.approx(delta(rec, "sglang:num_requests_total") / span)
    for q, name in ((last.itl, "inter_token_latency"), (last.ttft, "time_to_first_token"),
                    (last.e2e, "e2e_request_latency")):
        got = measured(q)
        count = delta(rec, f"sglang:{name}_seconds_count")
        assert got.count == count
        assert got.mean == pytest.approx(delta(rec, f"sglang:{name}_seconds_sum") / count)
    assert last.window_s == 60.0
    # What the load's client measured while the pages were served: the server saw the same
    # tokens (ITL per token ~ the client's TPOT) at the same rate.
    load = rec.meta["load"]
    assert load["failed"] == 0 and load["completed"] >= 8
    client_rate = load["output_tokens_before_last"] / load["elapsed_s"]
    assert load["client_tpot_mean_s"] / 2 < last.itl.mean < load["client_tpot_mean_s"] * 2
    assert last.ttft.mean < load["client_ttft_mean_s"] * 2
    assert last.e2e.count >= load["completed"] * 0.5
    assert client_rate / 2 < last.output_tokens_per_s < client_rate * 2


async def test_a_quiet_minute_empties_the_window_and_health_is_asked_on_its_cadence() -> None:
    rec, clock = recording("sglang-device"), ManualClock()
    collector = SglangCollector(URL, window_s=60.0, health_every_s=5.0, info_every_s=15.0,
                                clock=clock)
    await replayed(collector, rec, clock)
    client = collector.client
    # Healthy and answering: /health once in the first 5 s, /server_info once in 15.
    assert client.asked.count("/health") == 1 and client.asked.count("/server_info") == 1
    clock.advance(5.0)
    assert (await collector.poll()).ok
    assert client.asked.count("/health") == 2 and client.asked.count("/server_info") == 1
    # The last page again a minute on: nothing served in the window, no stale figure.
    clock.advance(60.0)
    quiet = (await collector.poll()).data
    assert quiet is not None
    assert quiet.output_tokens_per_s == 0.0 and quiet.requests_per_s == 0.0
    assert quiet.itl.count == 0 and quiet.itl.p50 is None
    assert client.asked.count("/server_info") == 2


async def test_a_refused_server_keeps_the_age_of_its_first_failure() -> None:
    rec, clock = recording("sglang-device"), ManualClock()
    collector = SglangCollector(URL, clock=clock)
    client = attach(collector, clock)
    client.serve(rec.polls[0].answers)
    assert (await collector.poll()).ok
    client.refuse()
    went = clock.advance(1.0)
    one = await collector.poll()
    clock.advance(2.0)
    two = await collector.poll()
    for r in (one, two):
        assert r.status is Status.ERROR and r.data is None
        assert r.message == f"no server at {URL} (connection refused)"
        assert r.failing_since == went
    assert two.at == went + 2.0
    client.refuse(False)
    clock.advance(1.0)
    back = await collector.poll()
    assert back.ok and back.failing_since is None
    assert client.asked[-2:] == ["/health", "/metrics"]  # asked again once it failed


async def test_without_the_api_key_server_info_is_refused_and_the_rest_read() -> None:
    rec, clock = recording("sglang-apikey"), ManualClock()
    collector = SglangCollector(URL, clock=clock)
    attach(collector, clock).serve(rec.polls[0].answers)
    bad = await collector.poll()
    assert bad.status is Status.ERROR
    assert "server_info" in bad.message and "401" in bad.message
    assert bad.data is not None and bad.data.healthy and bad.data.num_running_reqs is not None
    assert bad.failing_since == clock.t


def test_the_recorded_sglang_log_reads_as_the_pages_say() -> None:
    facts = parse_startup_log(recording("sglang-device").text("server.log"))
    assert facts.ready and facts.errors == () and facts.launches == 1
    assert facts.max_total_num_tokens == 11_840_000
    assert facts.server_args is not None and facts.server_args.tp_size == 4
    assert {r: (f.weights_gb, f.kv_tokens) for r, f in facts.ranks.items()} == {
        r: (119.04, 11_840_000) for r in range(4)}


# --------------------------------------------------------------------------- vLLM


async def test_vllm_collector_reads_the_recorded_server_and_its_load() -> None:
    rec, clock = recording("vllm-device"), ManualClock()
    collector = VllmCollector(URL, window_s=60.0, clock=clock)
    idle, during, last = await replayed(collector, rec, clock)
    assert idle.healthy and idle.url == URL
    assert idle.max_total_num_tokens == PLAN.kv_tokens
    assert idle.extra["capacity_from"] == "kv_cache_size_tokens"
    assert idle.extra["cache_config"]["num_gpu_blocks"] == str(PLAN.kv_tokens // 256)
    assert idle.version == vllm_log.VERSION and idle.model_path == REF.model
    assert idle.num_running_reqs == 0 and idle.token_usage == 0
    assert idle.output_tokens_per_s is None
    assert during.num_running_reqs
    span = rec.polls[-1].t - rec.polls[0].t
    assert last.output_tokens_per_s == pytest.approx(
        delta(rec, "vllm:generation_tokens_total") / span)
    assert last.requests_per_s == pytest.approx(delta(rec, "vllm:request_success_total") / span)
    for q, name in ((last.itl, "inter_token_latency"), (last.ttft, "time_to_first_token"),
                    (last.e2e, "e2e_request_latency"),
                    (last.tpot, "request_time_per_output_token"),
                    (last.queue_time, "request_queue_time")):
        got = measured(q)
        count = delta(rec, f"vllm:{name}_seconds_count")
        assert got.count == count
        assert got.mean == pytest.approx(delta(rec, f"vllm:{name}_seconds_sum") / count)
    assert last.page_problems == () and last.retracted_per_s == 0
    load = rec.meta["load"]
    assert load["failed"] == 0
    assert load["client_tpot_mean_s"] / 2 < last.itl.mean < load["client_tpot_mean_s"] * 2
    assert collector.client.asked[:4] == ["/health", "/version", "/v1/models", "/metrics"]


def test_the_recorded_vllm_log_reads_as_the_pages_say() -> None:
    parser = VllmLogParser()
    parser.feed_text(recording("vllm-device").text("server.log"))
    facts = parser.facts()
    assert facts.ready and facts.errors == ()
    assert facts.kv_capacity_tokens == PLAN.kv_tokens
    assert facts.server_args is not None and facts.server_args.tp_size == 4


# --------------------------------------------------------------------------- host


async def test_host_collector_reads_the_recorded_proc_tree() -> None:
    ids = json.loads((HOST / "tree.json").read_text())
    root, child = ids["root"], ids["child"]
    clock = ManualClock()
    collector = HostCollector(RecordedProc(HOST / "proc", HOST / "sys"), root_pid=root,
                              clock=clock)
    reading = await collector.poll()
    assert reading.status is Status.OK, reading.message
    assert reading.at == clock.t
    h = reading.data
    assert h is not None and h.backend == "proc"
    meminfo = (HOST / "proc" / "meminfo").read_text()
    assert h.total_bytes == kib(meminfo, "MemTotal")
    assert h.available_bytes == kib(meminfo, "MemAvailable")
    assert h.used_bytes == h.total_bytes - h.available_bytes > 0
    assert h.hugepage_size_bytes == kib(meminfo, "Hugepagesize")
    tree = h.server_tree
    assert tree is not None and tree.root_pid == root and tree.pids == (root, child)
    status = [(HOST / "proc" / str(p) / "status").read_text() for p in (root, child)]
    for key, field in (("VmRSS", "rss_bytes"), ("RssAnon", "rss_anon_bytes"),
                       ("RssFile", "rss_file_bytes"), ("RssShmem", "rss_shmem_bytes")):
        assert getattr(tree, field) == sum(kib(s, key) for s in status), key
    assert tree.pinned_bytes == sum(kib(s, "VmPin") + kib(s, "VmLck") for s in status)
    nodes = sorted((HOST / "sys" / "devices" / "system" / "node").glob("node*"))
    assert [n.node for n in h.numa_nodes] == [int(p.name[4:]) for p in nodes]
    # The tree is listed once and kept while nothing says it changed, until RELIST_S pass
    # on the collector's clock.
    for _ in range(3):
        clock.advance(1.0)
        assert (await collector.poll()).data.server_tree.pids == (root, child)
    assert collector.members.listings == 1
    clock.advance(tree_members.RELIST_S - 3.0)
    await collector.poll()
    assert collector.members.listings == 2


def test_the_largest_processes_outside_the_tree_from_the_recorded_proc() -> None:
    """What the host alert names: processes by VmRSS, largest first, the server's tree left
    out; re-read on the collector's clock every 30 s, not every poll."""
    ids = json.loads((HOST / "tree.json").read_text())
    root, child = ids["root"], ids["child"]
    backend = RecordedProc(HOST / "proc", HOST / "sys")
    status = {p: (HOST / "proc" / str(p) / "status").read_text() for p in (root, child)}
    assert backend.largest(3, frozenset()) == [
        ProcessMemory(p, "python", kib(status[p], "VmRSS")) for p in (root, child)]
    assert [m.pid for m in backend.largest(3, frozenset({root}))] == [child]
    assert backend.largest(1, frozenset()) == backend.largest(3, frozenset())[:1]

    clock = ManualClock()
    largest = Largest(interval_s=30.0, clock=clock)
    assert [m.pid for m in largest.get(backend, frozenset({root}))] == [child]
    clock.advance(10.0)  # within its interval: the same reading, less what joined the tree
    assert largest.get(backend, frozenset({root, child})) == ()


def test_the_corpus_is_what_capture_py_writes() -> None:
    """Every manifest's files are there, and the folders the tests read exist: a partial
    regeneration fails here, by name."""
    for name in ("sglang-device", "sglang-apikey", "vllm-device"):
        rec = recording(name)
        assert rec.polls and rec.polls[0].t == 0.0
        assert [p.t for p in rec.polls] == sorted(p.t for p in rec.polls)
    assert (HOST / "tree.json").is_file() and (HOST / "proc" / "meminfo").is_file()
