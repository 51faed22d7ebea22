"""Where the Engram tables are and whether the KV prefetch engages: read from the
environment, the argv or server args, the start-up log and the GPU (scenarios.engines.engram),
and which runs the seed's figures are a reference for."""

from __future__ import annotations

import dataclasses

import pytest

from collectors.engram_setting import EngramSetting
from collectors.startup_facts import EngramTable, RankFacts, StartupFacts
from engram_top.compare.runs import serves
from engram_top.model.store import RunFacts
from scenarios.engines import engram
from scenarios.engines.engram import argv_args, infer

HOST_ENV = {engram.HOST_TABLE: "1", engram.LAYOUT: "shared", engram.PIN: "1"}
PREFETCH_ENV = {**HOST_ENV, engram.KV_PREFETCH: "1"}
GOOD_ARGS = {"enable_dp_attention": False, "pp_size": 1, "attention_backend": "dsv4",
             "speculative_algorithm": None}
B200 = "NVIDIA B200"
NOTHING = StartupFacts()  # a log that has said nothing yet


def test_the_environment_names_the_placement() -> None:
    assert infer({}, {}, NOTHING).placement is None
    assert infer({engram.HOST_TABLE: "0"}, {}, NOTHING).placement == "device"
    host = infer(HOST_ENV, {}, NOTHING)
    assert (host.placement, host.layout, host.pinned, host.source) == \
        ("host", "shared", True, "environment")
    assert host.verdict == "prefetch: off"
    assert infer(PREFETCH_ENV, GOOD_ARGS, NOTHING, gpu_name=B200).placement == "host-prefetch"


def test_prefetch_engages_when_every_condition_holds() -> None:
    s = infer(PREFETCH_ENV, GOOD_ARGS, NOTHING, gpu_name=B200)
    assert s.prefetch == "engaged" and s.reasons == ()
    # The automatic backend is the DSV4 one for these models.
    auto = {**GOOD_ARGS, "attention_backend": None}
    assert infer(PREFETCH_ENV, auto, NOTHING, gpu_name="NVIDIA GB300").prefetch == "engaged"


@pytest.mark.parametrize(("env", "args", "gpu", "why"), [
    ({**PREFETCH_ENV, engram.LAYOUT: "private"}, GOOD_ARGS, B200, "layout is private"),
    (PREFETCH_ENV, {**GOOD_ARGS, "enable_dp_attention": True}, B200, "DP attention is on"),
    (PREFETCH_ENV, {**GOOD_ARGS, "pp_size": 2}, B200, "pipeline parallel size is 2"),
    (PREFETCH_ENV, {**GOOD_ARGS, "attention_backend": "fa3"}, B200, "backend fa3"),
    (PREFETCH_ENV, GOOD_ARGS, "NVIDIA H200", "not a Blackwell GPU"),
    (PREFETCH_ENV, {**GOOD_ARGS, "speculative_algorithm": "EAGLE"}, B200,
     "speculative decoding (EAGLE)"),
])
def test_each_failing_condition_is_named(env: dict[str, str], args: dict[str, object],
                                         gpu: str, why: str) -> None:
    s = infer(env, args, NOTHING, gpu_name=gpu)
    assert s.prefetch.startswith("would not engage: ")
    assert why in s.prefetch and len(s.reasons) == 1


def test_two_failing_conditions_are_both_named() -> None:
    args = {**GOOD_ARGS, "enable_dp_attention": "True", "pp_size": "4"}
    s = infer(PREFETCH_ENV, args, NOTHING, gpu_name=B200)
    assert s.reasons == ("DP attention is on", "pipeline parallel size is 4, not 1")


def test_unknown_conditions_are_not_a_verdict() -> None:
    s = infer(PREFETCH_ENV, {}, NOTHING)
    assert s.prefetch == "asked, not yet confirmed: the GPU, the server args unknown"


def test_engram_config_of_later_builds() -> None:
    cpu = argv_args(["--engram-config", '{"placement": "cpu", "replication": "per_node"}'])
    s = infer({}, cpu, NOTHING)
    assert (s.placement, s.layout, s.source) == ("host", "shared", "engram-config")
    private = infer({}, {"engram_config": {"placement": "cpu"}}, NOTHING)
    assert private.layout == "private"
    assert infer({}, {"engram_config": '{"placement": "gpu"}'}, NOTHING).placement == "device"
    assert infer({}, {"engram_config": "not json"}, NOTHING).placement is None


def test_the_log_says_where_the_rows_are() -> None:
    tables = StartupFacts(engram_tables=(EngramTable(
        label="L1", layout="private", pinned=False, resident_mib=1.0, huge_mib=1.0,
        huge_pct=100.0),))
    s = infer({}, {}, tables)
    assert (s.placement, s.layout, s.pinned, s.source) == ("host", "private", False, "log")
    loaded = StartupFacts(ranks={0: RankFacts(rank=0, weights_type="DeepseekV4ForCausalLM",
                                              weights_gb=119.04)})
    assert infer({}, {}, loaded).placement == "device"  # loaded, and no host table
    other = StartupFacts(ranks={0: RankFacts(rank=0, weights_type="LlamaForCausalLM",
                                             weights_gb=1.0)})
    assert infer({}, {}, other).placement is None


def test_a_scenario_placement_fills_what_nothing_else_says() -> None:
    s = infer({}, GOOD_ARGS, NOTHING, placement="host-prefetch", gpu_name=B200)
    assert (s.placement, s.source, s.prefetch) == ("host-prefetch", "scenario", "engaged")
    assert infer({}, {}, NOTHING, placement="device").placement == "device"


def test_argv_args_read_flags_as_argparse_does() -> None:
    args = argv_args(["--tp-size", "8", "--pp-size=2", "--enable-dp-attention",
                      "--attention-backend", "dsv4", "--speculative-algorithm", "EAGLE",
                      "--tp", "4", "--model-path"])
    assert args == {"tp_size": "4", "pp_size": "2", "enable_dp_attention": True,
                    "attention_backend": "dsv4", "speculative_algorithm": "EAGLE"}


def _run(model: str | None) -> RunFacts:
    return RunFacts(scenario="s", placement="device", node="n", time_scale=1.0,
                    launched_wall=0.0, launched_at=0.0, model=model)


def test_which_runs_the_seed_is_a_reference_for() -> None:
    seed = "deepseek-ai/DeepSeek-V4.1-Flash"
    assert serves(_run(seed), seed)
    assert serves(_run("/models/deepseek-v41-flash/"), seed)
    assert serves(_run(None), seed)  # nothing says otherwise yet
    assert not serves(_run("scripts/tiny-llama"), seed)
    assert not serves(_run("deepseek-ai/DeepSeek-V4-Flash"), seed)


def test_the_engram_row_rates_lookups_and_says_nothing_flows_once_lines_stop() -> None:
    from engram_top.model.facts import engram_facts
    from engram_top.model.store import RunStore

    store = RunStore()
    run = RunFacts(scenario="p", placement="host-prefetch", node="n", time_scale=1.0,
                   launched_wall=0.0, launched_at=0.0, state="ready")
    run.engram = EngramSetting(placement="host-prefetch", layout="shared", pinned=None,
                               source="environment", prefetch="engaged")
    layers = {1: {"layer": 1, "lookups": 6000, "hit_rate_pct": 10.0, "interval_s": 2.0,
                  "at": 100.0},
              14: {"layer": 14, "lookups": 2000, "hit_rate_pct": 30.0, "interval_s": 2.0,
                   "at": 100.0}}
    run.startup = StartupFacts(engram_layers=layers, last_line_at=101.0)
    store.set_run(run)
    view = engram_facts(store)
    assert view is not None
    assert view.lookups_per_s == 4000.0  # 6000 / 2 + 2000 / 2
    assert view.hit_rate_pct == 15.0  # weighted by lookups
    # The log went on, the statistics did not.
    run.startup = dataclasses.replace(run.startup, last_line_at=110.0)
    view = engram_facts(store)
    assert view is not None and view.lookups_per_s == 0.0
