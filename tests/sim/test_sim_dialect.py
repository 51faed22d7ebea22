"""The simulated node speaks DeepSeek-V4.1's own SGLang dialect, read from the real process:
its start-up log (the DSV4 pool configurator's lines per rank, the server args), its batch
lines (full and sliding-window pools), its Engram statistics (host placements only), its
multi-pool metrics and its /server_info, all with numbers that agree with each other and
with the seed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest
from helpers import ServerSpec, SimServer, wait_until
from prometheus_client.parser import text_string_to_metric_families

from collectors.units import GIB
from engram_top.seed import reference
from engram_top.sim import engram, memory

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

if TYPE_CHECKING:
    from helpers import Fleet

REF = reference.default()
PLAN = {p: memory.plan(REF, p) for p in reference.PLACEMENTS}
_PAIR = re.compile(r"([\w+#]+)=([^\s,]+)")


def _fields(line: str) -> dict[str, str]:
    """key=value pairs of a line, values without their unit ("2.52 GB" gives "2.52")."""
    return dict(_PAIR.findall(line))


def _rank_lines(text: str, rank: int, needle: str) -> list[str]:
    return [ln for ln in text.splitlines() if f" TP{rank}] " in ln and needle in ln]


def _one(text: str, rank: int, needle: str) -> str:
    lines = _rank_lines(text, rank, needle)
    assert len(lines) == 1, (rank, needle, lines)
    return lines[0]


@pytest.fixture(scope="module")
def own_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    """A host-placement server of this module's own: the fleet's are stopped by other tests,
    and the Engram statistics counted here must be of this module's requests alone."""
    server = SimServer("dialect-host", ServerSpec("host", 0.02),
                       tmp_path_factory.mktemp("dialect"))
    try:
        yield server.wait_ready()
    finally:
        server.stop(grace=5.0)


# --------------------------------------------------------------------------- start-up


@pytest.mark.parametrize("name", ["device", "host", "host-prefetch"])
def test_startup_prints_the_dsv4_pool_lines_per_rank(fleet: Fleet, name: str) -> None:
    server = fleet.launched(name)  # a stopped server's log is still there
    text = server.wait_log("The server is fired up and ready to roll!", timeout=60)
    plan = PLAN[server.placement]
    seed = REF.placements[server.placement]
    first_rank_line = text.index("Init torch distributed begin.")

    # Once, before the ranks: SGLang's DeepSeek-V4 defaults and the ServerArgs repr.
    ratio = re.search(r"\] INFO server_args\.py:\d+: Setting swa_full_tokens_ratio to 0\.1 "
                      r"for DeepseekV4ForCausalLM\.$", text, re.MULTILINE)
    args = re.search(r"\] server_args=ServerArgs\((.*)\)$", text, re.MULTILINE)
    assert ratio and args and ratio.start() < args.start() < first_rank_line
    for piece in ("model_path='deepseek-ai/DeepSeek-V4.1-Flash'", "tp_size=4", "pp_size=1",
                  "dp_size=1", "ep_size=1", f"mem_fraction_static={plan.mem_fraction_static}",
                  "kv_cache_dtype='fp8_e4m3'", "page_size=256", "attention_backend='dsv4'",
                  "decode_attention_backend=None", "speculative_algorithm=None",
                  "enable_dp_attention=False", "enable_hierarchical_cache=False"):
        assert piece in args.group(1), piece

    for r in range(4):
        begin = _one(text, r, "Load weight begin.")
        end = _one(text, r, "Load weight end.")
        assert "type=DeepseekV4ForCausalLM, quant=fp8" in end
        assert f"mem usage={seed.weights_gib:.2f} GB." in end
        prof = _fields(_one(text, r, "Memory profiling:"))
        sizing_line = _one(text, r, "DSV4 SWA sizing:")
        calc = _fields(_one(text, r, "DSV4 memory calculation:"))
        sizes = _fields(_one(text, r, "DSV4 pool sizes:"))
        init = _fields(_one(text, r, "Initialize DeepSeekV4TokenToKVPool with"))
        pool_end = _one(text, r, "Memory pool end.")
        order = [text.index(ln) for ln in (begin, end, sizing_line, pool_end)]
        assert order == sorted(order)
        assert not _rank_lines(text, r, "KV Cache is allocated")

        # Memory profiling: what the static fraction leaves (rest) is the KV budget.
        total, avail = float(prof["total_gpu_memory"]), float(prof["available_gpu_memory"])
        mfs, rest = float(prof["mem_fraction_static"]), float(prof["rest_memory"])
        assert total == pytest.approx(REF.gpu_total_bytes / GIB, abs=0.01)
        assert mfs == plan.mem_fraction_static
        assert avail - total * (1 - mfs) == pytest.approx(rest, abs=0.02)
        assert rest == pytest.approx(plan.kv_bytes / GIB, abs=0.01)

        # SWA sizing in cap mode: the pool is the request cap plus headroom.
        sizing = _fields(sizing_line)
        assert sizing["mode"] == "cap"
        assert int(sizing["swa_tokens"]) == int(sizing["request_cap+headroom"])
        assert int(sizing["prefix_tails"]) == REF.kv_pools.swa_prefix_tails

        # The calculation: available_bytes is the whole budget (SGLang prints it before it
        # takes the fixed pools out), full_token what is left over per full token.
        full = int(calc["full_token"])
        assert full == plan.kv_tokens
        assert round(full / 1e6, 2) == seed.kv_tokens / 1e6  # the seed's 11.84M / 42.70M
        assert float(calc["available_bytes"]) == pytest.approx(rest, abs=0.005)
        bpt = float(calc["bytes_per_full_token"])
        fixed = float(calc["swa_fixed"]) + float(calc["c128_state_fixed"])
        assert (bpt * full / GIB + fixed) == pytest.approx(float(calc["available_bytes"]),
                                                            abs=0.02)
        assert float(calc["swa_fixed"]) == pytest.approx(
            int(sizing["swa_tokens"]) * REF.kv_pools.swa_bytes_per_token / GIB, abs=0.005)

        # Pool sizes: full as calculated, the compressed pools follow it, SWA is the cap.
        assert int(sizes["full"]) == full
        assert int(sizes["swa"]) == int(sizing["swa_tokens"]) == seed.pools.swa
        assert (int(sizes["c4"]), int(sizes["c128"])) == (full // 4, full // 128)
        assert int(sizes["c4_state"]) == seed.pools.c4_state
        assert int(sizes["c128_state"]) == seed.pools.c128_state
        assert (init["swa_size"], init["c4_size"], init["c128_size"]) == \
            (sizes["swa"], sizes["c4"], sizes["c128"])
        assert int(init["max_num_reqs"]) == seed.service.max_running_requests
    # The scheduler summary: max_total_num_tokens is the full pool.
    assert f"max_total_num_tokens={plan.kv_tokens}, chunked_prefill_size=" in text


# --------------------------------------------------------------------------- serving


def _gauges(page: str, rank: str = "0") -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(page)
            for s in f.samples if s.labels.get("tp_rank") == rank}


def test_batch_lines_and_pool_metrics_while_serving(sim_device: SimServer) -> None:
    plan = PLAN["device"]
    body = {"text": "w " * 300, "sampling_params": {"max_new_tokens": 240}, "stream": True}
    with httpx.Client(base_url=sim_device.url, timeout=10.0) as c, \
            c.stream("POST", "/generate", json=body) as resp:
        lines = resp.iter_lines()
        for _ in range(6):  # a few tokens in: the request is running
            next(lines)
        page = c.get("/metrics").text
        for _ in lines:  # to the end: 239 decode steps log at least one Decode batch line
            pass
    g = _gauges(page)
    full, swa = g["sglang:full_token_usage"], g["sglang:swa_token_usage"]
    assert full > 0 and swa > 0
    assert g["sglang:token_usage"] == max(full, swa)
    assert g["sglang:max_total_num_tokens"] == plan.kv_tokens == 11_840_000
    used, avail = g["sglang:kv_used_tokens"], g["sglang:kv_available_tokens"]
    evictable = g["sglang:kv_evictable_tokens"]
    assert used == g["sglang:num_used_tokens"] > 0
    assert full == pytest.approx(used / plan.kv_tokens)
    assert avail > 0 and evictable >= 0
    assert used + avail + evictable <= plan.kv_tokens
    assert g["sglang:num_retracted_reqs"] == 0  # the pool is nowhere near full
    assert g["sglang:num_retracted_requests_total"] == 0
    assert 0.0 <= g["sglang:cache_hit_rate"] <= 1.0  # a fraction
    assert g["sglang:queue_time_seconds_count"] >= 1
    fams = {f.name: f.type for f in text_string_to_metric_families(page)}
    assert fams["sglang:queue_time_seconds"] == "histogram"
    assert fams["sglang:num_retracted_requests"] == "counter"

    text = sim_device.wait_log("Decode batch,")
    prefill = [ln for ln in text.splitlines() if "Prefill batch," in ln]
    decode = [ln for ln in text.splitlines() if "Decode batch," in ln]
    assert prefill and decode
    assert re.search(r"#cached-token: \d+, full token usage: \d\.\d\d, swa token usage: "
                     r"\d\.\d\d, #running-req: \d+, #queue-req: \d+", prefill[-1])
    assert re.search(r"Decode batch, #running-req: \d+, #full token: \d+, full token usage: "
                     r"\d\.\d\d, #swa token: \d+, swa token usage: \d\.\d\d, cuda graph: True, "
                     r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+$", decode[-1])
    # The one-pool spelling of other models is gone from this model's batch lines.
    assert not re.search(r"[#,] token usage:", "\n".join(prefill + decode))


def test_engram_statistics_only_on_host_placements(own_host: SimServer,
                                                   sim_device: SimServer) -> None:
    inp, out = 400, 30
    with httpx.Client(base_url=own_host.url, timeout=30.0) as c:
        c.post("/generate", json={"input_ids": list(range(inp)),
                                  "sampling_params": {"max_new_tokens": out}}).raise_for_status()
    # Every token run through the model looks its rows up in both tables: the prefill's
    # prompt, then one per decode step; the warm-up request's 3 prompt tokens came first.
    tokens = 3 + inp + (out - 1)
    per_layer = tokens * engram.ROWS_PER_TOKEN

    def stats() -> dict[int, list[dict[str, str]]]:
        found: dict[int, list[dict[str, str]]] = {}
        for ln in own_host.log_text().splitlines():
            if "] Engram layer=" in ln:
                assert " TP0] " in ln  # rank 0 logs them, as it does the batch lines
                f = _fields(ln)
                found.setdefault(int(f["layer"]), []).append(f)
        return found

    wait_until(lambda: sum(int(f["lookups"]) for f in stats().get(14, [])) >= per_layer,
               3 * engram.LOG_INTERVAL_S + 2, "the statistics lines of every token")
    found = stats()
    assert sorted(found) == [1, 14]
    for layer in (1, 14):
        assert sum(int(f["lookups"]) for f in found[layer]) == per_layer
        for f in found[layer]:
            lookups, reads = int(f["lookups"]), int(f["reads"])
            assert 0 < reads < lookups
            hit = float(f["hit_rate"].rstrip("%"))
            assert hit == pytest.approx(100 * (lookups - reads) / lookups, abs=0.05)
            assert 5 <= hit <= 30
            assert (f["cache"], f["threads"], f["packed"]) == ("1.0GiB(4-way)", "64", "True")
    assert "Engram layer=" not in sim_device.log_text()  # tables in HBM: no host lookups


# --------------------------------------------------------------------------- /server_info


def test_server_info_has_the_server_args(sim_device: SimServer, own_host: SimServer) -> None:
    expected = {
        "model_path": "deepseek-ai/DeepSeek-V4.1-Flash", "tp_size": 4, "pp_size": 1,
        "dp_size": 1, "ep_size": 1, "enable_dp_attention": False, "attention_backend": "dsv4",
        "decode_attention_backend": None, "speculative_algorithm": None, "page_size": 256,
        "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": PLAN["device"].mem_fraction_static,
        "enable_hierarchical_cache": False, "swa_full_tokens_ratio": 0.1,
    }
    for server in (sim_device, own_host):
        info = httpx.get(f"{server.url}/server_info", timeout=5).raise_for_status().json()
        assert {k: info.get(k) for k in expected} == expected
        assert info["internal_states"][0]["tp_size"] == 4  # the args again, per DP rank
        # The V4.1 preview build takes its Engram switches from the environment.
        assert "engram_config" not in info
        assert info["max_total_num_tokens"] == PLAN[server.placement].kv_tokens
