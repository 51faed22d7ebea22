"""The verdict (engram_top.compare.verdict) on known answers, live figures warming up
(compare.runs), a file's runs in columns of their own, and both on screen: the compare
screen's verdict and the dashboard's strip, driven with Pilot over a store filled by hand."""

from __future__ import annotations

import time
from pathlib import PurePath
from typing import Any

import pytest
from helpers import StaticSession, screen_text, until

from engram_top.app.compare_screen import CompareScreen
from engram_top.app.main import EngramTopApp
from engram_top.app.verdict_strip import VerdictStrip, strip_text, strip_verdict
from engram_top.bench import sweep
from engram_top.compare.comparison import compare
from engram_top.compare.run_result import RunResult
from engram_top.compare.runs import (
    WARM_REQUESTS,
    compared_scenarios,
    comparison,
    from_file,
    own_column,
    warming_up,
)
from engram_top.compare.verdict import (
    BETTER,
    EQUAL,
    EQUIVALENT,
    NO_INTERVAL,
    NOT_DISTINGUISHABLE,
    NOT_MEASURED,
    WARMING_UP,
    WORSE,
    Evidence,
    crossover_sentence,
    decide,
    verdict,
)
from engram_top.model.figures import RunFigures
from engram_top.model.store import RunFacts, RunStore
from scenarios.runstate import RunState


def ev(axis: str, delta: float | None, lo: float | None = None, hi: float | None = None,
       **kw: Any) -> Evidence:
    return Evidence(axis, kw.pop("scenario", "host-prefetch"), "device", delta, lo=lo, hi=hi,
                    method=kw.pop("method", "paired t"), n=kw.pop("n", 5), **kw)


def outcome(e: Evidence, **kw: Any) -> tuple[str, str | None]:
    (f,) = decide([e], baseline="device", **kw).findings
    return f.outcome, f.winner


# ----------------------------------------------------------------------------- decide

def test_a_winner_only_where_the_interval_excludes_zero() -> None:
    # TTFT is better lower: +15.6% [+10%, +21%] is the baseline's win.
    assert outcome(ev("ttft", 0.156, 0.10, 0.21)) == (WORSE, "device")
    assert outcome(ev("ttft", -0.05, -0.08, -0.01)) == (BETTER, "host-prefetch")
    # Throughput is better higher: the same signs give the other winner.
    assert outcome(ev("throughput", 0.156, 0.10, 0.21)) == (BETTER, "host-prefetch")
    assert outcome(ev("throughput", -0.05, -0.08, -0.01)) == (WORSE, "device")
    # The interval holds zero (at its edge too): nobody wins.
    assert outcome(ev("ttft", 0.01, -0.02, 0.05)) == (NOT_DISTINGUISHABLE, None)
    assert outcome(ev("tpot", 0.03, 0.0, 0.06)) == (NOT_DISTINGUISHABLE, None)
    # Within a stated margin of ±2%: equivalent, not merely indistinguishable.
    assert outcome(ev("tpot", 0.005, -0.01, 0.015), margins={"tpot": 0.02}) == (EQUIVALENT,
                                                                               None)
    assert outcome(ev("tpot", 0.005, -0.01, 0.025), margins={"tpot": 0.02}) == (
        NOT_DISTINGUISHABLE, None)


def test_no_interval_no_verdict_except_on_a_fixed_axis() -> None:
    assert outcome(ev("ttft", 0.3, n=1)) == (NO_INTERVAL, None)
    # Host RAM within a server's run-to-run spread (a GiB or two) needs an interval; an
    # allocation of 10 GiB or more (the Engram tables' +195 GiB) is decided by its sign.
    assert outcome(ev("host_ram", 1.5, n=1, relative=False, unit="GiB")) == (NO_INTERVAL,
                                                                             None)
    assert outcome(ev("host_ram", 195.1, n=1, relative=False, unit="GiB")) == (WORSE,
                                                                               "device")
    assert outcome(ev("host_ram", -190.0, n=1, relative=False, unit="GiB")) == (
        BETTER, "host-prefetch")
    # The KV pool is sized by the allocator, the same every run: its sign decides.
    assert outcome(ev("kv_capacity", 2.606, n=1)) == (BETTER, "host-prefetch")
    assert outcome(ev("kv_capacity", -0.5, n=1)) == (WORSE, "device")
    assert outcome(ev("kv_capacity", 0.0, n=1)) == (EQUAL, None)
    assert outcome(ev("goodput", None)) == (NOT_MEASURED, None)
    assert outcome(ev("ttft", 0.2, 0.1, 0.3, warming="device: 12 s of a 30 s window served")
                   ) == (WARMING_UP, None)


def test_sentences_say_the_interval_its_method_and_what_is_modelled() -> None:
    v = decide([ev("ttft", 0.156, 0.10, 0.21, method="bootstrap over rounds",
                   statistic="p99", n=8),
                ev("host_ram", 195.1, 190.0, 200.0, relative=False, unit="GiB",
                   method="Welch t", n=3),
                ev("goodput", 0.2, 0.1, 0.3, modelled=True, method="model", n=None)],
               baseline="device", load_unit="req/s",
               crossovers={"host-prefetch": {"over": "device", "at": 3.2, "where": "between",
                                             "between": (2.0, 4.0), "modelled": True,
                                             "until": None}})
    assert v.lines() == [
        "TTFT (p99): device wins (host-prefetch +15.6% [+10.0%, +21.0%] vs device; 95% "
        "bootstrap over rounds, n=8).",
        "host RAM: device wins (host-prefetch +195 GiB [+190, +200] vs device; 95% Welch t, "
        "n=3).",
        "goodput at the SLO (modelled): host-prefetch wins (host-prefetch +20.0% [+10.0%, "
        "+30.0%] vs device; 95% model).",
        "Crossover (modelled): host-prefetch's goodput overtakes device's above 3.2 req/s "
        "(between the levels at 2 and 4).",
    ]
    # Ahead, then level again (the goodput intervals meet): said so, not "falls behind".
    level = {"over": "device", "at": 1.0, "where": "below", "modelled": False, "until": 4.0,
             "until_between": (2.0, 4.0), "until_how": "level"}
    assert crossover_sentence("host-prefetch", level, "req/s") == (
        "Crossover: host-prefetch's goodput is above device's from the lowest load swept "
        "(1 req/s); it is level again (not told apart) above 4 req/s (between 2 and 4).")
    assert sweep.crossover_sentence("host-prefetch", level, "req/s").endswith(
        "; the two are level again (not told apart) above 4 req/s (between 2 and 4).")
    md = v.markdown()
    assert md.startswith("## Verdict\n\n- TTFT (p99): device wins")
    assert "\"not distinguishable\" where it holds zero" in md
    data = v.to_json()
    assert data["findings"][2]["modelled"] is True and data["findings"][0]["method"] == \
        "bootstrap over rounds"


def _run(scenario: str, trial: int, **kw: Any) -> RunResult:
    return RunResult(scenario=scenario, placement=scenario, source="bench", trial=trial, **kw)


def test_from_a_comparison_s_cells() -> None:
    # TTFT 100/200/400 ms against 110/230/440 ms: paired deltas 0.10, 0.15, 0.10, whose
    # 95% interval [0.045, 0.188] excludes zero; TPOT's holds it.
    results = [_run("device", i, ttft_mean_s=t, tpot_mean_s=p, kv_tokens=11_840_000)
               for i, (t, p) in enumerate([(0.100, 0.020), (0.200, 0.030), (0.400, 0.025)])]
    results += [_run("host-prefetch", i, ttft_mean_s=t, tpot_mean_s=p, kv_tokens=42_700_288)
                for i, (t, p) in enumerate([(0.110, 0.030), (0.230, 0.020), (0.440, 0.026)])]
    v = verdict(compare(results, "device"))
    found = {f.evidence.axis: f for f in v.findings}
    assert set(found) == {"kv_capacity", "ttft", "tpot"}  # only what was measured
    assert (found["ttft"].outcome, found["ttft"].winner) == (WORSE, "device")
    assert found["ttft"].evidence.method == "paired t" and found["ttft"].evidence.n == 3
    assert found["ttft"].evidence.lo == pytest.approx(0.045, abs=5e-3)
    assert found["tpot"].outcome == NOT_DISTINGUISHABLE
    assert (found["kv_capacity"].outcome, found["kv_capacity"].winner) == (BETTER,
                                                                           "host-prefetch")


def test_identical_rounds_are_no_evidence_of_a_win() -> None:
    # A report whose rounds were copied (or edited by hand): three identical TTFTs a side
    # give a zero-width interval, which used to read as a win. KV capacity, fixed by the
    # allocator, still decides by its sign.
    results = [_run("device", i, ttft_mean_s=0.100, kv_tokens=11_840_000) for i in range(3)]
    results += [_run("host-prefetch", i, ttft_mean_s=0.120, kv_tokens=42_700_288)
                for i in range(3)]
    found = {f.evidence.axis: f for f in verdict(compare(results, "device")).findings}
    assert found["ttft"].outcome == NO_INTERVAL and found["ttft"].winner is None
    assert "its 3 rounds identical to the last digit" in found["ttft"].text
    assert found["kv_capacity"].outcome == BETTER


def test_an_allocation_the_same_every_round_is_decided_by_its_sign() -> None:
    # A bench's host tables: +195 GiB in each of two rounds, to the digit (the simulated
    # node allocates the same every time). An allocation, not a noisy sample: the baseline
    # wins host RAM, as with one run each, rather than "identical rounds, no verdict". A
    # small change the same every round is still no evidence.
    results = [_run("device", i, host_delta_gib=6.5, kv_tokens=11_840_000) for i in range(2)]
    results += [_run("host", i, host_delta_gib=195.4 + 6.5, kv_tokens=42_700_288)
                for i in range(2)]
    results += [_run("host-prefetch", i, host_delta_gib=6.5 + 2.0, kv_tokens=11_840_000)
                for i in range(2)]
    found = {(f.evidence.axis, f.evidence.scenario): f
             for f in verdict(compare(results, "device")).findings}
    assert (found[("host_ram", "host")].outcome, found[("host_ram", "host")].winner) == \
        (WORSE, "device")
    assert found[("host_ram", "host-prefetch")].outcome == NO_INTERVAL


# ----------------------------------------------------------------------------- live windows

def figures(served: float | None, requests: int | None, ttft: float = 0.4) -> RunFigures:
    return RunFigures(gpus=4, kv_tokens=42_700_288, ttft_mean_s=ttft, itl_mean_s=0.028,
                      output_tok_s=190.0, window_s=30.0, window_requests=requests,
                      served_s=served)


def test_a_live_figure_warms_up_for_a_whole_window_and_enough_requests() -> None:
    assert warming_up(figures(12, 200)) == "12 s of a 30 s window served"
    assert warming_up(figures(45, WARM_REQUESTS - 1)) == \
        f"{WARM_REQUESTS - 1} of {WARM_REQUESTS} requests in the 30 s window"
    assert warming_up(figures(30, WARM_REQUESTS)) is None
    assert warming_up(figures(None, None)) is None  # a file that does not say: as it is
    # No load at all: nothing sampled, nothing to warm up.
    assert warming_up(RunFigures(kv_tokens=1, window_s=30.0, served_s=5.0)) is None


def facts(name: str, results: RunFigures, state: str = "ready") -> RunFacts:
    now = time.monotonic()
    run = RunFacts(scenario=name, placement=name, node="n", time_scale=1.0,
                   launched_wall=time.time(), launched_at=now, state=RunState(state))
    run.results = results
    return run


def test_a_warming_run_leaves_its_latency_out_of_the_comparison() -> None:
    runs = [facts("device", figures(60, 400, ttft=0.35)), facts("host-prefetch", figures(8, 5))]
    c = comparison(runs)
    assert c is not None
    assert c.warming == {"host-prefetch": "8 s of a 30 s window served"}
    # A run that ended short of a whole window will not fill it: it says so, and what to do.
    runs[1] = facts("host-prefetch", figures(45, 22), state="stopped")
    c = comparison(runs)
    assert c is not None and c.warming == {"host-prefetch": (
        f"22 of {WARM_REQUESTS} requests in the 30 s window when it stopped: start it again "
        "for a whole window")}
    runs[1] = facts("host-prefetch", figures(8, 5))
    c = comparison(runs)
    assert c is not None
    assert c.windows == {"device": "30 s window, 400 requests",
                         "host-prefetch": "30 s window, 5 requests"}
    assert c.row("ttft_mean_ms").cells["host-prefetch"].mean is None
    assert c.row("kv_tokens").cells["host-prefetch"].mean == 42_700_288  # not sampled
    axes = {f.evidence.axis: f.outcome for f in verdict(c, warming=c.warming).findings}
    assert axes["ttft"] == WARMING_UP and axes["kv_capacity"] == EQUAL
    # Both warming up: nothing sampled on either side, and the verdict says why, per axis,
    # rather than leave the latency axes out.
    both = comparison([facts("device", figures(5, 3)), facts("host-prefetch", figures(8, 5))])
    assert both is not None and set(both.warming) == {"device", "host-prefetch"}
    found = {f.evidence.axis: f for f in verdict(both, warming=both.warming).findings}
    assert found["ttft"].outcome == WARMING_UP and found["tpot"].outcome == WARMING_UP
    assert found["ttft"].text == ("TTFT: no verdict yet, warming up (host-prefetch: 8 s of a "
                                  "30 s window served; device: 5 s of a 30 s window served).")
    assert found["kv_capacity"].outcome == EQUAL
    # A warm earlier run of the scenario is a trial of it: no longer warming up.
    runs.insert(1, facts("host-prefetch", figures(90, 300, ttft=0.41)))
    c = comparison(runs)
    assert c is not None and c.warming == {}
    assert c.row("ttft_mean_ms").cells["host-prefetch"].mean == pytest.approx(410.0)
    assert c.trials["host-prefetch"] == 2


def test_each_file_s_runs_are_columns_of_their_own() -> None:
    bench = [_run("device", 0, kv_tokens=11_840_000), _run("device", 1, kv_tokens=11_840_000)]
    a = from_file(bench, PurePath("/x/A/report.json"))
    b = from_file(bench, PurePath("B/report.json"))
    assert {r.source for r in a} == {"bench:A/report.json"}
    assert own_column(b[0]).scenario == "device (B/report.json)"
    runs = [facts("device", figures(60, 400))]
    c = comparison(runs, extra=[*a, *b])
    assert c is not None
    assert c.scenarios == ("device", "device (A/report.json)", "device (B/report.json)")
    assert c.trials == {"device": 1, "device (A/report.json)": 2, "device (B/report.json)": 2}
    assert c.baseline == "device"  # the live one, the first device placement


# ----------------------------------------------------------------------------- on screen

def _store(host_prefetch: RunFigures) -> RunStore:
    store = RunStore()
    store.set_run(facts("device", figures(60, 400, ttft=0.35)))
    store.set_run(facts("host-prefetch", host_prefetch))
    return store


@pytest.mark.parametrize("size", [(100, 30), (160, 48)])
async def test_the_strip_and_the_compare_screen_say_the_verdict(size: tuple[int, int]) -> None:
    store = _store(figures(8, 5))
    app = EngramTopApp(StaticSession(store))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: "verdict vs device" in screen_text(app), what="the strip")
        text = screen_text(app)
        # figures() gives both 42.70M tokens: the same pool; TTFT warming up.
        assert "verdict vs device · host-prefetch: KV ≈ TTFT … TPOT … tok/s …" in text
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        await until(pilot, lambda: "Verdict against device" in screen_text(app),
                    what="the verdict")
        text = screen_text(app)
        assert "TTFT: host-prefetch warming up" in text
        assert "warming up: host-prefetch: 8 s of a 30 s window served" in text
        assert "measured over" in text and "30 s window, 5 requests" in text
        assert "warming up" in text
        await pilot.press("escape")
        # The run warms up: the verdict follows.
        store.runs[-1].results = figures(45, 300, ttft=0.42)
        store.bump("server")
        await until(pilot, lambda: "host-prefetch: KV ≈ TTFT ? TPOT ?" in screen_text(app),
                    what="a warm strip")
        await pilot.press("c")
        await until(pilot, lambda: "TTFT: host-prefetch +20.0% ?" in screen_text(app),
                    what="the warm verdict")
        assert "? one run each" in screen_text(app)  # the legend says what ? means
        await pilot.press("escape")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


async def test_a_verdict_that_fails_is_said_once_and_the_dashboard_stays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def broken(store: RunStore, extra: object = ()) -> None:
        calls.append(1)
        raise ZeroDivisionError("float division by zero")
    monkeypatch.setattr("engram_top.app.verdict_strip.strip_verdict", broken)
    store = _store(figures(45, 300, ttft=0.42))
    app = EngramTopApp(StaticSession(store))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "no verdict: ZeroDivisionError" in screen_text(app),
                    what="the failure on the events line")
        for tried in range(len(calls) + 1, len(calls) + 4):
            store.bump("server")  # a new reading: the strip tries again
            await until(pilot, lambda tried=tried: len(calls) >= tried, what="another try")
        said = [e for e in store.events if "no verdict" in e.text]
        assert len(said) == 1 and said[0].level == "error"
        assert not app.query_one(VerdictStrip).has_class("-shown")
        assert app.is_running and "KV pool" in screen_text(app)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


async def test_a_comparison_that_fails_is_said_on_the_compare_screen(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("float division by zero")
    monkeypatch.setattr("engram_top.app.compare_screen.compare_runs", broken)
    app = EngramTopApp(StaticSession(_store(figures(45, 300, ttft=0.42))))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "KV pool" in screen_text(app), what="the dashboard")
        await pilot.press("c")
        await until(pilot, lambda: "no comparison: ZeroDivisionError: float division by zero"
                    in screen_text(app), what="the failure where the table would be")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen),
                    what="the panels again")
        assert app.is_running
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


async def test_no_strip_for_one_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    store = RunStore()
    store.set_run(facts("device", figures(60, 400)))
    compared: list[object] = []

    def counted(*args: Any, **kw: Any) -> object:
        compared.append(args)
        return comparison(*args, **kw)

    monkeypatch.setattr("engram_top.app.verdict_strip.compare_runs", counted)
    app = EngramTopApp(StaticSession(store))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: "device" in screen_text(app), what="the dashboard")
        # Drawn: the strip was refreshed with the scenario list, in the same pass, and
        # found no verdict (the pure function it shows says so too), without comparing
        # one scenario with itself each refresh.
        assert strip_verdict(store) is None
        assert compared == []
        assert not app.query_one(VerdictStrip).has_class("-shown")
        assert not app.screen.has_class("-verdict")
        assert "verdict vs" not in screen_text(app)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


# ----------------------------------------------------------------------------- the strip's width

_AXES = ("KV", "RAM", "TTFT", "TPOT", "tok/s", "good")
_LONG_AXES = ("KV", "host RAM", "TTFT", "TPOT", "tok/s", "goodput")
_NAMES = ("device", "host-prefetch", "host-offload-nvme")


def _every_axis(kv: int, host: float, ttft: float) -> RunFigures:
    return RunFigures(gpus=4, kv_tokens=kv, host_delta_gib=host, ttft_mean_s=ttft,
                      itl_mean_s=0.028, output_tok_s=190.0, goodput_rps=2.5,
                      window_s=30.0, window_requests=400, served_s=60.0)


def _wide_store(count: int) -> RunStore:
    store = RunStore()
    for i, name in enumerate(_NAMES[:count]):
        store.set_run(facts(name, _every_axis(11_840_000 * (1 + i), 2.0 + 40 * i, 0.35 + i / 10)))
    return store


def _shown(line: str) -> dict[str, str]:
    """Each scenario on the strip's line and the text after its name, up to the next."""
    out = {}
    for part in line.split(" · ")[1:]:
        name, sep, rest = part.partition(": ")
        if sep and name in _NAMES:
            out[name] = rest
    return out


def _whole(rest: str) -> bool:
    """A scenario's axes, each with its mark, long names or short, none cut."""
    marks = {"KV": "▲", "RAM": "▼", "host RAM": "▼"}  # fixed, and an allocation: decided
    return rest.split() in ([w for a in axes for w in (*a.split(), marks.get(a, "?"))]
                            for axes in (_AXES, _LONG_AXES))


def test_the_strip_gives_up_its_legend_then_long_names_then_scenarios() -> None:
    def line(count: int, width: int | None) -> str:
        found = strip_verdict(_wide_store(count))
        assert found is not None
        return strip_text(found, width).plain

    full = line(3, None)
    assert full.endswith("· ▲ wins ▼ loses ≈ same ? one run … warming up · c: details")
    long_axes = "KV ▲ host RAM ▼ TTFT ? TPOT ? tok/s ? goodput ?"
    short_axes = "KV ▲ RAM ▼ TTFT ? TPOT ? tok/s ? good ?"
    two = f"verdict vs device · host-prefetch: {long_axes}"
    assert line(2, len(two) + len(" · c: details")) == two + " · c: details"
    assert line(2, len(two) + 12) == f"verdict vs device · host-prefetch: {short_axes} · c: details"
    three = f"verdict vs device · host-prefetch: {short_axes} · host-offload-nvme: {short_axes}"
    assert line(3, len(three)) == three
    assert line(3, len(three) - 1) == f"verdict vs device · host-prefetch: {short_axes} · +1 (c)"
    for width in range(40, 200):  # every width: within it, and each shown scenario whole
        text = line(3, width)
        shown = _shown(text)
        assert len(text) <= width or list(shown) == ["host-prefetch"], (width, text)
        assert all(_whole(rest.split(" · ")[0]) for rest in shown.values()), (width, text)


@pytest.mark.parametrize("size", [(100, 30), (160, 48)])
@pytest.mark.parametrize("count", [2, 3])
async def test_the_strip_fits_its_width_with_each_scenario_s_axes_whole(
        size: tuple[int, int], count: int) -> None:
    app = EngramTopApp(StaticSession(_wide_store(count)))
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: "verdict vs device" in screen_text(app), what="the strip")
        await pilot.pause()
        strip = app.query_one(VerdictStrip)
        line = strip.render_line(0).text.strip()
        assert line in screen_text(app)
        assert len(line) <= strip.content_size.width and not line.endswith("…")
        shown = _shown(line)
        hidden = count - 1 - len(shown)
        assert list(shown) == list(_NAMES[1:1 + len(shown)]) and shown, line
        for name, rest in shown.items():
            assert _whole(rest.split(" · ")[0]), (name, line)  # every axis and its mark
        if hidden:
            assert line.endswith(f"· +{hidden} (c)")
        else:
            assert line.endswith(("c: details", "good ?", "goodput ?"))
        # What each size shows: 100 columns, two scenarios with long names and the way to
        # the details, three with the first and +1; 160 columns, all with their names.
        expected = {(100, 2): 1, (100, 3): 1, (160, 2): 1, (160, 3): 2}[(size[0], count)]
        assert len(shown) == expected, line
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running, what="the app to quit")


def test_the_strip_holds_a_win_until_the_evidence_moves_out_of_its_interval() -> None:
    from engram_top.compare.verdict import Verdict, held_findings, hold

    def window(*evidence: Evidence) -> Verdict:
        return decide(list(evidence), baseline="device")

    def marks(found: Verdict) -> list[str]:
        return [f.mark for f in found.findings]

    # The first full window: host-prefetch's TTFT +15% [+2%, +28%], the baseline wins.
    shown = hold(window(ev("ttft", 0.15, 0.02, 0.28)), {})
    assert marks(shown) == ["▼"]
    # Five seconds later the interval grazes zero, the estimate still inside the first
    # interval: the ▼ stands (no flicker to ≈ and back).
    grazing = window(ev("ttft", 0.12, -0.01, 0.25))
    assert marks(grazing) == ["≈"]
    shown = hold(grazing, held_findings(shown))
    assert marks(shown) == ["▼"] and shown.findings[0].evidence.delta == 0.15
    # A window with too few requests for an interval: the ▼ stands too.
    shown = hold(window(ev("ttft", 0.14, n=1)), held_findings(shown))
    assert marks(shown) == ["▼"]
    # The estimate moves out of the interval the win was decided on: shown as it is.
    moved = hold(window(ev("ttft", 0.01, -0.05, 0.07)), held_findings(shown))
    assert marks(moved) == ["≈"]
    # A reversal, or a server warming up again, is shown at once.
    assert marks(hold(window(ev("ttft", -0.10, -0.15, -0.05)), held_findings(shown))) == ["▲"]
    assert marks(hold(window(ev("ttft", None, warming="1 s of a 30 s window")),
                      held_findings(shown))) == ["…"]
    # Against another baseline nothing is held.
    other = decide([Evidence("ttft", "host-prefetch", "host", 0.12, lo=-0.01, hi=0.25,
                             method="paired t", n=5)], baseline="host")
    assert marks(hold(other, held_findings(shown))) == ["≈"]


def test_compared_scenarios_are_a_comparisons_columns() -> None:
    """What the strip asks before it compares: the columns comparison() would give, in its
    order (a run without figures is none; a file's runs are columns of their own)."""
    bench = from_file([_run("device", 0, kv_tokens=11_840_000),
                       _run("device", 1, kv_tokens=11_840_000)], PurePath("B/report.json"))
    live = [facts("device", figures(60, 400)), facts("idle", RunFigures()),
            facts("host-prefetch", figures(60, 400)), facts("device", figures(61, 410))]
    for runs, extra in [(live, bench), (live, []), (live[:2], []), (live[1:2], bench),
                        (live[1:2], []), ([], [])]:
        c = comparison(runs, extra=extra)
        assert compared_scenarios(runs, extra) == (c.scenarios if c else ()), (runs, extra)
    assert compared_scenarios(live, bench) == ("device", "host-prefetch",
                                               "device (B/report.json)")


def test_the_strip_names_a_file_columns_own_baseline() -> None:
    """A file's host-prefetch is judged against the same file's device, not the live one:
    the strip says so beside it, and the live column stays under the strip's own."""
    kw = {"kv_tokens": 11_840_000, "ttft_mean_s": 0.10}
    bench = [_run("device", i, **kw) for i in range(3)] + [
        _run("host-prefetch", i, kv_tokens=42_700_288, ttft_mean_s=0.115) for i in range(3)]
    extra = from_file(bench, PurePath("B/report.json"))
    found = strip_verdict(_store(figures(60, 900)), extra)
    assert found is not None
    text = strip_text(found).plain
    assert " · host-prefetch: KV " in text, text
    assert " · host-prefetch (B/report.json) vs device (B/report.json): KV ▲" in text, text
    assert text.startswith("verdict vs device · "), text
