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
                         "child_failed"})
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
    "weights",
    "init_memory_pool": "kv_pool", "profile_max_num_token": "kv_pool",
    "init_cuda_graphs": "graphs", "init_device_graphs": "graphs",
    "init_piecewise_cuda_graphs": "graphs",
    "_wait_and_warmup": "warmup", "_execute_server_warmup": "warmup",
}
# Without one of those: the innermost frame in one of these files.
FILE_PHASES = (
    ("pool_configurator", "kv_pool"), ("memory_pool", "kv_pool"), ("allocator", "kv_pool"),
    ("cuda_graph_runner", "graphs"), ("loader", "weights"), ("weight_utils", "weights"),
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


class LogErr:
    """An error as the parser reads it: a traceback's exception line and phase come later."""

    __slots__ = ("at", "kind", "text", "rank", "exception", "fatal", "phase", "outer")

    def __init__(self, at: float | None, kind: str, text: str, rank: int, fatal: bool) -> None:
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
                        self.phase)


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
