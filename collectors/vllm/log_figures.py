"""The figures vLLM's start-up lines state, era by era, each taken as stated.

A rank's (its worker's lines):
  - weights: V1's ``Model loading took X GiB [memory] [and Y s[econds]]``; V0's ``Loading
    model weights took X GB``; V0's profile ``model weights take X GiB; ..``;
  - KV cache bytes: ``Available KV cache memory: X GiB``, the CPU's ``Explicitly set (X/Y)
    GiB for KV cache``, V0's ``.. the rest of the memory reserved for KV Cache is X GiB``
    (negative when nothing is left) and ``Memory profiling results: .. kv_cache_size=X GiB``;
  - the memory profile: ``total_gpu_memory (X GiB) x gpu_memory_utilization (U) = Y GiB``,
    ``non_torch_memory takes``, ``activation peak memory takes``, the key=value results;
  - graphs: ``Graph capturing finished in N secs[, took X GiB]``, v0.21+'s ``Estimated CUDA
    graph memory: X GiB total`` (an estimate, kept apart) and ``CUDA graph pool memory: X
    GiB (actual), Y GiB (estimated)``;
  - KV tokens: ``GPU KV cache size: N tokens``.
The engine's: V0's blocks (``# GPU blocks: N, # CPU blocks: M``, ``# cuda blocks``, ``The
engine can allocate N GPU blocks, M CPU blocks``), ``Maximum concurrency for N tokens per
request: X.XXx``, and the fatal ``max seq len (L) is larger than the maximum number of tokens
that can be stored in KV cache (N)`` (N stated: the capacity) or V1's ``.. (X GiB KV cache is
needed, which is larger than the available KV cache memory (Y GiB). .. the estimated maximum
model length is Z``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NUM = r"(-?\d+(?:\.\d+)?)"
GIB = NUM + r"\s*(GiB|GB|MiB|MB|Gib)"
# For a pattern that begins with the figure: digits bounded, so that a search over a line
# of a million digits tries each start in constant time, not to the line's end.
LEADING_GIB = r"(-?\d{1,15}(?:\.\d{1,15})?)\s*(GiB|GB|MiB|MB|Gib)"
SCALE = {"GiB": 1.0, "GB": 1.0, "Gib": 1.0, "MiB": 1 / 1024, "MB": 1 / 1024}

WEIGHTS = re.compile(r"Model loading took " + GIB + r"(?: memory)?(?:,? and (\d+(?:\.\d+)?) ?s)?")
OLD_WEIGHTS = re.compile(r"Loading model weights took " + GIB)
PROFILE_WEIGHTS = re.compile(r"model weights take " + GIB)
NON_TORCH = re.compile(r"non_torch_memory takes " + GIB)
ACTIVATION = re.compile(r"activation peak memory takes " + GIB)
USABLE = re.compile(r"total_gpu_memory \(" + GIB + r"\) x gpu_memory_utilization \("
                    + NUM + r"\) = " + GIB)
REST_KV = re.compile(r"reserved for KV Cache is " + GIB)
RESULT_PAIR = re.compile(r"\b(total_gpu_memory|initial_memory_usage|peak_torch_memory|"
                         r"memory_usage_post_profile|non_torch_memory|kv_cache_size|"
                         r"weights_memory)=" + GIB)
UTILIZATION = re.compile(r"\bgpu_memory_utilization=" + NUM)
AVAILABLE_KV = re.compile(r"Available KV cache memory: " + GIB)
# 0.10+'s gpu_worker, after the graphs: what the KV cache holds, in GiB or in bytes.
CURRENT_KV = re.compile(r"Current kv cache memory in use is (?:" + GIB + r"|(\d{1,20}) bytes)")
# --kv-cache-memory (kv_cache_memory_bytes) set: profiling skipped, the pool as asked.
RESERVED_KV = re.compile(r"[Rr]eserved " + GIB + r" memory for KV Cache as specified by "
                         r"kv_cache_memory_bytes")
INITIAL_FREE = re.compile(r"Initial free memory " + GIB)
FREE_ON_DEVICE = re.compile(r"Free memory on device \(" + NUM + r"/" + GIB + r"\) on startup")
DESIRED = re.compile(r"Desired GPU memory utilization is \(" + NUM + r", " + GIB + r"\)")
# "Actual usage is X GiB for weight, Y GiB for peak activation, Z GiB for non-torch memory,
# and W GiB for CUDAGraph memory", or "X GiB for consumed memory (weights + non-torch), ..".
ACTUAL = re.compile(r"Actual usage is " + GIB + r" for (weight|consumed memory)")
ACTUAL_PARTS = re.compile(LEADING_GIB + r" for (peak activation|non-torch memory|CUDAGraph "
                          r"memory)")
EXPLICIT_KV = re.compile(r"Explicitly set \(" + NUM + r"/\d+(?:\.\d+)?\) (GiB|GB) for KV cache")
KV_TOKENS = re.compile(r"(?P<dev>[A-Z]+(?: \+ host)?) KV cache size: (?P<n>[\d,]+) tokens")
CAPTURED = re.compile(r"Graph capturing finished in (\d+(?:\.\d+)?) secs?(?:, took " + GIB + ")?")
ESTIMATED_GRAPH = re.compile(r"Estimated CUDA graph memory: " + GIB)
GRAPH_POOL = re.compile(r"CUDA graph pool memory: " + GIB + r" \(actual\)")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: (\d+(?:\.\d+)?)x")
BLOCKS = re.compile(r"# (?:GPU|CPU|XPU|NPU|HPU|CUDA|cuda|gpu) blocks: (\d+)"
                    r"(?:, # CPU blocks: (\d+))?")
ALLOCATE = re.compile(r"engine can allocate (\d+) GPU blocks, (\d+) CPU blocks")
TOO_LONG = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens "
                      r"that can be stored in KV cache \((\d+)\)")
# The max seq len part is left out where a paste wrapped the line before it; later builds
# write "max seq len\n(N), X GiB" without the parenthesis.
NEEDED = re.compile(r"(?:max seq len\s*\((\d{1,15})\),\s*\(?)?" + LEADING_GIB + r" KV cache is "
                    r"needed, which is larger than the available KV cache memory \(" + GIB + r"\)")
ESTIMATED_LEN = re.compile(r"[Ee]stimated maximum model length is (\d+)")


def gib(value: str, unit: str) -> float:
    return float(value) * SCALE[unit]


@dataclass
class RankFigures:
    weights_gb: float | None = None
    weights_s: float | None = None
    weights_from_profile: bool = False  # V0's profile line, not a loading line
    kv_gb: float | None = None
    kv_tokens: int | None = None
    graph_gb: float | None = None  # summed over the capture lines that state it
    graph_s: float | None = None
    graph_estimate_gb: float | None = None
    graph_pool_gb: float | None = None
    profile: dict[str, float] = field(default_factory=dict)


def read_rank(msg: str, r: RankFigures) -> None:
    """The figures of one of a rank's lines, into ``r``."""
    if m := WEIGHTS.search(msg) or OLD_WEIGHTS.search(msg):
        r.weights_gb = gib(m.group(1), m.group(2))
        r.weights_from_profile = False
        if m.re is WEIGHTS and m.group(3):
            r.weights_s = float(m.group(3))
    if "take" in msg:  # V0's profile, in one line or several
        if (m := PROFILE_WEIGHTS.search(msg)) is not None:
            r.profile["weights_gb"] = gib(m.group(1), m.group(2))
            if r.weights_gb is None or r.weights_from_profile:
                r.weights_gb, r.weights_from_profile = r.profile["weights_gb"], True
        if (m := NON_TORCH.search(msg)) is not None:
            r.profile["non_torch_gb"] = gib(m.group(1), m.group(2))
        if (m := ACTIVATION.search(msg)) is not None:
            r.profile["activation_peak_gb"] = gib(m.group(1), m.group(2))
    if (m := USABLE.search(msg)) is not None:
        r.profile["total_gpu_memory_gb"] = gib(m.group(1), m.group(2))
        r.profile["gpu_memory_utilization"] = float(m.group(3))
        r.profile["usable_gb"] = gib(m.group(4), m.group(5))
    if "=" in msg:
        for key, value, unit in RESULT_PAIR.findall(msg):
            r.profile[f"{key}_gb"] = gib(value, unit)
        if "kv_cache_size_gb" in r.profile and "kv_cache_size=" in msg:
            r.kv_gb = r.profile["kv_cache_size_gb"]
        if (m := UTILIZATION.search(msg)) is not None:
            r.profile["gpu_memory_utilization"] = float(m.group(1))
    if m := AVAILABLE_KV.search(msg) or REST_KV.search(msg) or RESERVED_KV.search(msg):
        r.kv_gb = gib(m.group(1), m.group(2))
        if m.re is REST_KV:
            r.profile["kv_cache_gb"] = r.kv_gb
    elif (m := EXPLICIT_KV.search(msg)) is not None:
        r.kv_gb = float(m.group(1))
    if "memory" in msg:
        _read_memory_report(msg, r)
    if (m := KV_TOKENS.search(msg)) is not None:
        r.kv_tokens = int(m["n"].replace(",", ""))
    if (m := CAPTURED.search(msg)) is not None:
        r.graph_s = (r.graph_s or 0.0) + float(m.group(1))
        if m.group(2):
            r.graph_gb = (r.graph_gb or 0.0) + gib(m.group(2), m.group(3))
    if (m := ESTIMATED_GRAPH.search(msg)) is not None:
        r.graph_estimate_gb = gib(m.group(1), m.group(2))
    if (m := GRAPH_POOL.search(msg)) is not None:
        r.graph_pool_gb = gib(m.group(1), m.group(2))


def _read_memory_report(msg: str, r: RankFigures) -> None:
    """0.10+'s memory lines: the free memory at start, the utilization's budget, the
    actual usage by part, and what the KV cache holds once the graphs are captured."""
    if (m := CURRENT_KV.search(msg)) is not None:
        r.kv_gb = gib(m.group(1), m.group(2)) if m.group(1) else int(m.group(3)) / 2**30
    if (m := INITIAL_FREE.search(msg)) is not None:
        r.profile["initial_free_gb"] = gib(m.group(1), m.group(2))
    if (m := FREE_ON_DEVICE.search(msg)) is not None:
        r.profile["initial_free_gb"] = gib(m.group(1), m.group(3))
        r.profile["total_gpu_memory_gb"] = gib(m.group(2), m.group(3))
    if (m := DESIRED.search(msg)) is not None:
        r.profile["gpu_memory_utilization"] = float(m.group(1))
        r.profile["usable_gb"] = gib(m.group(2), m.group(3))
    if (m := ACTUAL.search(msg)) is not None:
        key = "weights_gb" if m.group(3) == "weight" else "weights_and_non_torch_gb"
        r.profile[key] = gib(m.group(1), m.group(2))
        names = {"peak activation": "activation_peak_gb", "non-torch memory": "non_torch_gb",
                 "CUDAGraph memory": "cuda_graph_gb"}
        for value, unit, part in ACTUAL_PARTS.findall(msg[m.end():]):
            r.profile[names[part]] = gib(value, unit)
        if key == "weights_gb" and (r.weights_gb is None or r.weights_from_profile):
            r.weights_gb, r.weights_from_profile = r.profile["weights_gb"], True


@dataclass
class EngineFigures:
    gpu_blocks: int | None = None
    cpu_blocks: int | None = None
    concurrency: float | None = None
    concurrency_tokens: int | None = None
    stated_capacity: int | None = None  # the fatal "can be stored in KV cache (N)"
    too_long_seq_len: int | None = None  # the max seq len that did not fit
    kv_needed_gb: float | None = None  # V1's fatal: what one request of max seq len needs
    kv_available_gb: float | None = None
    estimated_max_len: int | None = None
    kv_device: str | None = None


def read_engine(msg: str, e: EngineFigures) -> None:
    if m := BLOCKS.search(msg) or ALLOCATE.search(msg):
        e.gpu_blocks = int(m.group(1))
        e.cpu_blocks = int(m.group(2)) if m.group(2) else e.cpu_blocks
    if (m := CONCURRENCY.search(msg)) is not None:
        e.concurrency_tokens = int(m.group(1).replace(",", ""))
        e.concurrency = float(m.group(2))
    if (m := TOO_LONG.search(msg)) is not None:
        e.too_long_seq_len, e.stated_capacity = int(m.group(1)), int(m.group(2))
    if "KV cache is needed" in msg and (m := NEEDED.search(msg)) is not None:
        if m.group(1):
            e.too_long_seq_len = int(m.group(1))
        e.kv_needed_gb = gib(m.group(2), m.group(3))
        e.kv_available_gb = gib(m.group(4), m.group(5))
    if (m := ESTIMATED_LEN.search(msg)) is not None:
        e.estimated_max_len = int(m.group(1))
    if (m := KV_TOKENS.search(msg)) is not None:
        e.kv_device = m["dev"]
