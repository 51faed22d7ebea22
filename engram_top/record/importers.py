"""Read benchmark outputs from other tools into RunResult records for engram_top.compare.comparison
(load_runs takes engram-top's own recordings and bench reports too).

sglang.bench_serving appends one JSON object per run to its --output-file; each line is one
trial here. Two spellings exist (see the SGLang notes, section 5): the older bench_serving.py
(total_input_tokens, total_output_tokens, ...) and the refactored sglang.benchmark package
(total_input, total_output, total_throughput, max_itl_ms, ...). Both share the *_ms latency
names and the throughput names, so one reader takes either.

bench_serving measures only the client side: weights, KV capacity, host memory and time to
ready stay None for imported runs (the dashboard's own runs carry those).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engram_top.compare.run_result import QUICK, QUICK_NOTE, RunResult
from engram_top.record import recorder
from engram_top.record.file_format import RecordingError
from engram_top.seed.reference import PLACEMENTS

# The four means every bench_serving version writes; a line without them is not a result.
LATENCY_KEYS = ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2e_latency_ms")
# Run settings bench_serving echoes into each line; kept as notes so a trial says what load it was.
_ECHOED = ("backend", "dataset_name", "num_prompts", "request_rate", "max_concurrency",
           "random_input_len", "random_output_len", "random_range_ratio")
_OLDER = ("total_input_tokens", "total_output_tokens")
_REFACTORED = ("total_input", "total_output", "total_throughput", "max_itl_ms")


class BenchFileError(ValueError):
    """A bench_serving output that cannot be read as results; says FILE:LINE and why."""


def load_bench_serving(path: Path, *, scenario: str | None = None,
                       gpus: int | None = None) -> list[RunResult]:
    """One RunResult per non-blank line of a bench_serving JSONL file, trials numbered from 0
    in file order. The scenario defaults to the file's stem; its placement is the scenario's
    name when that names one of the seed's placements, else None."""
    name = scenario if scenario is not None else path.stem
    results: list[RunResult] = []
    # Split on "\n" only, so line numbers match what an editor shows.
    for lineno, line in enumerate(_read(path).split("\n"), start=1):
        if not line.strip():
            continue
        record = _parse(line, f"{path}:{lineno}")
        results.append(_run_result(record, f"{path}:{lineno}", name=name, source=path.name,
                                   trial=len(results), lineno=lineno, gpus=gpus))
    if not results:
        raise BenchFileError(f"{path}: no bench_serving results (the file is empty)")
    return results


def _read(path: Path) -> str:
    try:
        if path.exists() and not path.is_file():  # a folder, or a pipe that blocks the read
            raise BenchFileError(f"{path}: not a file of results (a folder, a pipe or a "
                                 "device)")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchFileError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BenchFileError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from exc


def _parse(line: str, where: str) -> dict[str, Any]:
    # Python's json reads the NaN and Infinity that bench_serving's json.dumps writes.
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BenchFileError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})") from exc
    except RecursionError:
        raise BenchFileError(f"{where}: not a bench_serving result (nested too deeply to "
                             "read)") from None
    if not isinstance(record, dict):
        raise BenchFileError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [k for k in LATENCY_KEYS if k not in record]
    if missing:
        raise BenchFileError(f"{where}: not a bench_serving result: missing {', '.join(missing)}")
    return record


def _run_result(record: dict[str, Any], where: str, *, name: str, source: str, trial: int,
                lineno: int, gpus: int | None) -> RunResult:
    def num(key: str) -> float | None:
        return _number(record, key, where)

    def seconds(key: str) -> float | None:
        ms = num(key)
        return None if ms is None else ms / 1000.0

    duration = num("duration")
    completed = _count(record, "completed", where)
    output_tokens = _first(num, "total_output_tokens", "total_output")
    return RunResult(
        scenario=name,
        placement=name if name in PLACEMENTS else None,
        source=f"bench_serving:{source}",
        trial=trial,
        gpus=gpus,
        # bench_serving's name of each latency: it writes ms, RunResult keeps seconds.
        ttft_mean_s=seconds("mean_ttft_ms"), tpot_mean_s=seconds("mean_tpot_ms"),
        itl_mean_s=seconds("mean_itl_ms"), e2e_mean_s=seconds("mean_e2e_latency_ms"),
        ttft_p99_s=seconds("p99_ttft_ms"), tpot_p99_s=seconds("p99_tpot_ms"),
        output_tok_s=_rate(num("output_throughput"), output_tokens, duration),
        request_per_s=_rate(num("request_throughput"),
                            None if completed is None else float(completed), duration),
        completed=completed or 0,
        failed=_failed(record, completed, where),
        duration_s=duration,
        notes=_notes(record, where, lineno),
    )


def _number(record: dict[str, Any], key: str, where: str) -> float | None:
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BenchFileError(f"{where}: '{key}' should be a number, got {value!r}")
    # bench_serving writes NaN for a mean over no samples (e.g. TPOT when every output was
    # one token): not measured, so None rather than a number that poisons the means.
    return float(value) if math.isfinite(value) else None


def _count(record: dict[str, Any], key: str, where: str) -> int | None:
    value = _number(record, key, where)
    if value is None:
        return None
    if value != int(value) or value < 0:
        raise BenchFileError(f"{where}: '{key}' should be a whole count, got {value!r}")
    return int(value)


def _first(num: Callable[[str], float | None], *keys: str) -> float | None:
    for key in keys:
        value = num(key)
        if value is not None:
            return value
    return None


def _rate(given: float | None, count: float | None, duration: float | None) -> float | None:
    """The rate bench_serving wrote, else count / duration (both over the benchmark's
    duration, as bench_serving defines its throughputs)."""
    if given is not None:
        return given
    if count is None or not duration:
        return None
    return count / duration


def _failed(record: dict[str, Any], completed: int | None, where: str) -> int:
    """Failed requests: the per-request errors when --output-details wrote them (top level in
    the older spelling, under "details" in the refactored one), else num_prompts - completed,
    else 0 (bench_serving itself records no failure count)."""
    details = record.get("details")
    errors = record.get("errors")
    if errors is None and isinstance(details, dict):
        errors = details.get("errors")
    if isinstance(errors, list):
        return sum(1 for e in errors if e)
    prompts = _count(record, "num_prompts", where)
    if prompts is not None and completed is not None:
        return max(0, prompts - completed)
    return 0


def _notes(record: dict[str, Any], where: str, lineno: int) -> tuple[str, ...]:
    notes = [f"line={lineno}", f"keys={_spelling(record)}"]
    for key in _ECHOED:
        if record.get(key) is not None:
            notes.append(f"{key}={record[key]}")
    for key in ("total_input_tokens", "total_input", "total_output_tokens", "total_output",
                "total_throughput", "max_itl_ms"):
        value = _number(record, key, where)
        if value is not None:
            notes.append(f"{key}={int(value) if value.is_integer() else value}")
    return tuple(notes)


def _spelling(record: dict[str, Any]) -> str:
    older = any(k in record for k in _OLDER)
    refactored = any(k in record for k in _REFACTORED)
    if older and refactored:
        return "mixed"
    if refactored:
        return "refactored"
    return "older" if older else "unknown"


def load_runs(path: Path, *, gpus: int | None = None,
              notes: list[str] | None = None) -> list[RunResult]:
    """Runs from any file a comparison takes: an engram-top recording (its finished runs),
    a bench_serving JSONL file, or an `engram-top bench` report.json. BenchFileError names
    the file (and line) that cannot be read; a recording's lines that cannot be read are
    skipped, and said in ``notes``."""
    try:
        if recorder.is_recording(path):
            return recorder.runs_from_recording(path, notes)
    except RecordingError as exc:
        raise BenchFileError(str(exc)) from exc
    if path.suffix == ".jsonl":
        return load_bench_serving(path, gpus=gpus)
    try:
        data = json.loads(_read(path))
        runs = [RunResult.from_dict(r) for r in data["results"]]
    except RecursionError:
        raise BenchFileError(f"{path}: not an engram-top bench report (nested too deeply to "
                             "read)") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchFileError(f"{path}: not an engram-top bench report: {exc}") from exc
    paired = data.get("paired") if isinstance(data, dict) else None
    if isinstance(paired, dict) and paired.get("quick") is True:
        # A report written before its runs said so themselves: the caveat all the same.
        runs = [r if any(n.startswith(QUICK) for n in r.notes) else dataclasses.replace(
            r, notes=(*r.notes, QUICK_NOTE))
            for r in runs]
    return runs


def report_price(path: Path) -> float | None:
    """The price per GPU-hour an `engram-top bench` report.json was written with, or None
    (another kind of file, or no price)."""
    if path.suffix != ".json" or recorder.is_recording(path):
        return None
    try:
        price = json.loads(_read(path))["comparison"]["price_per_gpu_hour"]
    except (KeyError, TypeError, ValueError, RecursionError, BenchFileError):
        return None
    ok = isinstance(price, int | float) and not isinstance(price, bool) and price >= 0
    return float(price) if ok else None
