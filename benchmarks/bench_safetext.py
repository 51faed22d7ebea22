"""What making outside text safe costs a repaint: collectors.safetext.visible on the kinds of
line the dashboard shows, engram_top.app.safe.safe on a panel's lines, and clean_strip on a
screen's worth of rows (what SafeOutput does to each frame it writes to a terminal).

Run from the repository root:  .venv/bin/python benchmarks/bench_safetext.py [--runs N]
Prints figures only; nothing here asserts on time (machines differ).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Group  # noqa: E402
from rich.segment import Segment  # noqa: E402
from rich.style import Style  # noqa: E402
from rich.text import Text  # noqa: E402
from textual.strip import Strip  # noqa: E402

from collectors.safetext import visible  # noqa: E402
from engram_top.app.safe import clean_strip, safe  # noqa: E402

LINES = {
    "ASCII": "capacity    11.84M tokens (SGLang max_total_num_tokens)",
    "non-ASCII, printable": "used   ████████████░░░░░░░░ 1,024.0 of 2,048.0 GiB · Δ +195.4",
    "a label with ESC and C1": "evil-node\x1b]0;pwned\x07\x9b31m placement host",
}


def per_call_ns(fn: Callable[[], object], runs: int, inner: int = 2000) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter_ns() - start) / inner)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs

    print("visible(), per call:")
    for name, line in LINES.items():
        print(f"  {name:<26} {per_call_ns(lambda line=line: visible(line), runs):8.0f} ns")
    print(f"  {'(Text(line), for scale)':<26} "
          f"{per_call_ns(lambda: Text(LINES['non-ASCII, printable']), runs):8.0f} ns")

    # A panel: 12 lines of text with a few styled spans, as engram_top.app.panels builds them.
    lines = []
    for i in range(12):
        t = Text(f"GPU {i % 4}  ", style="bold")
        t.append(LINES["non-ASCII, printable"], style="cyan")
        lines.append(t)
    panel = Group(*lines)
    dirty = Group(*lines[:11], Text(LINES["a label with ESC and C1"], style="yellow"))
    print("safe() on a panel of 12 lines:")
    print(f"  {'printable':<26} {per_call_ns(lambda: safe(panel), runs, 500) / 1000:8.1f} µs")
    print(f"  {'one line with controls':<26} "
          f"{per_call_ns(lambda: safe(dirty), runs, 500) / 1000:8.1f} µs")

    # A 160x50 screen: 50 rows of 12 segments each, every frame's worth of clean_strip.
    style = Style(color="cyan")
    rows = [Strip([Segment(f"│ cell {i}-{j} ·· ", style) for j in range(12)]) for i in range(50)]

    def screen() -> None:
        for row in rows:
            clean_strip(row)
    print(f"clean_strip on a 160x50 screen (50 rows): "
          f"{per_call_ns(screen, runs, 50) / 1000:8.1f} µs a frame")


if __name__ == "__main__":
    main()
