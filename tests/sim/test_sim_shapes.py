"""The simulated server writes the shapes real servers write, each as an option of `sim
serve`, and the readers take them end to end: failures in a real server's words (--fail-as:
a child's SIGQUIT, an NCCL watchdog timeout, no kernel image in graph capture, CUDA out of
memory allocating the KV pool), other models' pool lines (--kv-pools swa|mamba), the ranks'
prefixes of other parallel layouts (--parallel dp-attention|pp), a container runtime's
timestamps (--log-timestamps), and paused requests (/pause_generation)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import ENGRAM_TOP, ServerSpec, SimServer, wait_until

from collectors import promtext
from collectors.sglang.collector import canonical
from collectors.sglang.startup_log import parse_startup_log
from collectors.units import GIB
from engram_top.seed import reference
from engram_top.sim import memory, pool_styles, state
from engram_top.sim.server import main as sim_main
from scenarios.workload import PROMPT_TOKENS_FIELD

REF = reference.default()
PLAN = memory.plan(REF, "device")
# A container runtime's stamp, as kubectl logs --timestamps and docker logs -t print it.
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[list[SimServer]]:
    """Servers a test starts (append them), all stopped after it, with no survivor."""
    servers: list[SimServer] = []
    yield servers
    left = {s.name: s.stop(grace=5.0).survivors for s in servers}
    assert not any(left.values()), f"survivors: {left}"


def start(launch: list[SimServer], tmp_path: Path, name: str, *extra: str) -> SimServer:
    server = SimServer(name, ServerSpec("device", 0.01, extra), tmp_path)
    launch.append(server)
    return server


def ended(server: SimServer) -> str:
    """The log of a server that must fail: it exits 1, its ranks' memory gone."""
    rc = server.wait_exit(60)
    assert rc == 1, f"exit {rc}; log tail:\n{server.log_text()[-1500:]}"
    wait_until(lambda: not list(state.procs_dir(server.node_dir).glob("*.json")), 10.0,
               "the ranks' memory to go")
    return server.log_text()


# --------------------------------------------------------------------------- failures


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "extra", "phase", "words", "cause"), [
    ("sigquit", (), "weights", "It usually means one child failed.", "SafetensorError"),
    ("sigquit", ("--fail-at", "kv_pool"), "kv_pool", "It usually means one child failed.",
     "Not enough memory"),
    ("sigquit", ("--fail-at", "warmup"), "warmup", "It usually means one child failed.",
     "illegal memory access"),
    ("no-kernel-image", (), "graphs",
     "CUDA error: no kernel image is available for execution on the device",
     "no kernel image is available"),
    ("oom-kv-pool", ("--fail-at", "kv_pool"), "kv_pool", "torch.OutOfMemoryError",
     "CUDA out of memory"),
])
def test_each_failure_kind_ends_the_start_up_in_its_own_words(
        launch: list[SimServer], tmp_path: Path, kind: str, extra: tuple[str, ...],
        phase: str, words: str, cause: str) -> None:
    text = ended(start(launch, tmp_path, kind, "--fail-as", kind, *extra))
    assert words in text
    # The server's words end it: no line of the simulator's own.
    assert "Initialization failed." not in text and "simulated failure" not in text
    facts = parse_startup_log(text)
    assert facts.phase == "failed"
    fatal = [e for e in facts.errors if e.fatal and e.exception]
    assert fatal, facts.errors
    # The phase the text gives, its stack frames included; the cause in one line.
    assert facts.failed_in == phase
    if phase != "warmup":  # the event loop's frames name no start-up phase: the current one
        assert fatal[0].phase == phase
    assert facts.failure_cause is not None and cause in facts.failure_cause
    assert "\n" not in facts.failure_cause


@pytest.mark.slow
def test_an_oom_traceback_carries_no_timestamp_and_its_stack_names_the_kv_pool(
        launch: list[SimServer], tmp_path: Path) -> None:
    text = ended(start(launch, tmp_path, "oom", "--fail-as", "oom-kv-pool"))
    at = text.index("Traceback (most recent call last):")
    body = text[at:text.index("torch.OutOfMemoryError")].splitlines()
    assert body and not any(line.startswith("[") for line in body)
    assert "in _create_buffers" in text and "in init_memory_pool" in text
    # Before it, the pool phase had begun: its dtype line, and no pool line.
    assert "Using KV cache dtype" in text and "Memory pool end" not in text


@pytest.mark.slow
def test_an_nccl_watchdog_timeout_behind_container_timestamps(
        launch: list[SimServer], tmp_path: Path) -> None:
    text = ended(start(launch, tmp_path, "nccl", "--fail-as", "nccl-timeout",
                       "--log-timestamps"))
    lines = text.splitlines()
    assert all(RFC3339.match(line) for line in lines if line), \
        [line for line in lines if line and not RFC3339.match(line)][:3]
    watchdog = [line for line in lines if "ProcessGroupNCCL.cpp" in line]
    # torch's c10 lines on the last rank: "[rank3]:[E302 10:00:05.123456789 ProcessGroupNCCL..."
    assert watchdog and all(re.search(r"\[rank3\]:\[E\d{3,4} \d\d:\d\d:\d\d\.\d{9} ", line)
                            for line in watchdog)
    assert any("Timeout at NCCL work: 1" in line for line in watchdog)
    assert "Load weight begin" not in text  # it died in the distributed init
    facts = parse_startup_log(text)
    assert facts.phase == "failed" and facts.failed_in == "distributed_init"
    assert facts.failure_cause is not None and "Watchdog caught collective operation " \
        "timeout" in facts.failure_cause


@pytest.mark.parametrize(("argv", "says"), [
    (["--fail-as", "oom-kv-pool", "--fail-at", "weights"], "--fail-at kv_pool"),
    (["--fail-as", "no-kernel-image", "--fail-at", "warmup"], "happens in graphs"),
    (["--dialect", "vllm", "--fail-as", "sigquit"], "--fail-as"),
    (["--dialect", "vllm", "--kv-pools", "swa", "--parallel", "pp"], "--kv-pools, --parallel"),
])
def test_options_that_cannot_go_together_are_refused_before_anything_starts(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.startswith("engram-top sim serve: ")


# --------------------------------------------------------------------------- pools, layouts


def _info(server: SimServer) -> dict[str, object]:
    return httpx.get(f"{server.url}/server_info", timeout=5.0).raise_for_status().json()


@pytest.mark.slow
def test_a_hybrid_swa_pool_in_two_pipeline_stages(launch: list[SimServer],
                                                  tmp_path: Path) -> None:
    server = start(launch, tmp_path, "swa-pp", "--kv-pools", "swa", "--parallel", "pp")
    server.wait_ready()
    info = _info(server)
    assert (info["tp_size"], info["pp_size"], info["dp_size"]) == (2, 2, 1)
    text = server.log_text()
    swa = pool_styles.swa_tokens(PLAN, REF.kv_pools.swa_full_tokens_ratio)
    assert 0 < swa < PLAN.kv_tokens
    for tag in ("PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"):
        assert (f"{tag}] Use sliding window memory pool. full_layer_tokens={PLAN.kv_tokens}, "
                f"swa_layer_tokens={swa}") in text
        assert (f"{tag}] SWAKVPool mem usage: {PLAN.kv_bytes / GIB:.2f} GB, swa size: {swa}, "
                f"full size: {PLAN.kv_tokens}") in text
    assert "DSV4 pool sizes" not in text
    facts = parse_startup_log(text)
    # The capacity is the full pool's, as the server says it is.
    assert facts.kv_capacity_tokens == info["max_total_num_tokens"] == PLAN.kv_tokens
    assert facts.pool_sizes == {"full": PLAN.kv_tokens, "swa": swa}
    assert facts.parallel["pp_size"] == 2 and facts.parallel["tp_size"] == 2
    # Two stages of TP2: four ranks, PP0 TP0 and PP1 TP0 apart.
    assert sorted(f.label for f in facts.ranks.values()) == [
        "PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"]
    assert all(f.kv_tokens == PLAN.kv_tokens for f in facts.ranks.values())


@pytest.mark.slow
def test_a_mamba_state_beside_the_kv_cache_with_dp_attention(launch: list[SimServer],
                                                             tmp_path: Path) -> None:
    server = start(launch, tmp_path, "mamba-dp", "--kv-pools", "mamba", "--parallel",
                   "dp-attention", "--log-timestamps")
    server.wait_ready()
    info = _info(server)
    assert (info["tp_size"], info["dp_size"], info["ep_size"]) == (4, 4, 4)
    assert info["enable_dp_attention"] is True
    text = server.log_text()
    state_gib = PLAN.pools.fixed_bytes / GIB
    for r in range(REF.gpus):
        line = next(x for x in text.splitlines() if f"DP{r} TP{r} EP{r}] Mamba Cache" in x)
        conv, ssm = (float(v) for v in re.findall(r"_state size: ([\d.]+)GB", line))
        assert conv + ssm == pytest.approx(state_gib, abs=0.011)
        assert f"max_mamba_cache_size: {PLAN.pools.max_num_reqs + 1}," in line
        assert f"DP{r} TP{r} EP{r}] KV Cache is allocated. dtype: torch.float8_e4m3fn, " \
               f"#tokens: {PLAN.kv_tokens}, K size: " in text
    # The scheduler's process names carry the prefix, as SGLang's do (each rank's state is
    # read as it last wrote it: waited for, not taken once, on a busy machine).
    want = [f"sglang::scheduler_DP{r}_TP{r}_EP{r}" for r in range(REF.gpus)]

    def names() -> list[str]:
        return sorted(p.name for p in state.live_procs(server.node_dir) if "scheduler" in p.name)
    wait_until(lambda: names() == want, 10, "the four schedulers' names")
    facts = parse_startup_log(text)
    assert facts.kv_capacity_tokens == info["max_total_num_tokens"]
    assert facts.parallel["dp_size"] == 4 and facts.parallel["ep_size"] == 4
    assert sorted(f.label for f in facts.ranks.values()) == [
        f"DP{r} TP{r} EP{r}" for r in range(REF.gpus)]
    for f in facts.ranks.values():
        assert f.mamba_state["max_mamba_cache_size"] == PLAN.pools.max_num_reqs + 1
        assert f.mamba_state_gb == pytest.approx(state_gib, abs=0.011)


# --------------------------------------------------------------------------- paused, aborted


def _gauge(server: SimServer, name: str) -> list[float]:
    page = httpx.get(f"{server.url}/metrics", timeout=5.0).raise_for_status().text
    fam = canonical(promtext.parse(page)).get(name)
    return [] if fam is None else [s.value for s in fam.samples]


@pytest.mark.slow
def test_paused_requests_and_aborted_ones_on_the_metrics_page(launch: list[SimServer],
                                                              tmp_path: Path) -> None:
    server = start(launch, tmp_path, "pause", "--serve-scale", "1")
    server.wait_ready()
    assert _gauge(server, "sglang:num_paused_reqs") == [0.0] * REF.gpus
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        assert c.post("/pause_generation", json={"mode": "retract"}).status_code == 400
        assert c.post("/pause_generation", json={}).json()["status"] == "ok"
        # Two long requests arrive while paused: they wait, held by the pause.
        with c.stream("POST", "/generate", json={
                PROMPT_TOKENS_FIELD: 64, "text": "x", "stream": True,
                "sampling_params": {"max_new_tokens": 5000}}) as first:
            wait_until(lambda: _gauge(server, "sglang:num_queue_reqs")[0] == 1, 10.0,
                       "the request queued behind the pause")
            assert _gauge(server, "sglang:num_paused_reqs")[0] == 0  # queued, not running
            c.post("/continue_generation").raise_for_status()
            assert first.status_code == 200
            lines = first.iter_lines()  # kept: a dropped iterator closes the stream
            assert next(lines).startswith("data: ")
            c.post("/pause_generation").raise_for_status()
            wait_until(lambda: _gauge(server, "sglang:num_paused_reqs") == [1.0] * REF.gpus,
                       10.0, "the running request counted as paused")
            # inspect-metrics on the live page, as a user runs it: the paused count.
            done = subprocess.run([*ENGRAM_TOP, "inspect-metrics", f"{server.url}/metrics"],
                                  capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout)["gauges"]["num_paused_reqs"] == 1.0
        # Its client went away while paused: aborted, and counted so.
        wait_until(lambda: _gauge(server, "sglang:num_aborted_requests_total") == [1.0], 10.0,
                   "the abort counted")
        c.post("/continue_generation").raise_for_status()
        wait_until(lambda: _gauge(server, "sglang:num_paused_reqs") == [0.0] * REF.gpus, 10.0,
                   "no paused request once generation continues")
