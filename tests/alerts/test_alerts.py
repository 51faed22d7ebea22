"""Alerts over a RunStore fed deterministic readings: each raised with its figure, cleared,
written as events, held against flapping, and shaped by the config's thresholds."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from collectors.readings import (
    GpuData,
    GpuDevice,
    HostData,
    NumaNode,
    ProcessMemory,
    Reading,
    ServerData,
    Status,
)
from collectors.sglang.startup_log import StartupLogParser
from engram_top.alerts.monitor import AlertMonitor
from engram_top.alerts.thresholds import Thresholds
from engram_top.model.store import RunFacts, RunStore
from engram_top.settings.user_config import parse_config

GIB = 1024**3
MIB = 1024**2
NO_PROCESS = "NVML lists no process on it (another container's, or the driver's)"
NEXT = ("; look at the KV panel (usage, retracted/s) and TTFT: the server takes requests "
        "slower than they come")


def gpus(store: RunStore, t: float, *used_pct: float) -> None:
    devices = tuple(GpuDevice(index=i, name="B200", uuid=f"GPU-{i}", total_bytes=100 * GIB,
                              reserved_bytes=GIB, used_bytes=round(pct * GIB),
                              free_bytes=round((99 - pct) * GIB))
                    for i, pct in enumerate(used_pct))
    store.add("gpu", Reading("nvml", Status.OK, GpuData("580.1", devices), at=t))


def host(store: RunStore, t: float, available_gib: float = 50.0, swap_in: int = 0) -> None:
    total, avail = 100 * GIB, round(available_gib * GIB)
    data = HostData(total_bytes=total, available_bytes=avail, used_bytes=total - avail,
                    free_bytes=avail, cached_bytes=0, shmem_bytes=0, hugepages_total=0,
                    hugepages_free=0, hugepage_size_bytes=2 * MIB, anon_hugepages_bytes=0,
                    swap_total_bytes=8 * GIB, swap_used_bytes=0, swap_in_bytes=swap_in,
                    swap_out_bytes=0)
    store.add("host", Reading("host", Status.OK, data, at=t))


def server(store: RunStore, t: float, usage: float = 0.1, queue: float = 0.0) -> None:
    data = ServerData(url="http://127.0.0.1:30000", healthy=True, max_total_num_tokens=1000,
                      num_used_tokens=usage * 1000, token_usage=usage, num_queue_reqs=queue,
                      num_running_reqs=4)
    store.add("server", Reading("sglang", Status.OK, data, at=t))


def server_down(store: RunStore, t: float) -> None:
    store.add("server", Reading("sglang", Status.ERROR, None, at=t, failing_since=t,
                                message="no server at http://127.0.0.1:30000 (connection "
                                        "refused)"))


def new_run(store: RunStore, state: str = "ready", t: float = 0.0, **kw: object) -> RunFacts:
    facts = RunFacts(scenario="device", placement="device", node="sim", time_scale=1.0,
                     launched_wall=1.7e9, launched_at=t, state=state, ready_at=t, **kw)
    store.set_run(facts)
    return facts


def texts(store: RunStore) -> list[tuple[str, str]]:
    """The events the alerts wrote (readings' own status events left out)."""
    return [(e.level, e.text) for e in store.events if ":" not in e.text.split(" ")[0]
            or e.text.startswith("cleared:")]


def test_hbm_raised_with_its_figure_written_and_cleared() -> None:
    store, monitor = RunStore(), AlertMonitor()
    gpus(store, 0.0, 50.0, 96.3)
    (change,) = monitor.evaluate(store, 0.0)
    assert change.change == "raised"
    alert = store.alerts["hbm:gpu1"]
    assert change.alert is alert
    assert (alert.severity, alert.message) == ("warning", "GPU 1 HBM 96.3% used (> 95%): "
                                               f"{NO_PROCESS}; look at `h` (who holds each GPU)")
    assert alert.started_at == 0.0 and alert.since > 1.6e9
    assert list(store.alerts) == ["hbm:gpu1"]
    assert texts(store) == [("warning", alert.message)]
    assert store.version("alerts") == (1,)
    # Higher still: the same alert, its figure updated, no second event.
    gpus(store, 1.0, 50.0, 97.0)
    assert monitor.evaluate(store, 1.0) == []
    assert store.alerts["hbm:gpu1"].message.startswith("GPU 1 HBM 97.0% used (> 95%): ")
    # Below the threshold and the band, but not for clear_after_s (5 s) yet.
    gpus(store, 2.0, 50.0, 80.0)
    assert monitor.evaluate(store, 2.0) == []
    assert monitor.evaluate(store, 6.5) == []
    (change,) = monitor.evaluate(store, 7.0)
    assert change.change == "cleared" and store.alerts == {}
    assert texts(store)[-1][0] == "info"
    assert texts(store)[-1][1].startswith("cleared: GPU 1 HBM 97.0% used (> 95%): ")


def test_a_value_hovering_at_the_threshold_does_not_flap() -> None:
    store, monitor = RunStore(), AlertMonitor()
    changes = []
    for step in range(120):  # a minute at 2 Hz, either side of 95%
        t = step * 0.5
        gpus(store, t, 95.4 if step % 2 else 94.6)
        changes += monitor.evaluate(store, t)
    assert [c.change for c in changes] == ["raised"]
    # Dips below the band shorter than clear_after_s do not clear it either.
    for step in range(30):
        t = 60.0 + step
        gpus(store, t, 96.0 if step % 3 == 0 else 90.0)
        changes += monitor.evaluate(store, t)
    assert [c.change for c in changes] == ["raised"]
    assert len([e for e in texts(store) if "HBM" in e[1]]) == 1


def test_thresholds_from_the_config_file_are_honoured(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[alerts]\nhbm_used_pct = 80\nclear_after_s = 0\nhysteresis_pct = 0\n"
                    "disabled = ['host-available']\n")
    config = parse_config(path)
    store = RunStore()
    gpus(store, 0.0, 85.0)
    host(store, 0.0, available_gib=2.0)
    assert AlertMonitor().evaluate(store, 0.0)[0].alert.id == "host-available"
    store.alerts.clear()
    monitor = AlertMonitor(config.alerts)
    (change,) = monitor.evaluate(store, 0.0)
    assert change.alert.message.startswith("GPU 0 HBM 85.0% used (> 80%): ")
    # No band and no hold: it clears on the first reading under the threshold.
    gpus(store, 1.0, 79.9)
    assert [c.change for c in monitor.evaluate(store, 1.0)] == ["cleared"]


def test_alerts_switched_off_raise_nothing() -> None:
    store = RunStore()
    gpus(store, 0.0, 99.0)
    new_run(store, state="exited", exit_code=1)
    assert AlertMonitor(Thresholds(enabled=False)).evaluate(store, 0.0) == []
    only_died = AlertMonitor(Thresholds(disabled=("hbm",))).evaluate(store, 0.0)
    assert [c.alert.id for c in only_died] == ["server-died"]


def test_kv_usage_and_it_clears_when_the_server_is_gone() -> None:
    store, monitor = RunStore(), AlertMonitor()
    run = new_run(store)
    server(store, 0.0, usage=0.89)
    assert monitor.evaluate(store, 0.0) == []
    server(store, 1.0, usage=0.935)
    (change,) = monitor.evaluate(store, 1.0)
    assert change.alert.id == "kv"
    assert change.alert.message == ("KV pool 93.5% used (> 90%): 935 of 1,000 tokens; look at "
                                    "the KV panel (retracted/s, queue)")
    # Stopped: its last figures are no longer a live pool, so the alert ends at once, and
    # says why rather than "cleared".
    run.state = "stopped"
    assert [c.change for c in monitor.evaluate(store, 2.0)] == ["cleared"]
    assert texts(store)[-1] == ("info", f"ended (its server ended): {change.alert.message}")


def test_host_available_memory() -> None:
    store, monitor = RunStore(), AlertMonitor()
    host(store, 0.0, available_gib=11.0)
    assert monitor.evaluate(store, 0.0) == []
    host(store, 1.0, available_gib=8.0)
    (change,) = monitor.evaluate(store, 1.0)
    # It names the host ledger's line that grew since the monitor first saw the host.
    assert re.fullmatch(
        r"host memory 8\.0% available \(< 10%\): 8\.0 of 100\.0 GiB; other tenants grew the "
        r"most, \+3\.0 GiB since \d\d:\d\d:\d\d \(now 92\.0 GiB\); look at the Host RAM "
        r"panel's ledger", change.alert.message), change.alert.message
    host(store, 2.0, available_gib=11.0)  # inside the 2-point band: still short of memory
    assert monitor.evaluate(store, 10.0) == []
    host(store, 11.0, available_gib=40.0)
    assert monitor.evaluate(store, 11.0) == []
    assert [c.change for c in monitor.evaluate(store, 16.0)] == ["cleared"]


def test_growth_is_counted_on_one_host_never_across_two() -> None:
    """attach reads this machine until it learns the server's node: the node's first
    ledger, not this machine's, is what its lines grew from."""
    store, monitor = RunStore(), AlertMonitor()
    host(store, 0.0, available_gib=50.0)  # this machine: 100 GiB, 50 in use
    assert monitor.evaluate(store, 0.0) == []
    node = dataclasses.replace(store.data("host"), total_bytes=2000 * GIB,
                               available_bytes=100 * GIB, used_bytes=1900 * GIB,
                               free_bytes=100 * GIB, backend="simulated")
    store.add("host", Reading("host", Status.OK, node, at=1.0))
    (change,) = monitor.evaluate(store, 1.0)
    # Not "other tenants grew the most, +1,850.0 GiB": nothing grew on the node.
    assert "; the largest ledger line is other tenants, 1,900.0 GiB; look at" in \
        change.alert.message, change.alert.message
    grown = dataclasses.replace(node, available_bytes=90 * GIB, used_bytes=1910 * GIB,
                                free_bytes=90 * GIB)
    store.add("host", Reading("host", Status.OK, grown, at=2.0))
    monitor.evaluate(store, 2.0)
    (alert,) = store.alerts.values()
    assert "other tenants grew the most, +10.0 GiB since" in alert.message, alert.message


def numa_host(store: RunStore, t: float, node0_used_gib: float) -> None:
    """Two nodes of 100 GiB; node 0's use as given, 40 GiB of it shared memory (a rank's
    Engram tables); node 1 half free. The host as a whole has memory to spare."""
    nodes = (NumaNode(0, 100 * GIB, round((100 - node0_used_gib) * GIB),
                      round(node0_used_gib * GIB), 40 * GIB, 0, 0, 0, server_shared_bytes=40 * GIB),
             NumaNode(1, 100 * GIB, 50 * GIB, 50 * GIB, 0, 0, 0, 0, server_shared_bytes=0))
    used = round((node0_used_gib + 50) * GIB)
    data = HostData(total_bytes=200 * GIB, available_bytes=200 * GIB - used, used_bytes=used,
                    free_bytes=200 * GIB - used, cached_bytes=0, shmem_bytes=40 * GIB,
                    hugepages_total=0, hugepages_free=0, hugepage_size_bytes=2 * MIB,
                    anon_hugepages_bytes=0, swap_total_bytes=0, swap_used_bytes=0,
                    swap_in_bytes=0, swap_out_bytes=0, numa_nodes=nodes)
    store.add("host", Reading("host", Status.OK, data, at=t))


def test_the_host_alert_names_the_largest_processes_outside_the_server() -> None:
    store, monitor = RunStore(), AlertMonitor()
    host(store, 0.0, available_gib=5.0)
    data = store.data("host")
    store.add("host", Reading("host", Status.OK, dataclasses.replace(data, largest_others=(
        ProcessMemory(42, "hog", 80 * GIB), ProcessMemory(7, "python3", GIB),
        ProcessMemory(9, "bash", MIB))), at=1.0))
    (change,) = monitor.evaluate(store, 1.0)
    assert "; largest outside the server: hog (pid 42) 80.0 GiB, python3 (pid 7) 1.0 GiB; " \
           "look at the Host RAM panel's ledger" in change.alert.message


def test_a_full_numa_node_is_named_while_the_host_has_room() -> None:
    store, monitor = RunStore(), AlertMonitor()
    numa_host(store, 0.0, node0_used_gib=90.0)
    assert monitor.evaluate(store, 0.0) == []
    numa_host(store, 1.0, node0_used_gib=97.0)  # 3% of node 0 left; the host has 53 GiB
    (change,) = monitor.evaluate(store, 1.0)
    assert change.alert.id == "numa-available:node0" and change.alert.severity == "warning"
    assert change.alert.message == (
        "NUMA node 0 3.0% available (< 5%): 3.0 of 100.0 GiB; largest: anonymous, all "
        "processes 57.0 GiB, server shared (Engram tables) 40.0 GiB; memory placed there "
        "now spills to another node (its reads cross the socket link); look at the Host RAM "
        "panel's node rows")
    numa_host(store, 2.0, node0_used_gib=80.0)
    assert monitor.evaluate(store, 2.0) == []  # clear for clear_after_s first
    assert [c.change for c in monitor.evaluate(store, 8.0)] == ["cleared"]
    # Switched off by its name, as every alert.
    off = AlertMonitor(Thresholds(disabled=("numa-available",)))
    numa_host(store, 9.0, node0_used_gib=99.0)
    assert off.evaluate(store, 9.0) == []


def test_swap_in_rate_from_the_cumulative_counter() -> None:
    store, monitor = RunStore(), AlertMonitor()
    raised_at = cleared_at = None
    swapped = 0
    for t in range(20):
        if 5 <= t < 10:
            swapped += 3 * MIB  # 3 MiB/s for five seconds
        host(store, float(t), swap_in=500 * MIB + swapped)  # a counter that began long ago
        for c in monitor.evaluate(store, float(t)):
            if c.change == "raised":
                raised_at = t
                assert c.alert.message == ("swap-in 1.2 MiB/s over 5 s (> 1 MiB/s); look at "
                                           "the Host RAM panel's ledger (who grew)")
            else:
                cleared_at = t
    # The rate is the 5 s window's: 3 MiB/s for 2 of 5 s is past 1 MiB/s at t=6. It falls
    # under at t=13 (3 MiB in the window) and must stay under for 5 s.
    assert raised_at == 6
    assert cleared_at == 18
    assert [e[0] for e in texts(store)] == ["warning", "info"]


def test_a_flat_swap_counter_raises_nothing() -> None:
    store, monitor = RunStore(), AlertMonitor()
    for t in range(10):
        host(store, float(t), swap_in=900 * MIB)
        assert monitor.evaluate(store, float(t)) == []


def test_queue_growing_for_longer_than_the_window() -> None:
    store, monitor = RunStore(), AlertMonitor(Thresholds(queue_growth_window_s=30))
    new_run(store)
    raised = []
    for t in range(40):
        server(store, float(t), queue=float(t // 3))  # grows, with flat steps
        raised += [(t, c.alert.id, c.alert.message) for c in monitor.evaluate(store, float(t))]
    # Not before a whole window was watched; it says the queue's size now.
    assert raised == [(30, "queue-growth",
                       f"request queue at 10 (grew from 0 over 30 s without shrinking){NEXT}")]
    # The active alert follows the figure as it goes on growing.
    assert store.alerts["queue-growth"].message == (
        f"request queue at 13 (grew from 3 over 30 s without shrinking){NEXT}")
    # The growth stopped but requests still wait: not cleared, however long.
    for t in range(40, 80):
        server(store, float(t), queue=90.0 if t < 60 else 2.0)
        assert monitor.evaluate(store, float(t)) == []
    assert store.alerts["queue-growth"].message == (
        f"request queue at 2 (not drained back to 0 yet){NEXT}")
    assert not [e for e in texts(store) if e[1].startswith("cleared")]
    server(store, 80.0, queue=0.0)  # drained to where the growth began
    assert monitor.evaluate(store, 80.0) == []
    server(store, 85.0, queue=0.0)
    (change,) = monitor.evaluate(store, 85.0)
    assert change.change == "cleared"
    assert texts(store)[-1] == ("info", f"cleared: {change.alert.message}")


def test_a_queue_that_is_long_but_not_growing_raises_nothing() -> None:
    store, monitor = RunStore(), AlertMonitor()
    new_run(store)
    for t in range(60):
        server(store, float(t), queue=20.0 + (t % 2))  # long, but it shrinks every other second
        assert monitor.evaluate(store, float(t)) == []
    store2, monitor2 = RunStore(), AlertMonitor()
    new_run(store2)
    for t in range(60):
        server(store2, float(t), queue=20.0)  # long and flat
        assert monitor2.evaluate(store2, float(t)) == []


def test_no_huge_pages_from_the_start_up_log() -> None:
    parser = StartupLogParser()
    parser.feed_text(
        "[2026-03-01 09:02:04 TP0] engram host table L1: layout=private, 48384 MiB resident, "
        "48384 MiB in huge pages (100%), pinned\n"
        "[2026-03-01 09:02:04 TP2] WARNING engram.py:412: engram host table L14: "
        "layout=shared, 193536 MiB resident, 0 MiB in huge pages (0%), pinned. No huge pages: "
        "expect ~10x slower lookups (one TLB miss per row); transparent_hugepage/shmem_enabled "
        "is 'never'\n")
    store, monitor = RunStore(), AlertMonitor()
    new_run(store, state="starting", startup=parser.facts())
    (change,) = monitor.evaluate(store, 0.0)
    assert (change.alert.id, change.alert.severity) == ("no-huge-pages", "warning")
    assert change.alert.message == (
        "Engram host table L14 (TP2): No huge pages: expect ~10x slower lookups (one TLB miss "
        "per row); transparent_hugepage/shmem_enabled is 'never'")
    # The next run has huge pages: the alert goes at once.
    new_run(store, state="starting", t=1.0)
    assert [c.change for c in monitor.evaluate(store, 1.0)] == ["cleared"]


def test_server_died_but_not_when_we_stopped_it() -> None:
    store, monitor = RunStore(), AlertMonitor()
    run = new_run(store)
    server(store, 0.0)
    assert monitor.evaluate(store, 0.0) == []
    run.state, run.exit_code = "exited", -9
    (change,) = monitor.evaluate(store, 1.0)
    assert (change.alert.severity, change.alert.message) == (
        "error", "server device exited (exit code -9)")
    # The supervisor's own line says it in the events: no second line, raised or cleared.
    assert not [t for t in texts(store) if "exited" in t[1]]
    run = new_run(store, state="starting", t=2.0)  # restarted: cleared at once
    assert [c.change for c in monitor.evaluate(store, 2.0)] == ["cleared"]
    assert not [t for t in texts(store) if "exited" in t[1]]
    run.state, run.exit_code = "failed", 1
    run.failure = "exited with code 1 during weights: torch.OutOfMemoryError"
    (change,) = monitor.evaluate(store, 3.0)
    assert change.alert.message == (
        "server device failed: exited with code 1 during weights: torch.OutOfMemoryError")
    run = new_run(store, t=4.0)
    run.state, run.exit_code = "stopped", -15  # a stop we asked for
    assert [c.change for c in monitor.evaluate(store, 4.0)] == ["cleared"]
    assert monitor.evaluate(store, 5.0) == [] and store.alerts == {}


def test_a_ready_server_that_stops_answering() -> None:
    store, monitor = RunStore(), AlertMonitor()
    new_run(store, t=0.0)
    server(store, 1.0)
    server_down(store, 2.0)
    assert monitor.evaluate(store, 11.0) == []  # 10 s since the last good answer: not yet
    server_down(store, 12.0)
    (change,) = monitor.evaluate(store, 12.0)
    assert (change.alert.id, change.alert.severity) == ("server-silent", "error")
    assert change.alert.message == (
        "server device gave no good /metrics answer for 11 s (> 10 s) "
        "(no server at http://127.0.0.1:30000 (connection refused))")
    server(store, 13.0)
    assert monitor.evaluate(store, 13.0) == []
    assert [c.change for c in monitor.evaluate(store, 18.0)] == ["cleared"]


def test_a_starting_server_is_never_silent() -> None:
    store, monitor = RunStore(), AlertMonitor()
    new_run(store, state="starting", t=0.0)
    server_down(store, 100.0)
    assert monitor.evaluate(store, 100.0) == []


def test_an_overload_that_comes_and_goes_is_one_kv_alert_held_30_s() -> None:
    """Prometheus' keep_firing_for: the KV pool full, then not, every few seconds for a
    minute (batches finishing and starting) is one alert, not one a batch; it clears 30 s
    after the last time over, said once."""
    store, monitor = RunStore(), AlertMonitor()
    new_run(store)
    changes: list[tuple[float, str]] = []
    for t in range(0, 120):
        over = t < 60 and t % 8 < 3  # over the 90% bound 3 s of every 8, for a minute
        server(store, float(t), usage=0.95 if over else 0.5)
        changes += [(t, c.change) for c in monitor.evaluate(store, float(t))]
    last_over = max(t for t in range(60) if t % 8 < 3)
    assert changes == [(0, "raised"), (last_over + 1 + 30, "cleared")]
    # The config's hold: 0 keeps the old way, a clear after clear_after_s (5 s).
    store, monitor = RunStore(), AlertMonitor(Thresholds(kv_keep_firing_s=0.0))
    new_run(store)
    changes = []
    for t in range(0, 20):
        server(store, float(t), usage=0.95 if t < 3 else 0.5)
        changes += [(t, c.change) for c in monitor.evaluate(store, float(t))]
    assert changes == [(0, "raised"), (8, "cleared")]


def test_a_for_hold_lets_a_brief_spike_page_no_one() -> None:
    store, monitor = RunStore(), AlertMonitor(Thresholds(hbm_for_s=10.0))
    for t in range(0, 5):  # 5 s over: shorter than the hold
        gpus(store, float(t), 96.0)
        assert monitor.evaluate(store, float(t)) == []
    gpus(store, 5.0, 50.0)
    assert monitor.evaluate(store, 5.0) == []
    raised = []
    for t in range(6, 30):  # then over for good: it fires once it has held 10 s
        gpus(store, float(t), 96.0)
        raised += [t for c in monitor.evaluate(store, float(t)) if c.change == "raised"]
    assert raised == [16]



def test_a_full_numa_node_names_the_processes_outside_the_server_that_hold_it() -> None:
    store, monitor = RunStore(), AlertMonitor()
    numa_host(store, 0.0, node0_used_gib=97.0)
    data = store.data("host")
    store.add("host", Reading("host", Status.OK, dataclasses.replace(data, largest_others=(
        ProcessMemory(42, "hog", 60 * GIB, numa_bytes=((0, 50 * GIB), (1, 10 * GIB))),
        ProcessMemory(7, "etl", 30 * GIB, numa_bytes=((1, 30 * GIB),)),
        ProcessMemory(9, "bash", MIB, numa_bytes=((0, MIB),)))), at=1.0))
    (change,) = monitor.evaluate(store, 1.0)
    # Node 0's holders only, a GiB or more: the hog's 50 GiB there, not etl on node 1.
    assert "; outside the server there: hog (pid 42) 50.0 GiB; memory placed there" in \
        change.alert.message
    assert "etl" not in change.alert.message and "bash" not in change.alert.message
