"""HiCache and PCIe on the screen: the KV panel's HiCache rows (pools per rank x ranks, used
and total tokens, load-back and backup rates, host-pressure drops), the HBM table's receive
in the unit each figure reads in, the Engram share of it estimated where HiCache reports its
load-back, the snapshot's JSON and summary.md, and inspect-metrics' HiCache totals. On a
fixed store (Pilot at 100x30) and end to end on `sim serve --hicache-size`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from helpers import ENGRAM_TOP, StaticSession, quit_app, screen_text, until
from rich.console import Group
from scene import hicache_store, scene_store

from collectors.units import byte_rate, decimal_bytes
from engram_top.app.main import EngramTopApp
from engram_top.app.panels import hbm_panel, kv_panel
from engram_top.cli.commands import main as engram_top_main
from engram_top.export import snapshot
from engram_top.model import facts
from engram_top.model.hicache import engram_rx_estimate
from engram_top.seed import reference


def lines(group: Group) -> list[str]:
    return [line.plain for line in group.renderables]


# --------------------------------------------------------------------------- the units


@pytest.mark.parametrize(("value", "text"), [
    (2.28e9, "2.28 GB/s"), (4.2e6, "4.20 MB/s"), (812e6, "812 MB/s"), (12_345, "12.3 kB/s"),
    (512, "512 B/s"), (0, "0 B/s"), (999.7e6, "1.00 GB/s"), (1.234e12, "1,234 GB/s"),
    (None, "–"), (float("nan"), "–"), (float("inf"), "–")])
def test_a_byte_rate_reads_in_the_unit_that_shows_it(value: float | None, text: str) -> None:
    assert byte_rate(value) == text
    assert byte_rate(value, per_s=False) == text.removesuffix("/s")


# --------------------------------------------------------------------------- the panels


def test_the_kv_panel_says_the_hicache_tier_in_full_where_room_allows() -> None:
    text = lines(kv_panel(hicache_store(), rows=None, cols=None))
    # 32 GB per rank (SGLang's 1e9-byte GB) x 4 ranks; tokens over the four schedulers.
    assert "HiCache  32.0 GB × 4 ranks = 128 GB · 49.2k/392.0k tokens (13%) · dropping 35 " \
           "tok/s for host pressure" in text
    # The node's load-back is every rank's (1.5 GB/s x 3 + 1 MB/s); backup 20 MB/s x 4 ranks.
    assert "         load-back 4.50 GB/s (host→GPU) · backup 80.0 MB/s (GPU→host)" in text


def test_drops_for_host_pressure_stand_out_and_a_silent_page_reads_unknown() -> None:
    group = kv_panel(hicache_store(), rows=None, cols=48)
    pool = next(line for line in group.renderables if line.plain.startswith("HiCache"))
    at = pool.plain.index("drop")
    assert any(span.start <= at < span.end and "yellow" in str(span.style)
               for span in pool.spans)
    calm = kv_panel(hicache_store(drops=0.0), rows=None, cols=48)
    pool = next(line for line in calm.renderables if line.plain.startswith("HiCache"))
    assert "drop 0/s" in pool.plain
    assert not any("yellow" in str(span.style) for span in pool.spans)
    # A page without the drop counter: unknown, not 0.
    silent = lines(kv_panel(hicache_store(drops=None), rows=None, cols=None))
    assert any("dropping – tok/s" in line for line in silent)


def test_hicache_off_shows_no_row_and_no_estimate() -> None:
    store = scene_store()
    assert facts.hicache_facts(store) is None
    assert not any("HiCache" in line for line in lines(kv_panel(store, rows=None, cols=None)))
    assert not any("≈" in line for line in lines(hbm_panel(store, rows=None, cols=None)))


def test_the_hbm_table_reads_mb_per_s_and_estimates_engram_where_it_fits() -> None:
    store = hicache_store()
    # The panel at 100x30, 46 columns and 7 lines: the GPU rows, the weights, the estimate.
    text = lines(hbm_panel(store, rows=7, cols=46))
    assert text[0].endswith("rx/s") and text[4].endswith(" 4.20 MB")  # not 0.00 GB/s
    assert text[1].endswith(" 2.00 GB")
    assert text[5].startswith("weights 72.201 · KV 59.47")
    # rx less each rank's load-back: 500, 500, 0 and 3.2 MB/s.
    assert text[6] == "Engram ≈ 0 B–500 MB/s per GPU (est.)"
    assert max(len(line) for line in text) <= 46
    wide = lines(hbm_panel(store, rows=None, cols=None))
    assert ("Engram ≈ GPU0 500 MB/s · GPU1 500 MB/s · GPU2 0 B/s · GPU3 3.20 MB/s (est.: PCIe "
            "rx less HiCache load-back)") in wide
    # A GPU without a receive reading: unknown, said as such, not an estimate of 0.
    store = hicache_store(rx=(2.0e9, None, 1.5e9, 4.2e6))
    assert "Engram ≈ 0 B–500 MB/s per GPU, GPU 1 ? (est.)" in lines(
        hbm_panel(store, rows=None, cols=60))


def test_with_the_tables_in_hbm_the_rest_of_the_receive_is_not_called_engram(
        tmp_path: Path) -> None:
    store = hicache_store()
    store.run.engram = dataclasses.replace(store.run.engram, placement="device")
    assert facts.engram_facts(store).placement == "device"
    assert "other rx ≈ 0 B–500 MB/s per GPU (est.)" in lines(hbm_panel(store, rows=7, cols=46))
    folder = snapshot.write_folder(tmp_path, store, reference.default(), svg=None)
    md = (folder / "summary.md").read_text()
    assert "GPU 0 2.00 GB/s (other ≈ 500 MB/s, estimated" in md and "Engram ≈" not in md


async def test_the_dashboard_at_100x30_shows_the_hicache_rows_and_the_pcie_cell() -> None:
    store = hicache_store()
    app = EngramTopApp(StaticSession(store))
    async with app.run_test(size=(100, 30)) as pilot:
        # The KV panel at 100x30 (46 columns): the tight forms, every figure kept.
        await until(pilot, lambda: "HiCache  32.0GB×4 · 49.2k/392.0k · drop 35/s"
                    in screen_text(app), 10, "the HiCache row")
        text = screen_text(app)
        assert "load 4.50 GB/s · backup 80.0 MB/s" in text
        # The rows that matter most still show; the pools' split gives way.
        for kept in ("capacity 42.70M tokens", "in use", "requests 8 running"):
            assert kept in text
        # The HBM table: GPU 3's receive in MB, and the estimate labelled as one.
        assert "4.20 MB" in text and "0.00" not in text
        assert "Engram ≈ 0 B–500 MB/s per GPU (est.)" in text
        # The screen stays whole: every panel's frame, the header and the events line.
        assert text.count("╰") == 6 and "engram-top · " in text
        await quit_app(app, pilot)


# --------------------------------------------------------------------------- files


def test_the_snapshot_says_the_hicache_tier_and_the_engram_estimate(tmp_path: Path) -> None:
    folder = snapshot.write_folder(tmp_path, hicache_store(), reference.default(), svg=None)
    data = json.loads((folder / "snapshot.json").read_text())
    hc = data["hicache"]
    assert hc["pool_bytes_per_rank"] == 32e9 and hc["ranks"] == 4 and hc["pool_bytes"] == 128e9
    assert hc["used_tokens"] == 49_200 and hc["total_tokens"] == 392_000
    assert hc["load_back_bytes_per_s"] == pytest.approx(4.501e9)
    assert hc["dropped_host_pressure_per_s"] == 35.0
    assert hc["engram_rx_estimate_bytes_per_s"] == {"0": 5e8, "1": 5e8, "2": 0.0, "3": 3.2e6}
    md = (folder / "summary.md").read_text()
    assert ("- HiCache host tier: 32.0 GB per rank x 4 ranks = 128 GB (log: Allocating .. host "
            "memory (4 ranks)); host pool 49,200 of 392,000 tokens; load-back 4.50 GB/s, "
            "backup 80.0 MB/s, dropped for host pressure 35.0 tokens/s, evicted 500.0 tokens/s"
            ) in md
    assert ("GPU 3 4.20 MB/s (Engram ≈ 3.20 MB/s, estimated: receive less HiCache load-back)"
            ) in md
    # HiCache off: no such key's content, no estimate, the receive still in its unit.
    folder = snapshot.write_folder(tmp_path, scene_store(), reference.default(), svg=None)
    data = json.loads((folder / "snapshot.json").read_text())
    assert data["hicache"] is None
    md = (folder / "summary.md").read_text()
    assert "HiCache" not in md and "Engram ≈" not in md and "- PCIe receive: GPU 0 " in md


PAGE = """\
# TYPE sglang:load_back_bytes_total counter
sglang:load_back_bytes_total{tp_rank="0"} 4096
sglang:load_back_bytes_total{tp_rank="1"} 4096
# TYPE sglang:hicache_backup_bytes_total counter
sglang:hicache_backup_bytes_total{tp_rank="0"} 8192
# TYPE sglang:hicache_dropped_tokens_total counter
sglang:hicache_dropped_tokens_total{tp_rank="0",reason="host_pressure"} 12
sglang:hicache_dropped_tokens_total{tp_rank="0",reason="storage_full"} 99
# TYPE sglang:hicache_host_used_tokens gauge
sglang:hicache_host_used_tokens{tp_rank="0"} 300
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 1
"""


def test_inspect_metrics_prints_the_hicache_totals(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "metrics.txt"
    page.write_text(PAGE)
    assert engram_top_main(["inspect-metrics", str(page)]) == 0
    out = json.loads(capsys.readouterr().out)
    # The host-pressure drops only; no evicted counter on this page, so none printed.
    assert out["hicache"] == {"hicache_load_back_bytes": 4096.0, "hicache_backup_bytes": 8192.0,
                              "hicache_dropped_host_pressure": 12.0}
    assert out["hicache_load_back_bytes_by_rank"] == {"0": 4096.0, "1": 4096.0}
    assert out["gauges"]["hicache_host_used_tokens"] == 300
    page.write_text("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n")
    assert engram_top_main(["inspect-metrics", str(page)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hicache"] == {} and out["hicache_load_back_bytes_by_rank"] == {}


# --------------------------------------------------------------------------- end to end

SCENARIOS = """\
[plan]
name = "hicache"

[defaults]
kind = "simulated"
host = "127.0.0.1"
time_scale = 0.02
readiness_timeout_s = 60
stop_grace_s = 10
hbm_release_timeout_s = 30
hbm_release_slack_gib = 1

[scenarios.hicache]
title = "Engram in host memory with prefetch, HiCache on"
placement = "host-prefetch"
port = 30111
args = ["--hicache-size", "0.01"]
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_a_hicache_server_end_to_end(tmp_path: Path) -> None:
    from engram_top.live.load import LoadSpec
    from engram_top.live.session import Session, SessionOptions
    ref = reference.default()
    path = tmp_path / "hicache.toml"
    path.write_text(SCENARIOS)
    session = Session(SessionOptions(
        scenario_file=path, start="hicache", state_dir=tmp_path / "state",
        node_dir=tmp_path / "node", free_ports=True, poll_interval=0.5,
        load=LoadSpec(concurrency=2, input_len=2000, output_len=8)))
    app = EngramTopApp(session)
    store = session.store
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: store.run is not None and store.run.state == "ready", 60,
                    "the server to be ready")

        def pressed() -> bool:  # the pool full, dropping, and loading back, as the page says
            view = facts.hicache_facts(store)
            return (view is not None and (view.dropped_host_pressure_per_s or 0) > 0
                    and (view.load_back_bytes_per_s or 0) > 0)
        await until(pilot, pressed, 60, "HiCache to drop for host pressure and load back")
        view = facts.hicache_facts(store)
        # The log's Allocating line on every rank: 0.01 GB = 1e7 bytes per rank.
        assert view.pool_bytes_per_rank == 1e7 and view.ranks == ref.gpus
        assert view.source == f"log: Allocating .. host memory ({ref.gpus} ranks)"
        per_rank_tokens = int(1e7 // ref.kv_bytes_per_token)
        # The page's scheduler reports its own pool (SGLang's default: one scheduler).
        assert view.total_tokens == per_rank_tokens
        assert view.used_tokens == view.total_tokens  # full: what it drops, it cannot keep
        # The row says those figures, at 100x30, as the page gives them now.
        total = f"{per_rank_tokens:,}"
        await until(pilot, lambda: f"HiCache  10.0MB×{ref.gpus} · {total}/{total} · drop"
                    in screen_text(app), 10, "the HiCache row with the full pool")

        # The HBM table: each GPU's receive as the store has it, in its unit, and the
        # Engram estimate: receive less the rank's load-back, never above the receive.
        def table_agrees() -> bool:
            gpus = facts.gpu_facts(store)
            text = screen_text(app)
            cells = [byte_rate(g.pcie_rx_bytes_per_s, per_s=False) for g in gpus]
            est = engram_rx_estimate({g.index: g.pcie_rx_bytes_per_s for g in gpus},
                                     facts.hicache_facts(store))
            known = [v for v in est.values() if v is not None]
            return (all(c in text and c not in ("0 B", "–") for c in cells) and bool(known)
                    and f"Engram ≈ {byte_rate(min(known), per_s=False)}" in text
                    and "(est.)" in text)
        await until(pilot, table_agrees, 15, "the PCIe cells and the Engram estimate")
        gpus = facts.gpu_facts(store)
        est = engram_rx_estimate({g.index: g.pcie_rx_bytes_per_s for g in gpus},
                                 facts.hicache_facts(store))
        assert all(0 <= (est[g.index] or 0) <= (g.pcie_rx_bytes_per_s or 0) for g in gpus)

        # The pool as the node's host holds it: per rank, as the log said.
        assert decimal_bytes(view.pool_bytes) == decimal_bytes(ref.gpus * 1e7)

        # inspect-metrics on the live page: the totals the rates came from.
        # The command, as a user runs it (the dashboard holds this process's stdout).
        done = await asyncio.to_thread(
            subprocess.run, [*ENGRAM_TOP, "inspect-metrics", store.run.url],
            capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)["hicache"]
        assert out["hicache_dropped_host_pressure"] > 0 and out["hicache_load_back_bytes"] > 0
        assert out["hicache_backup_bytes"] == pytest.approx(per_rank_tokens
                                                            * ref.kv_bytes_per_token)
        await quit_app(app, pilot)
