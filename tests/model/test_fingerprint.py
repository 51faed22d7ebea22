"""A run's fingerprint says a parallel size the log only bounds from below (its highest
rank tag plus one) as "≥N", in summary.md's lines and in `diff`'s changes; a size the server
states stands over the log's bound."""

from __future__ import annotations

import dataclasses

from collectors.readings import Reading, ServerData, Status
from collectors.startup_facts import StartupFacts
from engram_top.live.run_facts import take_fingerprint
from engram_top.model.fingerprint import Fingerprint, changes, fingerprint_lines
from engram_top.model.store import RunFacts, RunStore
from scenarios import engines

BOUND = Fingerprint(engine="vllm 0.11.0", parallel={"tp_size": 7, "pp_size": 2},
                    parallel_at_least=("tp_size",))


def test_a_lower_bound_reads_at_least_in_the_summary_lines() -> None:
    assert "TP≥7, PP2" in fingerprint_lines(BOUND)[0]
    stated = dataclasses.replace(BOUND, parallel_at_least=())
    assert "TP7, PP2" in fingerprint_lines(stated)[0]


def test_a_bound_against_a_stated_size_is_a_change_even_where_the_figures_agree() -> None:
    stated = dataclasses.replace(BOUND, parallel={"tp_size": 8, "pp_size": 2},
                                 parallel_at_least=())
    assert [(c.what, c.before, c.after) for c in changes(BOUND, stated)] == [
        ("parallel.tp_size", "≥7", "8")]
    same_figure = dataclasses.replace(BOUND, parallel_at_least=())
    assert [(c.what, c.before, c.after) for c in changes(BOUND, same_figure)] == [
        ("parallel.tp_size", "≥7", "7")]
    assert changes(BOUND, BOUND) == []


def _facts(store: RunStore) -> RunFacts:
    facts = RunFacts(scenario="attached", placement="device", node="n", time_scale=1.0,
                     launched_wall=1.7e9, launched_at=0.0,
                     startup=StartupFacts(parallel={"tp_size": 7},
                                          derived={"parallel.tp_size": "derived, at least"}))
    store.set_run(facts)
    return facts


def test_the_run_fingerprint_keeps_the_log_bound_until_the_server_states_its_size() -> None:
    store = RunStore()
    facts = _facts(store)
    engine = engines.get("vllm")
    take_fingerprint(store, facts, engine, None, {}, "madvise")
    assert facts.fingerprint is not None
    assert facts.fingerprint.parallel == {"tp_size": 7}
    assert facts.fingerprint.parallel_at_least == ("tp_size",)
    stated = ServerData(url="u", healthy=True, tp_size=8)
    store.add("server", Reading("vllm", Status.OK, stated, at=1.0))
    take_fingerprint(store, facts, engine, None, {}, "madvise")
    assert facts.fingerprint.parallel == {"tp_size": 8}
    assert not facts.fingerprint.parallel_at_least
