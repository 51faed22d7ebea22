"""The simulated server's arguments, as SGLang's ServerArgs holds them once its
DeepSeek-V4 defaults are applied: one dict for the start-up log's `server_args=ServerArgs(...)`
line and for /server_info, which returns every argument as a flat key."""

from __future__ import annotations

from typing import Any

from engram_top.seed.reference import Placement, Reference
from engram_top.sim import log_style
from engram_top.sim.memory import MemoryPlan
from engram_top.sim.model import PREFILL_TOKEN_BUDGET
from engram_top.sim.pools import CHUNKED_PREFILL_SIZE, PAGE_SIZE
from scenarios.hicache_size import DEFAULT_FRACTION, DEFAULT_RATIO

CONTEXT_LEN = 1048576
DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default
KV_CACHE_DTYPE = "fp8_e4m3"  # what SGLang sets for DeepseekV4ForCausalLM


def build(ref: Reference, placement: Placement, mem: MemoryPlan, args: Any) -> dict[str, Any]:
    """In ServerArgs' field order; a real ServerArgs has many more, these are the ones a
    reader of placements looks at, and the usual neighbours they are printed among."""
    lay = log_style.layout(getattr(args, "parallel", None) or "tp", ref.gpus)
    return {
        "model_path": ref.model, "tokenizer_path": ref.model, "tokenizer_mode": "auto",
        "skip_tokenizer_init": False, "load_format": "auto", "trust_remote_code": True,
        "context_length": CONTEXT_LEN, "is_embedding": False, "revision": None,
        "dtype": "auto", "quantization": None, "kv_cache_dtype": KV_CACHE_DTYPE,
        "mem_fraction_static": mem.mem_fraction_static,
        "max_running_requests": placement.service.max_running_requests,
        "max_queued_requests": None, "max_total_tokens": None,
        "chunked_prefill_size": CHUNKED_PREFILL_SIZE, "max_prefill_tokens": PREFILL_TOKEN_BUDGET,
        "schedule_policy": "fcfs", "schedule_conservativeness": 1.0,
        "page_size": PAGE_SIZE,
        "swa_full_tokens_ratio": ref.kv_pools.swa_full_tokens_ratio,
        "swa_prefix_tails": ref.kv_pools.swa_prefix_tails,
        "disable_hybrid_swa_memory": False, "device": "cuda",
        "tp_size": lay.tp, "pp_size": lay.pp, "dp_size": lay.dp,
        "load_balance_method": "round_robin", "enable_dp_attention": lay.dp > 1,
        "base_gpu_id": 0, "gpu_id_step": 1, "random_seed": 0,
        "host": args.host, "port": args.port, "api_key": args.api_key, "admin_api_key": None,
        "served_model_name": ref.model, "stream_interval": args.stream_interval,
        "log_level": "info", "enable_metrics": True,
        "enable_metrics_for_all_schedulers": True,
        "decode_log_interval": DECODE_LOG_INTERVAL,
        "attention_backend": "dsv4", "decode_attention_backend": None,
        "prefill_attention_backend": None, "sampling_backend": "flashinfer",
        "grammar_backend": "xgrammar",
        "speculative_algorithm": None, "speculative_draft_model_path": None,
        "speculative_num_steps": None, "speculative_num_draft_tokens": None,
        "ep_size": lay.ep, "moe_a2a_backend": "none", "moe_runner_backend": "auto",
        "enable_eplb": False,
        # --hicache-size GB per rank turns SGLang's hierarchical KV cache on, as does the
        # flag itself (a ratio's pool, or one SGLang sizes: its size stays 0 here).
        "enable_hierarchical_cache": bool(getattr(args, "hicache_size", 0)
                                          or getattr(args, "enable_hierarchical_cache", False)),
        "hicache_ratio": getattr(args, "hicache_ratio", None) or DEFAULT_RATIO,
        "hicache_size": getattr(args, "hicache_size", 0) or 0,
        "hicache_host_memory_fraction": getattr(args, "hicache_host_memory_fraction", None)
        or DEFAULT_FRACTION,
        "cpu_offload_gb": 0, "disable_radix_cache": False,
        "disable_cuda_graph": False, "cuda_graph_max_bs": 256,
        "enable_torch_compile": False, "disable_overlap_schedule": False,
    }


def repr_line(server_args: dict[str, Any]) -> str:
    """`server_args=ServerArgs(model_path='...', tp_size=4, ...)`: the dataclass repr."""
    inner = ", ".join(f"{k}={v!r}" for k, v in server_args.items())
    return f"server_args=ServerArgs({inner})"
