"""What a server held just before it died: the most its tree held over the last readings,
not the last reading alone, which can be read during the end itself (a rank killed, its
memory gone, the launcher still alive). In-process: the host sampler's readings are the
test's, on a clock the test moves."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from scene import snapshot_host

from collectors import host
from collectors.readings import HostData, ProcessTreeMemory
from collectors.units import GIB


def tree(root: int, rss_gib: float) -> HostData:
    held = int(rss_gib * GIB)
    return dataclasses.replace(snapshot_host(400 * GIB), server_tree=ProcessTreeMemory(
        root_pid=root, pids=(root,), rss_bytes=held, rss_anon_bytes=held, rss_file_bytes=0,
        rss_shmem_bytes=0))


def test_the_peak_of_the_last_readings_of_the_same_root(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([tree(7, 10), tree(7, 250), tree(7, 6.5), tree(9, 300), tree(9, 20)])
    monkeypatch.setattr(host, "sample", lambda *_args: next(readings))
    now = [0.0]
    collector = host.HostCollector(backend=object(), clock=lambda: now[0])  # type: ignore[arg-type]

    def poll() -> None:
        asyncio.run(collector.poll())
        now[0] += 1.0

    for _ in range(3):
        poll()
    # The last reading (6.5 GiB: during the kill) is not what it held before it died.
    assert collector.last_with_tree is not None
    assert collector.last_with_tree.server_tree.rss_bytes == int(6.5 * GIB)  # type: ignore[union-attr]
    peak = collector.peak_with_tree
    assert peak is not None and peak.server_tree is not None
    assert peak.server_tree.rss_bytes == 250 * GIB
    # Another root (a restarted server): only its own readings count.
    poll()
    poll()
    peak = collector.peak_with_tree
    assert peak is not None and peak.server_tree is not None
    assert (peak.server_tree.root_pid, peak.server_tree.rss_bytes) == (9, 300 * GIB)


def test_readings_older_than_the_window_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([tree(7, 250), tree(7, 12)])
    monkeypatch.setattr(host, "sample", lambda *_args: next(readings))
    now = [0.0]
    collector = host.HostCollector(backend=object(), clock=lambda: now[0])  # type: ignore[arg-type]
    asyncio.run(collector.poll())
    now[0] += host.PEAK_WINDOW_S + 1
    asyncio.run(collector.poll())
    peak = collector.peak_with_tree
    assert peak is not None and peak.server_tree is not None
    assert peak.server_tree.rss_bytes == 12 * GIB
