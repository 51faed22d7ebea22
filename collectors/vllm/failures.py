"""What ends a vLLM start-up, the phase it ended in, and its cause in one line.

A failure's words come in several lines: V1's ``EngineCore failed to start.`` first, then the
traceback (its frames, as ``File "..", line N, in func``), its exception, and the API
server's own ``RuntimeError: Engine core initialization failed. See root cause above``.
The cause is the first line that says what went wrong, not a generic one; the phase is what
the words say (the KV cache's fit: kv_pool), else the deepest frame that names a phase
(``_allocate_kv_cache_tensors``: kv_pool; ``load_weights``: weights; ``capture_model``:
graphs), else the phase the log was in.
"""

from __future__ import annotations

import re

# Lines that end a start-up whatever their shape (matched anywhere in the message).
FATAL = (
    "EngineCore failed to start", "Engine core initialization failed", "WorkerProc failed",
    "Engine process failed to start", "CUDA out of memory", "OutOfMemoryError",
    "No available memory for the cache blocks",
    "is larger than the maximum number of tokens that can be stored in KV cache",
    "larger than the available KV cache memory",
    "Watchdog caught collective operation timeout", "Timeout at NCCL work",
    "no kernel image is available", "CUDA error:",
)
# Lines that say a start-up failed without saying why: a later line that does says it.
GENERIC = ("EngineCore failed to start", "Engine core initialization failed",
           "WorkerProc failed", "Engine process failed to start", "See root cause above",
           "Worker failed with error", "EngineDeadError", "SystemExit")
EXCEPTION = re.compile(
    r"^(?:[\w.]+\.)?(?P<name>[A-Z]\w*(?:Error|Exception|Exit))(?::\s*(?P<text>.*))?$")
FRAME = re.compile(r'^File "[^"]*", line \d+, in (?P<func>[\w<>.]+)')
MAX_FRAMES = 64

# Words of the message that name the phase it failed in, checked in order.
TEXT_PHASES: tuple[tuple[str, str], ...] = (
    ("KV cache", "kv_pool"), ("cache blocks", "kv_pool"), ("kv_cache", "kv_pool"),
    ("num_gpu_blocks", "kv_pool"), ("CUDA graph", "graphs"), ("cudagraph", "graphs"),
)
# Functions of vLLM (both engines) whose frame says the phase, from the deepest frame up.
FRAME_PHASES: dict[str, str] = {
    **dict.fromkeys((
        "determine_num_available_blocks", "determine_available_memory", "initialize_cache",
        "_initialize_kv_caches", "initialize_kv_cache", "initialize_kv_cache_tensors",
        "_allocate_kv_cache_tensors", "_allocate_kv_cache", "allocate_kv_cache",
        "_init_cache_engine", "get_kv_cache_config", "get_kv_cache_configs",
        "check_enough_kv_cache_memory", "_check_enough_kv_cache_memory",
        "determine_available_kv_cache_memory", "profile_run", "init_memory_pool",
        "initialize_from_config", "reshape_kv_cache_tensors"), "kv_pool"),
    **dict.fromkeys(("capture_model", "_capture_cudagraphs", "capture", "capture_graphs",
                     "compile_or_warm_up_model", "profile_cudagraph_memory",
                     "init_cuda_graphs"), "graphs"),
    **dict.fromkeys(("load_model", "load_weights", "_load_weights", "get_model",
                     "initialize_model", "_initialize_model", "load_weight",
                     "download_model", "_prepare_weights"), "weights"),
    **dict.fromkeys(("init_distributed_environment", "init_worker_distributed_environment",
                     "init_process_group", "initialize_model_parallel",
                     "ensure_model_parallel_initialized", "init_device"), "distributed_init"),
}


def kind_of(msg: str) -> str:
    if "out of memory" in msg or "OutOfMemory" in msg:
        return "oom"
    if "Watchdog caught collective" in msg or "Timeout at NCCL" in msg:
        return "nccl_timeout"
    if "no kernel image" in msg:
        return "no_kernel_image"
    if "stored in KV cache" in msg or "cache blocks" in msg or "available KV cache" in msg:
        return "kv_cache_too_small"
    return "engine"


def is_generic(msg: str) -> bool:
    return any(g in msg for g in GENERIC)


def phase_of_text(msg: str) -> str | None:
    return next((phase for words, phase in TEXT_PHASES if words in msg), None)


def phase_of_frames(frames: list[str]) -> str | None:
    return next((FRAME_PHASES[f] for f in reversed(frames) if f in FRAME_PHASES), None)


def one_line(msg: str, limit: int = 300) -> str:
    """A cause as one line: its first line, spaces collapsed, cut at ``limit``."""
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    return " ".join(first.split())[:limit]
