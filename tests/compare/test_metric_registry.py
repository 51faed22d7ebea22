"""engram_top.compare.measures: one registration puts a metric in every table (the `compare`
command, the compare screen, the bench report, a snapshot's two files); a snapshot folder
holds one comparison; RunFigures keeps its JSON form, so older recordings still read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from scene import filled_store

from engram_top.app.compare_screen import comparison_table
from engram_top.bench import runner
from engram_top.bench.plan import Plan
from engram_top.cli import commands
from engram_top.compare.comparison import compare, to_json
from engram_top.compare.markdown import to_markdown
from engram_top.compare.measures import METRICS, Metric, Registry, fixed
from engram_top.compare.run_result import RunResult
from engram_top.export.snapshot import write_folder
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts
from engram_top.record.file_format import decode_facts_fields, encode_facts
from engram_top.seed import reference
from scenarios.workload import Level, WorkloadSpec

DATA = Path(__file__).parents[1] / "data" / "bench_serving"
LABEL = "output throughput per GPU"


def per_gpu(r: RunResult) -> float | None:
    return None if r.output_tok_s is None or not r.gpus else r.output_tok_s / r.gpus


PER_GPU = Metric("output_tok_s_per_gpu", LABEL, "tok/s/GPU", "higher", extract=per_gpu,
                 fmt=fixed(1), panel="latency")


@pytest.fixture
def registered() -> Iterator[Metric]:
    """The extra metric in the default registry for one test: its one registration."""
    METRICS.add(PER_GPU)
    try:
        yield PER_GPU
    finally:
        METRICS.remove(PER_GPU.key)


def trial(scenario: str, gpus: int, tok_s: float, ttft_s: float) -> RunResult:
    return RunResult(scenario=scenario, placement=scenario, source="bench", trial=0,
                     gpus=gpus, output_tok_s=tok_s, ttft_mean_s=ttft_s)


TRIALS = [trial("device", 4, 2400.0, 0.410), trial("host-prefetch", 4, 2054.0, 0.474)]


def md_cells(markdown: str, label: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in\n{markdown}")


def row_json(comparison: dict, key: str) -> dict:
    return next(r for r in comparison["rows"] if r["key"] == key)


def test_a_registered_metric_is_a_row_of_the_comparison(registered: Metric) -> None:
    c = compare(TRIALS, "device")
    assert c.rows[-1].metric is registered  # after the built-in rows, in registration order
    assert md_cells(to_markdown(c), LABEL) == [
        LABEL, "tok/s/GPU", "higher", "600.0", "513.5 (Δ -14.42%)"]
    row = row_json(to_json(c), registered.key)
    assert (row["label"], row["unit"], row["better"], row["delta"]) == (
        LABEL, "tok/s/GPU", "higher", "relative")
    assert row["cells"]["host-prefetch"]["mean"] == pytest.approx(513.5)
    assert row["cells"]["host-prefetch"]["delta"] == pytest.approx(2054 / 2400 - 1)


def test_the_compare_command_shows_it(registered: Metric, capsys) -> None:  # type: ignore[no-untyped-def]
    files = [str(DATA / "device.jsonl"), str(DATA / "host-prefetch.jsonl")]
    assert commands.main(["compare", *files, "--baseline", "device", "--gpus", "4"]) == 0
    cells = md_cells(capsys.readouterr().out, LABEL)
    assert cells[3] == "600.0"  # bench_serving's mean of 2400 tok/s over 4 GPUs
    assert commands.main(["compare", *files, "--baseline", "device", "--gpus", "4", "--json"]) == 0
    row = row_json(json.loads(capsys.readouterr().out), registered.key)
    assert row["cells"]["device"]["mean"] == pytest.approx(600.0)


def test_the_compare_screen_shows_it(registered: Metric) -> None:
    store = filled_store()
    console = Console(width=200, record=True)
    console.print(comparison_table(compare(TRIALS, "device"), store))
    lines = console.export_text().splitlines()
    at = next(i for i, t in enumerate(lines) if LABEL in t)
    assert "600.0" in lines[at] and "513.5 -14.4%" in lines[at]
    # Under its panel's heading: the nearest heading row above it is "latency".
    headings = [t.split("│")[1].strip() for t in lines[:at]
                if t.startswith("│") and "(" not in t.split("│")[1]]
    assert headings[-1] == "latency"


def test_the_bench_report_shows_it(registered: Metric, tmp_path: Path) -> None:
    plan = Plan(
        path=tmp_path / "plan.toml", scenarios_file=tmp_path / "demo.toml",
        scenarios=("device", "host-prefetch"), baseline="device", trials=1,
        workload=WorkloadSpec(levels=(Level(4, concurrency=2),)), price_per_gpu_hour=None,
        gpus=4, time_scale=None, serve_scale=None)
    report = runner.write_report(plan, TRIALS, [], tmp_path / "out")
    assert row_json(report["comparison"], registered.key)["cells"]["device"]["mean"] == 600.0
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert row_json(on_disk["comparison"], registered.key)["cells"]["device"]["mean"] == 600.0
    md = (tmp_path / "out" / "report.md").read_text()
    assert md_cells(md, LABEL)[3:5] == ["600.0", "513.5 (Δ -14.42%)"]


def test_a_snapshot_shows_it_in_both_files(registered: Metric, tmp_path: Path) -> None:
    out = write_folder(tmp_path, filled_store(), reference.default(), svg=None)
    data = json.loads((out / "snapshot.json").read_text())
    # device: 224 tok/s over its 4 GPUs
    assert row_json(data["comparison"], registered.key)["cells"]["device"]["mean"] == 56.0
    assert md_cells((out / "summary.md").read_text(), LABEL)[3] == "56.0"


def test_a_registry_of_its_own_replaces_the_rows() -> None:
    only = Registry((PER_GPU,))
    c = compare(TRIALS, "device", metrics=only)
    assert [row.metric.key for row in c.rows] == [PER_GPU.key]
    assert PER_GPU.key not in METRICS  # the default registry is untouched


def test_a_registration_is_checked() -> None:
    with pytest.raises(ValueError, match="already registered"):
        Registry((PER_GPU, PER_GPU))
    with pytest.raises(ValueError, match="exactly one of"):
        Metric("x", "x", "s", "lower")
    with pytest.raises(ValueError, match="better"):
        Metric("x", "x", "s", "smaller", extract=per_gpu)
    with pytest.raises(ValueError, match="not registered before"):
        Registry((Metric("r", "ratio", "x", "higher", ratio_of="kv_tokens"),))


# ----------------------------------------------------------------------------- one comparison

def test_a_snapshot_folder_holds_one_comparison(tmp_path: Path) -> None:
    """The runs loaded from files and the price are in snapshot.json and summary.md alike."""
    imported = RunResult(scenario="bench_serving", placement=None, source="bench_serving:x",
                         trial=0, gpus=4, ttft_mean_s=0.7, output_tok_s=100.0)
    out = write_folder(tmp_path, filled_store(), reference.default(), svg=None,
                       compare_with=[imported], price_per_gpu_hour=2.0)
    comparison = json.loads((out / "snapshot.json").read_text())["comparison"]
    summary = (out / "summary.md").read_text()
    # The file's runs: a column of their own, named with their source.
    assert comparison["scenarios"] == ["device", "host-prefetch", "bench_serving (x)"]
    assert comparison["baseline"] == "device" and comparison["price_per_gpu_hour"] == 2.0
    assert "| metric | unit | better | device (baseline) | host-prefetch | bench_serving (x) |" \
        in summary
    cost = row_json(comparison, "cost_per_mtok")["cells"]["bench_serving (x)"]["mean"]
    assert cost == pytest.approx(2.0 * 4 / 3600 / 100.0 * 1e6)
    # Its own workload, without a device run of its own: its figures, compared with none.
    assert md_cells(summary, "cost per million output tokens")[5] == f"{cost:.4f}"
    assert md_cells(summary, "mean TTFT")[5] == "700.00"
    assert comparison["unpaired"] == {"bench_serving (x)": "x has no device run to compare "
                                      "it with, and device ran another workload"}


# ----------------------------------------------------------------------------- RunFigures

LEGACY = {"ready_s": 12.5, "gpus": 4, "weights_gb": 119.043, "kv_tokens": 11_840_000,
          "host_delta_gib": 6.5, "ttft_p50_ms": 345.0, "ttft_mean_ms": 350.4,
          "itl_p50_ms": 26.0, "itl_mean_ms": 26.03, "output_tok_s": 224.0}


def test_run_figures_keep_their_json_form() -> None:
    figures = RunFigures.from_json(LEGACY)
    assert figures.ttft_mean_s == pytest.approx(0.3504) and figures.itl_mean_s == 0.02603
    assert figures.to_json() == LEGACY  # key for key, value for value
    assert RunFigures().to_json() == {} and not RunFigures().measured()
    # Not measured is left out; a NaN mean (no samples) reads as not measured.
    assert RunFigures.from_json({"ttft_mean_ms": float("nan"), "gpus": None}) == RunFigures()


def test_run_figures_refuse_what_they_cannot_be() -> None:
    with pytest.raises(ValueError, match="unknown figures"):
        RunFigures.from_json({"ttft_mean": 1.0})
    with pytest.raises(ValueError, match="kv_tokens: expected a whole number"):
        RunFigures.from_json({"kv_tokens": 1.5})
    with pytest.raises(ValueError, match="ready_s: expected a number"):
        RunFigures.from_json({"ready_s": "soon"})


def test_newer_figures_merge_onto_older_ones() -> None:
    old = RunFigures(kv_tokens=11_840_000, weights_gb=119.043)
    new = old.merged(RunFigures(weights_gb=None, ttft_mean_s=0.35))
    assert new == RunFigures(kv_tokens=11_840_000, weights_gb=119.043, ttft_mean_s=0.35)


def test_a_recordings_figures_and_their_patches_read_back() -> None:
    """A run record as every version wrote it: the figures in ms, later ones as a patch
    (a null from a poll that had no figure keeps the last one)."""
    first = encode_facts(RunFacts("device", "device", "n", 1.0, 1.7e9, 1000.0), 1000.0)
    first["results"] = {"gpus": 4, "weights_gb": 119.043}
    run = RunFacts(**decode_facts_fields(first, 1000.0, "run"))
    assert run.results == RunFigures(gpus=4, weights_gb=119.043)
    patch = decode_facts_fields({"results": {"$patch": {"ttft_mean_ms": 350.4,
                                                        "weights_gb": None}, "$drop": []}},
                                1000.0, "run")["results"]
    assert patch.apply(run.results) == RunFigures(gpus=4, weights_gb=119.043,
                                                  ttft_mean_s=0.3504)
    with pytest.raises(ValueError, match=r"run\.results: kv_tokens"):
        decode_facts_fields({"results": {"kv_tokens": "many"}}, 1000.0, "run")
