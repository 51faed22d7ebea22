"""`engram-top diff` of snapshots and of bench reports, written by the product's own writers
(export.snapshot.write_folder, bench.runner.write_report): what ran first, then memory and
latency; two benches of one workload pair their rounds, two of different workloads do not;
a damaged file or a bench set against a snapshot stops with its name. (Two recordings, and
a snapshot against a recording, of real runs: tests/cli/test_diff.py.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from scene import filled_store

from collectors.readings import GpuData, GpuDevice, Reading, Status
from collectors.units import GIB
from engram_top.bench import runner
from engram_top.bench.plan import Plan
from engram_top.cli.commands import main
from engram_top.compare.run_result import RunResult
from engram_top.export.snapshot import write_folder
from engram_top.model.fingerprint import Fingerprint
from engram_top.seed import reference
from scenarios.workload import Level, WorkloadSpec

PRINT = Fingerprint(engine="sglang 0.5.18", model="deepseek-ai/DeepSeek-V4.1-Flash",
                    placement="host-prefetch", parallel={"tp_size": 4},
                    server_args={"mem_fraction_static": "0.88"}, gpus="4x NVIDIA B200, 179 GiB",
                    driver="580.65.06", host_total_bytes=2048 * GIB, numa_nodes=2, thp="madvise")


def snapshot(tmp_path: Path, name: str, fp: Fingerprint, extra_gib: int = 0) -> Path:
    store = filled_store()
    assert store.run is not None and store.run.scenario == "host-prefetch"
    store.run.fingerprint = fp
    if extra_gib:  # another process on GPU 0 since: NVML's used grows by it
        dev = GpuDevice(index=0, name="NVIDIA B200", uuid="GPU-x", total_bytes=179 * GIB,
                        reserved_bytes=GIB // 2, used_bytes=(102 + extra_gib) * GIB,
                        free_bytes=(76 - extra_gib) * GIB, util_gpu_pct=92)
        store.add("gpu", Reading("gpu", Status.OK, GpuData("t", (dev,)), at=store.clock()))
    return write_folder(tmp_path, store, reference.default(), svg=None, name=name)


def run_diff(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main(["diff", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_two_snapshots_that_differ_by_one_flag_and_a_tenant(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = snapshot(tmp_path, "a", PRINT)
    b = snapshot(tmp_path, "b", dataclasses.replace(
        PRINT, server_args={**PRINT.server_args, "hicache_size": "8"}), extra_gib=12)
    code, text, err = run_diff(capsys, a, b / "snapshot.json")
    assert code == 0, err
    assert f"- A: {a / 'snapshot.json'} taken " in text and "(host-prefetch)" in text
    ran = text.split("## What it ran as")[1].split("## HBM")[0]
    assert [r for r in ran.splitlines() if r.startswith("| ") and "what" not in r] == \
        ["| server_args.hicache_size | n/a | 8 |"]
    hbm = text.split("## HBM")[1].split("## Host RAM")[0]
    assert "| GPU 0 · NVML used | 102.0 | 114.0 | +11.76% |" in hbm, hbm
    assert "## Host RAM (GiB; lines that moved by 0.05 GiB or more)\n\nNo change." in text
    assert "| KV capacity (tokens) | 42,700,288 | 42,700,288 | +0.00% |" in text
    code, out, _ = run_diff(capsys, a, b, "--json")
    data = json.loads(out)
    assert data["fingerprint_changes"] == [["server_args.hicache_size", "n/a", "8"]]
    assert data["b"]["hbm_bytes"]["GPU 0 · NVML used"] == 114 * GIB
    assert data["a"]["scenario"] == "host-prefetch"


def test_a_damaged_snapshot_is_named_by_its_field(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    a = snapshot(tmp_path, "a", PRINT)
    b = snapshot(tmp_path, "b", PRINT)
    file = b / "snapshot.json"
    data = json.loads(file.read_text())
    data["hbm_ledger"][0]["used_bytes"] = "lots"
    file.write_text(json.dumps(data))
    code, _, err = run_diff(capsys, a, b)
    assert code == 2
    assert err == f"engram-top diff: {file}: hbm_ledger[0].used_bytes: expected a number, " \
                  "got 'lots'\n"
    data["hbm_ledger"][0]["used_bytes"] = 1.0
    watched = next(i for i, r in enumerate(data["runs"]) if r["scenario"] == "host-prefetch")
    data["runs"][watched]["fingerprint"]["parallel"] = "TP4"
    file.write_text(json.dumps(data))
    code, _, err = run_diff(capsys, a, b)
    assert code == 2 and f"{file}: runs[{watched}].fingerprint.parallel" in err, err


def plan(tmp_path: Path, seed: int = 1) -> Plan:
    return Plan(path=tmp_path / "plan.toml", scenarios_file=tmp_path / "demo.toml",
                scenarios=("device", "host-prefetch"), baseline="device", trials=3,
                workload=WorkloadSpec(levels=(Level(4, concurrency=2),), seed=seed),
                price_per_gpu_hour=None, gpus=4, time_scale=None, serve_scale=None)


def rounds(ttft: list[float], tok_s: list[float]) -> list[RunResult]:
    out = []
    for trial, (t, s) in enumerate(zip(ttft, tok_s, strict=True)):
        for name, scale in (("device", 1.0), ("host-prefetch", 1.15)):
            out.append(RunResult(name, name, "bench", trial, gpus=4, weights_gb=119.043,
                                 kv_tokens=11_840_000, ttft_mean_s=t * scale,
                                 tpot_mean_s=0.026, output_tok_s=s / scale, completed=70))
    return out


def bench(tmp_path: Path, name: str, results: list[RunResult], seed: int = 1,
          fp: Fingerprint = PRINT) -> Path:
    out = tmp_path / name
    runner.write_report(plan(tmp_path, seed), results, [], out, seed_column=False,
                        fingerprints={"device": dataclasses.replace(fp, placement="device"),
                                      "host-prefetch": fp})
    return out


# The rounds drift together on both sides (round 3 is slow on both): pairing takes it out.
A_TTFT = [0.350, 0.360, 0.400]
B_TTFT = [0.385, 0.394, 0.442]  # each round about 10% slower than A's same round


def test_two_benches_of_one_workload_pair_their_rounds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = bench(tmp_path, "A", rounds(A_TTFT, [220, 221, 219]))
    b = bench(tmp_path, "B", rounds(B_TTFT, [200, 201, 199]),
              fp=dataclasses.replace(PRINT, engine="sglang 0.5.19"))
    code, text, err = run_diff(capsys, a, b / "report.json")
    assert code == 0, err
    ran = text.split("## What it ran as")[1].split("## device")[0]
    assert "| device · engine | sglang 0.5.18 | sglang 0.5.19 |" in ran
    assert "| host-prefetch · engine | sglang 0.5.18 | sglang 0.5.19 |" in ran
    assert "workload" not in ran  # the same workload
    assert "Intervals: paired by round" in text
    code, out, _ = run_diff(capsys, a, b, "--json")
    paired = json.loads(out)["scenarios"]["device"]["TTFT mean (ms)"]
    assert paired["a"] == pytest.approx(370.0) and paired["b"] == pytest.approx(407.0)
    assert paired["change"] == pytest.approx(0.1)
    assert 0 < paired["lo"] < 0.1 < paired["hi"] < 0.2  # pairing: about ±1.3 points
    weights = json.loads(out)["scenarios"]["device"]["weights per GPU (GB)"]
    assert weights["change"] == 0 and weights["lo"] == weights["hi"] == 0

    # The same rounds with another workload's seed: the rounds no longer pair, and the
    # interval keeps the rounds' drift (wider, and here holding no change).
    c = bench(tmp_path, "C", rounds(B_TTFT, [200, 201, 199]), seed=2)
    code, text, _ = run_diff(capsys, a, c)
    assert "| workload.seed | 1 | 2 |" in text and "Intervals: unpaired" in text
    code, out, _ = run_diff(capsys, a, c, "--json")
    unpaired = json.loads(out)["scenarios"]["device"]["TTFT mean (ms)"]
    assert unpaired["change"] == pytest.approx(0.1)
    assert unpaired["hi"] - unpaired["lo"] > 3 * (paired["hi"] - paired["lo"])
    assert unpaired["lo"] < 0  # the drift between rounds hides a 10% change unpaired
    tput = [ln for ln in text.splitlines() if ln.startswith("| output tokens/s |")]
    assert len(tput) == 2 and tput[0].startswith("| output tokens/s | 220 | 200 | -9.09% [")


def test_a_report_from_before_reports_kept_their_workload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = bench(tmp_path, "A", rounds(A_TTFT, [220, 221, 219]))
    b = bench(tmp_path, "B", rounds(B_TTFT, [200, 201, 199]))
    old = json.loads((b / "report.json").read_text())
    del old["workload"], old["fingerprints"]
    (b / "report.json").write_text(json.dumps(old, indent=2))
    code, text, err = run_diff(capsys, a, b)
    assert code == 0, err
    assert "| workload | kept | n/a (an older report) |" in text
    assert "Intervals: unpaired" in text


def test_a_bench_report_is_set_only_against_a_bench_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = bench(tmp_path, "A", rounds(A_TTFT, [220, 221, 219]))
    s = snapshot(tmp_path, "s", PRINT)
    code, out, err = run_diff(capsys, a, s)
    assert code == 2 and out == ""
    assert err == (f"engram-top diff: {a}: a bench report, and the other side is not: a bench "
                   "report is set against another bench report\n")
    report = a / "report.json"
    data = json.loads(report.read_text())
    data["fingerprints"]["device"]["parallel"] = {"tp_size": "four"}
    report.write_text(json.dumps(data, indent=2))
    code, _, err = run_diff(capsys, a, a)
    assert code == 2 and f"{report}: fingerprints.device.parallel" in err, err
    code, _, err = run_diff(capsys, tmp_path / "nothing", a)
    assert code == 2 and "nothing: no such file or folder" in err
