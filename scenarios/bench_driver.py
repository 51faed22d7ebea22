"""The bench's workload driver in a process of its own, as sglang.bench_serving runs apart
from the server it measures: the bench's own session (its polls of NVML, /proc and the
server's /metrics, its alerts) runs in the parent, and a poll that held the parent's event
loop for a few milliseconds as a first token arrived used to add them to that request's
TTFT. Here the client's clock is the client's alone.

`drive()` starts the child (`python -m scenarios.bench_driver`), hands it the workload as
one JSON line, and awaits its level marks: at each level's start and end the child says so
and waits for the parent's "go" (the bench reads the server's counters there, as
run_workload's on_level does in process). The child answers with its DriverResult as a
JSON line and exits. It ends by itself when its parent goes (its stdin is a pipe from the
parent: end of file means nobody is left to read it), and drive() kills its process group
on every way out (an error, a cancellation). The API key travels in the environment, never
on the argv `ps` shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from scenarios.load_process import wait_or_kill
from scenarios.workload import (
    DriverResult,
    FailedRequest,
    Level,
    RequestRecord,
    WorkloadSpec,
    run_workload,
)

KEY_ENV = "ENGRAM_TOP_BENCH_API_KEY"
MAX_LINE = 256 * 1024 * 1024  # the result: a few hundred bytes a request
STOP_GRACE_S = 5.0


class DriverError(RuntimeError):
    """The driver process failed: its exit code and what it said on stderr."""


def _spec_json(base_url: str, spec: WorkloadSpec) -> str:
    return json.dumps({"url": base_url, "spec": dataclasses.asdict(spec)})


def _spec_of(raw: dict[str, Any]) -> WorkloadSpec:
    fields = dict(raw)
    fields["levels"] = tuple(Level(**lv) for lv in fields["levels"])
    return WorkloadSpec(**fields)


def _result_of(raw: dict[str, Any]) -> DriverResult:
    return DriverResult(
        records=[RequestRecord(**{**r, "itls": tuple(r["itls"])}) for r in raw["records"]],
        failed=raw["failed"], errors=list(raw["errors"]), duration_s=raw["duration_s"],
        driver_cpu_s=raw["driver_cpu_s"],
        failures=[FailedRequest(**f) for f in raw["failures"]],
        level_durations=list(raw["level_durations"]))


async def drive(base_url: str, spec: WorkloadSpec, *, api_key: str | None = None,
                on_level: Callable[[int, str], Awaitable[None]] | None = None
                ) -> DriverResult:
    """run_workload(base_url, spec) in a child process; ``on_level(index, "start" | "end")``
    is awaited at each level boundary while the child waits for it."""
    env = dict(os.environ)
    env.pop(KEY_ENV, None)
    if api_key:
        env[KEY_ENV] = api_key
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scenarios.bench_driver", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        start_new_session=True, limit=MAX_LINE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    errors = asyncio.create_task(proc.stderr.read())
    try:
        proc.stdin.write((_spec_json(base_url, spec) + "\n").encode())
        await proc.stdin.drain()
        while line := await proc.stdout.readline():
            said = json.loads(line)
            if "result" in said:
                return _result_of(said["result"])
            if on_level is not None:
                await on_level(int(said["level"]), str(said["when"]))
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        code = await proc.wait()
        raise DriverError(f"the bench's workload driver exited with code {code}: "
                          + (await errors).decode(errors="replace").strip()[-2000:])
    finally:
        await _stop(proc)
        errors.cancel()


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    if proc.returncode is None:
        await wait_or_kill(proc, STOP_GRACE_S)


# --------------------------------------------------------------------------- the child


async def _child() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    first = await reader.readline()
    if not first:
        return 0  # the parent went before it said anything
    raw = json.loads(first)
    main = asyncio.current_task()
    assert main is not None
    answers: asyncio.Queue[bytes] = asyncio.Queue()

    async def listen() -> None:
        """The parent's "go"s; its end of the pipe closing (it stopped, or died) ends the
        run at once, mid-level too, rather than load a server nobody measures."""
        while line := await reader.readline():
            answers.put_nowait(line)
        main.cancel()

    def say(payload: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(payload) + "\n")
        sys.stdout.flush()

    async def on_level(index: int, when: str) -> None:
        say({"level": index, "when": when})
        await answers.get()

    listener = asyncio.create_task(listen())
    try:
        result = await run_workload(raw["url"], _spec_of(raw["spec"]),
                                    api_key=os.environ.pop(KEY_ENV, None), on_level=on_level)
    except asyncio.CancelledError:
        return 0
    finally:
        listener.cancel()
    say({"result": dataclasses.asdict(result)})
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        raise SystemExit(asyncio.run(_child()))
