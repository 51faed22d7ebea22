"""How the Prometheus source groups what its queries answer into nodes, on answers shaped
as real fleets label them (no Prometheus needed: the live path is tests/test_fleet.py)."""

from __future__ import annotations

from typing import Any

from collectors.prometheus import group, host_of, node_of, queries
from engram_top import fleet
from engram_top.config import Thresholds


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
    nodes = group(results)
    assert sorted(nodes) == ["10.0.0.8", "gpu-a"]
    a = nodes["gpu-a"]
    assert a.host == {"total": 100.0, "available": 40.0}
    assert a.server == {"token_usage": 0.5}  # the underscore spelling is SGLang's too
    assert a.gpus[0].total_bytes == 3001 * 1024 * 1024
    assert nodes["10.0.0.8"].missing == ("dcgm-exporter (GPU figures)", "SGLang /metrics")


def test_a_node_label_wins_and_nan_or_garbage_values_are_left_out() -> None:
    results = {
        "gpu": [sample("NaN", __name__="DCGM_FI_DEV_FB_USED", gpu="0", node="n1",
                       hostname="pod-xyz", instance="10.1.2.3:9400"),
                sample("+Inf", __name__="DCGM_FI_DEV_FB_FREE", gpu="0", node="n1")],
        "host": [sample("oops", __name__="node_memory_MemTotal_bytes", node="n1")],
        "server": [], "latency": [sample(0.2, figure="ttft_p50", node="n1")],
        "up": [sample(0, job="sglang", instance="10.1.2.3:30000", node="n1")],
    }
    n1 = group(results)["n1"]
    assert n1.gpus[0].used_bytes is None and n1.gpus[0].total_bytes is None
    assert n1.host == {} and n1.latency == {"ttft_p50": 0.2}
    assert "sglang down (10.1.2.3:30000)" in n1.missing


def test_instance_forms() -> None:
    assert host_of("10.0.0.7:9100") == "10.0.0.7"
    assert host_of("[fe80::1]:9100") == "[fe80::1]"
    assert host_of("gpu-a") == "gpu-a"
    assert node_of({"instance": "h:1"}, {"h": "named"}) == "named"
    assert node_of({}) == "?"


def test_the_refresh_is_five_queries_whatever_the_fleet() -> None:
    q = queries("30s")
    assert sorted(q) == ["gpu", "host", "latency", "server", "up"]
    assert "[30s]" in q["latency"] and "sglang[:_]" in q["server"]


def test_placement_is_inferred_from_host_memory_when_no_label_says_it() -> None:
    gib = 1024 ** 3
    tables = {"gpu": [], "server": [], "latency": [], "up": [],
              "host": [sample(2048 * gib, __name__="node_memory_MemTotal_bytes", node="a"),
                       sample(190 * gib, __name__="node_memory_Shmem_bytes", node="a"),
                       sample(2048 * gib, __name__="node_memory_MemTotal_bytes", node="b"),
                       sample(2 * gib, __name__="node_memory_Shmem_bytes", node="b")]}
    nodes = group(tables)
    assert fleet.infer_placement(nodes["a"]) == ("host?", True)
    assert fleet.infer_placement(nodes["b"]) == ("device?", True)
    row = fleet.row(nodes["a"], 0.0, Thresholds(), 15.0)
    assert row.state == "no server" and "server silent" in row.alerts
    assert fleet.results([row]) == []  # a node that serves nothing is no trial


def test_filter_words_and_columns() -> None:
    nodes = group({"gpu": [], "host": [], "latency": [], "up": [],
                   "server": [sample(0.95, __name__="sglang:token_usage", node="n7",
                                     placement="host-prefetch")]})
    r = fleet.row(nodes["n7"], 0.0, Thresholds(), 15.0)
    assert r.alerts == ("kv 95%",)
    assert r.matches("n7") and r.matches("placement=prefetch kv")
    assert not r.matches("placement=device") and not r.matches("nosuch=1")


async def test_an_answer_of_another_shape_is_said_not_raised() -> None:
    from collectors.prometheus import PrometheusSource

    src = PrometheusSource("http://127.0.0.1:9")

    async def odd(key: str) -> list[Any]:
        return ["not a sample"] if key == "gpu" else []

    src.query = odd  # type: ignore[method-assign]
    (key, reading), = await src.poll()
    assert not reading.ok and "an answer of an unexpected shape" in reading.message
    await src.close()
