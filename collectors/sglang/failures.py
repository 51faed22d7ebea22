"""What SGLang's failure lines mean: which error kinds are fatal before "ready", which
phase a traceback's frames name, which words say the KV pool could not be sized. Pure;
the parser's handlers of these lines are in :mod:`collectors.sglang.error_handlers`.
"""

from __future__ import annotations

import re

from collectors.startup_facts import LogError

# Error kinds that mean the startup died when seen before "ready". "health_check" and
# "retract" (runtime KV retraction) are recorded but are not fatal.
FATAL_KINDS = frozenset({"traceback", "oom", "warmup_failed", "engram", "exception", "cuda",
                         "child_failed", "nccl_timeout"})
# Kinds that only tell that another process died: a later error of another fatal kind is
# the cause, and its phase the failure's.
SYMPTOM_KINDS = frozenset({"child_failed"})
OOM_WORDS = ("out of memory", "OutOfMemory", "Not enough memory")
# A bare exception line: "RuntimeError: ..", "torch.OutOfMemoryError: ..", "AssertionError:".
BARE_EXC = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit):(?:\s|$)")
# A traceback frame: '  File "/x/model_runner.py", line 312, in init_memory_pool'.
FRAME = re.compile(r'File "([^"]*)", line \d+, in (\S+)')
# ModelRunner's start-up steps by the phase they are; the outermost one a traceback passes
# through names the phase it failed in (inner frames can be anywhere: a KV write inside a
# graph capture's forward pass is still the capture's failure).
STEP_PHASES = {
    "init_torch_distributed": "distributed_init", "init_distributed_environment":
    "distributed_init", "initialize_model_parallel": "distributed_init",
    "load_model": "weights", "load_weights": "weights", "load_weights_and_postprocess":
    "weights", "get_model": "weights", "_initialize_model": "weights",
    # The model's parameters made before any is loaded: an OOM there is the weights' too.
    "create_weights": "weights",
    "init_memory_pool": "kv_pool", "profile_max_num_token": "kv_pool",
    "init_kv_cache_configurator": "kv_pool", "_init_pools": "kv_pool",
    "init_cuda_graphs": "graphs", "init_device_graphs": "graphs",
    "init_piecewise_cuda_graphs": "graphs", "init_decode_cuda_graph": "graphs",
    "init_prefill_cuda_graph": "graphs",
    "_wait_and_warmup": "warmup", "_execute_server_warmup": "warmup",
}
# Without one of those: the innermost frame in one of these files.
FILE_PHASES = (
    ("pool_configurator", "kv_pool"), ("memory_pool", "kv_pool"), ("allocator", "kv_pool"),
    ("kv_cache_configurator", "kv_pool"), ("kv_pool_runtime", "kv_pool"),
    ("cuda_graph_runner", "graphs"), ("graph_runner", "graphs"), ("loader", "weights"),
    ("weight_utils", "weights"), ("weight_load", "weights"), ("layers/quantization", "weights"),
    ("parallel_state", "distributed_init"),
)
# A traceback's last line: "RuntimeError: ..", "torch.OutOfMemoryError: ..", "KeyboardInterrupt".
EXC_LINE = re.compile(r"[A-Za-z_][\w.]*(?::\s|:$|$)")

# Messages of a KV pool that cannot be sized: the failure is the KV phase's, wherever the
# phase timeline stands (a rank may not have printed its "Load weight end").
KV_FAILURES = ("no GPU memory for the KV cache", "Not enough memory", "profiled value -")


def kv_failure(msg: str) -> str | None:
    """"kv_pool" when the message says the KV pool could not be sized."""
    return "kv_pool" if any(words in msg for words in KV_FAILURES) else None


# What an error's own words say of the phase it came in (lower case), where no frame does.
_TEXT_PHASES = (
    ("graphs", ("graph failed", "capture cuda graph", "cuda graph capture",
                "graph capture failed", "capture prefill cuda graph", "capture cpu graph")),
    ("kv_pool", ("kv cache pool", "memory pool", "kv pool", "token_to_kv_pool",
                 "max_total_num_tokens")),
    ("weights", ("load weight", "loading weights", "load_model", "safetensors",
                 "create_weights")),
    ("distributed_init", ("init torch distributed", "init_process_group",
                          "init_distributed_environment")),
)


def text_phase(msg: str) -> str | None:
    """The start-up phase an error's text names (a KV sizing failure's words, "Capture cuda
    graph failed: ..", ..); None where it names none."""
    found = kv_failure(msg)
    if found is not None:
        return found
    low = msg.lower()
    for phase, words in _TEXT_PHASES:
        if any(word in low for word in words):
            return phase
    return None


# The head of PyTorch's C++ log lines ("[E227 10:11:12.386573795 ProcessGroupNCCL.cpp:616] ")
# and the "[PG ID 0 PG GUID 0(default_pg) Rank 3] " that NCCL's watchdog adds.
_CPP_HEAD = re.compile(
    r"^\s*\[[EFWI]\d{3,4} [^\]]*\]\s*(?:\[(?:PG [^\]]*|Rank \d+)\]\s*)*")
NCCL_TIMEOUT_WORDS = ("Watchdog caught collective operation timeout", "Timeout at NCCL work",
                      "NCCL watchdog timeout", "NCCL timeout", "watchdog thread terminated")
MAX_CAUSE = 240


def cause_line(err: LogErr) -> str:
    """The failure's cause in one line: the exception a traceback ended with, else the
    error's text; C++ log heads off, cut to MAX_CAUSE characters."""
    text = err.exception or err.text
    if err.exception is None and err.kind == "traceback":
        text = "a traceback without its exception line: " + text
    line = " ".join(_CPP_HEAD.sub("", text).split())
    if err.kind == "nccl_timeout":
        line = f"NCCL on rank {err.rank}: {line}"
    return line if len(line) <= MAX_CAUSE else line[:MAX_CAUSE - 3] + "..."


class LogErr:
    """An error as the parser reads it: a traceback's exception line and phase come later."""

    __slots__ = ("at", "kind", "text", "rank", "exception", "fatal", "phase", "outer", "label")

    def __init__(self, at: float | None, kind: str, text: str, rank: int, fatal: bool,
                 label: str = "") -> None:
        self.label = label
        self.at = at
        self.kind = kind
        self.text = text
        self.rank = rank
        self.exception: str | None = None
        self.fatal = fatal
        self.phase: str | None = None  # from the traceback's frames
        self.outer = False  # phase named by a ModelRunner step (wins over a file's name)

    def frozen(self) -> LogError:
        return LogError(self.at, self.kind, self.text, self.rank, self.exception, self.fatal,
                        self.phase, self.label)


def read_frame(err: LogErr, frame: str) -> None:
    """A frame line: the outermost ModelRunner step names the phase; without one, the
    innermost frame in a file of a phase's own."""
    m = FRAME.search(frame)
    if m is None or err.outer:
        return
    step = STEP_PHASES.get(m.group(2))
    if step is not None:
        err.phase, err.outer = step, True
        return
    name = m.group(1).rsplit("/", 1)[-1]
    for part, phase in FILE_PHASES:
        if part in name:
            err.phase = phase
            break
