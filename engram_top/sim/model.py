"""The simulated server's scheduler: continuous batching over a KV pool, with no clock inside.

The same code runs the live simulated server (asyncio, scaled wall time) and the offline
virtual-time simulation that calibration and tests use as ground truth. Like SGLang's
default scheduler, a step is either a prefill batch (new requests admitted while their tokens
fit the KV pool, FIFO) or a decode step that gives every running request one token.

Admission and retraction follow SGLang's: a request is admitted when its prompt, plus
`new_token_ratio` of the output it may still write, fits beside what the running requests
hold and are expected to write; the ratio starts at 0.7 and decays by decode steps to 0.098.
When a decode step finds no room for a token per running request, the scheduler retracts
requests (fewest generated tokens first, then the longest prompt), frees their KV and puts
them back in the queue; re-admitted, they prefill their prompt and what they had generated
again. The ratio then rises to what the survivors have written plus 20 steps.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from dataclasses import dataclass, field

from engram_top.seed.reference import ServiceModel, Workload

PREFILL_TOKEN_BUDGET = 16384  # SGLang's max_prefill_tokens default
# After waking from idle the scheduler forms its first batch once arrivals have paused this
# long (node seconds), so a burst of requests sent together is prefilled together however a
# client spreads it: a Python client puts a 16-request burst on the wire over ~30 ms, a
# couple of milliseconds apart, with the odd 20 ms hiccup on a busy machine. The offline
# model's bursts are simultaneous, so there it is a plain wait after the first arrival.
BATCH_WINDOW_S = 0.02
# The offline closed loop's client turnaround: a finished request's successor arrives this
# long after it (node seconds), i.e. just after the next step has begun, as over real HTTP.
CLIENT_GAP_S = 0.002
# SGLang's defaults (SGLANG_INIT_NEW_TOKEN_RATIO, _MIN_NEW_TOKEN_RATIO_FACTOR,
# _NEW_TOKEN_RATIO_DECAY_STEPS, CLIP_MAX_NEW_TOKENS_ESTIMATION, retract_decode_steps).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20


@dataclass(eq=False)
class Request:
    rid: str
    input_len: int
    max_new_tokens: int
    arrival: float
    first_token_at: float | None = None
    finished_at: float | None = None
    generated: int = 0
    token_times: list[float] = field(default_factory=list)
    aborted: bool = False
    admitted_at: float | None = None  # its first admission: the queue time ends there
    retractions: int = 0

    @property
    def kv_tokens(self) -> int:
        """The most KV it can ever hold: its prompt and every token it may write."""
        return self.input_len + self.max_new_tokens

    @property
    def held(self) -> int:
        """KV slots it holds while running: its prompt and what it has written."""
        return self.input_len + self.generated

    def expected(self, ratio: float) -> float:
        """What admission expects it still to write (SGLang's estimate)."""
        return min(self.max_new_tokens - self.generated, CLIP_MAX_NEW_TOKENS) * ratio

    @property
    def done(self) -> bool:
        return self.generated >= self.max_new_tokens


@dataclass
class Step:
    kind: str  # "prefill" or "decode"
    duration: float
    requests: list[Request]
    tokens: int  # prompt tokens (prefill) or batch size (decode)


class Scheduler:
    def __init__(self, service: ServiceModel, kv_capacity: int) -> None:
        self.service = service
        self.kv_capacity = kv_capacity
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.kv_used = 0  # slots held: running requests' and those being prefilled
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.retracted_total = 0

    def submit(self, req: Request) -> None:
        if req.kv_tokens > self.kv_capacity:
            raise ValueError(f"request {req.rid} needs {req.kv_tokens} KV tokens; "
                             f"the pool holds {self.kv_capacity}")
        self.waiting.append(req)

    def abort(self, req: Request) -> None:
        req.aborted = True
        if req in self.running:
            self.running.remove(req)
            self.kv_used -= req.held
        elif req in self.waiting:
            self.waiting.remove(req)
        # Otherwise it is in the prefill step being run right now (admitted: out of the
        # queue, not yet running); finish() drops it and frees its KV, or it would come back.

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def next_step(self, now: float | None = None) -> Step | None:
        """The step to run next; with ``now``, requests arriving later are not admitted yet."""
        admitted: list[Request] = []
        budget = PREFILL_TOKEN_BUDGET
        cap = self.service.max_running_requests
        ratio = self.new_token_ratio
        room = (self.kv_capacity - self.kv_used
                - sum(r.expected(ratio) for r in self.running)) if self.waiting else 0.0
        while self.waiting and len(self.running) + len(admitted) < cap:
            head = self.waiting[0]
            if now is not None and head.arrival > now:
                break
            need = head.held + head.expected(ratio)
            if need > room:
                break  # the pool is full: the head waits, and so does everyone behind it
            if admitted and head.held > budget:
                break
            self.waiting.popleft()
            room -= need
            self.kv_used += head.held  # a retracted request prefills what it had written
            budget -= head.held
            if head.admitted_at is None:
                head.admitted_at = now if now is not None else head.arrival
            admitted.append(head)
        if admitted:
            tokens = sum(r.held for r in admitted)
            return Step("prefill", self.service.prefill_time_s(tokens), admitted, tokens)
        if self.running:
            if self.kv_capacity - self.kv_used < len(self.running):
                self._retract()
            else:
                self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO,
                                           self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
            batch = len(self.running)
            return Step("decode", self.service.decode_s(batch), list(self.running), batch)
        return None

    def _retract(self) -> None:
        """No slot for a token per running request: retract as SGLang's retract_decode does
        (fewest written first, then the longest prompt) until the rest have room for
        RETRACT_DECODE_STEPS more tokens each, or one is left."""
        order = sorted(self.running, key=lambda r: (r.generated, -r.input_len), reverse=True)
        first = True
        while len(order) > 1 and (first or self.kv_capacity - self.kv_used
                                  < RETRACT_DECODE_STEPS * len(order)):
            first = False
            victim = order.pop()
            self.running.remove(victim)
            self.kv_used -= victim.held
            victim.retractions += 1
            self.retracted_total += 1
            self.waiting.append(victim)
        written = sum(r.generated for r in order)
        most = sum(r.max_new_tokens for r in order) or 1
        self.new_token_ratio = min(1.0, (written + RETRACT_DECODE_STEPS * len(order)) / most)

    def finish(self, step: Step, now: float) -> list[Request]:
        """Apply a step that ended at ``now``; returns the requests that got a token."""
        live = [r for r in step.requests if not r.aborted]
        if step.kind == "prefill":
            # Aborted mid-prefill: their KV was taken at admission and is freed here
            # (a decode step's aborted requests were freed by abort()).
            self.kv_used -= sum(r.held for r in step.requests if r.aborted)
        for req in live:
            if req.first_token_at is None:
                req.first_token_at = now
            req.generated += 1
            req.token_times.append(now)
            self.kv_used += 1
        if step.kind == "prefill":
            self.running.extend(live)
        finished = {req for req in live if req.done}  # every live request is running now
        if finished:
            self.running = [r for r in self.running if r not in finished]
            for req in finished:
                req.finished_at = now
                self.kv_used -= req.held
        return live

    @property
    def used_tokens(self) -> int:
        """KV slots holding tokens now (prompt plus generated), as SGLang's num_used_tokens."""
        return sum(r.input_len + r.generated for r in self.running)


# --------------------------------------------------------------------------- offline runs


@dataclass(frozen=True)
class RequestResult:
    level: int
    input_len: int
    output_len: int
    ttft: float
    tpot: float
    e2e: float
    queue: float = 0.0  # arrival to first admission
    retractions: int = 0


@dataclass(frozen=True)
class LevelRun:
    """One closed-loop level in virtual time (node seconds)."""

    requests: tuple[RequestResult, ...]
    duration: float
    output_tokens: int
    retractions: int
    kv_usage_max: float  # of the full pool, 0..1
    kv_usage_mean: float  # over time


@dataclass(frozen=True)
class WorkloadResult:
    requests: tuple[RequestResult, ...]
    duration: float
    output_tokens: int

    @property
    def mean_ttft(self) -> float:
        return sum(r.ttft for r in self.requests) / len(self.requests)

    @property
    def mean_tpot(self) -> float:
        rs = [r.tpot for r in self.requests if r.output_len > 1]
        return sum(rs) / len(rs)

    @property
    def output_throughput(self) -> float:
        return self.output_tokens / self.duration


def request_lengths(workload: Workload, count: int, rng: random.Random) -> list[tuple[int, int]]:
    """Random input/output lengths as sglang.bench_serving's random dataset draws them."""
    def draw(full: int) -> int:
        return rng.randint(max(1, int(full * workload.range_ratio)), full)
    return [(draw(workload.input_len), draw(workload.output_len)) for _ in range(count)]


def simulate_level(service: ServiceModel, kv_capacity: int, concurrency: int,
                   lengths: list[tuple[int, int]], level: int = 0) -> LevelRun:
    """``concurrency`` clients in a closed loop sending ``lengths`` (input, output) in
    turn, each successor CLIENT_GAP_S after its predecessor finished."""
    sched = Scheduler(service, kv_capacity)
    todo = deque(lengths)
    count = len(lengths)
    tally = _Tally(level, kv_capacity)
    now = 0.0
    for i in range(min(concurrency, len(todo))):
        inp, out = todo.popleft()
        sched.submit(Request(f"r{level}-{i}", inp, out, 0.0))
    while len(tally.results) < count:
        step = sched.next_step(now)
        if step is None:  # idle until the next arrival, then the batch window
            assert sched.waiting, "closed loop stalled"
            now = max(now, sched.waiting[0].arrival) + BATCH_WINDOW_S
            continue
        now += step.duration
        tally.step(sched, step.duration)
        for req in sched.finish(step, now):
            if req.finished_at is None:
                continue
            tally.finished(req)
            if todo:
                inp, out = todo.popleft()
                sched.submit(Request(f"r{level}-{count - len(todo)}", inp, out,
                                     now + CLIENT_GAP_S))
    return tally.run(now, sched)


def simulate_closed_loop(service: ServiceModel, kv_capacity: int,
                         workload: Workload) -> WorkloadResult:
    """Run the workload's concurrency sweep in virtual time; the ground truth of the model."""
    rng = random.Random(workload.seed)
    results: list[RequestResult] = []
    duration = 0.0
    output_tokens = 0
    for level, count in zip(workload.concurrency_levels, workload.requests_per_level, strict=True):
        run = simulate_level(service, kv_capacity, level,
                             request_lengths(workload, count, rng), level)
        results += run.requests
        duration += run.duration
        output_tokens += run.output_tokens
    return WorkloadResult(tuple(results), duration, output_tokens)


# A bench draws each round's requests anew (seed, seed + 1, ...): the model's figures for a
# workload are its mean over the draws of this many rounds, as the demo plan
# (scenarios/demo-bench.toml, four rounds) measures them.
DRAWS = 4


@dataclass(frozen=True)
class DrawsResult:
    mean_ttft: float  # over every request of every draw
    mean_tpot: float
    output_throughput: float  # the mean of the draws' throughputs, as rounds average them


def simulate_draws(service: ServiceModel, kv_capacity: int, workload: Workload,
                   draws: int = DRAWS) -> DrawsResult:
    """The workload's figures over ``draws`` draws of its requests (seeds from its own)."""
    runs = [simulate_closed_loop(service, kv_capacity,
                                 dataclasses.replace(workload, seed=workload.seed + k))
            for k in range(draws)]
    requests = [r for run in runs for r in run.requests]
    tpots = [r.tpot for r in requests if r.output_len > 1]
    return DrawsResult(sum(r.ttft for r in requests) / len(requests), sum(tpots) / len(tpots),
                       sum(run.output_throughput for run in runs) / len(runs))


def simulate_open_level(service: ServiceModel, kv_capacity: int, rate: float,
                        lengths: list[tuple[int, int]], rng: random.Random,
                        level: int = 0) -> LevelRun:
    """Poisson arrivals at ``rate`` requests per node second, each joining the queue when
    it arrives (a retracted request goes back behind those already there, not behind ones
    yet to come)."""
    sched = Scheduler(service, kv_capacity)
    arrivals: deque[Request] = deque()
    t = 0.0
    for i, (inp, out) in enumerate(lengths):
        arrivals.append(Request(f"r{level}-{i}", inp, out, t))
        t += rng.expovariate(rate)
    tally = _Tally(level, kv_capacity)
    now = 0.0
    while len(tally.results) < len(lengths):
        while arrivals and arrivals[0].arrival <= now:
            sched.submit(arrivals.popleft())
        step = sched.next_step(now)
        if step is None:  # idle until the next arrival, then the batch window
            assert arrivals, "open loop stalled"
            now = max(now, arrivals[0].arrival) + BATCH_WINDOW_S
            continue
        now += step.duration
        tally.step(sched, step.duration)
        for req in sched.finish(step, now):
            if req.finished_at is not None:
                tally.finished(req)
    return tally.run(now, sched)


@dataclass
class _Tally:
    """What an offline level gathers as it runs: finished requests, output tokens and the
    KV pool's usage over time."""

    level: int
    kv_capacity: int
    results: list[RequestResult] = field(default_factory=list)
    output_tokens: int = 0
    usage_max: float = 0.0
    usage_area: float = 0.0

    def step(self, sched: Scheduler, duration: float) -> None:
        usage = sched.kv_used / self.kv_capacity
        self.usage_max = max(self.usage_max, usage)
        self.usage_area += usage * duration

    def finished(self, req: Request) -> None:
        assert req.first_token_at is not None and req.finished_at is not None
        assert req.admitted_at is not None
        self.output_tokens += req.generated
        ttft = req.first_token_at - req.arrival
        e2e = req.finished_at - req.arrival
        tpot = (e2e - ttft) / (req.generated - 1) if req.generated > 1 else 0.0
        self.results.append(RequestResult(self.level, req.input_len, req.generated, ttft, tpot,
                                          e2e, req.admitted_at - req.arrival, req.retractions))

    def run(self, duration: float, sched: Scheduler) -> LevelRun:
        return LevelRun(tuple(self.results), duration, self.output_tokens, sched.retracted_total,
                        self.usage_max, self.usage_area / duration if duration > 0 else 0.0)
