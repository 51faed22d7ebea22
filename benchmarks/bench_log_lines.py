"""What the start-up log parser costs per line of a busy server's log: after a whole start-up
(the tests' LOGDOC), nine access-log lines to one decode-batch line, the mix a served model
writes many times a second. Median over runs, µs per line. Figures only: nothing here
asserts on time (the suite checks what the lines mean, tests/collectors/test_startup_log.py).

    python benchmarks/bench_log_lines.py [--runs 7] [--lines 50000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sglang_logs import LOGDOC  # noqa: E402  (tests/sglang_logs.py: a whole start-up)

from collectors.sglang.startup_log import StartupLogParser  # noqa: E402

ACCESS = 'INFO:     127.0.0.1:55012 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
DECODE = ("[2026-02-04 10:12:00 TP0] Decode batch, #running-req: 64, #token: 40000, "
          "token usage: 0.51, cuda graph: True, gen throughput (token/s): 3012.44, "
          "#queue-req: 2")


def per_line(count: int) -> float:
    parser = StartupLogParser()
    parser.feed_text(LOGDOC)
    lines = [ACCESS] * 9 + [DECODE]
    start = time.perf_counter()
    for _ in range(count // len(lines)):
        for line in lines:
            parser.feed(line)
    return (time.perf_counter() - start) / (count // len(lines) * len(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--lines", type=int, default=50_000)
    args = ap.parse_args()
    times = [per_line(args.lines) for _ in range(args.runs)]
    print(f"startup log parser, busy server (9 access lines : 1 decode line), "
          f"{args.lines:,} lines x {args.runs} runs: median {statistics.median(times) * 1e6:.2f} "
          f"µs a line (min {min(times) * 1e6:.2f}, max {max(times) * 1e6:.2f})")


if __name__ == "__main__":
    main()
