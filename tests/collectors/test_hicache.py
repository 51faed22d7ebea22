"""SGLang's hierarchical KV cache (HiCache): its start-up line and its counters read from text
shaped like SGLang's, and the simulated server's --hicache-size end to end (its log line,
its host pools on the node, its metrics, its load-back on the GPUs' PCIe receive)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import DEMO, GIB, ServerSpec, SimServer, wait_until

from collectors import promtext
from collectors.sglang.collector import canonical
from collectors.sglang.hicache_metrics import HiCacheRates, by_rank, totals
from collectors.sglang.startup_log import StartupLogParser, parse_startup_log
from engram_top.seed import reference
from engram_top.sim import state
from engram_top.sim.backends import SimGpuBackend
from scenarios.workload import PROMPT_TOKENS_FIELD

ARGS = ("model_path='deepseek-ai/DeepSeek-V4.1-Flash', tp_size=4, "
        "enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_size=32")
LOG = f"""\
[2026-03-02 10:00:00] server_args=ServerArgs({ARGS})
[2026-03-02 10:00:09 TP0] Load weight begin. avail mem=139.20 GB
[2026-03-02 10:01:10 TP0] Memory pool end. avail mem=12.50 GB
[2026-03-02 10:01:11 TP0] Allocating 32.00 GB host memory for hierarchical KV cache.
[2026-03-02 10:01:11 TP1] Allocating 32.00 GB host memory for hierarchical KV cache.
\x1b[32m[2026-03-02 10:01:11 TP2]\x1b[0m Allocating 32.00 GB host memory for hierarchical KV cache.
[2026-03-02 10:01:12 DP0 TP3 EP3] Allocating 32.00 GB host memory for hierarchical KV cache.
"""


def test_the_start_up_line_gives_each_ranks_host_pool_in_bytes_of_1e9() -> None:
    facts = parse_startup_log(LOG)
    pools = {r: f.hicache_host_bytes for r, f in facts.ranks.items() if f.hicache_host_bytes}
    assert pools == {0: 32e9, 1: 32e9, 2: 32e9, 3: 32e9}
    assert facts.server_args is not None and facts.server_args.hicache_size == 32
    # inspect-log prints these facts as JSON: the field is there, per rank.
    assert facts.to_dict()["ranks"][3]["hicache_host_bytes"] == 32e9


@pytest.mark.parametrize("line", [
    "Allocating 0.50 GB host memory for hierarchical KV cache.",  # no prefix: rank 0
    "[2026-03-02 10:01:11] Allocating 0.50 GB host memory for hierarchical KV cache.",
    "[2026-03-02 10:01:11 TP0] Allocating 0.50 GB host memory for hierarchical KV cache.\r",
])
def test_the_line_in_every_prefix_the_reader_handles(line: str) -> None:
    parser = StartupLogParser()
    assert "hicache_allocated" in parser.feed(line)
    assert parser.facts().ranks[0].hicache_host_bytes == 0.5e9


def test_a_hybrid_rank_with_a_host_pool_per_kv_pool_adds_them_up_and_a_repeat_is_bounded(
) -> None:
    parser = StartupLogParser()
    for size in ("10.00", "2.50"):
        parser.feed(f"[2026-03-02 10:01:11 TP1] Allocating {size} GB host memory for "
                    "hierarchical KV cache.")
    assert parser.facts().ranks[1].hicache_host_bytes == 12.5e9
    for _ in range(10_000):  # a log that repeats the line: bounded, never grows without end
        parser.feed("[2026-03-02 10:01:11 TP1] Allocating 1.00 GB host memory for "
                    "hierarchical KV cache.")
    assert parser.facts().ranks[1].hicache_host_lines < 100


def test_not_a_number_is_no_pool() -> None:
    parser = StartupLogParser()
    parser.feed("[2026-03-02 10:01:11 TP0] Allocating nan GB host memory for hierarchical "
                "KV cache.")
    parser.feed("[2026-03-02 10:01:11 TP0] Allocating -5 GB host memory for hierarchical "
                "KV cache.")
    assert parser.facts().ranks.get(0) is None \
        or parser.facts().ranks[0].hicache_host_bytes is None


def page(load_back: float, backup: float, dropped: float, other_drop: float, evicted: float,
         prefix: str = "sglang:", suffix: str = "_total") -> str:
    """A /metrics page shaped like SGLang's radix cache collector's (two TP ranks reporting,
    the load-back split by pool, the drops by reason and pool)."""
    out = []
    for name, kind in (("load_back_bytes", "counter"), ("hicache_backup_bytes", "counter"),
                       ("hicache_dropped_tokens", "counter"), ("evicted_tokens", "counter")):
        out += [f"# HELP {prefix}{name}{suffix} {name}", f"# TYPE {prefix}{name}{suffix} {kind}"]
        for rank in (0, 1):
            lab = f'model_name="m",tp_rank="{rank}",pp_rank="0"'
            if name == "load_back_bytes":
                out.append(f'{prefix}{name}_total{{{lab},pool="full"}} {load_back * 0.75}')
                out.append(f'{prefix}{name}_total{{{lab},pool="swa"}} {load_back * 0.25}')
            elif name == "hicache_backup_bytes":
                out.append(f"{prefix}{name}_total{{{lab}}} {backup}")
            elif name == "hicache_dropped_tokens":
                out.append(f'{prefix}{name}_total{{{lab},reason="host_pressure",pool="full"}} '
                           f"{dropped}")
                out.append(f'{prefix}{name}_total{{{lab},reason="storage_full",pool="full"}} '
                           f"{other_drop}")
            else:
                out.append(f"{prefix}{name}_total{{{lab}}} {evicted}")
    out += [f"# TYPE {prefix}hicache_host_used_tokens gauge",
            f'{prefix}hicache_host_used_tokens{{tp_rank="0"}} 4096']
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("prefix,suffix", [("sglang:", "_total"), ("sglang_", "_total"),
                                           ("sglang:", "")])
def test_counters_and_their_rates_over_the_window(prefix: str, suffix: str) -> None:
    rates = HiCacheRates(window_s=60.0)
    first = canonical(promtext.parse(page(1000, 500, 10, 99, 100, prefix, suffix)))
    assert totals(first) == {"hicache_load_back_bytes": 1000.0, "hicache_backup_bytes": 500.0,
                             "hicache_dropped_host_pressure": 10.0, "evicted_tokens": 100.0}
    assert by_rank(first) == {0: 1000.0, 1: 1000.0}
    rates.add(0.0, first)
    out = rates.add(2.0, canonical(promtext.parse(page(5000, 900, 30, 500, 300, prefix,
                                                       suffix))))
    # The lowest TP rank stands for its scheduler; the per-rank series stay apart.
    assert out["hicache_load_back_bytes_per_s"] == 2000.0
    assert out["hicache_backup_bytes_per_s"] == 200.0
    assert out["hicache_dropped_host_pressure_per_s"] == 10.0  # storage_full is not counted
    assert out["evicted_tokens_per_s"] == 100.0
    assert out["hicache_load_back_by_rank"] == {0: 2000.0, 1: 2000.0}


def test_a_page_without_hicache_reports_none_not_zero() -> None:
    fams = canonical(promtext.parse("# TYPE sglang:num_running_reqs gauge\n"
                                    "sglang:num_running_reqs 1\n"))
    rates = HiCacheRates(window_s=60.0)
    rates.add(0.0, fams)
    out = rates.add(1.0, fams)
    assert all(out[k] is None for k in out if k.endswith("_per_s"))
    assert out["hicache_load_back_by_rank"] == {}


def test_a_drop_counter_with_other_reasons_only_counts_no_host_pressure_drop() -> None:
    fams = canonical(promtext.parse(
        "# TYPE sglang:hicache_dropped_tokens_total counter\n"
        'sglang:hicache_dropped_tokens_total{reason="storage_full"} 7\n'))
    assert totals(fams)["hicache_dropped_host_pressure"] == 0.0


POOL_GB = 0.01  # per rank: 1e7 bytes, a few thousand tokens, so a few prompts fill it


@pytest.fixture(scope="module")
def hicache_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    server = SimServer("hicache", ServerSpec("device", 0.02, ("--hicache-size", str(POOL_GB))),
                       Path(tmp_path_factory.mktemp("hicache")))
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def _fams(server: SimServer) -> dict[str, promtext.Family]:
    text = httpx.get(f"{server.url}/metrics", timeout=5.0).raise_for_status().text
    return canonical(promtext.parse(text))


@pytest.mark.slow
def test_sim_serve_hicache_size_end_to_end(hicache_server: SimServer) -> None:
    server = hicache_server
    ref = reference.default()
    # The start-up log: SGLang's line on every rank, read back as 1e7 bytes per rank.
    facts = parse_startup_log(server.log_text())
    assert {r: f.hicache_host_bytes for r, f in facts.ranks.items()} == {
        r: POOL_GB * 1e9 for r in range(ref.gpus)}
    assert facts.server_args is not None and facts.server_args.enable_hierarchical_cache
    # Each rank holds its pool on the node's host.
    ranks = [p for p in state.live_procs(server.node_dir) if "scheduler_TP" in p.name]
    assert len(ranks) == ref.gpus
    assert all(p.host_anon_bytes >= POOL_GB * 1e9 for p in ranks)
    # /server_info says HiCache is on, and its size.
    info = httpx.get(f"{server.url}/server_info", timeout=5.0).json()
    assert info["enable_hierarchical_cache"] is True and info["hicache_size"] == POOL_GB
    # Traffic: prompts larger than the pool fill it, then the backups drop for host pressure;
    # the next prompts load back from it, on every GPU's link.
    before = totals(_fams(server))
    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        for _ in range(4):
            c.post("/generate", json={PROMPT_TOKENS_FIELD: 4000, "text": "x",
                                      "sampling_params": {"max_new_tokens": 2}}
                   ).raise_for_status()
    after = totals(_fams(server))
    total_tokens = int(POOL_GB * 1e9 // ref.kv_bytes_per_token)
    assert after["hicache_backup_bytes"] == pytest.approx(total_tokens * ref.kv_bytes_per_token)
    # Every finished request's tokens leave the device; what the full pool could not take
    # was dropped.
    assert after["evicted_tokens"] >= 4 * 4002
    assert after["hicache_dropped_host_pressure"] == after["evicted_tokens"] - total_tokens
    assert after["hicache_load_back_bytes"] > (before["hicache_load_back_bytes"] or 0.0)
    fams = _fams(server)
    used = fams["sglang:hicache_host_used_tokens"].samples[0].value
    assert used == total_tokens
    assert by_rank(fams) == {r: after["hicache_load_back_bytes"] for r in range(ref.gpus)}

    # The load-back shows on each GPU's PCIe receive (the device placement reads no Engram
    # rows from the host, so it is all HiCache's) within a node tick of a new prompt.
    def rx() -> list[float]:
        return [d.pcie_rx_bytes_per_s or 0.0 for d in SimGpuBackend(server.node_dir).sample()
                .devices]

    with httpx.Client(base_url=server.url, timeout=30.0) as c:
        def loaded() -> bool:
            c.post("/generate", json={PROMPT_TOKENS_FIELD: 4000, "text": "x",
                                      "sampling_params": {"max_new_tokens": 1}}
                   ).raise_for_status()
            return all(v > 0 for v in rx())
        wait_until(loaded, 15.0, "the load-back on every GPU's PCIe receive")


def test_the_engram_estimate_is_receive_less_each_ranks_load_back() -> None:
    from engram_top.model.hicache import engram_rx_estimate
    from engram_top.model.views import HiCacheView
    view = HiCacheView(pool_bytes_per_rank=8e9, ranks=2, pool_bytes=16e9, used_tokens=None,
                       total_tokens=None, load_back_bytes_per_s=3e6, backup_bytes_per_s=None,
                       dropped_host_pressure_per_s=None, evicted_per_s=None, source="log",
                       load_back_by_rank={0: 1e6, 1: 2e6})
    assert engram_rx_estimate({0: 5e6, 1: 1e6, 2: 4e6, 3: None}, view) == {
        0: 4e6, 1: 0.0, 2: None, 3: None}  # never negative; unknown stays unknown
    assert engram_rx_estimate({0: 5e6}, None) == {0: None}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_pool_sglang_sizes_itself_is_the_one_the_fit_check_predicts(tmp_path: Path) -> None:
    """--enable-hierarchical-cache with no size or ratio on a host too small for the default
    ratio's pools: the simulated server sizes them as SGLang does (0.8 of what is available
    less 10 GiB, shared by the ranks) and logs the size; the fit check, before the start,
    predicted the same pool from the node's readings."""
    import dataclasses

    from collectors.host import sample as host_sample
    from engram_top.sim.backends import SimHostBackend
    from scenarios import fit, scenario_file
    from scenarios.hicache_size import DEFAULT_RATIO

    ref = reference.default()
    node_dir = tmp_path / "auto" / "node"
    spec = dataclasses.replace(state.NodeSpec.from_reference(ref),
                               host_total_bytes=768 * GIB, host_baseline_used_bytes=80 * GIB)
    state.write_spec(node_dir, spec)
    node = fit.node_free(SimGpuBackend(node_dir).sample(),
                         host_sample(SimHostBackend(node_dir), None))
    sc = scenario_file.load(DEMO).get("host")
    sized, plain = (fit.predict(dataclasses.replace(sc, args=args), node)
                    for args in (("--enable-hierarchical-cache",), ()))
    host_line = {ln.where: ln for ln in sized.lines}["host"]
    plain_line = {ln.where: ln for ln in plain.lines}["host"]
    predicted = (host_line.need_bytes - plain_line.need_bytes) / ref.gpus
    assert predicted < DEFAULT_RATIO * fit.seed_figures().kv_bytes["host"]  # sized down

    server = SimServer("auto", ServerSpec("host", 0.02, ("--enable-hierarchical-cache",)),
                       tmp_path)
    try:
        server.wait_ready()
        logged = {r: f.hicache_host_bytes for r, f in
                  parse_startup_log(server.log_text()).ranks.items()}
    finally:
        server.stop()
    assert sorted(logged) == list(range(ref.gpus))
    # One reading of available memory for every rank: the same pool on each.
    assert len(set(logged.values())) == 1
    # The check counts what the server will hold beside the pools from the model's figures;
    # the server measures what it holds: they agree to a few percent.
    assert logged[0] == pytest.approx(predicted, rel=0.03)
