"""StartupLogParser on hybrid models' pools: a sliding-window (SWA) model's full and SWA pools
(its capacity is the FULL pool, its KV total the SWAKVPool line's), a post-capture resize,
and a Mamba model's state pool; each shape in every prefix style, in several wordings."""

from __future__ import annotations

import json

import pytest
from sglang_logs import RANKED_STYLES, STYLES, dress

from collectors.sglang.startup_log import StartupLogParser, parse_startup_log


def _swa_lines(full: int, swa: int, *, labelled: bool, swa_first: bool, total: bool,
               tags: str = "TP0") -> list[tuple[str, str]]:
    word = "Use Sliding window memory pool" if full % 2 else "Use sliding window memory pool"
    full_gb, swa_gb = round(full * 2.4e-5, 2), round(swa * 2.4e-5, 2)
    pools = [
        ("Full " if labelled else "", full, full_gb),
        ("SWA " if labelled else "", swa, swa_gb),
    ]
    if swa_first:
        pools.reverse()
    lines = [
        (tags, "Load weight begin. avail mem=139.10 GB"),
        (tags, "Load weight end. elapsed=20.1 s, type=GptOssForCausalLM, dtype=torch.bfloat16, "
               "avail mem=100.00 GB, mem usage=39.10 GB."),
        (tags, f"{word}. full_layer_tokens={full}, swa_layer_tokens={swa}"),
        *((tags, f"{label}KV Cache is allocated. dtype: torch.bfloat16, #tokens: {n}, "
                 f"K size: {gb / 2:.2f} GB, V size: {gb / 2:.2f} GB") for label, n, gb in pools),
    ]
    if total:
        lines.append((tags, f"SWAKVPool mem usage: {full_gb + swa_gb + 0.01:.2f} GB, "
                            f"swa size: {swa}, full size: {full}"))
    lines.append((tags, "Memory pool end. avail mem=20.00 GB"))
    return lines


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(("full", "swa", "labelled", "swa_first", "total"), [
    (1310720, 1048576, True, False, True),
    (3234561, 646912, False, True, True),  # the older text: unlabelled, SWA pool first
    (523264, 130816, False, False, False),  # no SWAKVPool line: the total is derived
    (88064, 704512, True, True, False),  # a SWA pool larger than the full one
])
def test_a_swa_models_capacity_is_its_full_pool(style: str, full: int, swa: int,
                                                 labelled: bool, swa_first: bool,
                                                 total: bool) -> None:
    lines = _swa_lines(full, swa, labelled=labelled, swa_first=swa_first, total=total)
    f = parse_startup_log(dress(lines, style))
    r = f.ranks[0]
    assert f.kv_capacity_tokens == r.kv_tokens == full
    assert f.kv_capacity_from == r.kv_tokens_from == "sliding window pool: full_layer_tokens"
    assert f.pool_sizes == r.pool_sizes == {"full": full, "swa": swa}
    full_gb, swa_gb = round(full * 2.4e-5, 2), round(swa * 2.4e-5, 2)
    if total:  # SWAKVPool's figure, as stated
        assert r.kv_total_gb == pytest.approx(full_gb + swa_gb + 0.01, abs=0.006)
        assert r.kv_total_from == "SWAKVPool mem usage" and "ranks.kv_total_gb" not in f.derived
    else:  # the two pools added: said to be derived
        k_v = round(full_gb / 2, 2) * 2 + round(swa_gb / 2, 2) * 2
        assert r.kv_total_gb == pytest.approx(k_v, abs=1e-6)
        assert r.kv_total_from.startswith("derived") and "ranks.kv_total_gb" in f.derived
    # The main pool's K and V sizes are the full pool's, whatever order the lines came in.
    assert r.k_size_gb == pytest.approx(round(full_gb / 2, 2))
    assert [p.tokens for p in r.kv_pools] == ([swa, full] if swa_first else [full, swa])
    assert f.phase == "kv_pool" and f.failed_at is None


@pytest.mark.parametrize("style", STYLES)
def test_swakvpool_alone_states_capacity_and_total(style: str) -> None:
    lines = [("", "KV Cache is allocated. #tokens: 40960, K size: 0.94 GB, V size: 0.94 GB"),
             ("", "KV Cache is allocated. #tokens: 327680, K size: 7.50 GB, V size: 7.50 GB"),
             ("", "SWAKVPool mem usage: 18.75 GB, swa size: 40960, full size: 327680")]
    f = parse_startup_log(dress(lines, style))
    assert f.kv_capacity_tokens == 327680 and f.kv_capacity_from == "SWAKVPool: full size"
    assert f.ranks[0].kv_total_gb == 18.75 and f.ranks[0].k_size_gb == 7.5


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("swa", [8192, 2097152])
def test_all_swa_pool_is_the_capacity(style: str, swa: int) -> None:
    lines = [("", f"Use sliding window memory pool (all SWA). swa_layer_tokens={swa}"),
             ("", f"SWA KV Cache is allocated. #tokens: {swa}, K size: 1.00 GB, V size: 1.00 GB")]
    f = parse_startup_log(dress(lines, style))
    assert f.kv_capacity_tokens == swa and "all SWA" in (f.kv_capacity_from or "")
    assert f.pool_sizes == {"swa": swa}


def test_the_schedulers_max_total_num_tokens_wins() -> None:
    lines = _swa_lines(600000, 100000, labelled=True, swa_first=False, total=True)
    lines.append(("TP0", "max_total_num_tokens=599936, chunked_prefill_size=8192, "
                         "max_prefill_tokens=16384, max_running_requests=64, context_len=131072, "
                         "available_gpu_mem=20.00 GB"))
    f = parse_startup_log(dress(lines, "datetime"))
    assert f.kv_capacity_tokens == 599936 and f.kv_capacity_from == "max_total_num_tokens"
    assert f.ranks[0].kv_tokens == 600000  # the rank's own line, as stated


@pytest.mark.parametrize("style", STYLES)
def test_post_capture_resize_is_the_pool_that_serves(style: str) -> None:
    lines = [
        ("", "Use sliding window memory pool. full_layer_tokens=900000, swa_layer_tokens=90000"),
        ("", "Full KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 900000, "
             "K size: 20.00 GB, V size: 20.00 GB"),
        ("", "SWAKVPool VA upper bound: 44.00 GB, swa size: 90000, full size: 900000"),
        ("", "Capture cuda graph begin. This can take up to several minutes. avail mem=60.00 GB"),
        ("", "Capture cuda graph end. Time elapsed: 9.00 s. mem usage=1.50 GB. "
             "avail mem=58.50 GB."),
        ("", "Post-capture KV sizing: full_layer_tokens=812000, swa_layer_tokens=81200"),
        ("", "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 812000, "
             "KV size: 39.70 GB, avail mem=2.10 GB"),
    ]
    f = parse_startup_log(dress(lines, style))
    r = f.ranks[0]
    assert f.kv_capacity_tokens == r.kv_tokens == 812000
    assert r.pool_sizes == {"full": 812000, "swa": 81200}
    assert r.kv_total_gb == 39.70 and r.kv_total_from == "KV Cache is allocated"
    assert r.pool_end_avail_gb == 2.10 and [p.label for p in r.kv_pools] == ["post-capture"]


@pytest.mark.parametrize("style", RANKED_STYLES)
def test_each_rank_keeps_its_own_swa_pools(style: str) -> None:
    lines = []
    for rank, full in ((0, 700000), (1, 700160)):
        lines += _swa_lines(full, full // 8, labelled=True, swa_first=rank == 1, total=True,
                            tags=f"TP{rank}")
    f = parse_startup_log(dress(lines, style))
    assert {r: rf.kv_tokens for r, rf in f.ranks.items()} == {0: 700000, 1: 700160}
    assert f.kv_capacity_tokens == 700000  # the lowest rank's
    assert f.ranks[1].pool_sizes["swa"] == 700160 // 8


MAMBA = [
    ("Mamba Cache is allocated. max_mamba_cache_size: 656, conv_state size: 0.12GB, "
     "ssm_state size: 12.30GB intermediate_ssm_state_cache size: 0.00GB "
     "intermediate_conv_window_cache size: 0.50GB ",
     {"max_mamba_cache_size": 656, "conv_state_gb": 0.12, "ssm_state_gb": 12.3,
      "intermediate_ssm_state_cache_gb": 0.0, "intermediate_conv_window_cache_gb": 0.5}, 12.92),
    ("Mamba Cache is allocated. max_mamba_cache_size: 1024, conv_state size: 0.05GB, "
     "ssm_state size: 1.52GB ",
     {"max_mamba_cache_size": 1024, "conv_state_gb": 0.05, "ssm_state_gb": 1.52}, 1.57),
    ("Mamba Cache is allocated. conv_state size: 512.00 MB, ssm_state size: 3.25 GB",
     {"conv_state_gb": 0.5, "ssm_state_gb": 3.25}, 3.75),
]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(("line", "state", "total"), MAMBA)
def test_mamba_state_pool(style: str, line: str, state: dict[str, float], total: float) -> None:
    lines = [("TP0", line),
             ("TP0", "KV Cache is allocated. #tokens: 250000, K size: 2.00 GB, V size: 2.00 GB"),
             ("TP0", "Memory pool end. avail mem=30.00 GB")]
    f = parse_startup_log(dress(lines, style))
    r = f.ranks[0]
    assert r.mamba_state == state and f.mamba_state == state
    assert r.mamba_state_gb == pytest.approx(total)
    # The attention layers' pool is the KV capacity; the state pool is apart from it.
    assert f.kv_capacity_tokens == 250000 and r.kv_total_gb == 4.0


def test_inspect_log_prints_the_hybrid_figures(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from engram_top.cli.files import inspect_log
    lines = _swa_lines(1310720, 1048576, labelled=False, swa_first=True, total=True)
    lines.insert(0, ("TP0", MAMBA[1][0]))
    path = tmp_path / "server.log"
    path.write_text(dress(lines, "kubernetes"))
    assert inspect_log(path, "sglang") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_capacity_tokens"] == 1310720
    assert out["kv_capacity_from"] == "sliding window pool: full_layer_tokens"
    assert out["pool_sizes"] == {"full": 1310720, "swa": 1048576}
    rank = out["ranks"]["0"] if "0" in out["ranks"] else out["ranks"][0]
    assert rank["kv_total_from"] == "SWAKVPool mem usage"
    assert out["mamba_state"]["ssm_state_gb"] == 1.52


def test_a_hybrid_line_fed_alone_never_raises() -> None:
    parser = StartupLogParser()
    for line in ("Use sliding window memory pool.", "SWAKVPool mem usage: x GB",
                 "Mamba Cache is allocated.", "full_layer_tokens=-5, swa_layer_tokens=abc",
                 "Post-capture KV sizing: KV cache allocated.",
                 "SWAKVPool VA upper bound: 1e999 GB"):
        parser.feed(line)
    f = parser.facts()
    assert f.errors == () and f.kv_capacity_tokens is None
