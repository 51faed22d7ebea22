"""Driving the dashboard in the test's process (Textual's run_test and Pilot): the fault
matrix's terminal size and its files. The waits and the screen's text are helpers.py's."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

SIZE = (100, 30)


def strict_json(path: Path) -> Any:
    """A JSON file as any JSON reader takes it: no NaN, no Infinity."""
    def refuse(word: str) -> None:
        raise AssertionError(f"{path}: {word} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def make_recording(path: Path, scenarios: tuple[str, ...] = ("device", "host")) -> Path:
    """A small, valid recording without a node: one ready run with figures per scenario,
    and one reading, as a dashboard session writes them."""
    from collectors.readings import Reading, Status
    from engram_top.model.figures import RunFigures
    from engram_top.model.store import RunFacts, RunStore
    from engram_top.record.recorder import Recorder

    store = RunStore()
    store.node = "test-node"
    recorder = Recorder(store, path).start()
    now, wall = time.monotonic(), time.time()
    for i, name in enumerate(scenarios):
        facts = RunFacts(scenario=name, placement=name, node="test-node", time_scale=1.0,
                         launched_wall=wall, launched_at=now, state="ready",
                         ready_at=now + 100 + 50 * i,
                         results=RunFigures(gpus=4, weights_gb=119.043 - 46.842 * i,
                                            kv_tokens=11_840_000 * (1 + 2 * i),
                                            ready_s=100.0 + 50 * i,
                                            ttft_mean_s=0.350 + 0.050 * i,
                                            itl_mean_s=0.026 + 0.002 * i,
                                            output_tok_s=224.0 - 30 * i))
        store.set_run(facts)
    store.add("server", Reading("sglang http://127.0.0.1:1", Status.ERROR, None, "refused"))
    recorder.close()
    return path
