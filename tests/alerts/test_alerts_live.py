"""Alerts against a real simulated SGLang server with HiCache on (a real process, real HTTP
on 127.0.0.1), attached as someone else's server: prompts larger than its host pool make it
drop tokens for host pressure (an alert that says so and where to look), and once the server
is killed the header says NOT ANSWERING from the first failed poll, the server-gone alert stands in
the events pane and the stale HiCache alert ends: in the dashboard (Pilot) and headless."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import ServerSpec, SimServer, screen_text, until

from collectors.readings import Reading, Status
from engram_top.app.main import EngramTopApp
from engram_top.app.panels.header import header
from engram_top.live.session import Session, SessionOptions
from engram_top.model.store import RunStore
from scenarios.workload import PROMPT_TOKENS_FIELD

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

POOL_GB = 0.01  # per rank: a few thousand tokens, so a few long prompts fill it
POLL_S = 0.3


def hicache_server(base: Path, name: str) -> SimServer:
    return SimServer(name, ServerSpec("device", 0.02, ("--hicache-size", str(POOL_GB))), base)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SimServer]:
    launched = hicache_server(tmp_path, "alerts-hicache")
    try:
        yield launched.wait_ready()
    finally:
        launched.stop()  # killed already by the test, or stopped here: never left running


def fill_the_host_pool(server: SimServer) -> None:
    """Prompts larger than the HiCache host pool: their backups drop for host pressure."""
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        for _ in range(4):
            c.post("/generate", json={PROMPT_TOKENS_FIELD: 4000, "text": "x",
                                      "sampling_params": {"max_new_tokens": 2}}
                   ).raise_for_status()


class FailedPolls:
    """Counts the watched server's failed readings (a store listener), from the kill on,
    and keeps the header's line as it stood when the first of them was stored."""

    def __init__(self, store: RunStore) -> None:
        self.store, self.count = store, 0
        self.header_at_first: str | None = None
        store.listeners.append(self)

    def __call__(self, what: str, payload: Any) -> None:
        if what == "reading":
            key, reading = payload
            if key == self.store.watched and isinstance(reading, Reading) \
                    and reading.status is Status.ERROR:
                self.count += 1
                if self.count == 1:
                    self.header_at_first = header(self.store, time.time()).plain


def kill(server: SimServer) -> None:
    os.killpg(server.proc.pgid, signal.SIGKILL)  # a crash: no goodbye on its port
    assert server.wait_exit(10) == -signal.SIGKILL


@pytest.mark.timeout(120)
async def test_an_attached_server_killed_reads_not_answering_and_its_stale_alerts_end(
        server: SimServer) -> None:
    session = Session(SessionOptions(attach=(server.url,), load=None, poll_interval=POLL_S))
    app = EngramTopApp(session)
    store = session.store
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: "ATTACHED" in screen_text(app), 30, "the attached header")
        fill_the_host_pool(server)
        await until(pilot, lambda: "hicache-drops" in store.alerts, 20, "the HiCache alert")
        await until(pilot, lambda: "⚠ HiCache dropped" in screen_text(app), 5, "it on screen")
        assert "look at the Host RAM ledger (HiCache host pools, other tenants)" in \
            store.alerts["hicache-drops"].message
        failed = FailedPolls(store)
        kill(server)
        # The header's line says so from the first failed poll: no ATTACHED for a dead
        # server. (When the screen draws it depends on the machine's load, so the words
        # are taken as the first failure is stored, and the screen is waited for.)
        await until(pilot, lambda: failed.count >= 1, 10, "a failed poll")
        assert failed.header_at_first is not None
        assert "NOT ANSWERING" in failed.header_at_first, failed.header_at_first
        assert "ATTACHED" not in failed.header_at_first
        await until(pilot, lambda: "NOT ANSWERING" in screen_text(app), 10,
                    lambda: f"NOT ANSWERING on screen ({failed.count} failed polls)")
        await until(pilot, lambda: "server-gone" in store.alerts, 10, "the server-gone alert")
        gone = store.alerts["server-gone"]
        assert f"server {server.url} not answering since " in gone.message
        assert "(connection refused); its figures are stale: look at its process and its log" \
            in gone.message
        # The stale HiCache alert ended at once, said as ended, not cleared.
        assert "hicache-drops" not in store.alerts
        texts = [e.text for e in store.events]
        assert any(t.startswith("ended (its server is not answering): HiCache dropped")
                   for t in texts)
        assert not any(t.startswith("cleared: HiCache") for t in texts)
        await until(pilot, lambda: f"⚠ server {server.url} not answering" in screen_text(app),
                    5, "the server-gone line in the events pane")
        text = screen_text(app)
        assert "ATTACHED" not in text and "⚠ HiCache dropped" not in text
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, 20, "the app to quit")


@pytest.mark.timeout(120)
async def test_headless_the_same_alerts_are_raised_and_said(tmp_path: Path) -> None:
    """Without a dashboard (a headless command's session), the same alerts with the same
    words: the events a headless command prints."""
    server = hicache_server(tmp_path, "alerts-headless")
    session = Session(SessionOptions(attach=(server.url,), load=None, poll_interval=POLL_S))
    store = session.store
    raised: list[str] = []
    session.alerts.listeners.append(
        lambda change: raised.append(change.alert.id) if change.change == "raised" else None)
    try:
        server.wait_ready()
        await session.start()
        await until(None, lambda: store.latest.get("server") is not None
                    and store.latest["server"].ok, 20, "a good reading")
        fill_the_host_pool(server)
        await until(None, lambda: "hicache-drops" in raised, 20, "the HiCache alert")
        kill(server)
        await until(None, lambda: "server-gone" in raised, 10, "the server-gone alert")
        assert set(store.alerts) == {"server-gone"}
        said = [e.text for e in store.events]
        assert any(t.startswith(f"server {server.url} not answering since ") for t in said)
    finally:
        await session.close()
        server.stop()


@pytest.mark.timeout(120)
async def test_hbm_and_host_alerts_name_the_other_tenants(tmp_path: Path) -> None:
    """A simulated node under another tenant's pressure (`sim serve --neighbour-hbm` on GPU 0
    and `--host-hog`): the HBM alert names the neighbour's process and its GiB, the host
    memory alert the host ledger's line that holds the hog (other tenants)."""
    from helpers import free_port

    from engram_top.alerts.thresholds import Thresholds
    from engram_top.sim.tenant import NEIGHBOUR_NAME

    scenarios = tmp_path / "pressure.toml"
    scenarios.write_text(
        '[scenarios.crowded]\nkind = "simulated"\nplacement = "device"\n'
        f'port = {free_port()}\ntime_scale = 0.02\n'
        'args = ["--neighbour-hbm", "8", "--neighbour-gpus", "0", "--host-hog", "64"]\n')
    # Thresholds any share trips, so the test reads the words, not the node's sizes.
    session = Session(SessionOptions(
        scenario_file=scenarios, start="crowded", state_dir=tmp_path / "state", load=None,
        poll_interval=POLL_S, force=True,
        thresholds=Thresholds(hbm_used_pct=1, host_available_pct=99.9)))
    store = session.store
    try:
        await session.start()
        await until(None, lambda: store.run is not None and store.run.state == "ready", 60,
                    lambda: "the server to be ready; events: " + " | ".join(
                        e.text for e in list(store.events)[-6:]))
        await until(None, lambda: "hbm:gpu0" in store.alerts and "server" in
                    store.alerts["hbm:gpu0"].message, 15, "the HBM alert with the server")
        hbm = store.alerts["hbm:gpu0"].message
        assert f"{NEIGHBOUR_NAME} (pid " in hbm and ", not the server's) holds 8.0 GiB" in hbm
        assert hbm.endswith("GiB; look at `h` (who holds each GPU)")
        # GPU 1 has no neighbour: the server alone is named, once its rank there holds
        # enough to trip the threshold (the ranks load one after another).
        await until(None, lambda: "hbm:gpu1" in store.alerts, 15, "GPU 1's HBM alert")
        other = store.alerts["hbm:gpu1"].message
        assert NEIGHBOUR_NAME not in other and ": the server " in other
        await until(None, lambda: "host-available" in store.alerts, 15, "the host alert")
        host = store.alerts["host-available"].message
        assert "other tenants" in host and host.endswith("look at the Host RAM panel's ledger")
    finally:
        await session.close()
