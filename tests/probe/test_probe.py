"""`engram-top probe` and benchmarks/gpu_check.py on this CPU: the probe's CPU path end to
end with the SGLang environment's torch (the app's venv has none, and must not), its
predictions as a column of `compare` and of the compare screen, and the GPU check with NVML
missing, then against the stand-in NVML and a stand-in nvidia-smi."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, StaticSession, md_row, screen_text, until
from scene import SEED_RESULTS

from engram_top.app.compare_screen import CompareScreen
from engram_top.app.main import EngramTopApp
from engram_top.cli import commands
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore
from engram_top.probe.report import SCHEMA, ProbeFileError, from_json, load_probe

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

SGLANG_PY = ROOT / ".venv-sglang" / "bin" / "python"
BENCH_SERVING = ROOT / "tests" / "data" / "bench_serving"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _sglang_torch() -> str | None:
    """Why the SGLang environment's torch cannot run the probe; None when it can."""
    if not SGLANG_PY.exists():
        return f"{SGLANG_PY} is missing (scripts/setup-sglang-cpu.sh builds it)"
    out = subprocess.run([str(SGLANG_PY), "-c", "import torch"], capture_output=True,
                         text=True, timeout=120)
    return None if out.returncode == 0 else f"{SGLANG_PY} has no torch: {out.stderr[-200:]}"


@pytest.fixture(scope="module")
def sglang_python() -> Path:
    why = _sglang_torch()
    if why:
        pytest.skip(why)
    return SGLANG_PY


@pytest.fixture(scope="module")
def cpu_probe(sglang_python: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("probe")
    res = subprocess.run([str(sglang_python), "-m", "engram_top", "probe", "--out", str(out),
                          "--batch", "1,8", "--seconds", "0.05"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return out, res


def synthetic_probe(tmp: Path, *, meaningful: bool = True) -> Path:
    """A probe.json as a GPU's probe writes it, with round figures."""
    def batch(b: int, device: float, host: float, prefetch: float) -> dict[str, Any]:
        modes = {m: {"steps": 50, "step_ms": v, "step_ms_p50": v, "exposed_ms": v - device,
                     "gather_ms": None, "copy_ms": None, "copy_gb_s": None}
                 for m, v in (("device", device), ("host", host), ("host-prefetch", prefetch))}
        return {"batch": b, "rows_per_step": b * 16, "bytes_per_step": b * 16 * 4096,
                "modes": modes,
                "overlap_fraction": 1 - (prefetch - device) / (host - device),
                "predicted_tpot_change": {"host": host / device - 1,
                                          "host-prefetch": prefetch / device - 1}}
    data = {
        "schema": SCHEMA, "created": "2026-12-02T12:00:00+00:00",
        "meaningful_for_placement": meaningful,
        "device": {"kind": "cuda" if meaningful else "cpu",
                   "name": "NVIDIA H200" if meaningful else "CPU (x)", "torch": "2.11.0",
                   "cuda": "12.8" if meaningful else None},
        "sizes": {"table_gib": 8.0, "row_bytes": 4096, "rows": 2097152, "rows_per_token": 8,
                  "layers": 2},
        "compute": {"what": "bf16 GEMM [batch x 7168] @ [7168 x 7168] x 700"},
        "seconds_per_mode": 2.0, "warmup_steps": 3,
        "batches": [batch(8, 20.0, 21.0, 20.2), batch(64, 25.0, 27.5, 25.5)],
    }
    path = tmp / "probe.json"
    path.write_text(json.dumps(data))
    return path


# ----------------------------------------------------------------------------- the probe

def test_probe_cpu_path_end_to_end(cpu_probe: tuple[Path, subprocess.CompletedProcess[str]]
                                   ) -> None:
    out, res = cpu_probe
    data = json.loads((out / "probe.json").read_text())
    assert data["schema"] == SCHEMA
    assert data["meaningful_for_placement"] is False and "not meaningful" in \
        data["why_not_meaningful"]
    assert data["device"]["kind"] == "cpu" and data["device"]["torch"].startswith("2.")
    assert "bf16 GEMM [batch x 256] @ [256 x 256]" in data["compute"]["what"]
    assert [b["batch"] for b in data["batches"]] == [1, 8]
    for b in data["batches"]:
        assert set(b["modes"]) == {"device", "host", "host-prefetch"}
        for mode in b["modes"].values():
            assert mode["steps"] >= 5 and mode["step_ms"] > 0 and mode["step_ms_p50"] > 0
        for mode in ("host", "host-prefetch"):
            m = b["modes"][mode]
            assert m["gather_ms"] > 0 and m["copy_ms"] > 0 and m["copy_gb_s"] > 0
            assert b["predicted_tpot_change"][mode] == pytest.approx(
                m["exposed_ms"] / b["modes"]["device"]["step_ms"])
        assert b["bytes_per_step"] == b["batch"] * 2 * 8 * 4096
        assert b["overlap_fraction"] is None or 0 <= b["overlap_fraction"] <= 1
    md = (out / "probe.md").read_text()
    assert "**Not meaningful for placement**" in md and "copy GB/s (a CPU memcpy" in md
    assert "## Predicted TPOT change against device" in md
    assert "NOT MEANINGFUL FOR PLACEMENT" in res.stdout and "predicted TPOT change" in res.stdout
    report = load_probe(out / "probe.json")  # compare's loader takes what the probe wrote
    assert not report.meaningful_for_placement and len(report.batches) == 2


def test_probe_without_torch_says_how_to_get_it(tmp_path: Path) -> None:
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                      timeout=60).returncode == 0:
        pytest.skip("this interpreter has torch")
    res = subprocess.run([sys.executable, "-m", "engram_top", "probe", "--out",
                          str(tmp_path / "p")], cwd=ROOT, env=ENV, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert "engram-top probe: needs PyTorch" in res.stderr
    assert "-m engram_top probe" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "p").exists()


def test_probe_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--batch", "0,8"], ["--batch", "x"], ["--seconds", "-1"], ["--row-bytes", "0"]):
        with pytest.raises(SystemExit) as exc:
            commands.main(["probe", *bad])
        assert exc.value.code == 2
    assert "each from 1 to 65536, got '0'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- compare

def test_compare_shows_the_probe_as_a_column_of_predictions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(BENCH_SERVING / "device.jsonl"), str(BENCH_SERVING / "host-prefetch.jsonl")]
    assert commands.main(["compare", *files, "--baseline", "device"]) == 0
    plain = capsys.readouterr().out
    probe = synthetic_probe(tmp_path)
    assert commands.main(["compare", *files, "--baseline", "device", "--probe", str(probe)]) == 0
    md = capsys.readouterr().out
    head = md_row(md, "metric")
    assert head[-1] == "predicted by probe (NVIDIA H200)"
    tpot = md_row(md, "mean TPOT")
    assert tpot[-1] == ("batch 8: host +5.00%, host-prefetch +1.00% · batch 64: host +10.00%, "
                        "host-prefetch +2.00% vs device")
    assert md_row(md, "mean TTFT")[-1] == ""  # a probe predicts TPOT alone
    # The measured cells are the same with or without a probe beside them.
    for label in ("mean TTFT", "mean TPOT", "output throughput"):
        assert md_row(md, label)[:-1] == md_row(plain, label)
    assert "Predicted by probe (probe.json, 2026-12-02T12:00:00+00:00, NVIDIA H200)" in md
    assert "A prediction, not a measurement of these runs." in md
    assert "not meaningful" not in md
    assert commands.main(["compare", *files, "--baseline", "device", "--probe", str(probe),
                          "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["probe"]["label"] == "predicted by probe (NVIDIA H200)"
    assert data["probe"]["row"] == "tpot_mean_ms"
    assert data["probe"]["batches"][0]["predicted_tpot_change"]["host"] == pytest.approx(0.05)


def test_compare_with_the_cpu_probe_says_it_is_not_meaningful(
        cpu_probe: tuple[Path, subprocess.CompletedProcess[str]],
        capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(BENCH_SERVING / "device.jsonl"), str(BENCH_SERVING / "host-prefetch.jsonl")]
    assert commands.main(["compare", *files, "--baseline", "device", "--probe",
                          str(cpu_probe[0] / "probe.json")]) == 0
    md = capsys.readouterr().out
    assert md_row(md, "metric")[-1] == "predicted by probe (CPU: not meaningful for placement)"
    assert md_row(md, "mean TPOT")[-1].startswith("batch 1: host ")
    assert "⚠ This probe ran on a CPU: its figures are not meaningful for placement." in md


def test_a_bad_probe_file_is_named_with_its_field(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = synthetic_probe(tmp_path)
    good = json.loads(path.read_text())
    cases = [
        ({**good, "schema": "other/9"}, "field 'schema': expected 'engram-top-probe/1'"),
        ({k: v for k, v in good.items() if k != "device"}, "field 'device': missing"),
        ({**good, "batches": []}, "field 'batches': no batch was measured"),
    ]
    broken = json.loads(path.read_text())
    broken["batches"][1]["predicted_tpot_change"]["host"] = "fast"
    cases.append((broken, "field 'batches[1].predicted_tpot_change.host': expected a finite "
                          "number, got 'fast'"))
    broken = json.loads(path.read_text())
    del broken["batches"][0]["modes"]["host-prefetch"]
    cases.append((broken, "field 'batches[0].modes.host-prefetch': missing"))
    for data, message in cases:
        with pytest.raises(ProbeFileError, match="^x.json: " + message.replace("[", r"\[")
                           .replace("]", r"\]").replace(".", r"\.")):
            from_json(data, "x.json")
    path.write_text("{not json")
    res = commands.main(["compare", str(BENCH_SERVING / "device.jsonl"), "--baseline", "device",
                         "--probe", str(path)])
    assert res == 2
    err = capsys.readouterr().err
    assert f"engram-top compare: {path}: not valid JSON" in err and "Traceback" not in err


async def test_compare_screen_shows_the_probe_column(tmp_path: Path) -> None:
    store = RunStore()
    now = time.monotonic()
    for name, results in SEED_RESULTS.items():
        facts = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                         launched_wall=time.time(), launched_at=now, state="stopped")
        facts.results = RunFigures.from_json(results)
        store.set_run(facts)
    probe = load_probe(synthetic_probe(tmp_path, meaningful=False))
    app = EngramTopApp(StaticSession(store), probe=probe)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        await until(pilot, lambda: "b64 +10.0% · +2.0%" in screen_text(app),
                    what="the probe's column")
        text = screen_text(app)
        assert "predicted by probe (CPU: not meaningful)" in text
        assert "vs device: host · pf" in text and "b8 +5.0% · +1.0%" in text
        assert "not meaningful" in text  # a CPU probe, said in its column and caption
        assert "a CPU run: NOT meaningful for placement" in text
        assert "26.0" in text and "28.8 +10.9%" in text  # the measured TPOT cells as ever


# ----------------------------------------------------------------------------- gpu_check

def test_gpu_check_on_this_cpu(sglang_python: Path, tmp_path: Path) -> None:
    """The SGLang environment has torch and psutil but neither nvidia-ml-py nor Textual nor
    pandas, as the lent GPU node's Python lacks the app's dependencies."""
    res = subprocess.run([str(sglang_python), "benchmarks/gpu_check.py", "--out",
                          str(tmp_path), "--probe-seconds", "0.05"], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "NVML missing: nvidia-ml-py is not installed" in res.stdout
    assert "skipped: pinned memory needs CUDA" in res.stdout
    assert "README.md: \"pinned host memory shows up there\" (found)" in res.stdout
    assert "NOT MEANINGFUL FOR PLACEMENT" in res.stdout
    md = (tmp_path / "gpu_check.md").read_text()
    assert md.startswith("# gpu_check (") and "## The probe at its default sizes" in md
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    assert "failed" not in data and "missing" in data["nvml"]
    assert not load_probe(tmp_path / "probe" / "probe.json").meaningful_for_placement


def test_gpu_check_against_the_stand_in_nvml_and_nvidia_smi(tmp_path: Path) -> None:
    """The comparison's reading of nvidia-smi's CSV, its units, and the field-by-field retry
    when nvidia-smi refuses a field: against answers from the same stand-in library."""
    spec = importlib.util.spec_from_file_location(  # by path: tests/ is not a package
        "nvml_stub_build", ROOT / "tests" / "nvml_stub" / "build.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    if not build.gcc_available():
        pytest.skip("gcc is needed to build the stand-in libnvidia-ml.so.1")
    lib = build.build(tmp_path / "lib")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {sys.executable} "
                   f"{ROOT / 'tests' / 'nvml_stub' / 'fake_nvidia_smi.py'} \"$@\"\n")
    smi.chmod(0o755)
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "FAKE_SMI_REFUSE": "memory.reserved"}
    res = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out",
                          str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    gpu0 = res.stdout.split("### GPU 0")[1].split("### GPU 1")[0]
    rows = {cells[0]: cells[1:] for line in gpu0.splitlines() if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    assert len(rows) == 20
    assert rows["`memory.reserved`"][1].startswith("refused: Field \"memory.reserved\"")
    assert rows["`memory.reserved`"][2] == "only NVML"
    assert rows["`memory.used`"] == ["150,000 MiB", "150000", "yes"]
    assert all(r[2] == "yes" for name, r in rows.items() if name != "`memory.reserved`"), rows
    # Per-process memory, both tools; the stand-in's pid is one no host has (4194304 + 4242).
    assert "| 4198546 | 149,800 | 149800 |" in gpu0
    assert "same order" in gpu0  # PCIe: the collector's counters beside dmon's throughput
