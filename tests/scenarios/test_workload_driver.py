"""The workload driver against a simulated server and its own record of each request."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys

import httpx
import psutil
import pytest

from engram_top.live.demo import DemoOptions, DemoSession
from scenarios import bench_driver
from scenarios.workload import Level, WorkloadSpec, run_workload

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)


@pytest.fixture
async def server(tmp_path):  # type: ignore[no-untyped-def]
    session = DemoSession(DemoOptions(placement="device", time_scale=0.02, load=None,
                                      node_dir=tmp_path / "node", run_dir=tmp_path / "state",
                                      poll_interval=5.0))
    await session.start()
    try:
        assert await session.wait_ready(60)
        yield session.store.run.url
    finally:
        await session.close()


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/generate"])
async def test_driver_matches_the_servers_ground_truth(server: str, endpoint: str) -> None:
    spec = WorkloadSpec(levels=(Level(6, concurrency=1), Level(16, concurrency=4),
                                Level(10, rate=5.0)),
                        input_len=128, output_len=32, range_ratio=0.5, seed=3,
                        warmup_requests=2, endpoint=endpoint)
    result = await run_workload(server, spec)
    assert result.failed == 0, result.errors
    assert len(result.records) == 32  # the warm-up is not measured
    assert [sum(r.level == i for r in result.records) for i in range(3)] == [6, 16, 10]
    truth = {r["id"]: r for r in httpx.get(f"{server}/sim/requests").json()["requests"]}
    assert len(truth) >= 34  # warm-up included on the server's side (and its own warm-up)
    ttft_err, ttft_floor, e2e_err = [], [], []
    for rec in result.records:
        t = truth[rec.rid]
        assert rec.output_len == t["output_len"]
        assert 16 <= rec.output_len <= 32 and 64 <= rec.input_len <= 128
        ttft_err.append(rec.ttft - (t["first_token"] - t["arrival"]))
        ttft_floor.append(rec.ttft - (t["first_token_ready"] - t["arrival"]))
        e2e_err.append(rec.e2e - (t["finished"] - t["arrival"]))
        # bench_serving's TPOT: the decode time over the tokens after the first.
        assert rec.tpot == pytest.approx((rec.e2e - rec.ttft) / (rec.output_len - 1))
    # The client sent before the server saw the request, and read the first token after the
    # server began writing it: its TTFT is never less than that span. (Against the stamp
    # taken once the write returned it may be, by however late a busy machine resumed the
    # server.) How much more is a figure, not a pass/fail line: benchmarks/driver_accuracy.py.
    assert min(ttft_floor) > -0.0005 and min(e2e_err) > -0.0005
    assert statistics.median(ttft_err) < statistics.median(
        [r.ttft for r in result.records])  # the error is small next to what is measured
    assert result.output_tok_s and result.output_tok_s > 0
    assert result.driver_cpu_s > 0


async def test_driver_counts_failures_and_keeps_their_messages(server: str) -> None:
    # A request longer than the model's context is refused with a 400 and SGLang's message.
    spec = WorkloadSpec(levels=(Level(3, concurrency=3),), input_len=2_000_000,
                        output_len=4, range_ratio=1.0, warmup_requests=0)
    result = await run_workload(server, spec)
    assert result.records == [] and result.failed == 3
    assert all("HTTP 400" in e and "maximum context length" in e for e in result.errors)


def _command_line(p: psutil.Process) -> str:
    """A child's command line; "" for one that ended as we looked (a zombie an earlier
    test left to be reaped, or one gone): psutil raises for those."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def test_the_bench_driver_runs_apart_and_waits_at_each_level(server: str) -> None:
    # The bench's driver in a process of its own: each level's start and end are said to
    # the parent, which reads the server there, and the child waits for it.
    spec = WorkloadSpec(levels=(Level(3, concurrency=1), Level(4, rate=20.0)), input_len=32,
                        output_len=8, warmup_requests=1, seed=5)
    said: list[tuple[int, str]] = []
    children: set[int] = set()

    async def on_level(index: int, when: str) -> None:
        said.append((index, when))
        me = psutil.Process()
        children.update(p.pid for p in me.children(recursive=True)
                        if "scenarios.bench_driver" in _command_line(p))
        await asyncio.sleep(0.05)  # the child must not go on meanwhile

    apart = await bench_driver.drive(server, spec, on_level=on_level)
    inline = await run_workload(server, spec)
    assert said == [(0, "start"), (0, "end"), (1, "start"), (1, "end")]
    assert [len([r for r in res.records if r.level == i]) for res in (apart, inline)
            for i in (0, 1)] == [3, 4, 3, 4]
    assert sorted((r.input_len, r.output_len) for r in apart.records) == \
        sorted((r.input_len, r.output_len) for r in inline.records)  # the same draw
    assert apart.failed == 0 and len(apart.level_durations) == 2 and apart.driver_cpu_s > 0
    assert all(isinstance(r.itls, tuple) for r in apart.records)
    assert len(children) == 1 and not any(_running(p) for p in children)


def test_the_bench_driver_ends_when_its_parent_goes(server: str) -> None:
    # Its stdin is a pipe from the parent: closed mid-level, the child stops at once
    # rather than load a server nobody measures.
    spec = WorkloadSpec(levels=(Level(1000, concurrency=2),), input_len=32, output_len=64,
                        warmup_requests=0)
    child = subprocess.Popen([sys.executable, "-m", "scenarios.bench_driver"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write((json.dumps({"url": server, "spec": dataclasses.asdict(spec)})
                           + "\n").encode())
        child.stdin.flush()
        assert json.loads(child.stdout.readline()) == {"level": 0, "when": "start"}
        child.stdin.write(b"go\n")
        child.stdin.flush()
        child.stdin.close()  # the parent is gone
        assert child.wait(15) == 0
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(5)
