"""The GPUs' facts are derived once for all their readers each reading, and never stale:
a new reading, a replaced run, start-up facts or baseline each give new facts."""

from __future__ import annotations

import dataclasses

from scene import scene_store

from collectors.readings import Reading, Status
from engram_top.model import facts

NOW = 1000.0


def test_the_gpus_facts_are_derived_once_a_reading_and_follow_every_input() -> None:
    store = scene_store()
    first = facts.gpu_facts(store)
    again = facts.gpu_facts(store)
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))
    again.clear()  # a reader's list is its own
    assert facts.gpu_facts(store) == first

    gpus = store.data("gpu")
    moved = dataclasses.replace(gpus.devices[0], used_bytes=gpus.devices[0].used_bytes + 1)
    store.add("gpu", Reading("gpu", Status.OK, dataclasses.replace(
        gpus, devices=(moved, *gpus.devices[1:])), at=NOW + 1))
    assert facts.gpu_facts(store)[0].used_bytes == first[0].used_bytes + 1

    assert store.run is not None
    store.run.baseline_gpu_used = {0: 123}
    assert facts.gpu_facts(store)[0].baseline_used_bytes == 123

    rank0 = store.run.startup.ranks[0]
    store.run.startup = dataclasses.replace(store.run.startup, ranks={
        **store.run.startup.ranks, 0: dataclasses.replace(rank0, weights_gb=1.5)})
    server = store.data("server")
    store.add("server", Reading("server", Status.OK, dataclasses.replace(server, ranks={}),
                                at=NOW + 1))
    assert facts.gpu_facts(store)[0].weights_gb == 1.5  # the log's figure, the metric gone

    other = dataclasses.replace(store.run, scenario="host-async")
    store.set_run(other)
    assert facts.gpu_facts(store)[0].baseline_used_bytes == 123  # copied with the run
    store.run.baseline_gpu_used = {}
    assert facts.gpu_facts(store)[0].baseline_used_bytes is None
