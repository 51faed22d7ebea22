"""The launch-wide facts of a vLLM log: its version, its settings (typed as ServerArgsFacts),
the parallel sizes they state, timings, uvicorn's pid and URL, the Engram offload line and
the latest stats line."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from collectors.startup_facts import DecodeStats, ServerArgsFacts, server_args_facts

if TYPE_CHECKING:
    from collectors.vllm.log_state import LogState

_VERSION = re.compile(r"version\s+v?(\d+\.\d+[\w.+-]*)")
_API_VERSION = re.compile(r"vLLM API server version v?(\d+\.\d+[\w.+-]*)")
_ENGINE_VERSION = re.compile(r"Initializing an? (?:V1 )?LLM engine \(v?([\w.+-]+)\)")
_MODEL_LEN = re.compile(r"Using max model len (\d+)")
_LOAD_WEIGHTS = re.compile(r"Loading weights took (\d+(?:\.\d+)?) s")
# "takes" in the 0.9 era; 0.32's monitor.py says "took" (and "torch.compile and initial
# profiling/warmup run together took" when it compiles without its AOT path).
_COMPILE = re.compile(r"torch\.compile(?: and initial profiling/warmup run together)? "
                      r"t(?:akes|ook) (\d+(?:\.\d+)?) s in total")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took (\d+(?:\.\d+)?)"
                   r" s(?: \(compilation: (\d+(?:\.\d+)?) s)?")
_PROFILE = re.compile(r"Memory profiling takes (\d+(?:\.\d+)?) seconds")
HTTP = re.compile(r"(?:Starting vLLM (?:API )?server(?: \d+)? on|Uvicorn running on) (\S+)")
_UVICORN_PID = re.compile(r"Started server process \[(\d+)\]")
_STATS = re.compile(r"Running: (\d+) reqs?, (?:Swapped: \d+ reqs?, )?Waiting: (\d+) reqs?")
_GEN = re.compile(r"Avg generation throughput: (\d+(?:\.\d+)?) tokens/s")
_USAGE = re.compile(r"(?:GPU |CPU )?KV cache usage: (\d+(?:\.\d+)?)%")
# V1's "Prefix cache hit rate: 45.2%", V0's "Prefix cache hit rate: GPU: 45.20%, CPU: 0.00%".
_HIT = re.compile(r"Prefix cache hit rate: (?:GPU: )?(\d+(?:\.\d+)?)%")
_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_ENGRAM = re.compile(r"Engram table offloaded to pinned host memory: (\d+) rows x (\d+), "
                     r"(\d+(?:\.\d+)?) GiB (shared across DP replicas|per rank)")
_SECRET = re.compile(r"(?:^|_)(?:api_key|key|token|secret|password)$", re.IGNORECASE)
ARG_NAMES = {"model": "model_path", "tensor_parallel_size": "tp_size",
             "data_parallel_size": "dp_size", "pipeline_parallel_size": "pp_size",
             "kv_cache_dtype": "kv_cache_dtype", "max_model_len": "context_length",
             "max_seq_len": "context_length", "max_num_seqs": "max_running_requests",
             "engram_config": "engram_config", "max_num_batched_tokens": "chunked_prefill_size"}
SIZES = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp",
         "data_parallel_size": "dp"}


def version_of(msg: str, current: str | None = None) -> str | None:
    """The banner's version (it wins), else the API server's or the engine's, else
    ``current``."""
    if "█" in msg and (m := _VERSION.search(msg)):
        return m.group(1)
    if m := _API_VERSION.search(msg) or _ENGINE_VERSION.search(msg):
        return current or m.group(1)
    return current


def engram_line(msg: str) -> dict[str, str] | None:
    m = _ENGRAM.search(msg)
    if m is None:
        return None
    return {"placement": "cpu", "pinned": "true", "rows": m.group(1), "dim": m.group(2),
            "size_gib": m.group(3),
            "replication": "shared" if m.group(4).startswith("shared") else "per_rank"}


def read_stats(msg: str, at: float | None, s: LogState) -> None:
    if m := _MODEL_LEN.search(msg):
        s.context_len = int(m.group(1))
    if m := _LOAD_WEIGHTS.search(msg):
        s.timings["load_weights"] = float(m.group(1))
    if m := _COMPILE.search(msg):
        s.timings["compile"] = float(m.group(1))
    if m := _PROFILE.search(msg):
        s.timings["memory_profile"] = float(m.group(1))
    if m := _INIT.search(msg):
        s.timings["init_engine"] = float(m.group(1))
        if m.group(2):
            s.timings["compile"] = float(m.group(2))
    if m := _UVICORN_PID.search(msg):
        s.uvicorn_pid = int(m.group(1))
    if (m := _STATS.search(msg)) and "throughput" in msg:
        usage = _USAGE.search(msg)
        gen = _GEN.search(msg)
        hit = _HIT.search(msg)
        s.decode = DecodeStats(at=at, rank=0, running_reqs=int(m.group(1)),
                               queue_reqs=int(m.group(2)),
                               token_usage=float(usage.group(1)) / 100 if usage else None,
                               gen_throughput=float(gen.group(1)) if gen else None,
                               cache_hit_rate=float(hit.group(1)) / 100 if hit else None)
    if m := _CHUNKED.search(msg):
        s.stated["max_num_batched_tokens"] = int(m.group(1))


def merged(s: LogState) -> dict[str, object]:
    """Every setting the log states: a pasted command's, under the engine's config line's,
    under the args dump's (the launch's own words win)."""
    return {**s.stated, **s.command, **s.config, **s.args}


def parallel_stated(s: LogState, command: bool = False) -> dict[str, int]:
    """The sizes the launch's args dump or config line state (``command``: a pasted launch
    command's instead)."""
    given = s.command if command else {**s.config, **s.args}
    out: dict[str, int] = {}
    for key, dim in SIZES.items():
        value = given.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 16:
            out[dim] = value
    return out


def server_args(s: LogState) -> ServerArgsFacts | None:
    args = merged(s)
    if not args:
        return None
    typed: dict[str, object] = {}
    for key, name in ARG_NAMES.items():
        if key in args and name not in typed:
            typed[name] = args[key]
    spec = args.get("speculative_config")
    if isinstance(spec, dict):
        typed["speculative_algorithm"] = spec.get("method")
    raw = {k: "<redacted>" if _SECRET.search(k) and v else v for k, v in args.items()}
    return server_args_facts(typed, raw=raw)
