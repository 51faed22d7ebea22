"""The simulated server says ready only once its ranks hold their memory, as SGLang's
schedulers report theirs before the tokenizer does: a rank the OS runs late (here, stopped
with SIGSTOP) holds the start back, and a rank that cannot take its memory fails it in
words, not with a ready server whose GPUs read empty."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_top.sim import state
from engram_top.sim.startup import RankHandle, StartupFailed, ranks_settled, spawn_ranks

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

GB = 10**9


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[list[RankHandle]]:
    state.procs_dir(tmp_path).mkdir(parents=True)
    handles = spawn_ranks(tmp_path, 2)
    try:
        yield handles
    finally:
        for r in handles:
            r.proc.send_signal(signal.SIGCONT)  # a no-op on one already reaped
            r.proc.kill()
            r.proc.wait(10)


def held(node_dir: Path) -> dict[int, int]:
    return {p.pid: sum(p.gpu_bytes.values()) for p in state.live_procs(node_dir)}


async def test_a_late_rank_holds_the_start_back_until_its_memory_shows(
        tmp_path: Path, ranks: list[RankHandle]) -> None:
    await ranks_settled(tmp_path, ranks, within=30)  # both started and wrote their (empty) file
    late = ranks[1]
    os.kill(late.proc.pid, signal.SIGSTOP)
    for r in ranks:
        r.gpu_bytes, r.host_anon = 70 * GB, 2 * GB
        r.push()
    # Stopped, the late rank cannot have written its file: the wait runs out, naming it.
    with pytest.raises(StartupFailed, match="Rank 1 scheduler did not take its memory"):
        await ranks_settled(tmp_path, ranks, within=0.2)
    assert held(tmp_path)[late.proc.pid] == 0
    os.kill(late.proc.pid, signal.SIGCONT)
    await ranks_settled(tmp_path, ranks, within=30)
    assert held(tmp_path) == {r.proc.pid: 70 * GB for r in ranks}


async def test_a_rank_that_dies_fails_the_start_at_once(
        tmp_path: Path, ranks: list[RankHandle]) -> None:
    ranks[0].proc.kill()
    ranks[0].proc.wait(10)
    ranks[1].gpu_bytes = 70 * GB
    ranks[1].push()
    with pytest.raises(StartupFailed, match=r"Rank 0 scheduler died \(exit -9\)"):
        await asyncio.wait_for(ranks_settled(tmp_path, ranks, within=30), 10)
