"""GPU health past the collector: the simulated node's figures, energy per output token
(by hand), throttles carried into the comparison, the XID and ECC alerts, the HBM panel at
half of a 100-column terminal, and the new fields through a recording. The NVML side
(the real pynvml over the stand-in library) is in test_nvml.py."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from collectors.readings import GpuData, GpuDevice, Reading, ServerData, Status
from engram_top.alerts.monitor import AlertMonitor
from engram_top.alerts.thresholds import Thresholds
from engram_top.app.compare_screen import comparison_table
from engram_top.app.panels import hbm_panel
from engram_top.compare.comparison import compare, to_json
from engram_top.compare.markdown import to_markdown
from engram_top.compare.run_result import THROTTLED, RunResult
from engram_top.compare.runs import run_result
from engram_top.model import energy, facts
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore
from engram_top.record.file_format import decode_reading, encode_reading
from engram_top.sim import backends, state
from scenarios.proc_start import start_of
from scenarios.runstate import RunState

GIB = 1024**3


def device(index: int, energy_mj: int | None = None, **kw: object) -> GpuDevice:
    return GpuDevice(index=index, name="NVIDIA B200", uuid=f"GPU-{index}",
                     total_bytes=179 * GIB, reserved_bytes=GIB // 2, used_bytes=100 * GIB,
                     free_bytes=78 * GIB + GIB // 2, energy_mj=energy_mj, **kw)  # type: ignore[arg-type]


def gpu_reading(at: float, *devices: GpuDevice) -> Reading[GpuData]:
    return Reading("nvml", Status.OK, GpuData("580.95.05", devices), at=at)


# --------------------------------------------------------------------------- simulated node


def test_the_simulated_gpus_report_health_and_integrate_their_energy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = state.NodeSpec(gpus=2, gpu_name="NVIDIA B200", gpu_total_bytes=179 * GIB,
                          gpu_reserved_bytes=GIB // 2, host_total_bytes=2048 * GIB,
                          host_baseline_used_bytes=40 * GIB)
    state.write_spec(tmp_path, spec)
    proc = state.ProcState(pid=os.getpid(), started=start_of(os.getpid()) or 0.0, name="sglang",
                           gpu_bytes={0: 100 * GIB}, gpu_util_pct={0: 100.0})
    state.write_proc(tmp_path, proc)
    clock = [1000.0]
    monkeypatch.setattr(backends, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    backend = backends.SimGpuBackend(tmp_path)

    busy, idle = backend.sample().devices
    # 140 W idle, plus 80% of the way to the 1000 W limit at full load: 828 W.
    assert (busy.power_w, idle.power_w, busy.power_limit_w) == (828.0, 140.0, 1000.0)
    assert (busy.energy_mj, idle.energy_mj) == (0, 0)  # the simulated driver just loaded
    assert (busy.temperature_c, idle.temperature_c) == (72, 34)
    assert (busy.sm_clock_mhz, idle.sm_clock_mhz, busy.mem_clock_mhz) == (1965, 345, 3996)
    assert busy.throttle_reasons == () and idle.throttle_reasons == ()
    assert (busy.pcie_gen, busy.pcie_width, busy.pcie_gen_max, busy.pcie_width_max) == (
        5, 16, 5, 16)
    assert (busy.ecc_corrected, busy.ecc_uncorrected, busy.pcie_replay_errors) == (0, 0, 0)
    assert busy.nvlink_rx_bytes_per_s == 60e9 and idle.nvlink_tx_bytes_per_s == 0.0
    assert busy.xids == () and busy.unsupported == ()

    clock[0] += 2.0  # two seconds at a steady draw: power x time
    busy, idle = backend.sample().devices
    assert (busy.energy_mj, idle.energy_mj) == (828 * 2 * 1000, 140 * 2 * 1000)

    state.write_proc(tmp_path, dataclasses.replace(proc, gpu_util_pct={0: 50.0}))
    clock[0] += 1.0  # the draw fell to 484 W: the second counts at the mean of the two
    busy, _ = backend.sample().devices
    assert busy.power_w == 484.0 and busy.temperature_c == 53
    assert busy.energy_mj == 828 * 2000 + (828 + 484) // 2 * 1000


# --------------------------------------------------------------------------- energy per token


def test_energy_per_token_by_hand() -> None:
    # Four B200s at 800 W each for 10 s: 32,000 J; 16,000 tokens in that window: 2 J each.
    before = gpu_reading(100.0, *(device(i, 5_000_000_000 + i) for i in range(4)))
    after = gpu_reading(110.0, *(device(i, 5_000_000_000 + i + 8_000_000) for i in range(4)))
    assert energy.total_energy_mj(after.data) == 4 * 5_008_000_000 + 6
    power = energy.mean_power_w(before, after)
    assert power == 3200.0
    assert energy.joules_per_token(power, 16_000 / 10.0) == 2.0
    # Only the GPUs the server uses.
    assert energy.mean_power_w(before, after, gpus=[0, 1]) == 1600.0
    # No figure rather than a wrong one.
    assert energy.mean_power_w(before, before) is None  # no time between them
    assert energy.mean_power_w(after, before) is None  # the same counters, backwards
    reloaded = gpu_reading(120.0, *(device(i, 1000) for i in range(4)))
    assert energy.mean_power_w(after, reloaded) is None  # a driver reload reset them
    partial = gpu_reading(120.0, *(device(i, None if i == 3 else 6_000_000_000)
                                   for i in range(4)))
    assert energy.mean_power_w(after, partial) is None  # one GPU without a counter
    other = gpu_reading(120.0, *(dataclasses.replace(device(i, 6_000_000_000), uuid=f"x{i}")
                                 for i in range(4)))
    assert energy.mean_power_w(after, other) is None  # other GPUs
    assert energy.joules_per_token(3200.0, 0.0) is None  # no token served
    assert energy.joules_per_token(None, 10.0) is None


def serving_store(throttle: tuple[str, ...], running: float = 8.0) -> RunStore:
    """Two GPUs drawing 700 W and 900 W for 40 s, 400 tokens/s over the server's 30 s
    window: (700 + 900) / 400 = 4 J per token."""
    store = RunStore()
    run = RunFacts(scenario="device", placement="device", node="n", time_scale=1.0,
                   launched_wall=1.7e9, launched_at=0.0, state=RunState.READY, ready_at=1.0)
    store.set_run(run)
    for t in range(41):
        store.add("gpu", gpu_reading(float(t), device(0, 700_000 * t, throttle_reasons=()),
                                     device(1, 900_000 * t, throttle_reasons=throttle)))
    store.add("server", Reading("sglang", Status.OK, ServerData(
        url="http://127.0.0.1:30000", healthy=True, num_running_reqs=running,
        output_tokens_per_s=400.0, window_s=30.0), at=40.0))
    return store


def test_a_live_run_gets_its_energy_per_token_and_its_throttles() -> None:
    store = serving_store(("sw_power_cap", "hw_thermal_slowdown"))
    figures = facts.summary(store)
    assert figures.joules_per_token == 4.0
    assert figures.throttled == ("GPU 1 sw_power_cap", "GPU 1 hw_thermal_slowdown")
    run = store.run
    assert run is not None
    run.results = figures
    result = run_result(run, 0)
    assert result.joules_per_token == 4.0
    assert f"{THROTTLED}: GPU 1 sw_power_cap; GPU 1 hw_thermal_slowdown" in result.notes
    # Clocks held down while no request runs cost no figure: not said.
    assert facts.summary(serving_store(("sw_power_cap",), running=0.0)).throttled is None
    assert facts.summary(serving_store(())).throttled is None


def test_run_figures_add_throttles_up_and_read_them_back() -> None:
    first = RunFigures(output_tok_s=100.0, throttled=("GPU 1 sw_power_cap",))
    later = first.merged(RunFigures(output_tok_s=110.0, joules_per_token=2.5,
                                    throttled=("GPU 1 sw_power_cap", "GPU 3 hw_slowdown")))
    assert later.throttled == ("GPU 1 sw_power_cap", "GPU 3 hw_slowdown")
    assert later.merged(RunFigures(output_tok_s=1.0)).throttled == later.throttled
    assert (later.output_tok_s, later.joules_per_token) == (110.0, 2.5)
    data = later.to_json()
    assert data["throttled"] == ["GPU 1 sw_power_cap", "GPU 3 hw_slowdown"]
    assert data["joules_per_token"] == 2.5
    assert RunFigures.from_json(data) == later
    with pytest.raises(ValueError, match="throttled: expected a list of strings"):
        RunFigures.from_json({"throttled": "GPU 1"})


# --------------------------------------------------------------------------- comparison


def test_a_throttled_run_is_flagged_in_the_comparison() -> None:
    results = [
        RunResult("device", "device", "live", 0, gpus=4, output_tok_s=224.0,
                  joules_per_token=11.43),
        RunResult("host-prefetch", "host-prefetch", "live", 0, gpus=4, output_tok_s=191.8,
                  joules_per_token=13.38, notes=("live: window",
                                                 f"{THROTTLED}: GPU 2 sw_power_cap")),
    ]
    c = compare(results, "device")
    assert c.throttled == {"host-prefetch": ("trial 1: GPU 2 sw_power_cap",)}
    assert to_json(c)["throttled"] == {"host-prefetch": ["trial 1: GPU 2 sw_power_cap"]}
    energy_row = c.row("joules_per_token")
    assert energy_row.cells["host-prefetch"].mean == 13.38
    assert energy_row.cells["host-prefetch"].delta == pytest.approx(13.38 / 11.43 - 1)
    md = to_markdown(c)
    assert "| energy per token | J/tok | lower | 11.430 | 13.380 (Δ +17.06%) |" in md
    assert "⚠ host-prefetch throttled while serving: trial 1: GPU 2 sw_power_cap." in md

    console = Console(width=100, record=True)
    console.print(comparison_table(c, RunStore()))
    lines = console.export_text().splitlines()
    throttled = next(line for line in lines if "throttled while serving" in line)
    assert "trial 1: GPU 2 sw_power_cap" in throttled
    assert throttled.split("│")[2].strip() == "–"  # the baseline was not throttled
    energy_line = next(line for line in lines if "energy per token (J/tok)" in line)
    assert "11.43" in energy_line and "13.38 +17.1%" in energy_line
    # An unthrottled comparison has no such row.
    console = Console(width=100, record=True)
    console.print(comparison_table(compare(results[:1], "device"), RunStore()))
    assert "throttled" not in console.export_text()


# --------------------------------------------------------------------------- alerts


def test_xid_and_uncorrected_ecc_errors_raise_alerts() -> None:
    store = RunStore()
    store.add("gpu", gpu_reading(0.0, device(0, ecc_corrected=40, ecc_uncorrected=0),
                                 device(1, xids=(13, 79)),
                                 device(2, ecc_uncorrected=2, ecc_corrected=5),
                                 device(3, ecc_uncorrected=1)))
    monitor = AlertMonitor()
    changes = monitor.evaluate(store, 0.0)
    assert {c.alert.id: (c.alert.severity, c.alert.message) for c in changes} == {
        "xid:gpu1": ("error", "GPU 1 XID 13 (graphics engine exception), "
                              "XID 79 (GPU has fallen off the bus)"),
        "ecc:gpu2": ("error", "GPU 2 2 uncorrected ECC errors since the driver loaded"),
        "ecc:gpu3": ("error", "GPU 3 1 uncorrected ECC error since the driver loaded"),
    }  # corrected errors alone (GPU 0) are the ECC doing its job
    assert ("error", "GPU 1 XID 13 (graphics engine exception), XID 79 (GPU has fallen "
                     "off the bus)") in [(e.level, e.text) for e in store.events]
    # Switched off by name in the config.
    quiet = AlertMonitor(Thresholds(disabled=("xid", "ecc")))
    assert quiet.evaluate(RunStore(), 0.0) == []
    store2 = RunStore()
    store2.add("gpu", gpu_reading(0.0, device(1, xids=(79,), ecc_uncorrected=3)))
    assert quiet.evaluate(store2, 0.0) == []
    # Cleared once the reading no longer says so (a new collector, a driver reload).
    store.add("gpu", gpu_reading(1.0, device(0), device(1), device(2), device(3)))
    changes = monitor.evaluate(store, 10.0)
    changes += monitor.evaluate(store, 20.0)  # after clear_after_s
    assert sorted(c.alert.id for c in changes if c.change == "cleared") == [
        "ecc:gpu2", "ecc:gpu3", "xid:gpu1"]


# --------------------------------------------------------------------------- the panel


def test_the_hbm_panel_shows_health_within_half_of_100_columns() -> None:
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from scene import NOW, scene_store

    store = scene_store()
    gpus = list(store.data("gpu").devices)
    gpus[1] = dataclasses.replace(gpus[1], power_w=998.0, throttle_reasons=("sw_power_cap",))
    gpus[2] = dataclasses.replace(gpus[2], temperature_c=91,
                                  throttle_reasons=("sw_power_cap", "hw_thermal_slowdown"))
    store.add("gpu", Reading("nvml", Status.OK, GpuData("580.95.05", tuple(gpus)), at=NOW))

    # 100x30: 46 columns, 6 lines. The GPU rows and the throttle stay; nothing is cut.
    lines = [line.plain for line in hbm_panel(store, rows=6, cols=46).renderables]
    assert lines == [
        "GPU   GiB          srv util °C W/1000    rx/s",
        "0   140.2 █████░ 140.0  90% 61    640 2.28 GB",
        "1!  140.5 █████░ 140.2  91% 62    998 2.06 GB",
        "2!  140.7 █████░ 140.4  92% 91    642 1.78 GB",
        "3   140.9 █████░ 140.6  93% 64    643 1.71 GB",
        "throttled sw_power_cap: GPU 1,2",
    ]
    # Taller: each reason on a line of its own where both do not fit one, then the weights
    # per GPU whole (the headline figure), then the legend and the ledger's other holders.
    lines = [line.plain for line in hbm_panel(store, rows=8, cols=46).renderables]
    assert lines[5:] == ["throttled sw_power_cap: GPU 1,2",
                         "throttled hw_thermal_slowdown: GPU 2",
                         "weights 72.201 · KV 59.47 · graphs 1.20 GB"]
    lines = [line.plain for line in hbm_panel(store, rows=12, cols=46).renderables]
    assert lines[8:] == ["■ reserved 0.5 ■ other ■ this server · 179 GiB",
                         "GPU0 python (pid 999) 0.5 · ? 6.9", "GPU2 python (pid 999) 0.5 · ? 8.5"]
    # Limits that differ cannot go in the header: each GPU's, with a shorter bar.
    gpus[3] = dataclasses.replace(gpus[3], power_limit_w=700.0)
    store.add("gpu", Reading("nvml", Status.OK, GpuData("580.95.05", tuple(gpus)), at=NOW))
    lines = [line.plain for line in hbm_panel(store, rows=6, cols=46).renderables]
    assert lines[0] == "GPU   GiB        srv util °C  power W    rx/s"
    assert lines[4] == "3   140.9 ███░ 140.6  93% 64  643/700 1.71 GB"
    assert max(len(line) for line in lines) <= 46
    # A wide panel has the clocks and the throttles as columns.
    lines = [line.plain for line in hbm_panel(store, rows=None, cols=120).renderables]
    assert lines[0].split() == ["GPU", "GiB", "used", "srv", "util", "°C", "power", "W",
                                "SM", "MHz", "rx/s", "throttled"]
    assert lines[3].endswith("1965 1.78 GB sw_power_cap,hw_thermal_slowdown")
    assert lines[4].split()[6] == "643/700"


def test_the_health_fields_survive_a_recording() -> None:
    reading = gpu_reading(5.0, device(
        0, 123_456, temperature_c=70, sm_clock_mhz=1800, mem_clock_mhz=3996,
        throttle_reasons=("sw_power_cap",), pcie_gen=4, pcie_gen_max=5, pcie_width=8,
        pcie_width_max=16, pcie_replay_errors=3, nvlink_tx_bytes_per_s=1e9,
        nvlink_rx_bytes_per_s=2e9, ecc_corrected=1, ecc_uncorrected=0, xids=(79, 48),
        unsupported=(("nvlink_tx_bytes_per_s", "Not Supported"),)))
    back = decode_reading(encode_reading(reading, origin=1.0), origin=1.0)
    assert back == reading
    # A recording made before these fields reads back with them unknown.
    old = encode_reading(gpu_reading(5.0, device(0)))
    for name in ("temperature_c", "throttle_reasons", "energy_mj", "xids"):
        del old["data"]["devices"][0][name]
    (dev,) = decode_reading(old).data.devices
    assert (dev.temperature_c, dev.throttle_reasons, dev.energy_mj, dev.xids) == (
        None, None, None, ())
