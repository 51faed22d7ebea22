"""The HBM panel is drawn again only when hbm_inputs changes (Panel's ``inputs``): every
change of what the panel shows must change those inputs, or the panel would go on showing
the old figures. Each thing it reads is changed here in turn, on the scene's node and on
one with HiCache's load-back; what it does not draw (energy, NVLink, transmit, a draw that
moves under a watt) moves no input, so a GPU reading each second costs no drawing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from scene import NOW, hicache_store, scene_store

from collectors.readings import HostData, Reading, Status
from engram_top.app.panels import hbm_inputs, hbm_panel
from engram_top.model import RunStore

Change = Callable[[RunStore], None]


def shown(store: RunStore) -> list[tuple[str, str]]:
    return [(line.plain, repr(line.spans)) for line in
            hbm_panel(store, rows=None, cols=120).renderables]


def gpus(field: str, value: object, index: int = 1) -> Change:
    def change(store: RunStore) -> None:
        data = store.data("gpu")
        devices = list(data.devices)
        devices[index] = dataclasses.replace(devices[index], **{field: value})
        store.add("gpu", Reading("nvml", Status.OK, dataclasses.replace(
            data, devices=tuple(devices)), at=NOW))
    return change


def nudged(field: str, by: float, index: int = 1) -> Change:
    def change(store: RunStore) -> None:
        value = getattr(store.data("gpu").devices[index], field)
        gpus(field, value + by, index)(store)
    return change


def server_share(store: RunStore) -> None:
    device = store.data("gpu").devices[1]
    held = device.processes[0]
    gpus("processes", (dataclasses.replace(held, used_bytes=(held.used_bytes or 0) // 2),
                       *device.processes[1:]))(store)


def rank_figure(key: str, value: float) -> Change:
    """The server's page's figure for rank 0 (weights, KV pool, KV tokens)."""
    def change(store: RunStore) -> None:
        page = store.data("server")
        ranks = {**page.ranks, 0: {**page.ranks.get(0, {}), key: value}}
        store.add("server", Reading("sglang", Status.OK, dataclasses.replace(page, ranks=ranks),
                                    at=NOW))
    return change


def gpu_failing(store: RunStore) -> None:
    store.add("gpu", Reading("nvml", Status.ERROR, None, "NVML: GPU is lost", at=NOW + 5))


def no_server_tree(store: RunStore) -> None:
    host: HostData = store.data("host")
    store.add("host", Reading("proc", Status.OK, dataclasses.replace(host, server_tree=None),
                              at=NOW))


def run_field(**fields: object) -> Change:
    def change(store: RunStore) -> None:
        assert store.run is not None
        for name, value in fields.items():
            setattr(store.run, name, value)
    return change


def graphs(store: RunStore) -> None:
    assert store.run is not None
    ranks = store.run.startup.ranks
    first = min(ranks)
    ranks[first] = dataclasses.replace(ranks[first], graph_mem_usage_gb=9.5)


def placement(store: RunStore) -> None:
    assert store.run is not None and store.run.engram is not None
    store.run.engram = dataclasses.replace(store.run.engram, placement="device")


SHOWN_CHANGES: dict[str, Change] = {
    "used": nudged("used_bytes", 3 << 30),
    "server's share": server_share,
    "reserved": nudged("reserved_bytes", 1 << 30, index=0),
    "total": nudged("total_bytes", 8 << 30, index=0),
    "util": gpus("util_gpu_pct", 7),
    "temperature": gpus("temperature_c", 88),
    "power": nudged("power_w", 3.0),
    "power limit": gpus("power_limit_w", 650.0),
    "SM clock": gpus("sm_clock_mhz", 900),
    "throttled": gpus("throttle_reasons", ("hw_slowdown",)),
    "receive": gpus("pcie_rx_bytes_per_s", 9.9e9),
    "weights": rank_figure("weight_gb", 40.0),
    "KV pool": rank_figure("kv_cache_gb", 12.0),
    "KV tokens": rank_figure("max_total_num_tokens", 1234),
    "processes": gpus("processes", (), index=0),
    "GPU failing": gpu_failing,
    "server tree gone": no_server_tree,
    "graphs": graphs,
    "engine": run_field(engine="vllm"),
}

UNSHOWN_CHANGES: dict[str, Change] = {
    "energy": gpus("energy_mj", 12345),
    "NVLink": gpus("nvlink_rx_bytes_per_s", 3.0e10),
    "transmit": nudged("pcie_tx_bytes_per_s", 1.0),
    "power under a watt": nudged("power_w", 0.01),
    "receive in its last digits": nudged("pcie_rx_bytes_per_s", 1e-6),
}


@pytest.mark.parametrize("name", SHOWN_CHANGES)
def test_what_changes_the_panel_changes_its_inputs(name: str) -> None:
    store = scene_store()
    before, inputs = shown(store), hbm_inputs(store)
    SHOWN_CHANGES[name](store)
    assert shown(store) != before, f"{name}: not on the panel at all"
    assert hbm_inputs(store) != inputs, f"{name} changes the panel but not its inputs"


@pytest.mark.parametrize("name", UNSHOWN_CHANGES)
def test_what_the_panel_does_not_draw_moves_no_input(name: str) -> None:
    store = scene_store()
    before, inputs = shown(store), hbm_inputs(store)
    UNSHOWN_CHANGES[name](store)
    assert hbm_inputs(store) == inputs
    assert shown(store) == before


@pytest.mark.parametrize("change", [placement, nudged("pcie_rx_bytes_per_s", 2e8, index=0),
                                    "load-back"], ids=["placement", "receive", "load-back"])
def test_the_engram_estimate_follows_its_inputs(change: Change | str) -> None:
    store = hicache_store()
    before, inputs = shown(store), hbm_inputs(store)
    if change == "load-back":
        page = store.data("server")
        store.add("server", Reading("sglang", Status.OK, dataclasses.replace(
            page, hicache_load_back_by_rank={**page.hicache_load_back_by_rank, 0: 1.2e9}),
            at=NOW))
    else:
        assert callable(change)
        change(store)
    assert shown(store) != before
    assert hbm_inputs(store) != inputs
