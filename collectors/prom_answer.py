"""What a Prometheus answer may be trusted to hold: its JSON envelope, its samples, and each
figure's plausible range.

Prometheus's HTTP API answers `{"status": "success", "data": {"result": [...]}}` with each
sample `{"metric": {label: string}, "value": [time, "number"]}` (`values`: a list of those
pairs, for a range query). A proxy, a remote store or a compromised server may answer
anything that parses as JSON, so nothing here assumes a shape it has not checked: an envelope
of another shape is one ShapeError for the whole answer, while one odd sample (not a dict,
labels that are not strings, a value that is no number or one outside its field's range) is
left out alone and counted, never the whole answer. NaN and ±Inf are ordinary Prometheus
values (a quantile of no requests is NaN): they read as "no figure", uncounted.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from dataclasses import dataclass
from typing import Any

from collectors.pages import PageError
from collectors.units import MIB

Labels = dict[str, str]

# Each figure's plausible range, as its exporter counts it. A value outside is a broken or
# hostile exporter's, never a machine's: left out and said, so that no figure derived from it
# (bytes from MiB, sums, percentages) overflows or misleads downstream.
_GPU_MIB = (0.0, float(16 * MIB))  # 16 TiB of one GPU's memory, in MiB
_HOST_BYTES = (0.0, float(2**50))  # 1 PiB of one machine's memory
_RATE_BYTES = (0.0, 1e13)  # 10 TB/s over one GPU's PCIe or NVLink
_RATIO = (0.0, 2.0)  # a pool's usage (0..1), with room for rounding
_COUNT = (0.0, 1e12)
_SECONDS = (0.0, 1e6)
RANGES: dict[str, tuple[float, float]] = {
    # dcgm-exporter
    "used_mib": _GPU_MIB, "free_mib": _GPU_MIB, "reserved_mib": _GPU_MIB,
    "util_pct": (0.0, 100.0), "power_w": (0.0, 100_000.0),
    "pcie_tx": _RATE_BYTES, "pcie_rx": _RATE_BYTES, "nvlink_tx": _RATE_BYTES,
    "nvlink_rx": _RATE_BYTES,
    # node-exporter
    "total": _HOST_BYTES, "available": _HOST_BYTES, "shmem": _HOST_BYTES,
    "swap_total": _HOST_BYTES, "swap_free": _HOST_BYTES, "anon_huge": _HOST_BYTES,
    "cached": _HOST_BYTES, "free": _HOST_BYTES, "huge_total": (0.0, float(2**40)),
    "huge_free": (0.0, float(2**40)), "huge_size": (0.0, float(2**40)),
    # SGLang
    "token_usage": _RATIO, "full_token_usage": _RATIO, "swa_token_usage": _RATIO,
    "num_running_reqs": _COUNT, "num_queue_reqs": _COUNT, "max_total_num_tokens": _COUNT,
    "gen_throughput": (0.0, 1e9), "weight_memory_usage_gb": (0.0, 1e6),
    "num_used_tokens": _COUNT,
    # the latency query's figures (seconds, tokens/s) and `up`
    "ttft_p50": _SECONDS, "ttft_p99": _SECONDS, "tpot_p50": _SECONDS, "tpot_p99": _SECONDS,
    "output_tok_s": (0.0, 1e9), "up": (0.0, 1.0),
    # an engram-top agent's: bytes (a fit's room is negative where it is short), levels, 1s
    "agent": (-float(2**60), float(2**60)),
    # a router's and LMCache's (collectors.router_series)
    "workers": _COUNT, "running": _COUNT, "requests_per_s": (0.0, 1e9),
    "routing_hit_rate": (0.0, 1.0), "lmcache_hit_rate": (0.0, 1.0),
}
MAX_NUMBER_CHARS = 64  # "1.2345e+308" is 11; a longer "number" is somebody's payload


class ShapeError(PageError):
    """An answer that is JSON but not Prometheus's: said for the whole answer."""


@dataclass
class Odd:
    """The samples and values left out of one refresh: how many, and the first, in words."""

    count: int = 0
    first: str = ""

    def add(self, what: str) -> None:
        self.count += 1
        if not self.first:
            self.first = what


# `"result": [` as JSON writes it outside a string (inside one, a quote is escaped).
_RESULT_LIST = re.compile(r'"result"[ \t\n\r]*:[ \t\n\r]*\[')
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# The smallest sample, `{"metric":{},"value":[0,"0"]}`, is 30 characters.
MIN_SAMPLE_CHARS = 24


def decode_answer(content: bytes) -> Any:
    """``json.loads(content)``, with the answer's result list decoded one sample at a time.

    json.loads holds the GIL for a whole document (2,000 nodes' GPU answer, 8 MB: 80 ms
    with the cyclic collector off, 115-140 ms with it), so decoding it on a thread still
    stops the event loop that long; between samples the loop gets its turn (the longest
    wait 19-25 ms here, at twice the CPU). The list is found by its key, the rest decoded
    around a stand-in, and used only where the stand-in lands at ``data.result``; any other
    shape, encoding or error is json.loads's own (the same value, or the same exception)."""
    if not content.startswith(b"{"):  # a BOM, UTF-16, leading space: json.loads's cases
        return json.loads(content)
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return json.loads(content)
    found = _RESULT_LIST.search(text)
    if found is None:
        return json.loads(text)
    # What stands for the list while the rest is decoded: new each call, so that no answer
    # can hold it (a fixed one, escaped in an answer's text, could put a list in its place).
    stand_in = f"engram-top: the result list {secrets.token_hex(16)}"
    items, i = [], _skip(text, found.end())
    start = i
    try:
        if text[i] != "]":
            while True:
                item, i = _DECODER.raw_decode(text, i)
                items.append(item)
                if len(items) % 1024 == 0 and i - start < len(items) * MIN_SAMPLE_CHARS:
                    # Not samples: a list of tiny values (32 MB of `0,` would take 15 s
                    # a piece at a time) is decoded whole, faster than its pieces.
                    return json.loads(text)
                i = _skip(text, i)
                if text[i] == "]":
                    break
                if text[i] != ",":
                    return json.loads(text)  # not a list after all: json.loads says why
                i = _skip(text, i + 1)
        body = json.loads(text[:found.end() - 1] + json.dumps(stand_in) + text[i + 1:])
    except (ValueError, IndexError):  # json.loads says what is wrong, and where, as before
        return json.loads(text)
    data = body.get("data") if type(body) is dict else None
    if type(data) is not dict or data.get("result") != stand_in:
        return json.loads(text)
    data["result"] = items
    return body


def _skip(text: str, i: int) -> int:
    """The index after JSON's white space from ``i``."""
    space = _SPACE.match(text, i)
    return space.end() if space else i


def result_of(body: Any, where: str) -> list[Any]:
    """The `data.result` list of a successful answer, or ShapeError naming what was there."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        raise ShapeError(f"{where} has no data object (data is {kind_of(data)})")
    result = data.get("result")
    if not isinstance(result, list):
        raise ShapeError(f"{where} has no result list (data.result is {kind_of(result)})")
    return result


def kind_of(v: Any) -> str:
    """What a JSON value is, in words (for a message)."""
    if v is None:
        return "null"
    if isinstance(v, list):
        return "an empty list" if not v else "a list"
    return {str: "a string", dict: "an object", bool: "a boolean"}.get(type(v), "a number")


def labels_of(item: Any) -> Labels | None:
    """A sample's labels; None when ``item`` is no sample (not an object, `metric` not an
    object, a label value not a string)."""
    if type(item) is not dict:
        return None
    metric = item.get("metric", {})
    if type(metric) is not dict:
        return None
    for v in metric.values():  # the names are strings: JSON's object keys are
        if type(v) is not str:
            return None
    return metric


def number(raw: Any) -> float | None:
    """A sample's value as Prometheus writes it (a string; a JSON number from some stores):
    a finite float, or None for NaN, ±Inf and anything that is no number."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        if len(raw) > MAX_NUMBER_CHARS:
            return None
        try:
            v = float(raw)
        except ValueError:
            return None
    elif isinstance(raw, (int, float)):
        try:
            v = float(raw)
        except OverflowError:  # an integer of hundreds of digits
            return None
    else:
        return None
    return v if math.isfinite(v) else None


def is_number_text(raw: Any) -> bool:
    """Whether a sample's value is a number at all, NaN and ±Inf included (they are not odd:
    Prometheus writes them)."""
    return number(raw) is not None or (isinstance(raw, str) and raw.strip().lower().lstrip(
        "+-") in ("nan", "inf", "infinity"))


def value_of(item: dict[str, Any]) -> Any:
    """The raw value of an instant sample's `value` pair; None without one."""
    pair = item.get("value")
    if isinstance(pair, (list, tuple)) and len(pair) >= 2:
        return pair[1]
    return None


def in_range(field: str, v: float) -> bool:
    low, high = RANGES.get(field, (-math.inf, math.inf))
    return low <= v <= high


def say_range(field: str) -> str:
    low, high = RANGES.get(field, (-math.inf, math.inf))
    return f"{low:g}..{high:g}"


def small_index(text: str) -> int | None:
    """A GPU label as an index: ASCII digits, six at most ("0".."999999"); else None (a
    label like "²" is a digit to str.isdigit() but not to int())."""
    if text.isascii() and text.isdigit() and len(text) <= 6:
        return int(text)
    return None
