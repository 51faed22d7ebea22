"""A fixed, fully filled store for screen snapshots: the demo node after a switch from the
device placement to host-prefetch, with a frozen clock. Figures follow the seed (device:
119.043 GB weights, 11.84M KV tokens; host-prefetch: 72.201 GB, 42.70M tokens, +201.6 GiB
host) so the pictures tell the product's story; everything else is plain made-up steadiness.
The server speaks DeepSeek-V4.1's dialect: its log's KV pools, its multi-pool gauges, its
Engram statistics, as the start-up log parser reads them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from typing import Any

from helpers import DEMO, GIB

from collectors.engram_setting import EngramSetting
from collectors.readings import (
    GpuData,
    GpuDevice,
    GpuProcess,
    HostData,
    ProcessTreeMemory,
    Quantiles,
    Reading,
    ServerData,
    Status,
)
from collectors.sglang.startup_log import StartupLogParser
from engram_top.model.figures import RunFigures
from engram_top.model.store import Event, RunFacts, RunStore
from scenarios import scenario_file

NOW = 10_000.0  # the frozen monotonic clock
WALL = 1_795_000_000.0  # 2026-11-18 11:06:40 UTC, the frozen wall clock
SERVER_PID = 4242
# The seed's headline figures as a run's results (their JSON form), per placement.
SEED_RESULTS = {
    "device": {"gpus": 4, "weights_gb": 119.043, "kv_tokens": 11_840_000,
               "host_delta_gib": 6.5, "ready_s": 125.0, "ttft_mean_ms": 350.0,
               "itl_mean_ms": 26.0, "output_tok_s": 224.0},
    "host-prefetch": {"gpus": 4, "weights_gb": 72.201, "kv_tokens": 42_700_288,
                      "host_delta_gib": 201.6, "ready_s": 273.0, "ttft_mean_ms": 404.5,
                      "itl_mean_ms": 28.84, "output_tok_s": 191.8},
}


def gpu_device(index: int, used_gib: float, server_gib: float, util: int, rx: float) -> GpuDevice:
    total = 179 * GIB
    used = round(used_gib * GIB)
    reserved = GIB // 2
    return GpuDevice(
        index=index, name="NVIDIA B200", uuid=f"GPU-{index:04d}", total_bytes=total,
        reserved_bytes=reserved, used_bytes=used, free_bytes=total - reserved - used,
        util_gpu_pct=util, power_w=640.0 + index, power_limit_w=1000.0,
        temperature_c=61 + index, sm_clock_mhz=1965, throttle_reasons=(),
        pcie_tx_bytes_per_s=rx / 40, pcie_rx_bytes_per_s=rx,
        processes=(GpuProcess(SERVER_PID + 1 + index, round(server_gib * GIB), "sglang::scheduler"),
                   GpuProcess(999, None if index % 2 else 512 * 1024**2, "python")))


def host_data(used_gib: float) -> HostData:
    total = 2048 * GIB
    return HostData(
        total_bytes=total, available_bytes=total - round(used_gib * GIB),
        used_bytes=round(used_gib * GIB), free_bytes=total - round((used_gib + 50) * GIB),
        cached_bytes=50 * GIB, shmem_bytes=round(196 * GIB), hugepages_total=0,
        hugepages_free=0, hugepage_size_bytes=2 * 1024**2, anon_hugepages_bytes=0,
        swap_total_bytes=0, swap_used_bytes=0, swap_in_bytes=0, swap_out_bytes=0,
        server_tree=ProcessTreeMemory(SERVER_PID, (SERVER_PID, 4243, 4244, 4245, 4246),
                                      rss_bytes=round(204 * GIB), rss_anon_bytes=round(6 * GIB),
                                      rss_file_bytes=2 * GIB, rss_shmem_bytes=round(196 * GIB)),
        backend="simulated")


def server_data(t: float) -> ServerData:
    q = Quantiles
    return ServerData(
        url="http://127.0.0.1:30103", healthy=True, version="0.5.23",
        model_path="deepseek-ai/DeepSeek-V4.1-Flash", tp_size=4,
        max_total_num_tokens=42_700_288, weight_gb=72.201, kv_cache_gb=59.47, graph_gb=1.2,
        num_running_reqs=8, num_queue_reqs=0, num_used_tokens=9_800, token_usage=0.23,
        full_token_usage=0.0002, swa_token_usage=0.23, kv_used_tokens=9_800,
        kv_available_tokens=42_690_488, kv_evictable_tokens=0, num_retracted_reqs=0,
        cache_hit_rate=0.0, queue_time=q(0.0021, 0.0094, 0.0025, 300),
        gen_throughput=191.8, ttft=q(0.3995 + 0.004 * math.sin(t / 7), 0.71, 0.4045, 310),
        itl=q(0.0288, 0.041, 0.02884, 9_400), e2e=q(5.9, 7.2, 5.91, 300),
        output_tokens_per_s=191.8, requests_per_s=1.0, window_s=30.0,
        ranks={r: {"weight_gb": 72.201, "kv_cache_gb": 59.47,
                   "max_total_num_tokens": 42_700_288} for r in range(4)})


def _run(name: str, launched: float, ready_s: float, state: str, results: dict) -> RunFacts:
    run = RunFacts(scenario=name, placement=name, node="simulated 4x NVIDIA B200",
                   time_scale=0.1, launched_wall=WALL - (NOW - launched), launched_at=launched,
                   state=state, pid=SERVER_PID, url="http://127.0.0.1:30103",
                   ready_at=launched + ready_s, baseline_host_used=40 * GIB,
                   baseline_gpu_used={i: 0 for i in range(4)}, phase="ready",
                   title=name, log_path=f"/var/log/engram-top/{name}.log", engine="SGLang")
    run.results = RunFigures.from_json(results)
    return run


def _log_line(ago: float, text: str, rank: int | None) -> str:
    """A line as the simulated server writes it (UTC, whatever the machine's zone)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(WALL - ago))
    return f"[{stamp}{'' if rank is None else f' TP{rank}'}] {text}"


def scene_store() -> RunStore:
    store = RunStore()
    store.clock = lambda: NOW
    store.node = "simulated 4x NVIDIA B200"
    store.scenarios = scenario_file.load(DEMO)
    device = _run("device", NOW - 400, 12.5, "stopped", {
        "gpus": 4, "ready_s": 12.5, "weights_gb": 119.043, "kv_tokens": 11_840_000,
        "host_delta_gib": 6.5, "ttft_p50_ms": 345.0, "ttft_mean_ms": 350.4,
        "itl_p50_ms": 26.0, "itl_mean_ms": 26.0, "output_tok_s": 224.0,
        "joules_per_token": 11.43,
        "goodput_rps": 2.19, "slo_attainment": 1.0})
    store.set_run(device)
    prefetch = _run("host-prefetch", NOW - 180, 27.3, "ready", {
        "gpus": 4, "ready_s": 27.3, "weights_gb": 72.201, "kv_tokens": 42_700_288,
        "host_delta_gib": 201.6, "ttft_p50_ms": 399.5, "ttft_mean_ms": 404.5,
        "itl_p50_ms": 28.8, "itl_mean_ms": 28.84, "output_tok_s": 191.8,
        "joules_per_token": 13.38,
        "goodput_rps": 1.87, "slo_attainment": 0.998})
    lines = (
        (178, "Init torch distributed ends. elapsed=0.80 s, mem usage=0.50 GB", 0),
        (176, "Load weight begin. avail mem=178.50 GB", 0),
        (168, "engram host table L1: layout=shared, 100352 MiB resident, 100352 MiB in huge "
              "pages (100%), pinned", 0),
        (165, "Load weight end. elapsed=10.52 s, type=DeepseekV4ForCausalLM, quant=fp8, "
              "avail mem=106.30 GB, mem usage=72.20 GB.", 0),
        (164, "DSV4 memory calculation: bytes_per_full_token=1632.00, available_bytes=67.34 GB, "
              "c128_state_fixed=0.00 GB, swa_fixed=2.52 GB, full_token=42700288", 0),
        (164, "DSV4 pool sizes: full=42700288, swa=112640, c4=10675072, c128=333596, "
              "c4_state=14080, c128_state=0", 0),
        (163, "Memory pool end. avail mem=46.83 GB", 0),
        (162, "Capture cuda graph begin. This can take up to several minutes. "
              "avail mem=46.83 GB", 0),
        (155, "Capture cuda graph end. Time elapsed: 6.91 s. mem usage=1.20 GB. "
              "avail mem=45.63 GB.", 0),
        (153, "The server is fired up and ready to roll!", None),
        (12, "Engram layer=1 lookups=61440 hit_rate=12.5% reads=53760 cache=1.0GiB(4-way) "
             "scales=0.2GiB threads=64 packed=True", 0),
        (2, "Engram layer=1 lookups=61440 hit_rate=12.5% reads=53760 cache=1.0GiB(4-way) "
            "scales=0.2GiB threads=64 packed=True", 0))
    prefetch.log_lines = deque([(WALL - ago, _log_line(ago, text, rank))
                                for ago, text, rank in lines], maxlen=400)
    parser = StartupLogParser()
    for ago, text, rank in lines:
        parser.feed(_log_line(ago, text, rank), at=NOW - ago)
    prefetch.startup = parser.facts()
    prefetch.model = "deepseek-ai/DeepSeek-V4.1-Flash"
    prefetch.engram = EngramSetting(placement="host-prefetch", layout="shared", pinned=True,
                                    source="environment", prefetch="engaged")
    store.set_run(prefetch)
    # Two minutes of history at 1 Hz, the last point now.
    for k in range(120, -1, -1):
        t = NOW - k
        wall = WALL - k
        gpus = tuple(gpu_device(i, 140.5 + 0.2 * i + 0.3 * math.sin((t + i) / 9), 140.0 + 0.2 * i,
                          90 + i, 2.0e9 + 3e8 * math.sin(t / 5 + i)) for i in range(4))
        store.add("gpu", Reading("nvml", Status.OK, GpuData("570.00", gpus, "simulated"),
                                 at=t, wall=wall))
        store.add("host", Reading("host", Status.OK, host_data(241.6 + 0.05 * math.sin(t / 11)),
                                  at=t, wall=wall))
        store.add("server", Reading("sglang", Status.OK, server_data(t), at=t, wall=wall))
    store.load = {"concurrency": 8, "sent": 412, "completed": 404, "failed": 0}
    store.events.clear()
    for ago, level, text in ((400, "info", "started device"),
                             (190, "info", "switching to host-prefetch: device stopped, "
                                           "HBM returned in 0.6 s"),
                             (153, "info", "host-prefetch ready in 27.3 s (273 s node time)"),
                             (150, "info", "load started: 8 streams, closed loop")):
        store.events.append(Event(WALL - ago, level, text))
    return store


def three_scenarios_store() -> RunStore:
    """The scene with a run of the synchronous host placement too: the comparison then has
    three scenario columns, as the demo's has."""
    store = scene_store()
    host = _run("host", NOW - 300, 23.3, "stopped", {
        "gpus": 4, "ready_s": 23.3, "weights_gb": 72.201, "kv_tokens": 42_700_288,
        "host_delta_gib": 195.4, "ttft_p50_ms": 410.2, "ttft_mean_ms": 416.1,
        "itl_p50_ms": 32.6, "itl_mean_ms": 32.8, "output_tok_s": 180.6,
        "joules_per_token": 14.21,
        "goodput_rps": 1.76, "slo_attainment": 0.994})
    store.history["host"] = host
    store.runs.insert(1, host)  # device, host, host-prefetch: the demo's order
    return store


def snapshot_host(used: int) -> HostData:
    return HostData(total_bytes=2048 * GIB, available_bytes=2048 * GIB - used, used_bytes=used,
                    free_bytes=0, cached_bytes=0, shmem_bytes=3 * GIB, hugepages_total=0,
                    hugepages_free=0, hugepage_size_bytes=2 << 20, anon_hugepages_bytes=0,
                    swap_total_bytes=0, swap_used_bytes=0, swap_in_bytes=0, swap_out_bytes=0)


def filled_store() -> RunStore:
    """For the snapshot tests: two finished-looking runs (device, host-prefetch, the latter
    live) and a few points."""
    store = RunStore()
    store.node = "test node"
    now = time.monotonic()
    for name, results in SEED_RESULTS.items():
        run = RunFacts(scenario=name, placement=name, node="test node", time_scale=1.0,
                       launched_wall=time.time() - 100, launched_at=now - 100, state="ready",
                       ready_at=now - 90, baseline_host_used=40 * GIB,
                       log_lines=[(1, "a log line that stays in the log file")])
        run.results = RunFigures.from_json(results)
        store.set_run(run)
    for i in range(3):
        t = now - 30 + 10 * i
        dev = GpuDevice(index=0, name="NVIDIA B200", uuid="GPU-x", total_bytes=179 * GIB,
                        reserved_bytes=GIB // 2, used_bytes=(100 + i) * GIB,
                        free_bytes=(78 - i) * GIB, util_gpu_pct=90 + i)
        store.add("gpu", Reading("gpu", Status.OK, GpuData("t", (dev,)), at=t))
        store.add("host", Reading("host", Status.OK, snapshot_host((240 + i) * GIB), at=t))
        store.add("server", Reading("sglang", Status.OK, ServerData(
            url="http://127.0.0.1:1", healthy=True, max_total_num_tokens=42_700_288,
            token_usage=0.25 + i / 100, num_running_reqs=8, num_queue_reqs=3,
            ttft=Quantiles(0.4, 0.9, 0.41, 10), itl=Quantiles(0.028, 0.05, 0.029, 100),
            output_tokens_per_s=190.0 + i, window_s=30.0), at=t))
    return store


def frozen_time_zone() -> None:
    """Event times print in UTC, whatever the machine's zone."""
    import os
    os.environ["TZ"] = "UTC"
    time.tzset()


# --------------------------------------------------------------------------- the fleet


def fleet_results(nodes: int, at: float = 100.0) -> dict[str, list[dict[str, Any]]]:
    """What Prometheus's five queries would answer for `nodes` simulated nodes, `at` seconds
    after they started, built from the exporters' own model (no Prometheus, no clock)."""
    from engram_top.seed.reference import default
    from engram_top.sim.fleet import FleetNode

    ref = default()
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in ("gpu", "host", "server",
                                                            "latency", "up", "agent")}

    def add(kind: str, labels: dict[str, str], value: float) -> None:
        out[kind].append({"metric": labels, "value": [WALL, repr(float(value))]})

    for i in range(nodes):
        n = FleetNode(ref, i, 0.0)
        base = {"node": n.name, "placement": n.placement}
        for gpu in range(ref.gpus):
            g = {**base, "gpu": str(gpu), "modelName": ref.gpu_name, "Hostname": n.name}
            used = n.gpu_used(gpu)
            add("gpu", {**g, "__name__": "DCGM_FI_DEV_FB_USED"}, used // (1 << 20))
            add("gpu", {**g, "__name__": "DCGM_FI_DEV_FB_RESERVED"},
                ref.gpu_reserved_bytes // (1 << 20))
            add("gpu", {**g, "__name__": "DCGM_FI_DEV_FB_FREE"},
                (ref.gpu_total_bytes - ref.gpu_reserved_bytes - used) // (1 << 20))
        for key, value in n.host().items():
            name = f"node_memory_{key}" + ("" if key.startswith("HugePages_") else "_bytes")
            add("host", {**base, "__name__": name}, value)
        usage = n.kv_usage(at)
        for name, value in (("token_usage", usage), ("full_token_usage", usage),
                            ("swa_token_usage", usage * 0.6),
                            ("num_running_reqs", 200), ("max_total_num_tokens",
                                                        n.plan.kv_tokens),
                            ("weight_memory_usage_gb", n.plan.weights_bytes / (1 << 30))):
            add("server", {**base, "__name__": f"sglang:{name}"}, value)
        st = n.steady
        for figure, samples, q in (("ttft_p50", st.ttft, 0.5), ("ttft_p99", st.ttft, 0.99),
                                   ("tpot_p50", st.itl, 0.5), ("tpot_p99", st.itl, 0.99)):
            add("latency", {**base, "figure": figure},
                samples[int(q * (len(samples) - 1))] * n.speed)
        add("latency", {**base, "figure": "output_tok_s"}, st.tokens_per_s / n.speed)
        for job in ("dcgm-exporter", "node-exporter", "sglang"):
            add("up", {**base, "job": job, "instance": f"10.0.{i // 250}.{i % 250}:9400"}, 1)
        if i % 4 != 3:  # an engram-top agent on three nodes of four
            _agent_series(add, base, n)
    return out


def _agent_series(add: Any, base: dict[str, str], n: Any) -> None:
    """An agent's answer to the fleet's agent query for node ``n``, labelled as Prometheus
    labels it: the scrape config's `placement` kept, the agent's renamed exported_placement."""
    gib = 1 << 30
    host = n.host()
    for numa in (0, 1):
        add("agent", {**base, "__name__": "engram_top_host_ledger_numa_bytes",
                      "numa_node": str(numa), "line": "free"}, host["MemFree"] / 2)
    for gpu in range(n.ref.gpus):
        add("agent", {**base, "__name__": "engram_top_hbm_unexplained_bytes", "gpu": str(gpu)},
            (1.5 + 0.1 * gpu) * gib)
    add("agent", {**base, "__name__": "engram_top_server_info", "scenario": n.placement,
                  "exported_placement": n.placement, "state": "ready"}, 1)
    # Each placement's need of host memory beyond this node's (the tables, their staging):
    # a placement fits where MemAvailable keeps 5% of the host after it.
    mine = 0 if n.placement == "device" else 201 * gib
    for sc, need in (("device", 6.5 * gib), ("host", 195.4 * gib),
                     ("host-prefetch", 201.6 * gib)):
        room = host["MemAvailable"] + mine - need
        level = 0 if room > 0.05 * host["MemTotal"] else 1 if room > 0 else 2
        add("agent", {**base, "__name__": "engram_top_fit_level", "scenario": sc,
                      "exported_placement": sc}, level)
        add("agent", {**base, "scenario": sc, "exported_placement": sc,
                      "figure": "fit_host_room"}, room)


def fleet_session(nodes: int):  # type: ignore[no-untyped-def]
    """A FleetSession that polls nothing: its nodes read from fleet_results at NOW."""
    from collectors.prometheus import PromStatus, group
    from collectors.readings import Reading, Status
    from engram_top.fleet.session import FleetSession

    session = FleetSession("http://127.0.0.1:9090", interval=5.0, clock=lambda: NOW,
                           wall_clock=lambda: WALL)
    session.nodes = {name: (NOW, data) for name, data in
                     group(fleet_results(nodes), session.source.dialects).items()}
    session.walls = {name: WALL for name in session.nodes}

    async def history(node: str, span_s: float = 1800.0):  # type: ignore[no-untyped-def]
        # The range queries' answer, as group() makes it: the node's KV filling over the
        # half hour (a real Prometheus answers in tests/fleet/test_fleet.py).
        import dataclasses
        data = session.nodes[node][1]
        steps = 60
        return [(WALL - span_s + k * span_s / steps, dataclasses.replace(data, server={
            **data.server, "token_usage": data.server.get("token_usage", 0) * (k + 1) / steps}))
            for k in range(steps)]
    session.history = history  # type: ignore[method-assign]
    session.status = Reading("prometheus", Status.OK, at=NOW, wall=WALL,
                             data=PromStatus(session.url, nodes, nodes * 40, 12.0))
    return session


# Each GPU's PCIe receive, and its rank's HiCache load-back: GPU 3 receives a few MB/s (a
# table in GB/s read it 0.00), GPU 2 no more than it loads back.
RX = (2.0e9, 2.0e9, 1.5e9, 4.2e6)
LOAD_BACK = {0: 1.5e9, 1: 1.5e9, 2: 1.5e9, 3: 1.0e6}


def hicache_store(drops: float | None = 35.0, rx: tuple[float | None, ...] = RX) -> RunStore:
    """The scene (host-prefetch, TP4) with HiCache on: 32 GB per rank in the start-up log,
    its gauges and rates on the page, each GPU's receive as given."""
    store = scene_store()
    run = store.run
    parser = StartupLogParser()
    for _, line in run.log_lines:
        parser.feed(line)
    for rank in range(4):
        parser.feed(_log_line(160, "Allocating 32.00 GB host memory for hierarchical KV cache.",
                              rank))
    run.startup = parser.facts()
    server = dataclasses.replace(
        server_data(NOW), hicache_host_used_tokens=4 * 12_300, hicache_host_total_tokens=4 * 98_000,
        hicache_load_back_bytes_per_s=LOAD_BACK[0], hicache_backup_bytes_per_s=20e6,
        hicache_dropped_host_pressure_per_s=drops, evicted_tokens_per_s=500.0,
        hicache_load_back_by_rank=dict(LOAD_BACK))
    store.add("server", Reading("sglang", Status.OK, server, at=NOW, wall=WALL))
    gpus = tuple(dataclasses.replace(g, pcie_rx_bytes_per_s=r)
                 for g, r in zip(store.data("gpu").devices, rx, strict=True))
    store.add("gpu", Reading("nvml", Status.OK, GpuData("570.00", gpus, "simulated"), at=NOW,
                             wall=WALL))
    return store
