"""Units, and how each kind of figure is written: one place, so a figure reads the same on
the dashboard, in a snapshot, in a bench report and in the supervisor's messages.

Memory is binary (KiB, MiB, GiB), as NVML, /proc/meminfo and SGLang count it. SGLang prints
"GB" but divides by 1024**3, and the seed thread quotes SGLang (119.043 GB of weights per GPU
with the Engram tables in HBM, 72.201 GB with them in host memory), so a "GB" figure from
SGLang or the seed is GiB: it is shown as SGLang prints it, never converted. The decimal
units (GB = 10**9) are for PCIe bandwidth alone, which is quoted in GB/s.

The dashboard writes a figure it has not got as "–"; text files (Markdown, messages) write
"n/a". Each formatter takes None and writes its `none` for it. Where the dashboard and the
text files group thousands differently, two functions keep both: gib() and gib_text(),
latency() and ms_text().
"""

from __future__ import annotations

import math

KIB = 1024
MIB = 1024**2
GIB = 1024**3
# Decimal: PCIe bandwidth only.
KB = 10**3
MB = 10**6
GB = 10**9

DASH = "–"  # the dashboard's "not known yet"
NA = "n/a"  # the same in text files


def gib_to_bytes(gb: float | None) -> int | None:
    """SGLang's "GB" figure (really GiB) as bytes."""
    return None if gb is None else round(gb * GIB)


def mib_to_bytes(mib: float | None) -> int | None:
    return None if mib is None else round(mib * MIB)


# --------------------------------------------------------------------------- memory


def gib(nbytes: float | None, digits: int = 1, none: str = DASH) -> str:
    """Bytes in GiB, thousands grouped (the dashboard): 2,048.0."""
    return none if nbytes is None else f"{nbytes / GIB:,.{digits}f}"


def gib_text(nbytes: float | None, digits: int = 1, none: str = NA) -> str:
    """Bytes in GiB, not grouped (summary.md, alert messages): 2048.0."""
    return none if nbytes is None else f"{nbytes / GIB:.{digits}f}"


def gib_change(nbytes: float | None, none: str = DASH) -> str:
    """A change in bytes, in GiB with its sign: +195.4."""
    return none if nbytes is None else f"{nbytes / GIB:+,.1f}"


def weights_gb(gb: float | None, none: str = DASH) -> str:
    """SGLang's weights figure (GiB), to the 3 decimals SGLang prints: 119.043."""
    return none if gb is None else f"{gb:.3f}"


def sglang_gb(gb: float | None, none: str = DASH) -> str:
    """Any other SGLang "GB" figure (GiB: KV pool, graphs), to its log's 2 decimals."""
    return none if gb is None else f"{gb:.2f}"


def gb_per_s(bytes_per_s: float | None, none: str = DASH) -> str:
    """A PCIe rate in decimal GB/s, as PCIe bandwidth is quoted: 2.50."""
    return none if bytes_per_s is None else f"{bytes_per_s / GB:,.2f}"


def byte_rate(bytes_per_s: float | None, per_s: bool = True, none: str = DASH) -> str:
    """A byte rate in the decimal unit that shows it, three figures: 2.28 GB/s, 812 MB/s,
    8.12 MB/s, 512 B/s (a few MB/s is never 0.00 GB/s). Without ``per_s``, the unit alone
    ("812 MB"), for a column whose header says /s."""
    text = decimal_bytes(bytes_per_s, none)
    return f"{text}/s" if per_s and bytes_per_s is not None and text != none else text


def decimal_bytes(nbytes: float | None, none: str = DASH) -> str:
    """Bytes in the decimal unit that shows them, three figures (32.0 GB, 10.0 MB): for
    bandwidth and for SGLang's HiCache sizes, which it counts in GB of 1e9 bytes."""
    if nbytes is None or not math.isfinite(nbytes):
        return none
    size = abs(nbytes)
    # 999.7 MB would round to "1000 MB": it is said as 1.00 GB, as the next unit does.
    divisor, unit = next((d, u) for d, u in ((GB, "GB"), (MB, "MB"), (KB, "kB"), (1, "B"))
                         if size >= 0.9995 * d or d == 1)
    return _three_figures(nbytes / divisor, unit)


def _three_figures(value: float, unit: str) -> str:
    size = abs(value)
    if unit == "B" or size >= 99.95:
        return f"{value:,.0f} {unit}"
    return f"{value:.1f} {unit}" if size >= 9.995 else f"{value:.2f} {unit}"


# --------------------------------------------------------------------------- tokens


def millions(count: float) -> str:
    """A token count in millions, as the seed writes KV capacity: 11.84M."""
    return f"{count / 1e6:.2f}M"


def tokens(count: float | None, none: str = DASH) -> str:
    """A token count short enough for a panel: 11.84M, 52.4k, 9,000."""
    if count is None:
        return none
    if count >= 1e6:
        return millions(count)
    if count >= 1e4:
        return f"{count / 1e3:.1f}k"
    return f"{count:,.0f}"


# --------------------------------------------------------------------------- time


def seconds(value: float | None, digits: int = 1, none: str = DASH) -> str:
    """A duration in seconds: 125.0 s."""
    return none if value is None else f"{value:.{digits}f} s"


def latency(value_s: float | None, none: str = DASH) -> str:
    """A latency for the dashboard: ms, grouped, up to 10 s, then seconds so that an
    end-to-end latency stays readable: 345.0 ms, 1,250.0 ms, 12.50 s."""
    if value_s is None:
        return none
    return f"{value_s:,.2f} s" if value_s >= 10 else f"{value_s * 1000:,.1f} ms"


def ms_text(value_s: float | None, none: str = NA) -> str:
    """A latency in ms, not grouped, whatever its size (summary.md): 1250.0 ms."""
    return none if value_s is None else f"{value_s * 1000:.1f} ms"


def latency_bucket(lo: float, hi: float | None) -> str:
    """The histogram bucket a quantile lies in, where the interpolation inside it is no
    measurement (collectors.windowed.coarse), for the dashboard: "<= 100 ms" (the first
    bucket, from 0), "100-200 ms", "0.8-1 s", "4-6 s", "> 30 s" (the +Inf bucket, above
    its lower bound). Bounds are set round: in ms below 1 s, in seconds from 1 s (by the
    upper bound; +Inf's by its lower), each as exactly as it is set, thousands grouped."""
    return _bucket(lo, hi, ",")


def bucket_text(lo: float, hi: float | None) -> str:
    """The same bucket in text files (summary.md), not grouped: "1200-1800 s"."""
    return _bucket(lo, hi, "")


def _bucket(lo: float, hi: float | None, group: str) -> str:
    scale, unit = (1.0, "s") if (lo if hi is None else hi) >= 1 else (1000.0, "ms")

    def bound(v: float) -> str:  # 0.1 s is 100 ms, not 100.00000000000001; never 1e+06
        return format(round(v * scale, 6), f"{group}.6f").rstrip("0").rstrip(".")

    if hi is None:
        return f"> {bound(lo)} {unit}"
    if lo == 0:
        return f"<= {bound(hi)} {unit}"
    return f"{bound(lo)}-{bound(hi)} {unit}"


# --------------------------------------------------------------------------- rates and shares


def rate(value: float | None, unit: str, none: str = DASH) -> str:
    """A rate with its unit: 1,234.5 tok/s."""
    return none if value is None else f"{value:,.1f} {unit}"


def percent(fraction: float | None, digits: int = 1, none: str = NA) -> str:
    """A fraction (0-1) as a percentage: 0.4321 -> 43.2%."""
    return none if fraction is None else f"{fraction * 100:.{digits}f}%"


def pct_change(fraction: float) -> str:
    """A relative change (0.25 = 25% more) with its sign, as the seed gives them: +260.64%."""
    return f"{fraction * 100:+.2f}%"
