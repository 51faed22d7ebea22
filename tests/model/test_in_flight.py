"""Whose requests a stop would cut off (model.in_flight), over a RunStore fed readings as the
collectors make them: a server's own warm-up request is nobody's, another client's is."""

from __future__ import annotations

from collectors.readings import Reading, ServerData, Status
from engram_top.model import in_flight
from engram_top.model.store import RunFacts, RunStore

URL = "http://127.0.0.1:30000"


def owned_run(store: RunStore, ready_at: float | None) -> RunFacts:
    facts = RunFacts(scenario="device", placement="device", node="sim", time_scale=1.0,
                     launched_wall=1.7e9, launched_at=0.0,
                     state="ready" if ready_at is not None else "starting",
                     ready_at=ready_at, url=URL)
    store.set_run(facts)
    return facts


def page(store: RunStore, at: float, running: int, queued: float = 0.0) -> None:
    data = ServerData(url=URL, healthy=True, num_running_reqs=running, num_queue_reqs=queued)
    store.add("server", Reading("sglang", Status.OK, data, at=at))


def test_the_warm_up_request_read_before_ready_never_asks() -> None:
    store = RunStore()
    owned_run(store, ready_at=None)
    page(store, 1.0, running=1)  # still starting: its warm-up /generate
    assert in_flight.why_ask(store) is None
    owned_run(store, ready_at=2.0)
    assert in_flight.why_ask(store) is None  # the newest page is still the warm-up's
    page(store, 2.5, running=1, queued=2.0)  # read after ready: someone else's
    assert in_flight.others_in_flight(store) == 3
    assert in_flight.why_ask(store) == "3 requests from other clients are running or queued"
    page(store, 3.0, running=0)
    assert in_flight.why_ask(store) is None
