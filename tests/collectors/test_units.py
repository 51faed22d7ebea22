"""collectors.units: the figures the seed and the dashboard write, formatted as they show."""

from __future__ import annotations

from collectors.units import (
    GB,
    GIB,
    KIB,
    MIB,
    gb_per_s,
    gib,
    gib_change,
    gib_text,
    gib_to_bytes,
    latency,
    mib_to_bytes,
    millions,
    ms_text,
    pct_change,
    percent,
    rate,
    seconds,
    sglang_gb,
    tokens,
    weights_gb,
)


def test_binary_and_decimal_units() -> None:
    assert (KIB, MIB, GIB) == (1024, 1024**2, 1024**3)
    assert GB == 10**9 and GB < GIB


def test_sglang_gb_is_gib() -> None:
    # The seed quotes SGLang: 119.043 GB of weights per GPU in HBM, 72.201 GB in host memory.
    assert (weights_gb(119.043), weights_gb(72.201)) == ("119.043", "72.201")
    assert gib_to_bytes(119.043) == round(119.043 * 1024**3)
    assert gib_to_bytes(1.5) == 1536 * MIB and mib_to_bytes(2) == 2 * 1024 * 1024
    assert gib_to_bytes(None) is None and mib_to_bytes(None) is None
    assert sglang_gb(16.4) == "16.40"


def test_bytes_in_gib_on_screen_and_in_text_files() -> None:
    assert gib(195 * GIB) == "195.0"
    assert gib(2 * 1024 * GIB, 0) == "2,048"  # a 2 TiB host
    assert gib_text(2 * 1024 * GIB) == "2048.0"  # summary.md does not group thousands
    assert gib(12 * GIB + GIB // 4, 2) == "12.25"
    assert gib_change(round(195.4 * GIB)) == "+195.4"
    assert gib_change(-GIB) == "-1.0"


def test_tokens() -> None:
    # The seed's KV capacities.
    assert (millions(11_840_000), millions(42_700_000)) == ("11.84M", "42.70M")
    assert tokens(11_840_000) == "11.84M"
    assert tokens(52_400) == "52.4k"
    assert tokens(9_000) == "9,000"


def test_durations() -> None:
    assert seconds(125.04) == "125.0 s"  # the seed's time to ready, device placement
    assert latency(0.345) == "345.0 ms"
    assert latency(1.25) == "1,250.0 ms"
    assert latency(12.5) == "12.50 s"  # an end-to-end latency past 10 s reads in seconds
    assert ms_text(1.25) == "1250.0 ms"


def test_rates_and_shares() -> None:
    assert pct_change(42_700_000 / 11_840_000 - 1) == "+260.64%"  # the seed's KV gain
    assert pct_change(-0.05) == "-5.00%"
    assert percent(0.4321) == "43.2%" and percent(0.4321, 2) == "43.21%"
    assert rate(1234.5, "tok/s") == "1,234.5 tok/s"
    assert gb_per_s(2.5e9) == "2.50"


def test_a_missing_figure() -> None:
    # "–" on the dashboard, "n/a" in text files; each overridable.
    for fmt in (gib, gib_change, weights_gb, sglang_gb, gb_per_s, tokens, seconds, latency):
        assert fmt(None) == "–"
    for fmt in (gib_text, ms_text, percent):
        assert fmt(None) == "n/a"
    assert rate(None, "tok/s") == "–" and weights_gb(None, "n/a") == "n/a"
