"""The restart-loop alert over the deaths the session classified: an attached server's
earlier deaths and its latest, or the runs of one scenario, counted within the window on
the readings' wall clock; said with the deaths' classes and the last one's next action;
cleared once the oldest falls out of the window. The live path (a server killed and
restarted on its URL) is tests/cli/test_restarts.py."""

from __future__ import annotations

from collectors.readings import Reading, ServerData, Status
from engram_top.alerts.monitor import AlertMonitor
from engram_top.alerts.thresholds import Thresholds
from engram_top.model.death import TITLES, Death, DeathKind
from engram_top.model.store import RunFacts, RunStore

URL = "http://127.0.0.1:30000"
WALL = 1_795_000_000.0  # the readings' wall clock at monotonic 0


def death(kind: DeathKind, ago_s: float, scenario: str = URL) -> Death:
    return Death(scenario, kind, TITLES[kind], ("evidence",), f"the action for {kind}",
                 at=WALL - ago_s)


def store_at(facts: RunFacts) -> RunStore:
    store = RunStore()
    store.set_run(facts)
    # The readings' pair of clocks: monotonic t is wall WALL + t.
    store.add("server", Reading("sglang", Status.OK, ServerData(url=URL, healthy=True),
                                at=0.0, wall=WALL))
    return store


def attached(*deaths: Death) -> RunFacts:
    *earlier, latest = deaths
    return RunFacts(scenario=URL, placement="?", node="n", time_scale=1.0,
                    launched_wall=WALL, launched_at=0.0, state="attached", url=URL,
                    owned=False, death=latest, earlier_deaths=tuple(earlier))


def test_three_deaths_within_ten_minutes_raise_it_with_their_classes_and_the_last_cause() -> None:
    store = store_at(attached(death(DeathKind.HOST_OOM_KILL, 420), death(DeathKind.SHM_FULL, 200),
                              death(DeathKind.SHM_FULL, 20)))
    (raised,) = [c for c in AlertMonitor(Thresholds()).evaluate(store, 0.0)
                 if c.alert.id == "restart-loop"]
    assert (raised.change, raised.alert.severity) == ("raised", "error")
    assert raised.alert.message == (
        f"{URL} died 3 times in 7 min (>= 3 in 10 min: shm-full ×2, host-oom-kill); last: "
        "/dev/shm full; each restart meets the same end: the action for shm-full")


def test_two_deaths_are_no_loop_unless_the_config_says_two_is() -> None:
    store = store_at(attached(death(DeathKind.SIGNAL, 100), death(DeathKind.SIGNAL, 10)))
    assert not [c for c in AlertMonitor(Thresholds()).evaluate(store, 0.0)
                if c.alert.id == "restart-loop"]
    two = AlertMonitor(Thresholds(restart_loop_count=2))
    assert [c.alert.id for c in two.evaluate(store, 0.0)] == ["restart-loop"]


def test_it_clears_once_the_oldest_death_leaves_the_window() -> None:
    store = store_at(attached(death(DeathKind.CRASH, 590), death(DeathKind.CRASH, 300),
                              death(DeathKind.CRASH, 5)))
    monitor = AlertMonitor(Thresholds())
    assert [c.change for c in monitor.evaluate(store, 0.0)] == ["raised"]
    # Eleven seconds on (the readings' clock), the first death is 601 s old: two are left.
    assert [c.change for c in monitor.evaluate(store, 11.0)
            if c.alert.id == "restart-loop"] == ["cleared"]


def test_runs_of_one_scenario_count_together_and_another_scenarios_do_not() -> None:
    store = RunStore()
    for i, kind in enumerate((DeathKind.HBM_OOM_STARTUP, DeathKind.HBM_OOM_STARTUP)):
        store.set_run(RunFacts(scenario="device", placement="device", node="n",
                               time_scale=1.0, launched_wall=WALL, launched_at=float(i),
                               state="exited", death=death(kind, 300 - 100 * i, "device")))
    store.set_run(RunFacts(scenario="host", placement="host", node="n", time_scale=1.0,
                           launched_wall=WALL, launched_at=5.0, state="exited",
                           death=death(DeathKind.SIGNAL, 50, "host")))
    store.add("server", Reading("sglang", Status.OK, ServerData(url=URL, healthy=True),
                                at=0.0, wall=WALL))
    monitor = AlertMonitor(Thresholds())
    assert "restart-loop" not in {c.alert.id for c in monitor.evaluate(store, 0.0)}
    store.set_run(RunFacts(scenario="device", placement="device", node="n", time_scale=1.0,
                           launched_wall=WALL, launched_at=9.0, state="exited",
                           death=death(DeathKind.HBM_OOM_STARTUP, 30, "device")))
    # A run of ours starting drops the previous server's readings: the clocks' pair again.
    store.add("server", Reading("sglang", Status.OK, ServerData(url=URL, healthy=True),
                                at=0.0, wall=WALL))
    loop = [c.alert for c in monitor.evaluate(store, 0.0) if c.alert.id == "restart-loop"]
    assert loop and loop[0].message.startswith(
        "device died 3 times in 5 min (>= 3 in 10 min: hbm-oom-startup ×3)")


def test_the_agents_exposition_keeps_each_kinds_latest_death_through_restarts() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from engram_top.export import prometheus_text
    from engram_top.export.prometheus_text import AgentHealth, render

    facts = attached(death(DeathKind.HOST_OOM_KILL, 420), death(DeathKind.SIGNAL, 200),
                     death(DeathKind.HOST_OOM_KILL, 20))
    # It came back after the last one: every death is an earlier one now.
    facts.earlier_deaths, facts.death = (*facts.earlier_deaths, facts.death), None
    store = store_at(facts)
    health = AgentHealth(recording=True, recording_bytes=0, started_wall=WALL)
    fams = {f.name: f for f in text_string_to_metric_families(render(
        prometheus_text.node_families(store, health, 0.0)))}
    died = {s.labels["kind"]: s.value
            for s in fams["engram_top_server_death_timestamp_seconds"].samples}
    assert died == {"host-oom-kill": WALL - 20, "signal": WALL - 200}
