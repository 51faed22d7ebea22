"""The simulated scheduler (engram_top.sim.model) without a clock: KV admission, FIFO,
prefill then decode, freeing on finish and abort; and the offline closed-loop run that
calibrates the simulated node against the seed's host-prefetch deltas."""

from __future__ import annotations

import pytest

from engram_top.seed import reference
from engram_top.seed.reference import ServiceModel, Workload
from engram_top.sim import memory
from engram_top.sim.memory import PAGE_SIZE, kv_capacity_tokens
from engram_top.sim.model import (
    PREFILL_TOKEN_BUDGET,
    Request,
    Scheduler,
    simulate_closed_loop,
    simulate_draws,
)

SVC = ServiceModel(max_running_requests=4, step_s=0.010, per_seq_s=0.001, prefill_s=0.002,
                   prefill_per_token_s=0.0001)


def req(rid: str, input_len: int, max_new: int, arrival: float = 0.0) -> Request:
    return Request(rid, input_len, max_new, arrival)


def run_step(s: Scheduler, now: float):  # type: ignore[no-untyped-def]
    step = s.next_step()
    assert step is not None
    return step, s.finish(step, now)


# --------------------------------------------------------------------------- admission


def test_a_request_larger_than_the_pool_is_refused() -> None:
    s = Scheduler(SVC, kv_capacity=100)
    with pytest.raises(ValueError, match="needs 101 KV tokens; the pool holds 100"):
        s.submit(req("big", 91, 10))
    s.submit(req("fits", 90, 10))  # exactly the pool
    assert len(s.waiting) == 1


def test_requests_queue_while_their_tokens_do_not_fit_fifo() -> None:
    s = Scheduler(SVC, kv_capacity=100)
    a, b, c = req("a", 50, 10), req("b", 40, 10), req("c", 5, 5)
    for r in (a, b, c):
        s.submit(r)
    step = s.next_step()
    assert step is not None and step.kind == "prefill"
    # Each needs its prompt and 0.7 of its output: a 57; b 47 does not fit beside it; c 8.5
    # would, but waits behind b (FIFO).
    assert step.requests == [a]
    assert step.tokens == 50
    assert step.duration == pytest.approx(SVC.prefill_time_s(50))
    assert s.kv_used == 50  # its prompt: output slots are taken as tokens are written
    assert list(s.waiting) == [b, c]


def test_prefill_then_decode_steps_and_finish_frees_kv() -> None:
    s = Scheduler(SVC, kv_capacity=100)
    a, b = req("a", 50, 3), req("b", 48, 3)  # 52.1 + 50.1 > 100
    s.submit(a)
    s.submit(b)
    step, got = run_step(s, 1.0)
    assert step.kind == "prefill" and got == [a]
    assert a.first_token_at == 1.0 and a.generated == 1  # prefill yields the first token
    assert s.running == [a]
    assert s.used_tokens == 51
    # b still does not fit: decode steps give a its next token.
    step, got = run_step(s, 2.0)
    assert step.kind == "decode" and step.tokens == 1 and got == [a]
    assert step.duration == pytest.approx(SVC.decode_s(1))
    assert a.generated == 2 and s.used_tokens == 52
    step, got = run_step(s, 3.0)
    assert a.done and a.finished_at == 3.0 and a.token_times == [1.0, 2.0, 3.0]
    assert s.running == [] and s.kv_used == 0  # finishing frees what it held
    # Now b is admitted.
    step, got = run_step(s, 4.0)
    assert step.kind == "prefill" and got == [b]
    assert s.kv_used == 49
    run_step(s, 5.0)
    step, got = run_step(s, 6.0)
    assert b.done and s.idle and s.kv_used == 0
    assert s.next_step() is None


def test_decode_batches_every_running_request() -> None:
    s = Scheduler(SVC, kv_capacity=1000)
    rs = [req(f"r{i}", 10, 4) for i in range(3)]
    for r in rs:
        s.submit(r)
    step, got = run_step(s, 1.0)
    assert step.kind == "prefill" and got == rs and step.tokens == 30
    step, got = run_step(s, 2.0)
    assert step.kind == "decode" and step.tokens == 3 and got == rs
    assert step.duration == pytest.approx(SVC.step_s + 3 * SVC.per_seq_s)
    # A newcomer gets a prefill step before the next decode step.
    late = req("late", 10, 1, arrival=2.0)
    s.submit(late)
    step, got = run_step(s, 3.0)
    assert step.kind == "prefill" and got == [late]
    assert late.done and late not in s.running  # one token: done at prefill


def test_max_running_requests_caps_admission() -> None:
    s = Scheduler(SVC, kv_capacity=10_000)
    rs = [req(f"r{i}", 10, 5) for i in range(6)]
    for r in rs:
        s.submit(r)
    step, _ = run_step(s, 1.0)
    assert step.requests == rs[:4]  # max_running_requests = 4
    assert list(s.waiting) == rs[4:]
    step, _ = run_step(s, 2.0)
    assert step.kind == "decode"


def test_prefill_token_budget_splits_admission() -> None:
    s = Scheduler(SVC, kv_capacity=10 * PREFILL_TOKEN_BUDGET)
    a = req("a", PREFILL_TOKEN_BUDGET - 100, 1)
    b = req("b", 200, 1)
    s.submit(a)
    s.submit(b)
    step, _ = run_step(s, 1.0)
    assert step.requests == [a]  # b's prompt would overrun max_prefill_tokens
    step, _ = run_step(s, 2.0)
    assert step.requests == [b]
    # A lone prompt longer than the budget still goes (as a chunk would).
    huge = req("huge", 2 * PREFILL_TOKEN_BUDGET, 1)
    s.submit(huge)
    step, _ = run_step(s, 3.0)
    assert step.requests == [huge]


# --------------------------------------------------------------------------- abort


def test_abort_waiting_and_running_requests() -> None:
    s = Scheduler(SVC, kv_capacity=100)
    a, b = req("a", 50, 10), req("b", 40, 10)  # 60 + 50 > 100
    s.submit(a)
    s.submit(b)
    run_step(s, 1.0)
    s.abort(b)  # waiting
    assert list(s.waiting) == [] and s.kv_used == 51  # a's prompt and first token
    s.abort(a)  # running
    assert s.running == [] and s.kv_used == 0
    assert s.next_step() is None


def test_abort_during_its_prefill_step_does_not_bring_it_back() -> None:
    # The live server aborts a request whose client went away while a step is in flight;
    # one admitted into that prefill step is in neither list at that moment.
    s = Scheduler(SVC, kv_capacity=100)
    a, b = req("a", 50, 10), req("b", 40, 10)  # 60 + 50 > 100
    s.submit(a)
    s.submit(b)
    step = s.next_step()
    assert step is not None and step.requests == [a]
    s.abort(a)
    assert s.finish(step, 1.0) == []
    assert s.running == [] and s.kv_used == 0 and a.generated == 0
    step, got = run_step(s, 2.0)
    assert got == [b]  # the pool it held is free for the next in line


def test_abort_during_a_decode_step_frees_once() -> None:
    s = Scheduler(SVC, kv_capacity=100)
    a, b = req("a", 10, 5), req("b", 10, 5)
    s.submit(a)
    s.submit(b)
    run_step(s, 1.0)
    step = s.next_step()
    assert step is not None and step.kind == "decode"
    s.abort(a)
    assert s.finish(step, 2.0) == [b]
    assert s.kv_used == 12 and s.running == [b] and a.generated == 1


# --------------------------------------------------------------------------- offline runs


def test_closed_loop_is_deterministic_and_complete() -> None:
    ref = reference.default()
    dev = ref.placements["device"]
    cap = kv_capacity_tokens(ref, "device")
    one = simulate_closed_loop(dev.service, cap, ref.workload)
    two = simulate_closed_loop(dev.service, cap, ref.workload)
    assert one == two
    assert len(one.requests) == sum(ref.workload.requests_per_level)
    assert one.output_tokens == sum(r.output_len for r in one.requests)
    for r in one.requests:
        assert 0 < r.ttft <= r.e2e
        lo = int(ref.workload.output_len * ref.workload.range_ratio)
        assert lo <= r.output_len <= ref.workload.output_len
    # More concurrency: more throughput, slower tokens.
    by_level = {lvl: [r for r in one.requests if r.level == lvl]
                for lvl in ref.workload.concurrency_levels}
    tpot = {lvl: sum(r.tpot for r in rs) / len(rs) for lvl, rs in by_level.items()}
    assert tpot[1] < tpot[4] < tpot[16]


def test_host_prefetch_reproduces_the_seed_deltas() -> None:
    # Over the draws a bench's rounds make of the workload (each round its own requests).
    ref = reference.default()
    base = simulate_draws(ref.placements["device"].service,
                          kv_capacity_tokens(ref, "device"), ref.workload)
    got = simulate_draws(ref.placements["host-prefetch"].service,
                         kv_capacity_tokens(ref, "host-prefetch"), ref.workload)
    deltas = {
        "ttft_mean": got.mean_ttft / base.mean_ttft - 1,
        "tpot_mean": got.mean_tpot / base.mean_tpot - 1,
        "output_throughput": got.output_throughput / base.output_throughput - 1,
    }
    seed = {k: f.value for k, f in ref.deltas("host-prefetch").items()}
    assert seed == {"ttft_mean": 0.1557, "tpot_mean": 0.1091, "output_throughput": -0.1436}
    for key, value in deltas.items():
        assert abs(value - seed[key]) * 100 < 0.01, (key, value)  # within 0.01 pp


def test_kv_capacity_matches_the_seed() -> None:
    ref = reference.default()
    assert kv_capacity_tokens(ref, "device") == 11_840_000
    host = kv_capacity_tokens(ref, "host")
    assert host == kv_capacity_tokens(ref, "host-prefetch") == 42_700_288
    assert round(host / 1e6, 2) == 42.70
    assert host % 256 == 0  # whole pages


def test_kv_pools_follow_the_full_pool_and_match_the_seed() -> None:
    ref = reference.default()
    for name, placement in ref.placements.items():
        plan = memory.plan(ref, name)
        got, seed = plan.pools, placement.pools
        assert got.full == plan.kv_tokens
        assert (got.c4, got.c128) == (got.full // 4, got.full // 128)
        # The seed derives its pools from the full pool rounded to 0.01M; the simulated node
        # from its exact one. The SWA pool is the cap (it does not follow the full pool).
        for pool in ("full", "c4", "c128"):
            assert getattr(got, pool) == pytest.approx(getattr(seed, pool), rel=1e-4), pool
        assert (got.swa, got.c4_state, got.c128_state) == \
            (seed.swa, seed.c4_state, seed.c128_state)
        assert got.swa < ref.kv_pools.swa_full_tokens_ratio * got.full  # cap mode wins
        # The KV bytes hold the fixed pools, then the full pool, in whole pages.
        left = plan.kv_bytes - got.fixed_bytes - got.full * got.bytes_per_full_token
        assert 0 <= left < PAGE_SIZE * got.bytes_per_full_token
    fractions = {memory.plan(ref, name).mem_fraction_static for name in ref.placements}
    assert fractions == {0.791}  # one allocator policy for every placement


def test_small_pool_makes_the_closed_loop_queue() -> None:
    # A pool that holds about two requests: throughput falls, TTFT grows with queueing.
    wl = Workload(concurrency_levels=(8,), requests_per_level=(24,), input_len=100,
                  output_len=20, range_ratio=1.0, seed=3)
    roomy = simulate_closed_loop(SVC, 10_000, wl)
    tight = simulate_closed_loop(SVC, 240, wl)
    assert len(tight.requests) == 24
    assert tight.mean_ttft > 2 * roomy.mean_ttft
    assert tight.output_throughput < roomy.output_throughput


# --------------------------------------------------------------------------- retraction


def test_a_full_pool_retracts_as_sglang_does_and_every_request_still_finishes() -> None:
    s = Scheduler(SVC, kv_capacity=100)
    s.new_token_ratio = 0.1  # late in a run: admission expects little more output
    rs = [req(f"r{i}", 20, 30) for i in range(4)]
    for r in rs:
        s.submit(r)
    step, got = run_step(s, 0.0)
    assert got == rs and s.kv_used == 84  # 20 + 3 expected each: all four fit, 4 x 21 held
    t = 0.0
    while s.kv_used + len(s.running) <= 100:
        t += 1
        run_step(s, t)
    assert s.kv_used == 100 and s.retracted_total == 0
    step, got = run_step(s, t + 1)  # no slot for four more tokens: retract
    # Fewest written first, then the longest prompt: all equal, so the last two in order.
    # One retraction leaves 25 free for three (60 needed); a second leaves 50 for two.
    assert s.retracted_total == 2 and len(s.running) == 2 and len(s.waiting) == 2
    assert all(r.retractions == 1 and r.generated == 5 for r in s.waiting)
    assert s.kv_used == sum(r.held for r in s.running)
    assert s.new_token_ratio == pytest.approx((2 * 5 + 20 * 2) / 60)  # written + 20 steps
    back = list(s.waiting)
    while not s.idle:
        t += 1
        step = s.next_step()
        assert step is not None
        if step.kind == "prefill" and back[0] in step.requests:
            assert step.tokens >= back[0].input_len + back[0].generated  # recomputed
        s.finish(step, t)
        assert s.kv_used <= 100
    assert all(r.done and r.generated == 30 for r in rs) and s.kv_used == 0
