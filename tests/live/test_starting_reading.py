"""A server the session started is read before its port opens too: that reading says what
the start-up waits for, and is named as the server's engine's collector names every other
reading of it ("vllm http://..." for a vLLM server, never "sglang ..."), so a recording or
a snapshot shows one source, not two."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from helpers import free_port

from collectors.readings import Status
from engram_top.live.run_facts import until_port
from scenarios import scenario_file
from scenarios.server_run import Run

SHIPPED = Path(__file__).resolve().parents[2] / "scenarios"
# (file, scenario, the word its engine's readings are named by)
CASES = [("dsv41-flash-4xb200.toml", "device", "sglang"),
         ("dsv41-flash-4xb200-vllm.toml", None, "vllm"),
         ("demo-mixed.toml", "simulated", "sglang"),
         ("demo-mixed.toml", "simulated-vllm", "vllm")]


def scenario_of(file: str, kind_or_name: str | None) -> scenario_file.Scenario:
    """A shipped scenario of that kind (or name), on a port nothing listens on."""
    sf = scenario_file.load(SHIPPED / file)
    found = [sc for sc in sf.scenarios.values()
             if kind_or_name is None or kind_or_name in (sc.name, sc.engine.kind)]
    assert found, f"{file} has no {kind_or_name} scenario"
    return dataclasses.replace(found[0], port=free_port())


@pytest.mark.parametrize(("file", "which", "word"), CASES)
async def test_a_starting_server_is_named_as_its_engines_collector_names_it(
        tmp_path: Path, file: str, which: str | None, word: str) -> None:
    sc = scenario_of(file, which)
    run = Run(scenario=sc, proc=None, log_path=tmp_path / "server.log",  # type: ignore[arg-type]
              launched_at=time.monotonic(), launched_wall=time.time())
    collector = sc.engine.collector(sc.url)
    try:
        poll = until_port(run, collector)
        run.phase = "weights"
        waiting = await poll()
        assert waiting.status is Status.STARTING
        assert waiting.source == f"{word} {sc.url}"
        assert waiting.message == "waiting for the server's port (loading weights)"
        # Its port open: the collector's own reading (refused: nothing listens), by the
        # same name.
        run.http_up = True
        asked = await poll()
        assert asked.status is not Status.STARTING and asked.source == waiting.source
    finally:
        await collector.close()
