"""What a large `--compare-with` file costs: an engram-top recording and a bench_serving
file with per-request details (its --output-details), each about --mb MB, read as the
dashboard reads them (record.importers.load_runs). Prints the read time, the peak memory
while reading and what the runs keep afterwards. Quitting the dashboard holds none of the
file (the runs are a few hundred bytes each), so `q` costs what it costs without one.

Run from the repository root:  .venv/bin/python benchmarks/bench_compare_files.py [--mb 80]
Prints figures only; nothing here asserts on time (machines differ).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collectors.readings import GpuData, GpuDevice, Reading, ServerData, Status  # noqa: E402
from engram_top.model.figures import RunFigures  # noqa: E402
from engram_top.model.store import RunFacts, RunState, RunStore  # noqa: E402
from engram_top.record.importers import load_runs  # noqa: E402
from engram_top.record.recorder import Recorder  # noqa: E402

GIB = 1 << 30


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def recording(path: Path, mb: float) -> None:
    """A session of one finished run, a poll a second of 8 GPUs and a busy server."""
    clock = Clock()
    store = RunStore()
    store.clock = clock
    recorder = Recorder(store, path, clock=clock).start()
    facts = RunFacts(scenario="device", placement="device", node="bench", time_scale=1.0,
                     launched_wall=1.7e9, launched_at=0.0, state=RunState.READY, ready_at=1.0)
    store.set_run(facts)
    rng = random.Random(1)
    while path.stat().st_size < mb * 1e6:
        clock.now += 1.0
        devices = tuple(GpuDevice(index=i, name="NVIDIA H200", uuid=f"GPU-{i}",
                                  total_bytes=141 * GIB, reserved_bytes=GIB // 2,
                                  used_bytes=rng.randrange(100, 130) * GIB,
                                  free_bytes=10 * GIB, util_gpu_pct=rng.randrange(100))
                        for i in range(8))
        store.add("gpu", Reading("gpu", Status.OK, GpuData("575.57", devices), at=clock.now))
        server = ServerData(url="http://127.0.0.1:30000", healthy=True,
                            num_running_reqs=rng.randrange(64), token_usage=rng.random(),
                            gen_throughput=rng.random() * 1e4)
        store.add("server", Reading("sglang", Status.OK, server, at=clock.now))
    facts.results = RunFigures(ready_s=125.0, gpus=8, weights_gb=119.043, kv_tokens=11_840_000)
    facts.state = RunState.STOPPED
    facts.ended_at = clock.now
    store.set_run(facts)
    recorder.close()


def bench_serving(path: Path, mb: float) -> None:
    """bench_serving lines with every request's figures, as --output-details writes them."""
    rng = random.Random(1)
    with path.open("w") as out:
        while out.tell() < mb * 1e6:
            n = 50_000
            out.write(json.dumps({
                "backend": "sglang", "dataset_name": "random", "num_prompts": n,
                "completed": n, "duration": 100.0, "total_input_tokens": n * 100,
                "total_output_tokens": n * 50, "request_throughput": 500.0,
                "output_throughput": 25000.0, "mean_ttft_ms": 100.0, "mean_tpot_ms": 20.0,
                "mean_itl_ms": 20.0, "mean_e2e_latency_ms": 1000.0,
                "ttfts": [rng.random() for _ in range(n)],
                "itls": [[rng.random() for _ in range(4)] for _ in range(n)],
                "generated_texts": ["x" * 20] * n, "errors": [""] * n}) + "\n")


def measure(path: Path) -> None:
    """Read it twice: once for the time, once under tracemalloc (which slows it) for memory."""
    started = time.perf_counter()
    runs = load_runs(path, notes=[])
    took = time.perf_counter() - started
    del runs
    tracemalloc.start()
    runs = load_runs(path, notes=[])
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{path.name}: {path.stat().st_size / 1e6:.0f} MB, {len(runs)} run(s), read in "
          f"{took:.2f} s, peak {peak / 1e6:.0f} MB while reading, {kept / 1e6:.2f} MB kept "
          f"afterwards")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=80.0, help="each file's size (default 80)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rec, jsonl = Path(tmp) / "session.jsonl", Path(tmp) / "bench_serving.jsonl"
        recording(rec, args.mb)
        bench_serving(jsonl, args.mb)
        for path in (rec, jsonl):
            measure(path)


if __name__ == "__main__":
    main()
