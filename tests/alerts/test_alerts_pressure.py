"""The alerts that say what is wrong and what to look at next, over a RunStore fed readings
shaped as the collectors make them: a server gone (its stale figures' alerts end), requests
retracted, the [slo] breached, HiCache dropping tokens for host pressure, a PCIe link near
full, an HBM alert naming who holds the memory."""

from __future__ import annotations

from helpers import GIB

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
from collectors.units import GB, MIB
from engram_top.alerts.monitor import AlertMonitor
from engram_top.alerts.thresholds import Thresholds
from engram_top.compare.slo import Slo
from engram_top.model.store import RunFacts, RunStore

URL = "http://127.0.0.1:30000"


def attached(store: RunStore, **kw: object) -> RunFacts:
    facts = RunFacts(scenario=URL, placement="host", node="sim", time_scale=1.0,
                     launched_wall=1.7e9, launched_at=0.0, state="attached", ready_at=0.0,
                     url=URL, owned=False, **kw)
    store.set_run(facts)
    return facts


def server(store: RunStore, t: float, **fields: object) -> None:
    base: dict[str, object] = dict(url=URL, healthy=True, max_total_num_tokens=1000,
                                   num_used_tokens=500, token_usage=0.5, num_queue_reqs=0.0,
                                   num_running_reqs=4)
    base.update(fields)
    store.add("server", Reading("sglang", Status.OK, ServerData(**base), at=t))  # type: ignore[arg-type]


def refused(store: RunStore, t: float, since: float) -> None:
    store.add("server", Reading("sglang", Status.ERROR, None, at=t, failing_since=since,
                                message=f"no server at {URL} (connection refused)"))


def events(store: RunStore) -> list[str]:
    return [e.text for e in store.events if not e.text.startswith(("server:", "gpu:", "host:"))]


def test_a_server_that_fails_two_polls_is_gone_and_its_stale_alerts_end_at_once() -> None:
    store, monitor = RunStore(), AlertMonitor(Thresholds(queue_growth_window_s=5))
    attached(store)
    for t in range(8):  # a full pool and a queue that grows
        server(store, float(t), token_usage=0.97, num_used_tokens=970, num_queue_reqs=float(t))
        monitor.evaluate(store, float(t))
    assert set(store.alerts) == {"kv", "queue-growth"}
    refused(store, 8.0, since=8.0)  # one lost poll: no alarm yet, the figures stand
    assert monitor.evaluate(store, 8.0) == []
    refused(store, 9.0, since=8.0)  # the second: gone
    changes = monitor.evaluate(store, 9.0)
    assert sorted((c.change, c.alert.id) for c in changes) == [
        ("cleared", "kv"), ("cleared", "queue-growth"), ("raised", "server-gone")]
    gone = store.alerts["server-gone"]
    assert gone.severity == "error" and gone.message.startswith(f"server {URL} not answering ")
    assert gone.message.endswith(f": no server at {URL} (connection refused); its figures are "
                                 "stale: look at its process and its log")
    said = events(store)
    # The events line says it, and why the stale alerts went (not "cleared").
    assert gone.message in said
    assert [t for t in said if t.startswith("ended (its server is not answering): KV pool")]
    assert not [t for t in said if t.startswith("cleared:")]
    # Long silent: server-gone says it; no second line from server-silent.
    refused(store, 30.0, since=8.0)
    assert monitor.evaluate(store, 30.0) == []
    assert set(store.alerts) == {"server-gone"}
    # With server-gone switched off, server-silent still says it.
    quiet = AlertMonitor(Thresholds(disabled=("server-gone",)))
    assert [c.alert.id for c in quiet.evaluate(store, 30.0) if c.change == "raised"] == [
        "server-silent"]
    store.alerts["server-gone"] = gone  # (the quiet monitor's evaluation ended it)
    # It answers again: gone clears at once.
    server(store, 31.0)
    assert [(c.change, c.alert.id) for c in monitor.evaluate(store, 31.0)] == [
        ("cleared", "server-gone")]


def test_retractions_per_second_in_the_engines_word() -> None:
    store, monitor = RunStore(), AlertMonitor(Thresholds(disabled=("kv",)))
    attached(store, words={"retracted": "preempted"})
    server(store, 0.0, retracted_per_s=0.05, token_usage=0.99)
    assert monitor.evaluate(store, 0.0) == []  # under 0.1/s
    server(store, 1.0, retracted_per_s=2.5, token_usage=0.99)
    alert = store.alerts.get("retractions") or monitor.evaluate(store, 1.0)[0].alert
    assert store.alerts["retractions"].message == (
        "2.50 requests preempted a second (> 0.1/s): the KV pool ran out mid-decode, KV pool "
        "99% used; look at the KV panel (usage, queue): fewer concurrent requests or a larger "
        "KV pool")
    assert alert.severity == "warning"


def q(p50: float, p99: float, count: float, over: bool = False) -> Quantiles:
    return Quantiles(p50=p50, p99=p99, mean=None, count=count, p99_over=over)


def test_an_slo_breach_against_the_configs_bounds() -> None:
    slos = (Slo("ttft", 99, 2.0), Slo("tpot", 99, 0.05), Slo("e2e", 90, 1.0))
    store, monitor = RunStore(), AlertMonitor(slos=slos)
    attached(store)
    # Too few requests in the window: one slow start is no breach.
    server(store, 0.0, ttft=q(1.0, 99.7, 5), itl=q(0.01, 0.02, 500), window_s=30.0)
    assert monitor.evaluate(store, 0.0) == []
    # p99 TTFT past its bound (its +Inf bucket: a lower bound), TPOT (the ITL) within; the
    # p90 bound is the load's only.
    server(store, 1.0, ttft=q(75.0, 30.0, 146, over=True), itl=q(0.01, 0.04, 5000),
           e2e=q(80.0, 99.0, 146), window_s=30.0, num_queue_reqs=146.0)
    (change,) = monitor.evaluate(store, 1.0)
    assert change.alert.message == (
        "p99 TTFT > 30 s over the last 30 s, past the [slo] bound of 2,000 ms (146 queued); "
        "look at the queue and the KV panel, and the latency panel's p50 against p99")
    # Both breached: one alert, both said.
    server(store, 2.0, ttft=q(0.5, 2.5, 146), itl=q(0.03, 0.080, 5000), window_s=30.0)
    assert monitor.evaluate(store, 2.0) == []
    assert store.alerts["slo"].message.startswith(
        "p99 TTFT 2.5 s over the last 30 s, past the [slo] bound of 2,000 ms; p99 TPOT 80 ms "
        "over the last 30 s, past the [slo] bound of 50 ms; look at")
    # No [slo] given: nothing to hold to.
    assert AlertMonitor().findings(store, 2.0) == []


def test_the_slo_alert_holds_while_requests_queue_with_no_first_token() -> None:
    """A window in which no request got a first token measures no TTFT: while requests
    queue, that is no SLO met. The alert read "cleared: p99 TTFT 79.7 s ... (43 queued)" in
    a KV exhaustion; it now stays, and clears 30 s (its keep_firing_s) after the queue is
    served again."""
    store, monitor = RunStore(), AlertMonitor(slos=(Slo("ttft", 99, 2.0),))
    attached(store)
    server(store, 0.0, ttft=q(40.0, 79.7, 50), window_s=30.0, num_queue_reqs=43.0)
    (change,) = monitor.evaluate(store, 0.0)
    assert change.change == "raised"
    # Then no first token in the window (count 0), requests still queued: held, however long.
    for t in range(1, 120):
        server(store, float(t), ttft=q(0.0, 0.0, 0), window_s=30.0, num_queue_reqs=43.0)
        assert monitor.evaluate(store, float(t)) == [], t
    # Served again, within the bound: it clears after its hold, said once.
    cleared = []
    for t in range(120, 160):
        server(store, float(t), ttft=q(0.2, 0.5, 200), window_s=30.0, num_queue_reqs=0.0)
        cleared += [t for c in monitor.evaluate(store, float(t)) if c.change == "cleared"]
    assert cleared == [150]
    assert [e for e in events(store) if e.startswith("cleared: p99 TTFT")] == [
        "cleared: " + change.alert.message]


def test_an_slo_breach_on_a_coarse_quantile_says_its_bucket() -> None:
    """A p99 interpolated inside a bucket too wide to resolve it is said by the bucket,
    never by the interpolated figure: past the bound where the whole bucket is, "not
    resolved" where the bucket holds the bound."""
    def coarse(p99: float, bucket: tuple[float, float]) -> Quantiles:
        return Quantiles(p50=0.05, p99=p99, mean=0.004, count=200, p99_bucket=bucket,
                         p99_coarse=True, p50_bucket=(0.0, 0.1), p50_coarse=True)
    store, monitor = RunStore(), AlertMonitor(slos=(Slo("ttft", 99, 0.05),))
    attached(store)
    # All in SGLang's first TTFT bucket (0-100 ms): p99 interpolates to 99 ms, past 50 ms.
    server(store, 0.0, ttft=coarse(0.099, (0.0, 0.1)), window_s=30.0)
    (change,) = monitor.evaluate(store, 0.0)
    assert change.alert.message == (
        "p99 TTFT <= 100 ms over the last 30 s, a histogram bucket that holds the [slo] "
        "bound of 50 ms: not resolved; look at the queue and the KV panel, and the latency "
        "panel's p50 against p99")
    # The whole bucket past the bound: past, by the bucket.
    server(store, 1.0, ttft=coarse(0.15, (0.1, 0.2)), window_s=30.0)
    assert monitor.evaluate(store, 1.0) == []  # the same alert, its message updated
    assert store.alerts["slo"].message.startswith(
        "p99 TTFT 100-200 ms over the last 30 s, past the [slo] bound of 50 ms; look at")


def test_hicache_dropping_tokens_for_host_pressure() -> None:
    store, monitor = RunStore(), AlertMonitor()
    attached(store)
    server(store, 0.0, hicache_host_used_tokens=31_000.0, hicache_host_total_tokens=32_000.0,
           hicache_dropped_host_pressure_per_s=0.0)
    assert monitor.evaluate(store, 0.0) == []
    server(store, 1.0, hicache_host_used_tokens=32_000.0, hicache_host_total_tokens=32_000.0,
           hicache_dropped_host_pressure_per_s=1234.0)
    (change,) = monitor.evaluate(store, 1.0)
    assert (change.alert.id, change.alert.message) == (
        "hicache-drops", "HiCache dropped 1,234 tokens/s for host pressure (> 0/s): host pool "
        "32,000 of 32,000 tokens; look at the Host RAM ledger (HiCache host pools, other "
        "tenants) and --hicache-size")


def gpu(index: int, *, rx: float | None = None, gen: int = 5, width: int = 16,
        used_gib: float = 50.0, processes: tuple[GpuProcess, ...] = ()) -> GpuDevice:
    return GpuDevice(index=index, name="B200", uuid=f"GPU-{index}", total_bytes=100 * GIB,
                     reserved_bytes=GIB, used_bytes=round(used_gib * GIB),
                     free_bytes=round((99 - used_gib) * GIB), pcie_gen=gen, pcie_width=width,
                     pcie_rx_bytes_per_s=rx, processes=processes)


def test_pcie_receive_near_its_links_capacity_with_hicache_apart() -> None:
    store, monitor = RunStore(), AlertMonitor()
    attached(store)
    server(store, 0.0, hicache_load_back_bytes_per_s=12e9, hicache_host_total_tokens=1e6)
    for t in range(6):  # a Gen5 x16 link carries 63.0 GB/s; Gen4 x16 31.5 GB/s
        store.add("gpu", Reading("nvml", Status.OK, GpuData("580", (
            gpu(0, rx=52e9), gpu(1, rx=20e9), gpu(2, rx=20e9, gen=4), gpu(3, rx=None))),
            at=float(t)))
    found = {c.alert.id: c.alert.message for c in monitor.evaluate(store, 5.0)}
    assert set(found) == {"pcie:gpu0"}  # gpu 2 is at 64% of its Gen4 link
    assert found["pcie:gpu0"] == (
        "GPU 0 PCIe receive 52.0 GB/s over 5 s, 83% of its Gen5 x16 link (63.0 GB/s): HiCache "
        "load-back 12.0 GB/s, Engram ~40.0 GB/s (an estimate); look at `h` (PCIe per GPU)")
    # A spike is averaged over the window: one second at 60 GB/s among 20s is no alert.
    store2, monitor2 = RunStore(), AlertMonitor()
    for t in range(6):
        store2.add("gpu", Reading("nvml", Status.OK, GpuData("580", (
            gpu(0, rx=60e9 if t == 5 else 20e9),)), at=float(t)))
    assert monitor2.evaluate(store2, 5.0) == []


def test_hbm_names_the_process_that_holds_it() -> None:
    store, monitor = RunStore(), AlertMonitor()
    attached(store)
    tree = ProcessTreeMemory(root_pid=100, pids=(100, 101), rss_bytes=GIB, rss_anon_bytes=GIB,
                             rss_file_bytes=0, rss_shmem_bytes=0)
    store.add("host", Reading("host", Status.OK, HostData(
        total_bytes=100 * GIB, available_bytes=50 * GIB, used_bytes=50 * GIB,
        free_bytes=50 * GIB, cached_bytes=0, shmem_bytes=0, hugepages_total=0,
        hugepages_free=0, hugepage_size_bytes=2 * MIB, anon_hugepages_bytes=0,
        swap_total_bytes=0, swap_used_bytes=0, swap_in_bytes=0, swap_out_bytes=0,
        server_tree=tree), at=0.0))
    held = (GpuProcess(101, 55 * GIB, "sglang::scheduler"), GpuProcess(4242, 41 * GIB, "hog"))
    store.add("gpu", Reading("nvml", Status.OK, GpuData("580", (
        gpu(0, used_gib=96.5, processes=held),)), at=0.0))
    (change,) = monitor.evaluate(store, 0.0)
    assert change.alert.message == (
        "GPU 0 HBM 96.5% used (> 95%): hog (pid 4242, not the server's) holds 41.0 GiB, the "
        "server 55.0 GiB; look at `h` (who holds each GPU)")
    assert GB == 10**9
