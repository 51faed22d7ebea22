"""The dashboard over a store filled by hand, driven as a user drives it (Textual's Pilot):
failing sources with the age of their last good values, on a clock the test pins (an age
read from the wall clock moves while a loaded machine draws), and the comparison screen.
No process starts: the quick tier. The live dashboard over a simulated server:
tests/app/test_app.py."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import GIB, StaticSession, screen_text, until
from scene import NOW, SEED_RESULTS, WALL

from collectors.readings import GpuData, GpuDevice, Reading, ServerData, Status
from engram_top.app.compare_screen import CompareScreen
from engram_top.app.dialogs import HelpScreen
from engram_top.app.main import EngramTopApp
from engram_top.compare.run_result import RunResult
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore


def filled_store() -> RunStore:
    """A run whose sources were good 30 s before NOW, then failed; every time on NOW's
    clock, which the app is given, so that every age on screen is exact."""
    store = RunStore()
    now = NOW
    store.run = RunFacts(scenario="demo/host-prefetch", placement="host-prefetch",
                         node="test node", time_scale=1.0, launched_wall=WALL,
                         launched_at=now - 300, state="ready", ready_at=now - 27,
                         baseline_host_used=40 * GIB)
    dev = GpuDevice(index=0, name="NVIDIA B200", uuid="GPU-x", total_bytes=179 * GIB,
                    reserved_bytes=GIB // 2, used_bytes=140 * GIB, free_bytes=38 * GIB,
                    util_gpu_pct=97, pcie_rx_bytes_per_s=2e6)
    store.add("gpu", Reading("gpu", Status.OK, GpuData("t", (dev,)), at=now - 30))
    store.add("server", Reading("sglang", Status.OK, ServerData(
        url="http://127.0.0.1:1", healthy=True, max_total_num_tokens=42_700_288,
        token_usage=0.25, num_running_reqs=8, num_queue_reqs=3), at=now - 30))
    # Then both sources fail: the panels must say so, with the age of their last good values.
    store.add("gpu", Reading("gpu", Status.UNAVAILABLE,
                             message="no NVIDIA driver: libnvidia-ml.so.1 not found",
                             at=now - 1, failing_since=now - 12))
    store.add("server", Reading("sglang", Status.ERROR,
                                message="metrics page: line 7: bad value",
                                at=now - 1, failing_since=now - 10))
    return store


async def test_failing_sources_are_shown_with_their_age() -> None:
    session = StaticSession(filled_store())
    app = EngramTopApp(session, clock=lambda: NOW)  # however long a draw takes: 30 s
    async with app.run_test(size=(150, 42)) as pilot:
        await until(pilot, lambda: "no NVIDIA driver" in screen_text(app),
                    what="the panels drawn from the store")
        text = screen_text(app)
        assert "last good value 30 s old" in text
        assert "metrics page: line 7: bad value" in text
        assert "42.70M tokens" in text  # the last good KV reading is kept on screen
        assert "3 queued" in text
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
        assert "Quit" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen),
                    what="the help screen to close")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")
    assert session.closed


async def test_compare_screen_puts_runs_side_by_side_against_a_chosen_baseline(
        tmp_path: Path) -> None:
    store = RunStore()
    now = NOW
    for name, results in SEED_RESULTS.items():
        facts = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                         launched_wall=WALL, launched_at=now, state="stopped")
        facts.results = RunFigures.from_json(results)
        store.set_run(facts)
    app = EngramTopApp(StaticSession(store), snapshot_dir=tmp_path / "snaps")
    async with app.run_test(size=(150, 45)) as pilot:
        # A warning toasted a moment before `c` does not cover the table either.
        from engram_top.alerts.monitor import Alert, AlertChange
        app._alert_changed(AlertChange("raised", Alert(
            "queue-before", "warning", "request queue before", WALL, NOW)))
        await until(pilot, lambda: any(n.message == "request queue before"
                                       for n in app._notifications), what="the toast")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        assert not list(app._notifications)
        text = screen_text(app)
        assert "baseline: device" in text and "n=1 · baseline" in text
        assert "42.70M +260.6%" in text  # KV capacity gained, against device
        assert "72.201 -39.3%" in text and "191.8 -14.4%" in text
        assert "▶ host-prefetch" in text  # the live (latest) run is marked
        # The seeds file's assumptions marked as the Markdown marks them (device's host Δ).
        assert "seed 6.50†" in text and "† an assumption of the" in text
        await pilot.press("b")  # host-prefetch becomes the baseline
        await until(pilot, lambda: "baseline: host-prefetch" in screen_text(app),
                    what="the new baseline")
        assert "11.84M -72.3%" in screen_text(app)
        # A warning raised meanwhile is not toasted over it (the demo's own load queues
        # requests); an error is.
        for severity in ("warning", "error"):
            app._alert_changed(AlertChange("raised", Alert(
                f"queue-{severity}", severity, f"request queue {severity}", WALL, NOW)))
        await pilot.pause()
        toasts = [n.message for n in app._notifications]
        assert "request queue error" in toasts and "request queue warning" not in toasts
        # Closed and opened again: an error's toast up is kept (Textual clears all or none).
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen), what="closed")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="reopened")
        assert "request queue error" in [n.message for n in app._notifications]
        # `s` here: this screen, and a comparison against the baseline chosen on it.
        await pilot.press("s")
        await until(pilot, lambda: any(e.text.startswith("snapshot written: ")
                                       for e in store.events), 20,
                    "the snapshot `s` writes from the compare screen")
        (folder,) = (tmp_path / "snaps").iterdir()
        assert "Verdict against host-prefetch" in (folder / "screen.svg").read_text() \
            .replace("&#160;", " ")
        assert json.loads((folder / "snapshot.json").read_text())["comparison"][
            "baseline"] == "host-prefetch"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen),
                    what="the comparison to close")
        assert "baseline" not in screen_text(app)
        # The session's baseline: the strip says it, and the screen opens with it again.
        await until(pilot, lambda: "vs host-prefetch" in screen_text(app), 10,
                    "the verdict strip against the chosen baseline")
        await pilot.press("c")
        await until(pilot, lambda: "baseline: host-prefetch" in screen_text(app),
                    what="the compare screen against the same baseline")


async def test_compare_screen_treats_repeated_runs_as_trials_with_intervals() -> None:
    """Three runs of each placement: means, a 95% interval of each change, and ~ where
    the interval holds zero; runs loaded from a file join as another column."""
    store = RunStore()
    now = NOW
    ttft = {"device": (350.0, 352.0, 348.0), "host-prefetch": (404.0, 405.0, 403.0)}
    tpot = {"device": (26.0, 28.0, 24.0), "host-prefetch": (27.0, 24.0, 26.5)}
    for trial in range(3):
        for name in ("device", "host-prefetch"):
            facts = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                             launched_wall=WALL, launched_at=now, state="stopped")
            facts.results = RunFigures.from_json({"gpus": 4, "ttft_mean_ms": ttft[name][trial],
                                                  "itl_mean_ms": tpot[name][trial],
                                                  "output_tok_s": 200.0})
            store.set_run(facts)
    imported = RunResult(
        scenario="bench_serving", placement=None, source="bench_serving:x.jsonl", trial=0,
        gpus=4, weights_gb=None, kv_tokens=None, host_delta_gib=None, ready_s=None,
        ttft_mean_s=0.7, tpot_mean_s=0.026, itl_mean_s=None, e2e_mean_s=None, ttft_p99_s=None,
        tpot_p99_s=None, output_tok_s=100.0, request_per_s=None)
    app = EngramTopApp(StaticSession(store), compare_with=[imported], price_per_gpu_hour=2.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        text = screen_text(app)
        assert "n=3" in text and "bench_serving" in text
        # TTFT: mean 404.0 vs 350.0 = +15.4%, paired interval tight around it.
        assert "404.0 +15.4%" in text and "[+14.5, +16.4]" in text
        # TPOT: 25.83 vs 26.0; the interval holds zero, so it is marked.
        assert "25.8 -0.6%" in text and "[-31.8, +31.8] ~" in text
        # The imported run: its own workload, with no device run of its own to be compared
        # with, so no change against the live device (another workload's).
        assert "700.0" in text and "700.0 +" not in text
        assert "n=1 · no baseline in its file" in text
        assert "11.1111" in text  # 2 per GPU-hour x 4 GPUs at 200 tok/s, per Mtok
