"""Figures no node could have, from a server (a bug, a hostile exporter): each is refused
where it enters (collectors/figure_bounds.py), with its reason, and the rest of the reading
kept; the dashboard draws, the snapshot writes, nothing allocates without bound. And a
scenario file's launch arguments that engram-top reads itself are bounded as its own keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from drive import SIZE
from faultkit import Cli, no_traceback, sim_scenario_file
from helpers import screen_text, until

from engram_top.app.main import EngramTopApp
from engram_top.live.session import Session, SessionOptions

pytestmark = pytest.mark.slow  # a server on loopback, the CLI (tests/quick_tier.py)


@pytest.mark.timeout(120)  # a loop over 1e30 ranks, or an allocation without bound, ends it
async def test_absurd_server_figures_are_refused_where_they_enter(bad_server, cli: Cli) -> None:
    bad_server.faults.update(info="huge", metrics="huge")
    session = Session(SessionOptions(attach=(bad_server.url,), load=None, poll_interval=0.2))
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        # tp_size 1e30 once looped a HiCache pool per rank; 1e308 crashed the usage bar.
        await until(pilot, lambda: "full pool n/a" in screen_text(app), 20,
                    "the 1e308 usage drawn as n/a")
        data = session.store.data("server")
        assert data.token_usage is None and data.weight_gb is None and data.tp_size is None
        assert data.unavailable["token_usage"] == "n/a: 1e+308 is outside 0..10"
        assert data.unavailable["weight_gb"] == "n/a: 1e+308 is outside 0..100000"
        assert data.unavailable["server_args.tp_size"] == "n/a: 1e+30 is outside 1..4096"
        assert "tp_size" not in data.server_args
        # The rank labelled "²" is no scheduler's: left out, not read as rank 0's stand-in.
        assert set(data.ranks) == {0}
        assert data.max_total_num_tokens == 8192  # the rest of the reading kept
        await pilot.press("q")

    res = cli.run("snapshot", "--attach", bad_server.url, "--after", "0.5", "--out",
                  str(cli.tmp / "snaps"), timeout=60)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    data = json.loads((Path(res.stdout.strip()) / "snapshot.json").read_text())
    assert data["kv"]["token_usage"] is None
    assert data["kv"]["unavailable"]["usage"] == "n/a: 1e+308 is outside 0..10"


def test_launch_arguments_engram_top_reads_are_bounded(cli: Cli, tmp_path: Path) -> None:
    for args, says in (('["--tp-size", "1e308"]', "--tp-size: should be a whole number of "
                        "ranks from 1 to 1024, got '1e308'"),
                       ('["--hicache-size=1e308"]', "--hicache-size: '1e308' is out of range"),
                       ('["--tp", "1000000000"]', "--tp: '1000000000' is out of range"),
                       ('["--mem-fraction-static"]', "--mem-fraction-static: no value follows")):
        scenarios = sim_scenario_file(tmp_path, f"args = {args}\n")
        res = cli.run("switch", str(scenarios), "--to", "device")
        no_traceback(res.stdout, res.stderr)
        assert res.returncode == 2, res.stderr
        assert f"{scenarios}:" in res.stderr and f"scenarios.device.args: {says}" \
            in res.stderr, res.stderr

