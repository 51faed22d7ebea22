"""The GPUs' facts and the host ledger are derived once for all their readers each reading,
and never stale: a new reading, a replaced run, start-up facts, Engram setting or baseline
each give new facts."""

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


def test_the_host_ledger_is_derived_once_a_reading_and_follows_every_input() -> None:
    from collectors.engram_setting import EngramSetting
    from collectors.startup_facts import EngramTable
    from engram_top.model import ledger

    store = scene_store()
    first = ledger.host_ledger(store)
    assert first is not None and ledger.host_ledger(store) is first
    run = store.run
    assert run is not None

    host = store.data("host")
    store.add("host", Reading("host", Status.OK, dataclasses.replace(
        host, free_bytes=host.free_bytes - 2**30), at=NOW + 1))
    moved = ledger.host_ledger(store)
    assert moved is not first and moved.in_use_bytes == first.in_use_bytes + 2**30

    # The tables as the log states them: replaced start-up facts give the Engram line.
    run.engram = EngramSetting(placement="device", layout=None, pinned=None, source="log",
                               prefetch="n/a")
    run.startup = dataclasses.replace(run.startup, engram_tables=())
    before = ledger.host_ledger(store)
    assert before is not None and before.line("Engram tables") is None
    run.startup = dataclasses.replace(run.startup, engram_tables=(
        EngramTable("L1", "shared", 1024.0, 1024.0, 100.0, True),))
    tables = ledger.host_ledger(store)
    assert tables is not None and tables.line("Engram tables") is not None
    run.startup = dataclasses.replace(run.startup, engram_tables=())
    cleared = ledger.host_ledger(store)
    assert cleared is not None and cleared.line("Engram tables") is None
    # A host placement says there are tables, their size unknown, when the log is silent.
    run.engram = EngramSetting(placement="host", layout="shared", pinned=True, source="log",
                               prefetch="off")
    placed = ledger.host_ledger(store)
    assert placed is not None and placed.line("Engram tables") is not None

    # HiCache's host pools, from the server's arguments on its page.
    server = store.data("server")
    store.add("server", Reading("server", Status.OK, dataclasses.replace(
        server, server_args={**server.server_args, "enable_hierarchical_cache": True,
                             "hicache_size": 8}), at=NOW + 1))
    pools = ledger.host_ledger(store)
    assert pools is not None and pools.line("HiCache host pools") is not None

    store.set_run(dataclasses.replace(run, scenario="device"))  # another run: new facts
    assert ledger.host_ledger(store) is not pools
