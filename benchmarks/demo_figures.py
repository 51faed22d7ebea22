"""Do the demo bench's headline figures hold run after run?

Runs `engram-top bench PLAN --out DIR` (by default scenarios/demo-bench.toml) N times in a
row, as a presenter would, and prints for each run host-prefetch's change against device in
mean TTFT, mean TPOT and output throughput with the report's 95% interval (the paired
interval over rounds: Fieller's for a mean's relative change), whether the interval holds
the seed's figure, its half-width in points, and the run's wall time. Then the coverage (runs
whose interval holds the seed's figure, per figure) and the widest half-width.

    python benchmarks/demo_figures.py [--runs 20] [--plan scenarios/demo-bench.toml] [--quick]

Nothing here is asserted by a test: the figures go in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engram_top.seed import reference  # noqa: E402

FIGURES = (("ttft_ms", "ttft_mean", "TTFT"), ("tpot_ms", "tpot_mean", "TPOT"),
           ("output_tok_s", "output_throughput", "throughput"))


def one_run(command: list[str], plan: Path, out: Path, quick: bool) -> tuple[dict, float]:
    started = time.monotonic()
    done = subprocess.run([*command, "bench", str(plan), "--out", str(out),
                           *(["--quick"] if quick else [])],
                          capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"bench exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return json.loads((out / "report.json").read_text()), took


def mean_entry(report: dict, scenario: str, figure: str) -> dict:
    (entry,) = [e for e in report["paired"]["scenarios"][scenario][figure]
                if e["statistic"] == "mean"]
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--plan", type=Path, default=ROOT / "scenarios" / "demo-bench.toml")
    ap.add_argument("--quick", action="store_true", help="each run with bench --quick")
    ap.add_argument("--scenario", default="host-prefetch")
    args = ap.parse_args()
    seed = {k: f.value for k, f in reference.default().deltas(args.scenario).items()}
    # The console script pip installed beside this interpreter (or on PATH).
    script = shutil.which("engram-top", path=os.pathsep.join(
        [sysconfig.get_path("scripts"), os.environ.get("PATH", "")]))
    if script is None:
        raise SystemExit("engram-top is not installed for this interpreter: pip install -e .")
    command = [script]
    tmp = Path(tempfile.mkdtemp(prefix="engram-demo-figures-"))
    held = {label: 0 for _, _, label in FIGURES}
    widest = {label: 0.0 for _, _, label in FIGURES}
    walls = []
    print(f"{args.plan.name}{' --quick' if args.quick else ''}, {args.runs} runs; "
          f"{args.scenario} vs device; seed " +
          ", ".join(f"{label} {seed[key] * 100:+.2f}%" for _, key, label in FIGURES))
    try:
        for i in range(args.runs):
            report, took = one_run(command, args.plan, tmp / f"run-{i}", args.quick)
            walls.append(took)
            cells = []
            for figure, key, label in FIGURES:
                e = mean_entry(report, args.scenario, figure)
                lo, hi, rel = e["rel_lo"], e["rel_hi"], e["rel"]
                target = seed[key]
                inside = lo is not None and hi is not None and lo <= target <= hi
                held[label] += inside
                if lo is None or hi is None:
                    cells.append(f"{label} {rel * 100:+.2f}% (no interval)")
                    widest[label] = float("inf")
                    continue
                half = (hi - lo) / 2 * 100
                widest[label] = max(widest[label], half)
                cells.append(f"{label} {rel * 100:+.2f}% [{lo * 100:+.2f}, {hi * 100:+.2f}]"
                             f"{'' if inside else ' MISS'}")
            rounds = report["paired"]["rounds"]
            print(f"run {i + 1:2d} ({rounds} rounds, {took:.0f} s): " + " · ".join(cells),
                  flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = len(walls)
    print(f"\ncoverage of the seed's figures over {n} runs: " +
          ", ".join(f"{label} {held[label]}/{n}" for _, _, label in FIGURES))
    print("widest half-width (points): " +
          ", ".join(f"{label} ±{widest[label]:.2f}" for _, _, label in FIGURES))
    print(f"wall time per run: median {sorted(walls)[n // 2]:.0f} s, longest {max(walls):.0f} s")


if __name__ == "__main__":
    main()
