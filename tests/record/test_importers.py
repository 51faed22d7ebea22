"""engram_top.record.importers: sglang.bench_serving JSONL in both spellings, and its bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_top.compare.comparison import compare
from engram_top.compare.markdown import to_markdown
from engram_top.record.importers import BenchFileError, load_bench_serving
from engram_top.seed import reference

DATA = Path(__file__).parents[1] / "data" / "bench_serving"
# The smallest line bench_serving could write that is still a result.
LATENCIES = {"mean_ttft_ms": 400.0, "mean_tpot_ms": 20.0, "mean_itl_ms": 20.5,
             "mean_e2e_latency_ms": 4000.0}


def write(tmp_path: Path, *lines: str, name: str = "run.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_older_spelling() -> None:
    runs = load_bench_serving(DATA / "device.jsonl")
    assert [r.trial for r in runs] == [0, 1, 2]  # the blank line is no trial
    first = runs[0]
    assert first.scenario == "device" and first.placement == "device"
    assert first.source == "bench_serving:device.jsonl"
    assert first.ttft_mean_s == pytest.approx(0.410)
    assert first.tpot_mean_s == pytest.approx(0.0218)
    assert first.itl_mean_s == pytest.approx(0.0219)
    assert first.e2e_mean_s == pytest.approx(4.580)
    assert first.ttft_p99_s == pytest.approx(1.210)
    assert first.tpot_p99_s == pytest.approx(0.0301)
    assert first.output_tok_s == 2410.0 and first.request_per_s == 1.2549
    assert (first.completed, first.failed, first.duration_s) == (64, 0, 51.0)
    # bench_serving measures none of these.
    assert (first.gpus, first.weights_gb, first.kv_tokens, first.host_delta_gib,
            first.ready_s) == (None, None, None, None, None)
    assert "keys=older" in first.notes
    assert "request_rate=inf" in first.notes  # json.dumps writes inf as Infinity
    assert "max_concurrency=16" in first.notes
    assert "total_output_tokens=122910" in first.notes
    assert "line=4" in runs[2].notes  # line numbers as the file has them


def test_refactored_spelling() -> None:
    runs = load_bench_serving(DATA / "host-prefetch.jsonl", gpus=4)
    assert len(runs) == 3
    r = runs[1]
    assert r.scenario == "host-prefetch" and r.placement == "host-prefetch" and r.gpus == 4
    assert r.ttft_mean_s == pytest.approx(0.491)
    assert r.e2e_mean_s == pytest.approx(5.160)
    assert r.output_tok_s == 2047.0
    assert r.failed == 0  # num_prompts 64, completed 64
    assert "keys=refactored" in r.notes
    assert "total_output=122370" in r.notes and "max_itl_ms=91.2" in r.notes
    assert "total_throughput=2869.22" in r.notes


def test_scenario_override_names_no_placement() -> None:
    runs = load_bench_serving(DATA / "device.jsonl", scenario="hbm-run-2")
    assert {r.scenario for r in runs} == {"hbm-run-2"}
    assert {r.placement for r in runs} == {None}


def test_imported_runs_compare_like_the_seed() -> None:
    runs = (load_bench_serving(DATA / "device.jsonl", gpus=4)
            + load_bench_serving(DATA / "host-prefetch.jsonl", gpus=4))
    c = compare(runs, "device", price_per_gpu_hour=5.0, reference=reference.default())
    ttft = c.row("ttft_mean_ms").cells["host-prefetch"]
    assert ttft.delta == pytest.approx(491.3333 / 425.0 - 1, abs=1e-6)  # +15.61%
    assert ttft.interval is not None and ttft.interval.method == "paired"
    assert ttft.spans_zero is False
    assert c.row("output_tok_s").cells["host-prefetch"].delta == pytest.approx(
        2055.3333 / 2400.0 - 1, abs=1e-6)  # -14.36%
    assert c.row("weights_gb").cells["host-prefetch"].mean is None
    md = to_markdown(c)
    assert "host-prefetch +15.57% vs device" in md
    assert "Δ +15.61%" in md


def test_broken_line_names_file_and_line() -> None:
    with pytest.raises(BenchFileError, match=r"broken\.jsonl:3: not valid JSON"):
        load_bench_serving(DATA / "broken.jsonl")


def test_missing_latency_keys_are_named() -> None:
    with pytest.raises(BenchFileError) as err:
        load_bench_serving(DATA / "missing_key.jsonl")
    msg = str(err.value)
    assert "missing_key.jsonl:2:" in msg
    assert "missing mean_itl_ms, mean_e2e_latency_ms" in msg
    assert "mean_ttft_ms" not in msg.split("missing")[-1]


def test_empty_file_is_an_error() -> None:
    with pytest.raises(BenchFileError, match=r"empty\.jsonl: no bench_serving results"):
        load_bench_serving(DATA / "empty.jsonl")


def test_blank_only_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BenchFileError, match="no bench_serving results"):
        load_bench_serving(write(tmp_path, "", "   ", ""))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(BenchFileError, match="absent.jsonl: cannot read"):
        load_bench_serving(tmp_path / "absent.jsonl")


def test_error_is_a_value_error() -> None:
    assert issubclass(BenchFileError, ValueError)


def test_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps(LATENCIES), "[1, 2, 3]")
    with pytest.raises(BenchFileError, match=r"run\.jsonl:2: expected a JSON object, got list"):
        load_bench_serving(path)


def test_non_numeric_value(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({**LATENCIES, "mean_tpot_ms": "fast"}))
    with pytest.raises(BenchFileError, match=r"run\.jsonl:1: 'mean_tpot_ms' should be a number"):
        load_bench_serving(path)


def test_nan_reads_as_not_measured(tmp_path: Path) -> None:
    # bench_serving writes NaN for a mean over no samples; json.dumps spells it NaN.
    path = write(tmp_path, json.dumps({**LATENCIES, "mean_tpot_ms": float("nan")}))
    (r,) = load_bench_serving(path)
    assert r.tpot_mean_s is None and r.ttft_mean_s == pytest.approx(0.4)


def test_minimal_line_leaves_the_rest_none(tmp_path: Path) -> None:
    (r,) = load_bench_serving(write(tmp_path, json.dumps({**LATENCIES, "future_key": [1]})))
    assert r.ttft_p99_s is None and r.output_tok_s is None and r.request_per_s is None
    assert (r.completed, r.failed, r.duration_s) == (0, 0, None)
    assert "keys=unknown" in r.notes


def test_rates_from_totals_when_not_written(tmp_path: Path) -> None:
    line = {**LATENCIES, "total_output": 1000, "completed": 8, "duration": 4.0}
    (r,) = load_bench_serving(write(tmp_path, json.dumps(line)))
    assert r.output_tok_s == pytest.approx(250.0)
    assert r.request_per_s == pytest.approx(2.0)


def test_failed_from_output_details(tmp_path: Path) -> None:
    older = {**LATENCIES, "completed": 2, "errors": ["", "timeout", ""]}
    refactored = {**LATENCIES, "completed": 1, "total_output": 10,
                  "details": {"errors": ["", "reset", "reset"]}}
    runs = load_bench_serving(write(tmp_path, json.dumps(older), json.dumps(refactored)))
    assert [r.failed for r in runs] == [1, 2]


def test_fractional_count_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps({**LATENCIES, "completed": 2.5}))
    with pytest.raises(BenchFileError, match="'completed' should be a whole count"):
        load_bench_serving(path)
