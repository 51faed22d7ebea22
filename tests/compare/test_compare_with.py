"""`demo --compare-with FILE... --no-load`, then c: each file's runs are columns of their own,
named with their file, beside the live run's (which keeps its own n), and the verdict names
them. Over a real simulated server (a real process, real HTTP on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import screen_text, until

from engram_top.app.compare_screen import CompareScreen
from engram_top.cli import commands
from engram_top.cli.dashboards import dashboard_app
from engram_top.compare.run_result import RunResult
from engram_top.live.demo import DemoOptions, DemoSession

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


def bench_report(path: Path, ttft_s: float) -> Path:
    """A bench's report.json as `engram-top bench` writes its runs: two trials each of the
    device and host-prefetch placements, named as the live scenarios are."""
    results = [RunResult(scenario=p, placement=p, source="bench", trial=t, gpus=4,
                         kv_tokens=kv, ttft_mean_s=ttft_s * (1.0 + 0.01 * t) * factor,
                         output_tok_s=200.0).to_dict()
               for p, kv, factor in (("device", 11_840_000, 1.0),
                                     ("host-prefetch", 42_700_288, 1.2))
               for t in range(2)]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"results": results}))
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("files", [1, 2])
async def test_each_file_is_its_own_columns_beside_the_live_run(tmp_path: Path,
                                                               files: int) -> None:
    reports = [bench_report(tmp_path / name / "report.json", ttft)
               for name, ttft in (("A", 0.35), ("B", 0.50))[:files]]
    args = commands.build_parser().parse_args(
        ["demo", "--no-load", "--compare-with", *map(str, reports)])
    session = DemoSession(DemoOptions(placement="device", time_scale=0.02, load=None,
                                      node_dir=tmp_path / "node", run_dir=tmp_path / "runs",
                                      poll_interval=0.5))
    app = dashboard_app(session, args)
    assert app is not None
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: session.store.run is not None
                    and session.store.run.results.kv_tokens is not None, 60,
                    "the live device run's figures")
        # The strip, once the live run and the files' scenarios have figures.
        await until(pilot, lambda: "verdict vs device" in screen_text(app), 10, "the strip")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), 10, "the comparison")
        await until(pilot, lambda: "Verdict against device" in screen_text(app), 10,
                    "the verdict")
        text = screen_text(app)
        # The live device run is one trial of its own, not joined by the files' two each.
        assert "▶ device" in text and "baseline: device" in text
        assert "n=1 · baseline" in text  # the first row: each column's runs
        c = app.screen._comparison()
        assert c is not None
        assert c.trials == {"device": 1, **{f"{p} ({name}/report.json)": 2
                                            for name in ("A", "B")[:files]
                                            for p in ("device", "host-prefetch")}}
        for name in ("A", "B")[:files]:
            # The file's host-prefetch holds the seed's pool: 3.6x its own file's device's
            # (never set against the live run: another workload), over its two rounds.
            assert f"host-prefetch ({name}/report.json) +260.6% [+260.6%, +260.6%] ▲" in text
            assert c.against[f"host-prefetch ({name}/report.json)"] == \
                f"device ({name}/report.json)"
        assert "n=2 · vs device" in text and "n=2 · its file's baseline" in text
        assert ("B/report.json" in text) == (files == 2)
        await pilot.press("escape")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 30, "the app to quit")
