"""When a recording's lines reach the OS and how often the recorder wakes: each store event
is on disk as soon as it is taken (a killed process loses only the line being written), and
the recorder's tick runs four times a second only while a load's figures move."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from collectors.readings import HostData, Reading, Status
from engram_top.model.store import RunStore
from engram_top.record import recorder as recording
from engram_top.record.file_format import FACTS_S, TICK_S


def host(at: float, used: int) -> Reading[HostData]:
    data = HostData(100, 100 - used, used, 100 - used, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return Reading("host", Status.OK, data, at=at)


def test_each_reading_is_on_disk_once_taken(tmp_path: Path) -> None:
    store = RunStore()
    path = tmp_path / "rec.jsonl"
    recorder = recording.Recorder(store, path).start()
    try:
        for i in range(3):
            store.add("host", host(10.0 + i, i))
            # Read by another open file: what the OS has, not the recorder's buffer.
            assert path.read_text().count('"type":"reading"') == i + 1
        store.event("warning", "a fault")
        assert '"a fault"' in path.read_text()
    finally:
        recorder.close()


async def test_the_tick_runs_four_times_a_second_only_while_a_load_moves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        slept.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(recording.asyncio, "sleep", sleep)
    async def ticks(n: int) -> None:  # n more ticks, within a bounded number of turns
        for _ in range(10_000):
            if len(slept) >= n:
                return
            await real_sleep(0)
        raise AssertionError(f"{len(slept)} ticks, not {n}")

    store = RunStore()
    recorder = recording.Recorder(store, tmp_path / "rec.jsonl").start()
    try:
        store.add("host", host(1.0, 1))  # the first record starts the tick
        await ticks(3)
        assert set(slept) == {FACTS_S}  # an attached server, no load: once a second
        store.load = {"requests": 1}
        await ticks(len(slept) + 3)
        assert slept[-1] == TICK_S
    finally:
        recorder.close()
