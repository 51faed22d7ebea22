"""A run's start-up facts and Engram setting are typed in the store (StartupFacts,
EngramSetting) and decoded only where a recording is read: a recording made before they were
typed, which kept them as plain data (its tuples and integer keys as "$tuple" and "$items",
keys the parser has since dropped, the dict's own current_phase and phase_durations, an empty
dict for "no setting yet"), replays into the same types."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from collectors.engram_setting import EngramSetting
from collectors.sglang.startup_log import StartupLogParser
from collectors.startup_facts import StartupFacts
from engram_top.model.store import RunFacts
from engram_top.record.file_format import (
    decode_facts_fields,
    encode_facts,
    loose,
    update_facts,
)

LOG = (
    "[2026-11-29 10:00:00 TP0] Load weight begin. avail mem=178.50 GB\n"
    "[2026-11-29 10:00:09 TP0] Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16"
    ", avail mem=59.46 GB, mem usage=119.04 GB.\n"
    "[2026-11-29 10:00:10 TP0] KV Cache is allocated. #tokens: 11840000, KV size: 8.00 GB\n"
    "[2026-11-29 10:00:11 TP0] engram host table L14: layout=shared, 193536 MiB resident, "
    "193536 MiB in huge pages (100%), pinned\n"
)


def parsed() -> StartupFacts:
    parser = StartupLogParser()
    parser.feed_text(LOG)
    return parser.facts()


def plain_then(facts: StartupFacts) -> dict[str, Any]:
    """The start-up facts as a recording made before they were typed wrote them: the
    parser's to_dict() as loose plain data (what dict[str, Any] was encoded as)."""
    return json.loads(json.dumps(loose(facts.to_dict())))


def test_the_typed_facts_round_trip() -> None:
    facts = RunFacts("host", "host", "n", 1.0, 1.7e9, 1000.0, startup=parsed(),
                     engram=EngramSetting("host", "shared", True, "log", "off"))
    data = json.loads(json.dumps(encode_facts(facts, 1000.0)))
    assert data["startup"]["ranks"]["0"]["kv_tokens"] == 11_840_000  # plain JSON, typed
    assert data["engram"]["reasons"] == []
    back = RunFacts(**decode_facts_fields(data, 1000.0, "run"))
    assert back == facts


def test_an_older_recording_s_plain_facts_are_read_into_the_types() -> None:
    facts = parsed()
    old = plain_then(facts)
    assert "$items" in json.dumps(old["ranks"]) and "current_phase" in old
    old["ranks"]["$items"][0][1]["tp_rank"] = 0  # a field the parser has since dropped
    data = {**encode_facts(RunFacts("host", "host", "n", 1.0, 1.7e9, 1000.0), 1000.0),
            "startup": old, "engram": {}}
    run = RunFacts(**decode_facts_fields(data, 1000.0, "run"))
    assert run.startup == facts and run.engram is None
    assert run.startup.ranks[0].weights_gb == 119.04
    assert run.startup.engram_tables[0].resident_mib == 193536.0


def test_an_older_recording_s_patches_apply_to_the_types() -> None:
    """Each change an older recording wrote of its start-up facts, as a patch of their plain
    data: applied to the typed facts, key by key."""
    before = parsed()
    later = dataclasses.replace(before, last_line_at=123.0, ready=True)
    old, new = plain_then(before), plain_then(later)
    patch = {"$patch": {k: v for k, v in new.items() if old.get(k) != v}, "$drop": []}
    assert set(patch["$patch"]) >= {"last_line_at", "ready"}
    run = RunFacts("host", "host", "n", 1.0, 1.7e9, 1000.0, startup=before)
    update_facts(run, decode_facts_fields({"startup": patch}, 1000.0, "run"))
    assert run.startup == later


@pytest.mark.parametrize(("where", "value", "says"), [
    (("ranks", "0"), 5, "run.startup.ranks['0']: expected an object, got int"),
    (("last_line_at",), float("inf"), "run.startup.last_line_at: inf is not a finite number"),
    (("engram_tables",), [{"label": "L1"}], "run.startup.engram_tables[0]: missing fields"),
])
def test_damaged_facts_are_named(where: tuple[str, ...], value: Any, says: str) -> None:
    data = {"startup": json.loads(json.dumps(encode_facts(
        RunFacts("host", "host", "n", 1.0, 1.7e9, 1000.0, startup=parsed()), 1000.0)["startup"]))}
    target = data["startup"]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(ValueError, match=r"^" + says.replace("[", r"\[").replace("]", r"\]")):
        decode_facts_fields(data, 1000.0, "run")


def test_an_older_recording_s_server_args_and_not_reported_become_fields() -> None:
    """ServerData kept the server args /server_info gave and the figures an engine does
    not report in its extra dict: a recording made then reads them into their fields."""
    from collectors.readings import Reading, ServerData, Status
    from engram_top.record.file_format import decode_reading, encode_reading

    now = Reading("sglang", Status.OK, ServerData(
        "u", True, server_args={"tp_size": 4}, not_reported={"weight_gb": "no gauge"},
        extra={"cache_config": {"block_size": "128"}}), at=5.0, wall=1.7e9)
    data = json.loads(json.dumps(encode_reading(now)))
    assert decode_reading(data) == now
    for key in ("server_args", "not_reported"):
        data["data"]["extra"][key] = data["data"].pop(key)  # as it was written then
    assert decode_reading(data) == now


def test_an_older_recording_s_simulated_block_becomes_its_field() -> None:
    from collectors.readings import Reading, ServerData, Status
    from engram_top.record.file_format import decode_reading, encode_reading

    now = Reading("sglang", Status.OK, ServerData(
        "u", True, simulated={"placement": "host", "env": {"X": "1"}}), at=5.0, wall=1.7e9)
    data = json.loads(json.dumps(encode_reading(now)))
    data["data"]["extra"]["simulated"] = data["data"].pop("simulated")  # as it was written
    assert decode_reading(data) == now
