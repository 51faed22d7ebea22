"""How the Prometheus source groups what its queries answer into nodes, on answers shaped
as real fleets label them (no Prometheus needed: the live path is tests/fleet/test_fleet.py)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from collectors.base import uncollected
from collectors.pages import PageError
from collectors.prometheus import group, host_of, node_of, queries, together
from engram_top.alerts.thresholds import Thresholds
from engram_top.fleet import session as fleet

DIALECTS = fleet.dialects()  # every engine's series, as a fleet reads them


def sample(value: Any, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1_795_000_000.0, str(value)]}


def test_instance_hosts_join_dcgm_hostname_and_ports_are_dropped() -> None:
    results = {
        # A static config: every exporter of a machine on its IP, dcgm naming the host.
        "gpu": [sample(1000, __name__="DCGM_FI_DEV_FB_USED", gpu="0", Hostname="gpu-a",
                       instance="10.0.0.7:9400"),
                sample(2000, __name__="DCGM_FI_DEV_FB_FREE", gpu="0", Hostname="gpu-a",
                       instance="10.0.0.7:9400"),
                sample(1, __name__="DCGM_FI_DEV_FB_RESERVED", gpu="0", Hostname="gpu-a",
                       instance="10.0.0.7:9400")],
        "host": [sample(100, __name__="node_memory_MemTotal_bytes", instance="10.0.0.7:9100"),
                 sample(40, __name__="node_memory_MemAvailable_bytes",
                        instance="10.0.0.7:9100"),
                 # A machine with no dcgm: its IP is its name.
                 sample(50, __name__="node_memory_MemTotal_bytes", instance="10.0.0.8:9100")],
        "server": [sample(0.5, __name__="sglang_token_usage", instance="10.0.0.7:30000")],
        "latency": [], "up": [],
    }
    nodes = group(results, DIALECTS)
    assert sorted(nodes) == ["10.0.0.8", "gpu-a"]
    a = nodes["gpu-a"]
    assert a.host == {"total": 100.0, "available": 40.0}
    assert a.server == {"token_usage": 0.5}  # the underscore spelling is SGLang's too
    assert a.gpus[0].total_bytes == 3001 * 1024 * 1024
    assert nodes["10.0.0.8"].missing == ("dcgm-exporter (GPU figures)",
                                         "SGLang or vLLM /metrics")


def test_a_node_label_wins_and_nan_or_garbage_values_are_left_out() -> None:
    results = {
        "gpu": [sample("NaN", __name__="DCGM_FI_DEV_FB_USED", gpu="0", node="n1",
                       hostname="pod-xyz", instance="10.1.2.3:9400"),
                sample("+Inf", __name__="DCGM_FI_DEV_FB_FREE", gpu="0", node="n1")],
        "host": [sample("oops", __name__="node_memory_MemTotal_bytes", node="n1")],
        "server": [], "latency": [sample(0.2, figure="ttft_p50", node="n1")],
        "up": [sample(0, job="sglang", instance="10.1.2.3:30000", node="n1")],
    }
    n1 = group(results, DIALECTS)["n1"]
    assert n1.gpus[0].used_bytes is None and n1.gpus[0].total_bytes is None
    assert n1.host == {} and n1.latency == {"ttft_p50": 0.2}
    assert "sglang down (10.1.2.3:30000)" in n1.missing


def test_instance_forms() -> None:
    assert host_of("10.0.0.7:9100") == "10.0.0.7"
    assert host_of("[fe80::1]:9100") == "[fe80::1]"
    assert host_of("gpu-a") == "gpu-a"
    assert node_of({"instance": "h:1"}, {"h": "named"}) == "named"
    assert node_of({}) == "?"


def test_the_refresh_is_seven_queries_whatever_the_fleet() -> None:
    q = queries("30s", dialects=DIALECTS)
    assert sorted(q) == ["agent", "gpu", "host", "latency", "server", "stack", "up"]
    assert "[30s]" in q["latency"] and "sglang[:_]" in q["server"]


def test_placement_is_inferred_from_host_memory_when_no_label_says_it() -> None:
    gib = 1024 ** 3
    tables = {"gpu": [], "server": [], "latency": [], "up": [],
              "host": [sample(2048 * gib, __name__="node_memory_MemTotal_bytes", node="a"),
                       sample(190 * gib, __name__="node_memory_Shmem_bytes", node="a"),
                       sample(2048 * gib, __name__="node_memory_MemTotal_bytes", node="b"),
                       sample(2 * gib, __name__="node_memory_Shmem_bytes", node="b")]}
    nodes = group(tables, DIALECTS)
    assert fleet.infer_placement(nodes["a"]) == ("host?", True)
    assert fleet.infer_placement(nodes["b"]) == ("device?", True)
    row = fleet.row(nodes["a"], 0.0, Thresholds(), 15.0)
    assert row.state == "no server" and "server silent" in row.alerts
    assert fleet.results([row]) == []  # a node that serves nothing is no trial


def test_filter_words_and_columns() -> None:
    nodes = group({"gpu": [], "host": [], "latency": [], "up": [],
                   "server": [sample(0.95, __name__="sglang:token_usage", node="n7",
                                     placement="host-prefetch")]}, DIALECTS)
    r = fleet.row(nodes["n7"], 0.0, Thresholds(), 15.0)
    assert r.alerts == ("kv 95%",)
    assert r.matches("n7") and r.matches("placement=prefetch kv")
    assert not r.matches("placement=device") and not r.matches("nosuch=1")


async def test_an_answer_of_another_shape_is_said_not_raised() -> None:
    from collectors.prometheus import PrometheusSource

    src = PrometheusSource("http://127.0.0.1:9", dialects=DIALECTS)

    async def odd(key: str) -> list[Any]:
        return ["not a sample"] if key == "gpu" else []

    src.query = odd  # type: ignore[method-assign]
    (key, reading), = await src.poll()
    assert not reading.ok and "an answer of an unexpected shape" in reading.message
    await src.close()


def test_one_nodes_history_queries_match_its_instances_only() -> None:
    import re

    from collectors.prometheus import _promql_re
    q = queries("1m", 'instance=~"10\\\\.0\\\\.0\\\\.7:9400"', dialects=DIALECTS)
    # Every selector carries the matcher; `up` is not part of a history.
    for key in ("gpu", "host", "server", "latency"):
        selectors = re.findall(r"\{__name__=~\"[^\"]+\"([^}]*)\}", q[key])
        assert selectors and all(m == ', instance=~"10\\\\.0\\\\.0\\\\.7:9400"'
                                 for m in selectors), key
    # Literal instances: RE2 escapes, then the PromQL string's (a dot is `\\.` there).
    assert _promql_re("10.0.0.7:9400") == "10\\\\.0\\\\.0\\\\.7:9400"
    assert _promql_re('a"b') == 'a\\"b'


def test_group_keeps_one_node_and_the_instances_it_came_from() -> None:
    results = {
        "gpu": [sample(1000, __name__="DCGM_FI_DEV_FB_USED", gpu="0", Hostname="gpu-a",
                       instance="10.0.0.7:9400"),
                sample(2000, __name__="DCGM_FI_DEV_FB_USED", gpu="0", Hostname="gpu-b",
                       instance="10.0.0.8:9400")],
        "host": [sample(100, __name__="node_memory_MemTotal_bytes", instance="10.0.0.7:9100"),
                 sample(50, __name__="node_memory_MemTotal_bytes", instance="10.0.0.8:9100")],
        "server": [], "latency": [], "up": [],
    }
    only = group(results, DIALECTS, only="gpu-a")
    assert list(only) == ["gpu-a"]
    assert only["gpu-a"].instances == ("10.0.0.7:9100", "10.0.0.7:9400")
    assert only["gpu-a"].host == {"total": 100.0}
    assert group(results, DIALECTS)["gpu-b"].instances == ("10.0.0.8:9100", "10.0.0.8:9400")


def test_a_nodes_figures_become_the_panels_readings() -> None:
    from collectors.prometheus import FleetGpu, FleetNodeData
    from engram_top.fleet.detail import NodeDetail, duration_s
    from engram_top.model import facts
    gib = 1024 ** 3
    d = FleetNodeData(
        node="gpu-a", placement="host",
        gpus=(FleetGpu("0", "NVIDIA B200", used_bytes=70 * gib, free_bytes=100 * gib,
                       reserved_bytes=gib, util_pct=79.6),),
        host={"total": 2048 * gib, "available": 1800 * gib, "huge_total": 1000,
              "huge_free": 200, "huge_size": 2 * 1024 ** 2, "swap_total": 8 * gib,
              "swap_free": 6 * gib},
        server={}, latency={"ttft_p50": 0.12, "ttft_p99": 1.3}, instances=("10.0.0.7:9100",))
    detail = NodeDetail("gpu-a", "http://127.0.0.1:9090", "1m", "host",
                        clock=lambda: 100.0, wall_clock=lambda: 1_795_000_000.0)
    assert detail.add(1_795_000_000.0, d) and not detail.add(1_795_000_000.0, d)
    store = detail.store
    [gpu] = facts.gpu_facts(store)
    assert (gpu.total_bytes, gpu.used_bytes, gpu.util_gpu_pct) == (171 * gib, 70 * gib, 80)
    host = facts.host_facts(store)
    assert host is not None and host.used_bytes == 248 * gib
    assert host.hugepages_bytes == 800 * 2 * 1024 ** 2 and host.swap_used_bytes == 2 * gib
    assert host.delta_bytes is None and host.server_rss_bytes is None  # unknown, not 0
    # No engine's series for this node: the server reading says so, it is not invented.
    server = store.latest["server"]
    assert server.status.value == "error" and "no inference engine's series" in server.message
    assert duration_s("1m") == 60 and duration_s("1h30m") == 5400 and duration_s("x") is None
    older = [(1_795_000_000.0 - 10 * k, d) for k in range(1, 4)]
    assert detail.backfill(older) == 3
    used = detail.store.line("gpu", "used", gpu="0")
    assert used is not None and [t for t, _ in used.fine] == [70.0, 80.0, 90.0, 100.0]


def test_a_vllm_node_fills_the_same_columns_from_its_own_series() -> None:
    """vLLM's names (either spelling) beside SGLang's: each node's server figures, read as
    its own engine's, fill the same fields; whose they are is kept for its panels."""
    results = {
        "gpu": [], "host": [], "up": [],
        "server": [sample(0.42, __name__="vllm:kv_cache_usage_perc", node="v1"),
                   sample(3, __name__="vllm:num_requests_running", node="v1"),
                   sample(1, __name__="vllm_num_requests_waiting", node="v1"),
                   sample(0.9, __name__="sglang:token_usage", node="s1"),
                   sample(7, __name__="vllm:no_such_gauge", node="v2")],
        "latency": [sample(0.2, figure="ttft_p50", node="v1"),
                    sample(0.03, figure="tpot_p99", node="v1")],
    }
    nodes = group(results, DIALECTS)
    v1 = nodes["v1"]
    assert v1.server == {"token_usage": 0.42, "num_running_reqs": 3.0, "num_queue_reqs": 1.0}
    assert v1.dialect is not None and v1.dialect.name == "vLLM" and not v1.server_silent
    assert v1.dialect.words["retracted"] == "preempted"
    assert nodes["s1"].dialect is not None and nodes["s1"].dialect.name == "SGLang"
    assert "v2" not in nodes  # a name neither engine declares is no figure of a node
    r = fleet.row(v1, 0.0, Thresholds(), 15.0)
    assert (r.kv_usage, r.running, r.state, r.engine) == (0.42, 3.0, "serving", "vLLM")
    assert (r.ttft_p50, r.tpot_p99) == (0.2, 0.03)
    assert "server silent" not in r.alerts
    assert not any("/metrics" in m for m in r.missing)


def test_every_engines_series_are_queried() -> None:
    q = queries("1m", dialects=DIALECTS)
    assert "vllm[:_](" in q["server"] and "kv_cache_usage_perc" in q["server"]
    assert "vllm[:_]time_to_first_token_seconds_bucket" in q["latency"]
    assert "vllm[:_]generation_tokens_total" in q["latency"]
    assert "sglang[:_]inter_token_latency_seconds_bucket" in q["latency"]


def test_a_vllm_nodes_panels_speak_vllms_words() -> None:
    from collectors.prometheus import FleetNodeData
    from engram_top.fleet.detail import NodeDetail
    from engram_top.model import facts
    vllm = next(d for d in DIALECTS if d.name == "vLLM")
    d = FleetNodeData(node="v1", placement="device", server={"token_usage": 0.5},
                      dialect=vllm)
    detail = NodeDetail("v1", "http://127.0.0.1:9090", "1m", "device",
                        clock=lambda: 100.0, wall_clock=lambda: 1_795_000_000.0)
    assert facts.engine_of(detail.store) == "the server"  # nothing read yet
    assert detail.add(1_795_000_000.0, d)
    assert facts.engine_of(detail.store) == "vLLM"
    assert facts.word(detail.store, "retracted") == "preempted"


def test_an_agents_series_join_its_node_and_its_own_labels_are_its_own() -> None:
    gib = 1 << 30
    agent = [
        # The scrape config's placement kept, the agent's own renamed by Prometheus.
        sample(1, __name__="engram_top_server_info", node="a", placement="device",
               exported_placement="host", scenario="host", state="ready"),
        sample(900 * gib, __name__="engram_top_host_ledger_numa_bytes", node="a",
               numa_node="1", line="free"),
        sample(800 * gib, __name__="engram_top_host_ledger_numa_bytes", node="a",
               numa_node="0", line="free"),
        sample(2 * gib, __name__="engram_top_hbm_unexplained_bytes", node="a", gpu="10"),
        sample(1 * gib, __name__="engram_top_hbm_unexplained_bytes", node="a", gpu="2"),
        sample(3 * gib, __name__="engram_top_hbm_unexplained_bytes", node="a", gpu="²"),
        sample(2, __name__="engram_top_fit_level", node="a", placement="device",
               exported_placement="host", scenario="host"),
        sample(-12 * gib, node="a", placement="device", exported_placement="host",
               scenario="host", figure="fit_host_room"),
        sample(7, __name__="engram_top_fit_level", node="a", scenario="odd"),  # no level
        sample(1, __name__="engram_top_alert_active", node="a", alert="kv", id="kv",
               severity="warning"),
        sample(1, __name__="engram_top_alert_active", node="a", alert="hbm", id="hbm:gpu2",
               severity="warning"),
        # Without a config label, the agent's placement is `placement` itself: never the
        # node's, which its server_info says.
        sample(0, __name__="engram_top_fit_level", node="b", placement="host-prefetch",
               scenario="p"),
        sample(1, __name__="engram_top_server_info", node="b", placement="device",
               scenario="d", state="ready"),
    ]
    nodes = group({"gpu": [], "host": [], "latency": [], "up": [], "agent": agent,
                   "server": [sample(0.95, __name__="sglang:token_usage", node="a"),
                              sample(0.1, __name__="sglang:token_usage", node="c")]},
                  DIALECTS)
    a, b, c = nodes["a"].agent, nodes["b"].agent, nodes["c"].agent
    assert c is None  # no agent there: the node reads as the exporters give it
    assert a is not None and b is not None
    assert a.placement == "host" and nodes["a"].placement is None
    assert a.numa_free == (("0", 800.0 * gib), ("1", 900.0 * gib))
    # By index; a label that is no index ("²") after them, never a crash.
    assert a.hbm_unexplained == (("2", 1.0 * gib), ("10", 2.0 * gib), ("²", 3.0 * gib))
    (fit,) = a.fits
    assert (fit.scenario, fit.placement, fit.level, fit.room_bytes) == (
        "host", "host", 2, -12.0 * gib)
    assert b.placement == "device" and [(f.placement, f.level) for f in b.fits] == [
        ("host-prefetch", 0)]
    # The row: placement as the agent reads it; the fleet's own kv rule said kv already,
    # the agent's hbm alert on GPU 2 is added; the agent's alerts off in the config stay off.
    ra = fleet.row(nodes["a"], 0.0, Thresholds(), 15.0)
    assert (ra.placement, ra.placement_inferred) == ("host", False)
    assert ra.alerts == ("kv 95%", "hbm:gpu2")
    assert fleet.row(nodes["a"], 0.0, Thresholds(disabled=("hbm",)), 15.0).alerts == \
        ("kv 95%",)
    assert fleet.row(nodes["b"], 0.0, Thresholds(), 15.0).placement == "device"


def test_a_refresh_decodes_and_groups_with_the_collector_off_and_puts_it_back() -> None:
    """Full collections of a big refresh's objects would hold the GIL (and so the screen's
    event loop) for 50-100 ms each: off while the worker decodes and groups, on again after,
    even when the work fails, and left off where something else had turned it off."""
    assert gc.isenabled()
    assert uncollected(gc.isenabled) is False
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        uncollected(lambda: 1 / 0)
    assert gc.isenabled()
    gc.disable()
    try:
        uncollected(int)
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_a_quit_while_a_query_fails_still_ends_the_poll() -> None:
    """Python 3.11's TaskGroup gives a failed query's error priority over the cancel that
    arrived with it, and drops the cancel: the fleet's poll loop, told to stop as a wrong
    password's 401s came back, caught the error as a failed poll and ran on, and the quit
    that awaited it waited for ever (seen once in the full suite). The cancel wins."""
    failing = asyncio.Event()
    asked = asyncio.Event()  # both queries under way
    running = 0

    def started() -> None:
        nonlocal running
        running += 1
        if running == 2:
            asked.set()

    async def refused() -> None:
        started()
        await failing.wait()
        raise PageError("HTTP 401 Unauthorized")

    async def slow() -> None:
        started()
        await asyncio.Event().wait()  # answers only when cancelled

    async def poll() -> list[None]:
        return await together([refused(), slow()])

    task = asyncio.create_task(poll())
    await asyncio.wait_for(asked.wait(), 5)  # the group and its queries started
    failing.set()  # the 401 answers, and the quit comes, in the same turn of the loop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    # A failure alone is still the failure's own error, and leaves its caller no cancel
    # to come (3.11's TaskGroup left the caller's cancel count at 1).
    running = 0
    with pytest.raises(PageError):
        await together([refused(), slow()])
    me = asyncio.current_task()
    assert me is not None and me.cancelling() == 0
    assert await together([asyncio.sleep(0, result=1), asyncio.sleep(0, result=2)]) == [1, 2]
    assert await together([]) == []
