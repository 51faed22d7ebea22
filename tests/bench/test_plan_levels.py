"""A plan's levels are the ones its file says: a rate sweep's live loads are open-loop levels
at those rates, a concurrency sweep's closed-loop levels at those concurrencies, and a
fixed plan's levels as written (a sweep once read every kind as concurrency 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_top.bench.plan import load_plan
from scenarios.workload import Level

ROOT = Path(__file__).resolve().parents[2]
SWEEP = """
[bench]
scenarios_file = "{demo}"
scenarios = ["device"]
baseline = "device"

[sweep]
kind = "{kind}"
loads = [1, 2, 4, 8]
live_up_to = 2
requests = 3
modelled_requests = 50
"""


@pytest.mark.parametrize(("kind", "want"), [
    ("rate", (Level(3, rate=1.0), Level(3, rate=2.0))),
    ("concurrency", (Level(3, concurrency=1), Level(3, concurrency=2))),
])
def test_a_sweeps_live_levels_keep_its_kind(tmp_path: Path, kind: str,
                                            want: tuple[Level, ...]) -> None:
    plan = tmp_path / "sweep.toml"
    plan.write_text(SWEEP.format(demo=ROOT / "scenarios" / "demo.toml", kind=kind))
    loaded = load_plan(plan)
    assert loaded.sweep is not None and loaded.sweep.kind == kind
    assert loaded.sweep.requests == 3 and loaded.sweep.modelled_requests == 50
    assert loaded.workload.levels == want


def test_the_shipped_sweep_runs_its_live_loads_as_rates() -> None:
    plan = load_plan(ROOT / "scenarios" / "demo-sweep.toml")
    assert plan.sweep is not None and plan.sweep.kind == "rate"
    assert [(lv.rate, lv.concurrency, lv.requests) for lv in plan.workload.levels] == [
        (0.01, None, 8), (0.02, None, 8)]
