"""NVML collector tests.

NvmlBackend runs through the real pynvml over a stand-in libnvidia-ml.so.1 built with gcc
(tests/nvml_stub/). The loader reads LD_LIBRARY_PATH only at process start, so those tests
run the collector in a subprocess with the stub's directory on that path. GpuCollector's
failure handling, in-process with Python fake backends, is in
tests/collectors/test_nvml_inprocess.py (the quick tier).
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port

from collectors.proc_names import ProcessNames

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]

MIB = 1024 * 1024
UNSEEN = 4194304 + 7  # beyond Linux's PID_MAX_LIMIT: no process of this host has it
B200_TOTAL = 183359 * MIB
B200_RESERVED = 512 * MIB
NO_DRIVER = "no NVIDIA driver: libnvidia-ml.so.1 not found"


def _load_build_module() -> Any:
    # By path: tests/ is not a package, and its import mode may change.
    spec = importlib.util.spec_from_file_location(
        "nvml_stub_build", Path(__file__).parents[1] / "nvml_stub" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def stub_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Directories holding the stub library: "current" and "old" (no _v2 memory/_v3 procs)."""
    build = _load_build_module()
    if not build.gcc_available():
        pytest.skip("gcc is needed to build the stand-in libnvidia-ml.so.1")
    return build.build_variants(tmp_path_factory.mktemp("nvml_stub"))


# Runs in the subprocess: poll once per step (optionally rewriting the stub's state file
# first), then print every Reading as JSON.
_DRIVER = r"""
import asyncio, dataclasses, json, os, sys, time
from collectors.nvml import GpuCollector, NvmlBackend

async def main(steps):
    clock = [time.monotonic()]  # the backend's: moved on by a step's "advance" (seconds)
    collector = GpuCollector(NvmlBackend(clock=lambda: clock[0]), timeout=10.0)
    out = []
    for step in steps:
        if "state" in step:
            with open(os.environ["FAKE_NVML_STATE_FILE"], "w") as f:
                f.write(step["state"])
        time.sleep(step.get("sleep", 0.0))
        clock[0] += step.get("sleep", 0.0) + step.get("advance", 0.0)
        r = await collector.poll()
        out.append({"status": str(r.status), "message": r.message,
                    "failing_since": r.failing_since,
                    "data": dataclasses.asdict(r.data) if r.data is not None else None})
    await collector.close()
    print(json.dumps(out))

asyncio.run(main(json.loads(sys.argv[1])))
"""


def run_nvml(lib_dir: Path | None, steps: list[dict[str, Any]] | None = None,
             state_file: Path | None = None, **fake_env: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items()
           if k != "LD_LIBRARY_PATH" and not k.startswith("FAKE_NVML_")}
    env["PYTHONPATH"] = str(ROOT)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    if state_file is not None:
        env["FAKE_NVML_STATE_FILE"] = str(state_file)
    env.update(fake_env)
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(steps or [{}])],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def devices(reading: dict[str, Any]) -> list[dict[str, Any]]:
    assert reading["status"] == "ok", reading["message"]
    return reading["data"]["devices"]


def unsupported(device: dict[str, Any]) -> dict[str, str]:
    return {name: text for name, text in device["unsupported"]}


# --------------------------------------------------------------------------- via the stub


def test_memory_and_identity_match_the_stub(stub_libs: dict[str, Path], tmp_path: Path) -> None:
    state = tmp_path / "state"
    used0, used1, used0_later = 140_000 * MIB, 90_000 * MIB, 160_123 * MIB
    first, second = run_nvml(stub_libs["current"], state_file=state, steps=[
        {"state": f"0 used {used0}\n1 used {used1}\n"},
        {"state": f"0 used {used0_later}\n1 used {used1}\n"},
    ])

    assert first["failing_since"] is None
    assert first["data"]["driver_version"] == "580.95.05"
    assert first["data"]["backend"] == "nvml"
    d0, d1 = devices(first)
    for index, dev, used in ((0, d0, used0), (1, d1, used1)):
        assert dev["index"] == index
        assert dev["name"] == "NVIDIA B200"
        assert dev["uuid"] == f"GPU-fa4e0b20-0000-4000-8000-{index:012x}"
        assert dev["total_bytes"] == B200_TOTAL
        assert dev["reserved_bytes"] == B200_RESERVED
        assert dev["used_bytes"] == used
        assert dev["free_bytes"] == B200_TOTAL - B200_RESERVED - used
        assert dev["util_gpu_pct"] == 87
        assert dev["util_mem_pct"] == 41
        assert dev["power_limit_w"] == 1000.0
        assert dev["unsupported"] == []
    assert d0["power_w"] == 650.0
    assert d1["power_w"] == 651.0

    # The state file changed between samples; the second sample sees it.
    later = devices(second)[0]
    assert later["used_bytes"] == used0_later
    assert later["free_bytes"] == B200_TOTAL - B200_RESERVED - used0_later


def test_old_driver_falls_back_to_memory_v1_and_processes_v2(
        stub_libs: dict[str, Path], tmp_path: Path) -> None:
    used = 100_000 * MIB
    (reading,) = run_nvml(stub_libs["old"], state_file=tmp_path / "state", steps=[
        {"state": f"0 used {used}\n0 proc {UNSEEN} {used}\n"}], FAKE_NVML_COUNT="1")

    (dev,) = devices(reading)
    assert dev["total_bytes"] == B200_TOTAL
    assert dev["reserved_bytes"] == 0
    # v1 "used" includes the driver's reservation.
    assert dev["used_bytes"] == used + B200_RESERVED
    assert dev["free_bytes"] == B200_TOTAL - B200_RESERVED - used
    assert unsupported(dev) == {"reserved_bytes": "Function Not Found"}
    # pynvml's unversioned call raised NVMLLibraryMismatchError; _v2 answered instead.
    assert dev["processes"] == [{"pid": UNSEEN, "used_bytes": used, "name": "",
                                 "seen": False, "container": ""}]


def test_process_list_with_pids_and_bytes(stub_libs: dict[str, Path], tmp_path: Path) -> None:
    # A process of this host (this test's own) is named from /proc; pids beyond Linux's
    # PID_MAX_LIMIT, as another PID namespace's would be, are said unseen.
    me, away = os.getpid(), UNSEEN + 1111
    (reading,) = run_nvml(stub_libs["current"], state_file=tmp_path / "state", FAKE_NVML_COUNT="3",
                          steps=[{"state": f"0 proc {me} 1073741824\n0 proc {away} na\n"
                                           "1 noprocs\n"}])

    d0, d1, d2 = devices(reading)
    own = Path(f"/proc/{me}/comm").read_text().strip()
    # What this test runs in, as its own cgroup says ("" on a host, or a container's name).
    mine = ProcessNames().container(me)
    assert d0["processes"] == [
        {"pid": me, "used_bytes": 1 << 30, "name": own, "seen": True, "container": mine},
        # NOT_AVAILABLE bytes
        {"pid": away, "used_bytes": None, "name": "", "seen": False, "container": ""},
    ]
    assert d1["processes"] == []
    # Untouched device: the stub's default process, a pid no host has.
    assert d2["processes"] == [{"pid": 4194304 + 4244, "used_bytes": (152_000 - 200) * MIB,
                                "name": "", "seen": False, "container": ""}]
    assert all(unsupported(d) == {} for d in (d0, d1, d2))


def test_field_failures_degrade_to_none(stub_libs: dict[str, Path], tmp_path: Path) -> None:
    state = (
        "* fail power 3\n"            # NotSupported everywhere
        "0 fail utilization 3\n"
        "0 fail name 3\n"
        "1 fail processes 15\n"       # GpuIsLost
        "1 fail memory_v2 3\n"
        "1 fail memory 3\n"
        "2 fail handle 4\n"           # NoPermission on the handle
    )
    (reading,) = run_nvml(stub_libs["current"], state_file=tmp_path / "state",
                          FAKE_NVML_COUNT="3", steps=[{"state": state}])

    d0, d1, d2 = devices(reading)  # the sample as a whole is still OK
    assert d0["power_w"] is None and d1["power_w"] is None
    assert d0["util_gpu_pct"] is None and d0["util_mem_pct"] is None
    assert d0["name"] == ""
    assert unsupported(d0) == {
        "name": "Not Supported", "util_gpu_pct": "Not Supported",
        "util_mem_pct": "Not Supported", "power_w": "Not Supported",
    }
    # Everything else on device 0 still came through.
    assert d0["uuid"].startswith("GPU-") and d0["total_bytes"] == B200_TOTAL
    assert d0["power_limit_w"] == 1000.0 and d0["processes"]

    assert d1["processes"] == []
    assert (d1["total_bytes"], d1["used_bytes"], d1["free_bytes"]) == (0, 0, 0)
    assert unsupported(d1) == {"power_w": "Not Supported", "processes": "GPU is lost",
                               "memory": "Not Supported"}
    assert d1["util_gpu_pct"] == 87

    assert d2["name"] == "" and d2["total_bytes"] == 0
    assert unsupported(d2) == {"handle": "Insufficient Permissions"}


def test_what_a_gpu_never_changes_is_read_until_given_then_kept(
        stub_libs: dict[str, Path], tmp_path: Path) -> None:
    """A GPU's name, UUID and PCIe maxima are kept once read (a fifth of a sample's calls);
    a refusal is asked again, and a GPU whose handle was refused is read anew."""
    fails = "0 fail name 3\n"
    readings = run_nvml(stub_libs["current"], state_file=tmp_path / "state",
                        FAKE_NVML_COUNT="1", steps=[
                            {"state": fails}, {"state": ""}, {"state": fails},
                            {"state": "0 fail handle 4\n"}, {"state": fails}])
    names = [(d["name"], "name" in unsupported(d)) for r in readings for d in devices(r)]
    assert names == [("", True), ("NVIDIA B200", False), ("NVIDIA B200", False),
                     ("", False), ("", True)]
    kept = devices(readings[2])[0]
    assert kept["uuid"] == "GPU-fa4e0b20-0000-4000-8000-000000000000"
    assert (kept["pcie_gen_max"], kept["pcie_width_max"]) == (5, 16)
    assert all(r["data"]["driver_version"] == "580.95.05" for r in readings)


def test_pcie_rates_come_from_counter_deltas(stub_libs: dict[str, Path], tmp_path: Path) -> None:
    tx, rx = 3_000_000_000, 7_000_000_000
    first, second, third = run_nvml(
        stub_libs["current"], state_file=tmp_path / "state", FAKE_NVML_COUNT="1",
        steps=[{"state": f"0 pcie {tx} {rx}\n"}, {"sleep": 0.1}, {"sleep": 0.05}])

    # No delta yet: the 20 ms snapshot (KB/s * 1000) fills in.
    (d,) = devices(first)
    assert (d["pcie_tx_bytes_per_s"], d["pcie_rx_bytes_per_s"]) == (2e9, 1e10)
    # Then Δcounter / Δtimestamp: the stub's counter slope, not its snapshot.
    for reading in (second, third):
        (d,) = devices(reading)
        assert d["pcie_tx_bytes_per_s"] > 0 and d["pcie_rx_bytes_per_s"] > 0
        assert d["pcie_tx_bytes_per_s"] == pytest.approx(tx, rel=1e-3)
        assert d["pcie_rx_bytes_per_s"] == pytest.approx(rx, rel=1e-3)
        assert unsupported(d) == {}


def test_pcie_counters_of_32_bits_are_not_read_as_rates(stub_libs: dict[str, Path],
                                                        tmp_path: Path) -> None:
    # An H200 on driver 580.159.04 answers fields 197/198 as unsigned int: at 59.5 GB/s the
    # RX counter wraps about 14 times a second, and a delta a sample apart read 375 MB/s
    # where nvidia-smi dmon read 59,546 MB/s. The 20 ms window is the figure there.
    tx, rx = 5_170_000_000, 59_500_000_000
    readings = run_nvml(
        stub_libs["current"], state_file=tmp_path / "state", FAKE_NVML_COUNT="1",
        steps=[{"state": f"0 pcie {tx} {rx}\n0 pcie32\n0 snapshot 5169579 59498433\n"},
               {"sleep": 0.1}, {"sleep": 0.13}])
    for reading in readings:
        (d,) = devices(reading)
        assert (d["pcie_tx_bytes_per_s"], d["pcie_rx_bytes_per_s"]) == (5_169_579_000,
                                                                        59_498_433_000)
        assert unsupported(d) == {}


def test_pcie_without_counters_uses_throughput(stub_libs: dict[str, Path], tmp_path: Path) -> None:
    state = tmp_path / "state"
    readings = run_nvml(stub_libs["current"], state_file=state, FAKE_NVML_COUNT="1",
                        FAKE_NVML_NO_FIELDS="1",
                        steps=[{"state": "0 snapshot 1500 2500\n"}, {"sleep": 0.02},
                               {"state": "0 fail throughput 3\n"}])

    # No field values at all: the NVLink counters are field values too.
    no_nvlink = {"nvlink_tx_bytes_per_s": "Not Supported",
                 "nvlink_rx_bytes_per_s": "Not Supported"}
    for reading in readings[:2]:
        (d,) = devices(reading)
        assert (d["pcie_tx_bytes_per_s"], d["pcie_rx_bytes_per_s"]) == (1.5e6, 2.5e6)
        assert unsupported(d) == no_nvlink
    # Neither source left: None, and both refusals named.
    (d,) = devices(readings[2])
    assert d["pcie_tx_bytes_per_s"] is None and d["pcie_rx_bytes_per_s"] is None
    text = "counters: Not Supported; throughput: Not Supported"
    assert unsupported(d) == {"pcie_tx_bytes_per_s": text, "pcie_rx_bytes_per_s": text,
                              **no_nvlink}


# --------------------------------------------------------------------------- health

HEALTH_NONE = {"temperature_c": None, "sm_clock_mhz": None, "mem_clock_mhz": None,
               "throttle_reasons": None, "energy_mj": None, "pcie_gen": None,
               "pcie_gen_max": None, "pcie_width": None, "pcie_width_max": None,
               "pcie_replay_errors": None, "nvlink_tx_bytes_per_s": None,
               "nvlink_rx_bytes_per_s": None, "ecc_corrected": None, "ecc_uncorrected": None}


def test_health_fields_match_the_stub(stub_libs: dict[str, Path], tmp_path: Path) -> None:
    state = ("0 temp 71\n0 clocks 1650 3996\n"
             "0 reasons 0x45\n"        # idle (not throttling) + sw power cap + hw thermal
             "1 reasons 0x3\n"         # idle + applications clocks: not throttling
             "0 energy 123456789\n0 link 4 8\n0 replay 7\n0 ecc 12 1\n"
             "0 nvlink 30000000000 20000000000\n")
    first, second = run_nvml(stub_libs["current"], state_file=tmp_path / "state",
                             steps=[{"state": state}, {"sleep": 0.1}])

    d0, d1 = devices(first)
    assert d0["temperature_c"] == 71 and d1["temperature_c"] == 63
    assert (d0["sm_clock_mhz"], d0["mem_clock_mhz"]) == (1650, 3996)
    assert (d1["sm_clock_mhz"], d1["mem_clock_mhz"]) == (1965, 3996)
    assert d0["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert d1["throttle_reasons"] == []
    assert d0["energy_mj"] == 123_456_789
    assert (d0["pcie_gen"], d0["pcie_width"], d0["pcie_gen_max"], d0["pcie_width_max"]) \
        == (4, 8, 5, 16)
    assert (d1["pcie_gen"], d1["pcie_width"]) == (5, 16)
    assert (d0["pcie_replay_errors"], d1["pcie_replay_errors"]) == (7, 0)
    assert (d0["ecc_corrected"], d0["ecc_uncorrected"]) == (12, 1)
    assert (d1["ecc_corrected"], d1["ecc_uncorrected"]) == (0, 0)
    assert d0["xids"] == [] and d1["xids"] == []
    # A rate needs two readings of the cumulative NVLink counters.
    assert d0["nvlink_tx_bytes_per_s"] is None and d0["nvlink_rx_bytes_per_s"] is None
    for d in (d0, d1):
        assert d["power_limit_w"] == 1000.0
        assert unsupported(d) == {}

    later0, later1 = devices(second)
    assert later0["nvlink_tx_bytes_per_s"] == pytest.approx(30e9, rel=1e-3)
    assert later0["nvlink_rx_bytes_per_s"] == pytest.approx(20e9, rel=1e-3)
    assert later1["nvlink_tx_bytes_per_s"] == pytest.approx(40e9, rel=1e-3)  # the default
    assert later0["energy_mj"] == 123_456_789  # fixed by the state file
    # Unfixed, the counter grows at the draw (651 W: 65 J in 0.1 s) from the stub's 5e9 mJ.
    assert later1["energy_mj"] - d1["energy_mj"] >= 65_000
    assert d1["energy_mj"] > 5_000_000_000


def test_what_a_gpu_changes_seldom_is_read_every_few_seconds(
        stub_libs: dict[str, Path], tmp_path: Path) -> None:
    """The PCIe link, its replays, the ECC counters and the power limit are read every
    SLOW_S on the backend's clock, and stand as last read between (a refusal too); what
    moves every second is read every sample."""
    from collectors.nvml import SLOW_S
    before = "0 link 4 8\n0 replay 7\n0 ecc 12 1\n0 limit 700000\n"
    after = "0 link 5 16\n0 replay 9\n0 ecc 20 3\n0 limit 600000\n0 temp 80\n"
    readings = run_nvml(stub_libs["current"], state_file=tmp_path / "state",
                        FAKE_NVML_COUNT="1", steps=[
                            {"state": before}, {"state": after, "advance": SLOW_S - 1},
                            {"advance": 1},
                            {"state": after + "0 fail ecc 3\n", "advance": SLOW_S},
                            {"state": after, "advance": SLOW_S - 1}, {"advance": 1}])
    seen = [(d["pcie_gen"], d["pcie_width"], d["pcie_replay_errors"], d["ecc_corrected"],
             d["ecc_uncorrected"], d["power_limit_w"], d["temperature_c"],
             unsupported(d).get("ecc_uncorrected"))
            for r in readings for d in devices(r)]
    assert seen == [(4, 8, 7, 12, 1, 700.0, 62, None),  # (the stub's GPU0 default)
                    (4, 8, 7, 12, 1, 700.0, 80, None),  # the temperature at once
                    (5, 16, 9, 20, 3, 600.0, 80, None),
                    (5, 16, 9, None, None, 600.0, 80, "Not Supported"),
                    (5, 16, 9, None, None, 600.0, 80, "Not Supported"),  # as last read
                    (5, 16, 9, 20, 3, 600.0, 80, None)]


def test_refused_health_fields_are_none_and_named(stub_libs: dict[str, Path],
                                                  tmp_path: Path) -> None:
    calls = ("temperature", "clocks", "clock_events", "energy", "pcie_link", "replay", "ecc",
             "events", "nvlink")
    state = "".join(f"0 fail {c} 3\n" for c in calls) + "1 fail energy 13\n1 fail ecc 3\n"
    first, second = run_nvml(stub_libs["current"], state_file=tmp_path / "state",
                             steps=[{"state": state}, {"sleep": 0.02}])

    for reading in (first, second):
        d0, d1 = devices(reading)  # the sample as a whole is still OK
        assert {k: d0[k] for k in HEALTH_NONE} == HEALTH_NONE
        assert d0["xids"] == []
        assert unsupported(d0) == {**{k: "Not Supported" for k in HEALTH_NONE},
                                   "xids": "Not Supported"}
        # Everything else on that GPU still came through.
        assert d0["power_w"] == 650.0 and d0["pcie_rx_bytes_per_s"] is not None
        # An old driver without the energy symbol: FunctionNotFound, the same None.
        assert d1["energy_mj"] is None and d1["ecc_uncorrected"] is None
        assert unsupported(d1) == {"energy_mj": "Function Not Found",
                                   "ecc_corrected": "Not Supported",
                                   "ecc_uncorrected": "Not Supported"}
        assert d1["temperature_c"] == 63 and d1["throttle_reasons"] == []
    assert devices(second)[1]["nvlink_tx_bytes_per_s"] == pytest.approx(40e9, rel=1e-3)


def test_old_driver_falls_back_to_throttle_reasons_and_temperature(
        stub_libs: dict[str, Path], tmp_path: Path) -> None:
    lib = ctypes.CDLL(str(stub_libs["old"] / "libnvidia-ml.so.1"))
    assert not hasattr(lib, "nvmlDeviceGetCurrentClocksEventReasons")
    assert not hasattr(lib, "nvmlDeviceGetTemperatureV")
    first, second = run_nvml(stub_libs["old"], state_file=tmp_path / "state",
                             FAKE_NVML_COUNT="1",
                             steps=[{"state": "0 reasons 0x88\n0 temp 84\n"},
                                    {"state": "0 reasons 0x20\n0 temp 85\n"}])
    for reading, reasons, temp in ((first, ["hw_slowdown", "hw_power_brake"], 84),
                                   (second, ["sw_thermal_slowdown"], 85)):
        (d,) = devices(reading)
        assert d["throttle_reasons"] == reasons
        assert d["temperature_c"] == temp
        assert unsupported(d) == {"reserved_bytes": "Function Not Found"}


def test_xid_events_are_polled_and_the_last_kept(stub_libs: dict[str, Path],
                                                 tmp_path: Path) -> None:
    many = "".join(f"0 xid {n}\n" for n in range(100, 110))
    readings = run_nvml(stub_libs["current"], state_file=tmp_path / "state", steps=[
        {},
        {"state": "1 xid 79\n1 xid 48\n"},
        {},  # nothing new: the XIDs seen stay
        {"state": "1 xid 79\n1 xid 48\n1 xid 13\n" + many},
    ])
    assert [devices(r)[1]["xids"] for r in readings] == [[], [79, 48], [79, 48], [79, 48, 13]]
    assert [devices(r)[0]["xids"] for r in readings[:3]] == [[], [], []]
    assert devices(readings[3])[0]["xids"] == list(range(102, 110))  # the last 8
    assert all(unsupported(d) == {} for r in readings for d in devices(r))


@pytest.mark.parametrize(("rc", "words"), [
    (9, ("driver not loaded", "kernel module")),
    (4, ("permission", "/dev/nvidia*")),
    (18, ("mismatch", "reboot or reload")),
])
def test_init_errors_are_unavailable(stub_libs: dict[str, Path], rc: int,
                                     words: tuple[str, ...]) -> None:
    first, second = run_nvml(stub_libs["current"], steps=[{}, {}], FAKE_NVML_INIT_RC=str(rc))
    for reading in (first, second):
        assert reading["status"] == "unavailable"
        assert reading["data"] is None
        assert "\n" not in reading["message"]
        for word in words:
            assert word in reading["message"]
    # Init is retried on the second poll, still fails, and the failure run keeps its start.
    assert first["failing_since"] is not None
    assert second["failing_since"] == first["failing_since"]


def test_other_init_error_is_an_error(stub_libs: dict[str, Path]) -> None:
    (reading,) = run_nvml(stub_libs["current"], FAKE_NVML_INIT_RC="999")
    assert reading["status"] == "error"
    assert reading["message"] == "NVMLError_Unknown: Unknown Error"


def test_no_library_is_unavailable() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml")
    first, second = run_nvml(None, steps=[{}, {}])
    for reading in (first, second):
        assert reading["status"] == "unavailable"
        assert reading["message"] == NO_DRIVER
        assert reading["data"] is None
    assert second["failing_since"] == first["failing_since"] is not None


# --------------------------------------------------------------------------- contention

# Runs in the subprocess: a session over stand-in SGLang servers on a driver that answers
# slowly (8 GPUs, 25 ms a query: 200 ms a sample), polled every 50 ms, switched back and
# forth. Each switch takes a baseline and runs the HBM-release guard while polls are in
# flight.
_CONTENTION = r"""
import asyncio, json, sys
from pathlib import Path
from engram_top.live.session import Session, SessionOptions
from scenarios.supervisor import SupervisorError

async def main(scenario_file, state_dir):
    session = Session(SessionOptions(scenario_file=Path(scenario_file), load=None,
                                     state_dir=Path(state_dir), poll_interval=0.05))
    await session.start()
    out = {"refused": [], "baselines": [], "notes": []}
    try:
        for name in ("a", "b", "a", "b"):
            try:
                run = await session.switch(name)
            except SupervisorError as exc:
                out["refused"].append(str(exc))
                continue
            out["baselines"].append(sorted(run.baseline_gpu))
            out["notes"].append(run.baseline_note)
    finally:
        await session.close()
    out["events"] = [e.text for e in session.store.events]
    print(json.dumps(out))

asyncio.run(main(*sys.argv[1:]))
"""


def test_slow_driver_refuses_no_switch_and_skips_no_baseline(stub_libs: dict[str, Path],
                                                            tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    scenarios = tmp_path / "two.toml"
    scenarios.write_text(f"""
[defaults]
kind = "sglang"
python = "{sys.executable}"
model_path = "{model}"
stop_grace_s = 2
hbm_release_timeout_s = 5
env = {{ PYTHONPATH = "{ROOT / 'tests' / 'data' / 'fake_sglang'}" }}
[scenarios.a]
port = {free_port()}
[scenarios.b]
port = {free_port()}
""")
    env = {k: v for k, v in os.environ.items()
           if k != "LD_LIBRARY_PATH" and not k.startswith("FAKE_NVML_")}
    env.update(PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=str(stub_libs["current"]),
               FAKE_NVML_COUNT="8", FAKE_NVML_DELAY_MS="25")
    proc = subprocess.run([sys.executable, "-c", _CONTENTION, str(scenarios),
                           str(tmp_path / "state")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["refused"] == [], out["refused"]
    assert out["baselines"] == [list(range(8))] * 4
    assert out["notes"] == [None] * 4
    assert not [e for e in out["events"] if "HBM baseline" in e or "cannot read" in e]
