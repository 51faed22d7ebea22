"""The command line as a user runs it: the venv's `engram-top` as a subprocess.

The snapshot runs each start a simulated server; they are launched together (and beside the
session's fleet) so their start-ups overlap.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import ENGRAM_TOP

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

if TYPE_CHECKING:
    from helpers import Fleet, SimServer


def engram_top(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGRAM_TOP, *args], capture_output=True, text=True, timeout=timeout)


@dataclass
class SnapshotRun:
    out: Path
    proc: subprocess.Popen[str]
    stdout: str = ""
    stderr: str = ""

    def wait(self, timeout: float = 90.0) -> SnapshotRun:
        if self.proc.returncode is None:
            self.stdout, self.stderr = self.proc.communicate(timeout=timeout)
        return self

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def folder(self) -> Path:
        """The snapshot folder the command printed: a new one under --out."""
        self.wait()
        assert self.returncode == 0, self.stderr
        folder = Path(self.stdout.strip())
        assert folder.parent == self.out
        return folder

    def snapshot(self) -> dict:
        return json.loads((self.folder / "snapshot.json").read_text())


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory,
              fleet: Fleet) -> Iterator[dict[str, SnapshotRun]]:
    # `fleet` is asked for only to launch the session's servers now, beside these runs.
    base = tmp_path_factory.mktemp("snapshots")
    blocker = base / "a-file"
    blocker.write_text("not a folder\n")
    common = ["snapshot", "--demo", "--no-load"]
    runs = {
        "device": (base / "device", ["--placement", "device", "--after", "1",
                                     "--time-scale", "0.03"]),
        "host-prefetch": (base / "hp", ["--placement", "host-prefetch", "--after", "1",
                                        "--time-scale", "0.02"]),
        # The server comes up, then the write fails: a path under a regular file.
        "unwritable": (blocker / "sub", ["--placement", "device", "--after", "0",
                                         "--time-scale", "0.02"]),
    }
    started: dict[str, SnapshotRun] = {}
    try:
        for name, (out, args) in runs.items():
            started[name] = SnapshotRun(out, subprocess.Popen(
                [*ENGRAM_TOP, *common, *args, "--out", str(out)], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=base))
        yield started
    finally:
        # SIGTERM first: the command then stops the server it started (SIGKILL would
        # orphan it); SIGKILL only for a command that does not end in time.
        for run in started.values():
            run.proc.terminate()
        for run in started.values():
            try:
                run.wait(30)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.wait()


def test_snapshot_device(snapshots: dict[str, SnapshotRun]) -> None:
    run = snapshots["device"]
    snap = run.snapshot()
    assert sorted(p.name for p in run.folder.iterdir()) == [
        "history.png", "screen.svg", "snapshot.json", "summary.md", "timeseries.csv",
        "timeseries.parquet"]
    assert "11.84M" in (run.folder / "screen.svg").read_text()
    assert snap["run"]["state"] == "ready"
    assert snap["run"]["placement"] == "device"
    assert snap["run"]["engram_host_tables"] == []
    assert snap["run"]["max_total_num_tokens_log"] == 11_840_000
    gpus = snap["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    for g in gpus:
        assert g["name"] == "NVIDIA B200"
        assert g["weights_gb"] == 119.043
        assert g["kv_tokens"] == 11_840_000
        assert g["used_bytes"] > 0 and g["baseline_used_bytes"] == 0
    assert snap["kv"]["capacity_tokens"] == 11_840_000
    # DeepSeek-V4's pools: the full one is the seed's capacity, the others beside it.
    assert snap["kv"]["pools"] == {"full": 11_840_000, "swa": 112_640, "c4": 2_960_000,
                                   "c128": 92_500, "c4_state": 14_080, "c128_state": 0}
    assert snap["engram"]["placement"] == "device" and snap["engram"]["prefetch"] == "n/a"
    assert abs(snap["host"]["delta_gib"] - 6.5) < 0.01
    assert snap["load"] == {}  # --no-load


def test_snapshot_host_prefetch(snapshots: dict[str, SnapshotRun]) -> None:
    snap = snapshots["host-prefetch"].snapshot()
    assert snap["run"]["state"] == "ready"
    assert snap["run"]["placement"] == "host-prefetch"
    for g in snap["gpus"]:
        assert g["weights_gb"] == 72.201
        assert g["kv_tokens"] == 42_700_288
        assert round(g["kv_tokens"] / 1e6, 2) == 42.70
    assert 195 <= snap["host"]["delta_gib"] <= 202
    assert [t["label"] for t in snap["run"]["engram_host_tables"]] == ["L1", "L14"]
    pools = snap["kv"]["pools"]
    assert pools["full"] == 42_700_288 and pools["c4"] == 42_700_288 // 4
    assert pools["swa"] == 112_640  # the SWA cap follows the requests, not the freed HBM
    engram = snap["engram"]
    assert (engram["placement"], engram["layout"], engram["pinned"]) == \
        ("host-prefetch", "shared", True)
    # Every condition holds on the simulated B200s: shared layout, no DP attention, PP 1,
    # the DSV4 backend, no speculative decoding.
    assert engram["verdict"] == "prefetch: engaged"
    assert 180 * 1024 <= engram["resident_mib"] <= 200 * 1024
    assert "prefetch: engaged" in (snapshots["host-prefetch"].folder / "summary.md").read_text()
    deltas = snap["reference"]["deltas"]
    assert deltas["ttft_mean"]["value"] == 0.1557


def test_snapshot_into_an_unwritable_path_fails_cleanly(snapshots: dict[str, SnapshotRun]) -> None:
    run = snapshots["unwritable"].wait()
    assert run.returncode == 1
    assert "Traceback" not in run.stderr
    # Checked before any server starts: the message names the folder and the reason.
    assert f"cannot write into {run.out}" in run.stderr
    assert "Not a directory" in run.stderr
    assert run.stdout == ""


def test_snapshot_needs_a_source() -> None:
    res = engram_top("snapshot", "--out", "somewhere")
    assert res.returncode == 2
    assert "--demo" in res.stderr


def test_help() -> None:
    res = engram_top("--help")
    assert res.returncode == 0
    for command in ("demo", "snapshot", "inspect-log", "inspect-metrics", "sim"):
        assert command in res.stdout
    assert engram_top("sim", "serve", "--help").returncode == 0


def test_inspect_log_on_a_sim_log(sim_device: SimServer) -> None:
    sim_device.wait_log("fired up and ready to roll")
    res = engram_top("inspect-log", str(sim_device.log_path))
    assert res.returncode == 0, res.stderr
    facts = json.loads(res.stdout)
    assert facts["max_total_num_tokens"] == 11_840_000
    assert facts["ready"] is True
    assert facts["current_phase"] == "ready"
    assert facts["uvicorn_url"] == f"http://127.0.0.1:{sim_device.port}"
    assert sorted(facts["ranks"]) == ["0", "1", "2", "3"]  # JSON object keys
    for rank in facts["ranks"].values():
        assert rank["weights_gb"] == 119.04
        assert rank["kv_tokens"] == 11_840_000
        assert rank["graph_mem_usage_gb"] == 2.3
        assert rank["weights_quant"] == "fp8"
    assert facts["errors"] == []


def test_inspect_log_missing_file(tmp_path: Path) -> None:
    res = engram_top("inspect-log", str(tmp_path / "nope.log"))
    assert res.returncode == 1
    assert "nope.log" in res.stderr and "Traceback" not in res.stderr


def test_inspect_metrics_on_a_saved_page(tmp_path: Path, device_metrics_page: str) -> None:
    page = tmp_path / "metrics.txt"
    page.write_text(device_metrics_page)
    res = engram_top("inspect-metrics", str(page))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert "sglang:time_to_first_token_seconds" in out["sglang_families"]
    assert out["page"] == "sglang"
    # DeepSeek-V4.1's pools besides the usual gauges; nothing the simulated node lacks.
    assert set(out["gauges"]) == {
        "num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage",
        "gen_throughput", "full_token_usage", "swa_token_usage", "kv_used_tokens",
        "kv_available_tokens", "kv_evictable_tokens", "num_retracted_reqs", "num_paused_reqs",
        "cache_hit_rate"}
    assert out["gauges"]["num_paused_reqs"] == 0  # SGLang's gauge: none paused by a weight sync
    # No HiCache on this node; the simulator serves no Mamba pool gauge (SGLang states 0.0).
    assert out["missing"] == ["hicache_host_total_tokens", "hicache_host_used_tokens",
                              "mamba_usage"]
    assert out["constants"]["max_total_num_tokens"] == 11_840_000
    assert out["page_problems"] == []
    assert sorted(out["ranks"]) == ["0", "1", "2", "3"]
    for rank in out["ranks"].values():
        assert rank["weight_gb"] == 119.043
        assert rank["max_total_num_tokens"] == 11_840_000
    assert set(out["histograms"]) == {"ttft", "itl", "e2e", "queue_time"}
    # At least the server's own warm-up request was served.
    assert out["histograms"]["ttft"]["count"] >= 1
    assert out["counters"]["sglang:num_requests_total"] >= 1


def test_inspect_metrics_on_a_url(sim_device: SimServer) -> None:
    res = engram_top("inspect-metrics", sim_device.url)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ranks"]["0"]["weight_gb"] == 119.043


def test_inspect_metrics_reads_around_the_lines_it_cannot(tmp_path: Path) -> None:
    # A page as people paste it: an author's "..." between families, a line cut short.
    page = tmp_path / "pasted.txt"
    page.write_text("# TYPE sglang:token_usage gauge\nsglang:token_usage 0.5\n...\n"
                    'sglang:num_running_reqs{tp_rank="0" 1\n'
                    "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 3\n")
    res = engram_top("inspect-metrics", str(page))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["gauges"]["token_usage"] == 0.5 and out["gauges"]["num_queue_reqs"] == 3
    assert out["page_problems"][:2] == [
        "line 3: invalid metric name: '...' (skipped)",
        "line 4: expected ',' or '}' after label 'tp_rank': "
        "'sglang:num_running_reqs{tp_rank=\"0\" 1' (skipped)"]


def test_inspect_metrics_on_a_page_with_no_line_it_can_read(tmp_path: Path) -> None:
    page = tmp_path / "broken.txt"
    page.write_text('sglang:num_running_reqs{tp_rank="0" 1\n...\n')
    res = engram_top("inspect-metrics", str(page))
    assert res.returncode == 1
    assert "line 1" in res.stderr and str(page) in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stdout == ""


def test_inspect_metrics_with_nothing_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    res = engram_top("inspect-metrics", url)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert url in lines[0]


def test_options_without_a_command_are_the_demos() -> None:
    res = engram_top("--no-record", "--help")
    assert res.returncode == 0, res.stderr
    assert "--placement" in res.stdout and "--no-record" in res.stdout


def test_every_option_of_the_headless_commands_says_what_it_is() -> None:
    for command in ("switch", "stop", "bench", "run"):
        res = engram_top(command, "--help")
        text = " ".join(res.stdout.split())
        assert "--state-dir STATE_DIR the scenario file's state folder" in text, command
    text = " ".join(engram_top("switch", "--help").stdout.split())
    assert "--to NAME the scenario (a [scenarios.NAME] table of the file) to start" in text
    text = " ".join(engram_top("demo", "--help").stdout.split())
    assert "~/.local/state/engram-top, for demo and attach" in text
