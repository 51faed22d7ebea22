"""The demo's synthetic load in a process of its own: its HTTP streams cost the dashboard's
process nothing, so what the dashboard costs can be read apart from what the load costs.

`LoadProcess` has the surface the session uses of a ClosedLoopLoad (concurrency, stats,
start, stop); the child (`python -m scenarios.load_process`) runs one and writes its counters
as a JSON line four times a second. The child ends when told to (SIGTERM), and by itself when
its parent goes: its stdin is a pipe from the parent, and end of file means nobody is left to
read what it says. The API key travels in the environment, never on the argv `ps` shows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

from scenarios.load_window import LoadWindow
from scenarios.workload import ClosedLoopLoad, LoadStats

KEY_ENV = "ENGRAM_TOP_LOAD_API_KEY"
REPORT_S = 0.25
STOP_GRACE_S = 5.0
MAX_LINE = 64 * 1024


class LoadProcess:
    def __init__(self, base_url: str, *, concurrency: int = 8, input_len: int = 512,
                 output_len: int = 128, range_ratio: float = 0.5, seed: int = 1,
                 api_key: str | None = None, bounds: dict[str, float] | None = None,
                 count_prompt: bool = False, window_s: float | None = None) -> None:
        self.concurrency = concurrency
        self.bounds = dict(bounds or {})
        self.argv = [sys.executable, "-m", "scenarios.load_process", "--url", base_url,
                     "--concurrency", str(concurrency), "--input-len", str(input_len),
                     "--output-len", str(output_len), "--range-ratio", repr(range_ratio),
                     "--seed", str(seed), *(["--count-prompt"] if count_prompt else []),
                     *(["--window", repr(window_s)] if window_s is not None else []),
                     *(a for k, v in self.bounds.items() for a in ("--bound", f"{k}={v!r}"))]
        self.api_key = api_key
        self.stats = LoadStats()
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        env = dict(os.environ)
        if self.api_key:
            env[KEY_ENV] = self.api_key
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, env=env, start_new_session=True,
            limit=MAX_LINE)
        self._reader = asyncio.create_task(self._read(), name="load counters")

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                line = await self.proc.stdout.readline()
            except ValueError:  # a line past MAX_LINE: not ours
                continue
            if not line:
                break
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                self._take(json.loads(line))
        code = await self.proc.wait()
        if code not in (0, -signal.SIGTERM):
            self.stats.last_error = f"the load driver exited with code {code}"

    def _take(self, counters: dict[str, Any]) -> None:
        for name in ("sent", "completed", "failed", "output_tokens", "good"):
            value = counters.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self.stats, name, value)
        error = counters.get("last_error")
        if isinstance(error, str):
            self.stats.last_error = error[:300]
        if (window := counters.get("window")) is not None:  # last: a bad one drops only it
            self.stats.window = LoadWindow.from_json(window)

    async def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            await wait_or_kill(proc, STOP_GRACE_S)
        if proc.stdin is not None:
            proc.stdin.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        self.proc = None

    def stop_now(self) -> None:
        """Without a loop (an exit path that has none left): the group goes at once."""
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


async def wait_or_kill(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    """A child (the leader of its own process group) asked to end: its exit, or after
    ``grace_s`` its group's SIGKILL. The bench's workload driver ends the same way."""
    try:
        await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


# --------------------------------------------------------------------------- the child


async def _child(args: argparse.Namespace) -> int:
    load = ClosedLoopLoad(args.url, concurrency=args.concurrency, input_len=args.input_len,
                          output_len=args.output_len, range_ratio=args.range_ratio,
                          seed=args.seed, api_key=os.environ.pop(KEY_ENV, None),
                          bounds=dict(args.bound), count_prompt=args.count_prompt,
                          window_s=args.window)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def parent_gone() -> None:
        await reader.read()  # end of file: the parent closed its end, or died
        done.set()

    watch = asyncio.create_task(parent_gone())
    await load.start()
    try:
        while not done.is_set():
            s = load.stats
            window = (None if load.window is None
                      else load.window.figures(time.monotonic()).to_json())
            line = json.dumps({"sent": s.sent, "completed": s.completed, "failed": s.failed,
                               "output_tokens": s.output_tokens, "good": s.good,
                               "last_error": s.last_error, "window": window})
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError):
                break  # nobody reads: the parent is gone
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), REPORT_S)
    finally:
        watch.cancel()
        await load.stop()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m scenarios.load_process",
                                description="A closed-loop load on one server (the demo's).")
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--range-ratio", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count-prompt", action="store_true",
                   help="send a prompt's length as a number (a simulated server's field)")
    p.add_argument("--bound", type=_bound, action="append", default=[], metavar="METRIC=S",
                   help="a per-request latency bound (ttft, tpot or e2e, in seconds): "
                        "requests within every bound are counted as good")
    p.add_argument("--window", type=_seconds, default=None, metavar="S",
                   help="report the last S seconds' requests: their TPOTs' spread, and "
                        "their output tokens and those within the bounds in six bins")
    return asyncio.run(_child(p.parse_args()))


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds") from None
    if not 0 < seconds < 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds between 0 and a day")
    return seconds


def _bound(text: str) -> tuple[str, float]:
    metric, _, value = text.partition("=")
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: METRIC=SECONDS") from None
    if metric not in ("ttft", "tpot", "e2e") or not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: ttft, tpot or e2e = seconds > 0")
    return metric, seconds


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        raise SystemExit(main())
