"""The KV panel's rows beyond the KV tokens: a hybrid model's Mamba state pool (its size from
the start-up log's "Mamba Cache is allocated" line, its use from the page), and the requests
a weight-sync pause holds and those aborted (from the page). On a fixed store, at 100x30 with
Pilot, and end to end on `sim serve --kv-pools mamba` paused by /pause_generation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import pytest
from helpers import StaticSession, quit_app, screen_text, until
from rich.console import Group
from scene import NOW, WALL, _log_line, scene_store, server_data

from collectors.readings import Reading, Status
from collectors.sglang.startup_log import StartupLogParser
from engram_top.app.main import EngramTopApp
from engram_top.app.panels import kv_panel
from engram_top.model.store import RunStore

MAMBA = ("Mamba Cache is allocated. max_mamba_cache_size: 257, conv_state size: 0.16GB, "
         "ssm_state size: 2.37GB ")


def store_with(paused: float | None = 2.0, aborted: float | None = 13.0,
               aborted_per_s: float | None = 0.2, mamba_usage: float | None = 0.125,
               mamba_line: str | None = MAMBA) -> RunStore:
    """The scene with the page's paused/aborted/Mamba figures as given, and the log's Mamba
    line on every rank where one is given."""
    store = scene_store()
    run = store.run
    parser = StartupLogParser()
    for _, line in run.log_lines:
        parser.feed(line)
    if mamba_line is not None:
        for rank in range(4):
            parser.feed(_log_line(160, mamba_line, rank))
    run.startup = parser.facts()
    server = dataclasses.replace(server_data(NOW), num_paused_reqs=paused,
                                 aborted_requests_total=aborted, aborted_per_s=aborted_per_s,
                                 mamba_usage=mamba_usage)
    store.add("server", Reading("sglang", Status.OK, server, at=NOW, wall=WALL))
    return store


def lines(group: Group) -> list[str]:
    return [line.plain for line in group.renderables]


def test_the_mamba_row_says_the_logs_slots_and_gb_and_the_pages_use() -> None:
    text = lines(kv_panel(store_with()))
    assert "mamba    257 slots · 2.53 GB/GPU (conv 0.16 + ssm 2.37) · 12.5% in use" in text
    # Narrow: the split goes, the figures stay.
    narrow = lines(kv_panel(store_with(), cols=40))
    assert any(x.startswith("mamba    257 slots · 2.53 GB") for x in narrow), narrow


@pytest.mark.parametrize(("line", "slots", "gb"), [
    ("Mamba Cache is allocated. max_mamba_cache_size: 1024, conv_state size: 0.50GB, "
     "ssm_state size: 12.00GB intermediate_ssm_state_cache size: 1.00GB "
     "intermediate_conv_window_cache size: 0.25GB ", "1,024 slots", "13.75 GB/GPU"),
    ("Mamba Cache is allocated. max_mamba_cache_size: 64, conv_state size: 0.01GB, "
     "ssm_state size: 0.10GB ", "64 slots", "0.11 GB/GPU"),
])
def test_other_mamba_lines_give_their_own_figures(line: str, slots: str, gb: str) -> None:
    text = "\n".join(lines(kv_panel(store_with(mamba_line=line))))
    assert f"mamba    {slots} · {gb}" in text


def test_paused_and_aborted_show_where_the_page_counts_them_and_nothing_where_not() -> None:
    text = lines(kv_panel(store_with()))
    assert "held     2 paused (weight sync) · 13 aborted (0.20/s)" in text
    # Nothing paused: still said, the aborted count beside it.
    text = lines(kv_panel(store_with(paused=0.0, aborted_per_s=None)))
    assert "held     0 paused (weight sync) · 13 aborted" in text
    # A page without these figures (another engine, an older SGLang): no row, no zeros.
    text = "\n".join(lines(kv_panel(store_with(paused=None, aborted=None, aborted_per_s=None,
                                               mamba_usage=None, mamba_line=None))))
    assert "held" not in text and "mamba" not in text and "paused" not in text


def test_a_page_with_mamba_use_but_no_log_line_says_the_use_alone() -> None:
    text = lines(kv_panel(store_with(mamba_line=None)))
    assert "mamba    state pool · 12.5% in use" in text


async def test_the_dashboard_at_100x30_keeps_the_rows_and_stays_whole() -> None:
    app = EngramTopApp(StaticSession(store_with()))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "2 paused" in screen_text(app), 10, "the held row")
        text = screen_text(app)
        # A pause that holds requests ranks with the requests row: kept at 100x30.
        for kept in ("capacity", "in use", "requests", "2 paused · 13 aborted", "257 slots"):
            assert kept in text
        assert text.count("╰") == 6 and "engram-top · " in text
        await quit_app(app, pilot)


# --------------------------------------------------------------------------- end to end

SCENARIOS = """\
[plan]
name = "mamba"

[defaults]
kind = "simulated"
host = "127.0.0.1"
time_scale = 0.02
readiness_timeout_s = 60
stop_grace_s = 10
hbm_release_timeout_s = 30
hbm_release_slack_gib = 1

[scenarios.mamba]
title = "A hybrid model's Mamba state, paused for a weight sync"
placement = "device"
port = 30112
args = ["--kv-pools", "mamba", "--parallel", "dp-attention"]
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_a_mamba_server_paused_end_to_end(tmp_path: Path) -> None:
    from engram_top.live.load import LoadSpec
    from engram_top.live.session import Session, SessionOptions
    path = tmp_path / "mamba.toml"
    path.write_text(SCENARIOS)
    session = Session(SessionOptions(
        scenario_file=path, start="mamba", state_dir=tmp_path / "state",
        node_dir=tmp_path / "node", free_ports=True, poll_interval=0.5,
        load=LoadSpec(concurrency=2, input_len=200, output_len=4000)))
    app = EngramTopApp(session)
    store = session.store
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: store.run is not None and store.run.state == "ready", 60,
                    "the server to be ready")
        async with httpx.AsyncClient(base_url=store.run.url, timeout=10.0) as c:
            await until(pilot, lambda: "2 running" in screen_text(app), 30,
                        "the load's two requests running")
            (await c.post("/pause_generation", json={})).raise_for_status()
            await until(pilot, lambda: "2 paused" in screen_text(app), 20,
                        "the paused requests on the panel")
            (await c.post("/continue_generation")).raise_for_status()
            await until(pilot, lambda: "0 paused" in screen_text(app), 20,
                        "no request paused once generation continues")
        # The log's Mamba line on the panel: the simulated pool's request slots.
        await until(pilot, lambda: "257 slots" in screen_text(app), 20, "the mamba row")
        await quit_app(app, pilot)
