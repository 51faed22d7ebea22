"""How the simulated server dies while it serves: `sim serve --fail-as KIND --fail-after S`,
S real seconds after "The server is fired up and ready to roll!", in the words and exit
statuses a real SGLang server and a real node leave, so the death forensics (kernel log,
oom_kill counter, log tail, exit status) meet the shapes they meet on real nodes.

- host-oom-kill: TP rank 0's pageable (anon) memory grows 40 GiB in a second, the host
  stalls at the top for three, then the kernel's OOM killer kills it (the simulated node's
  kmsg and vmstat, engram_top.sim.kernel).
- cgroup-oom-kill: the same at a memory cgroup's limit (constraint=CONSTRAINT_MEMCG).
- hbm-oom-running: rank 0's event loop raises torch's CUDA out of memory; no kernel kill.
- shm-full: rank 0's NCCL cannot grow a /dev/shm segment, then the rank dies by SIGBUS.
- killed: SIGTERM from outside; nothing in the log says so.

The first four end as SGLang's main process ends when a child fails: its running-phase
SIGQUIT line, then kill_process_tree(os.getpid()), which SIGKILLs every child and then itself:
the main process's exit status is -9, not 1. `killed` ends by SIGTERM under its default
action: -15. (Real SGLang's tokenizer manager would log "SIGTERM received. ... Draining
requests and shutting down..." and end by its own kill_process_tree, -9; `killed` is the
signal the log does not explain.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import resource
import signal
import socket
import string
import sys
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import psutil

from collectors.units import GIB
from engram_top.sim import fail_kinds, kernel
from engram_top.sim.options import RUNNING_KINDS
from engram_top.sim.startup import RankHandle, log, raw

# A memory cgroup as systemd names a service's: where a unit's MemoryMax= is the limit hit.
CGROUP = "/system.slice/sglang.service"
# The rank's pageable memory before the kernel kills it: enough for a dashboard's host ledger
# to show the line that grew, in a few steps (one reading of half a second sees two).
OOM_GROWTH_BYTES = 40 * GIB
GROWTH_STEPS = 5
GROWTH_S = 1.0
# At the top the kernel reclaims (page cache, swap) before it picks a victim: on a real host
# seconds of stall. A reader polling each second (the dashboard's default) sees the whole
# growth then, twice at least however loaded its machine: the recording's "just before"
# figures are the same at every run.
RECLAIM_S = 3.0
# torch's OOM on a nearly full GPU: what it tried to allocate, what the GPU had left, and what
# the caching allocator held but had not handed out.
HBM_TRIED_BYTES = 2 * GIB
HBM_FREE_BYTES = int(1.12 * GIB)
HBM_CACHED_BYTES = int(312.5 * 1024**2)
# NCCL's shared-memory segment for a pair of ranks on one node, and the file it grows to (the
# segment and a trailing int): sizes real NCCL 2.2x logs when /dev/shm is full.
SHM_SEGMENT_BYTES = 9637888
SHM_FILE_BYTES = SHM_SEGMENT_BYTES + 4
ENOSPC = "No space left on device (28)"
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"
PYTHON = "/usr/lib/python3.12"


def option_problem(fail_as: str | None, fail_at: str | None,
                   fail_after: float | None) -> str | None:
    """What is wrong with --fail-as, --fail-at and --fail-after together, or None."""
    kinds = "|".join(RUNNING_KINDS)
    if fail_as in RUNNING_KINDS:
        if fail_at is not None:
            return (f"--fail-as {fail_as} dies while serving, --fail-after seconds after "
                    f"ready, not during start-up: leave out --fail-at {fail_at}")
        return None
    if fail_after is not None:
        given = f"--fail-as {fail_as} dies during start-up" if fail_as else "no --fail-as"
        return f"--fail-after: only with a --fail-as that dies while serving ({kinds}); {given}"
    if fail_as is not None:
        try:
            fail_kinds.phase_of(fail_as, fail_at)
        except ValueError as exc:
            return str(exc)
    return None


# --------------------------------------------------------------------------- the words


def torch_size(nbytes: int) -> str:
    """A size as torch's CUDA caching allocator writes it in its messages (format_size)."""
    if nbytes <= 1024:
        return f"{nbytes} bytes"
    if nbytes <= 1024**2:
        return f"{nbytes / 1024:.2f} KiB"
    if nbytes <= 1024**3:
        return f"{nbytes / 1024**2:.2f} MiB"
    return f"{nbytes / 1024**3:.2f} GiB"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def hbm_oom_lines(gpu: int, gpu_total_bytes: int, in_use_bytes: int,
                  non_pytorch_bytes: int) -> list[str]:
    """The traceback a scheduler prints when a prefill in its event loop runs out of HBM:
    from its process's entry through the batch's forward to the logits' matmul, ending in
    torch's message with the GPU's numbers."""
    srt = fail_kinds.SRT
    decorated = _frame(f"{TORCH}/utils/_contextlib.py", 120, "decorate_context",
                       "return func(*args, **kwargs)")
    allocated = in_use_bytes - non_pytorch_bytes - HBM_CACHED_BYTES
    return ["Traceback (most recent call last):",
            *_frame(f"{srt}/managers/scheduler.py", 3034, "run_scheduler_process",
                    "scheduler.event_loop_overlap()"),
            *decorated,
            *_frame(f"{srt}/managers/scheduler.py", 1204, "event_loop_overlap",
                    "batch_result = self.run_batch(batch)"),
            *_frame(f"{srt}/managers/scheduler.py", 2411, "run_batch",
                    "batch_result = self.model_worker.forward_batch_generation("),
            *_frame(f"{srt}/managers/tp_worker.py", 412, "forward_batch_generation",
                    "logits_output, can_run_cuda_graph = self.model_runner.forward("),
            *_frame(f"{srt}/model_executor/model_runner.py", 2533, "forward",
                    "output = self._forward_raw("),
            *_frame(f"{srt}/model_executor/model_runner.py", 2594, "_forward_raw",
                    "ret = self.forward_extend("),
            *_frame(f"{srt}/model_executor/model_runner.py", 2461, "forward_extend",
                    "return self.model.forward("),
            *decorated,
            *_frame(f"{srt}/models/deepseek_v4.py", 1873, "forward",
                    "return self.logits_processor("),
            *_frame(f"{TORCH}/nn/modules/module.py", 1773, "_wrapped_call_impl",
                    "return self._call_impl(*args, **kwargs)"),
            *_frame(f"{TORCH}/nn/modules/module.py", 1784, "_call_impl",
                    "return forward_call(*args, **kwargs)"),
            *_frame(f"{srt}/layers/logits_processor.py", 441, "forward",
                    "logits = self._get_logits(pruned_states, lm_head, logits_metadata)"),
            *_frame(f"{srt}/layers/logits_processor.py", 598, "_get_logits",
                    "logits = torch.matmul("),
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{torch_size(HBM_TRIED_BYTES)}. GPU {gpu} has a total capacity of "
            f"{torch_size(gpu_total_bytes)} of which {torch_size(HBM_FREE_BYTES)} is free. "
            f"Including non-PyTorch memory, this process has {torch_size(in_use_bytes)} memory "
            f"in use. Of the allocated memory {torch_size(allocated)} is allocated by PyTorch, and "
            f"{torch_size(HBM_CACHED_BYTES)} is reserved by PyTorch but unallocated. If "
            f"reserved but unallocated memory is large try setting "
            f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            f"documentation for Memory Management  "
            f"(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]


def shm_full_lines(pid: int, gpu: int, segment: str | None = None,
                   host: str | None = None) -> list[str]:
    """NCCL's warnings when it cannot grow a /dev/shm segment, as NCCL 2.2x prints them: a
    blank line before each WARN, its timestamp (WARN lines only, by default), then
    `host:pid:tid [cudaDev] file:line NCCL WARN ...`; then faulthandler's report of the
    SIGBUS that follows (SGLang's schedulers enable faulthandler)."""
    segment = segment or "nccl-" + "".join(
        random.choices(string.ascii_letters + string.digits, k=6))
    host = host or socket.gethostname().split(".")[0]  # NCCL cuts the name at its first dot
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    head = f"[{stamp}] {host}:{pid}:{pid + 57} [{gpu}]"  # the tid: NCCL's proxy thread
    srt = fail_kinds.SRT
    return ["",
            f"{head} misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/{segment} "
            f"to {SHM_FILE_BYTES} bytes, error: {ENOSPC}",
            "",
            f"{head} misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment "
            f"/dev/shm/{segment} (size {SHM_SEGMENT_BYTES}), error: {ENOSPC}",
            "Fatal Python error: Bus error",
            "",
            f"Current thread 0x{0x7F3A2C1B5740 + gpu * 0x1000:016x} (most recent call first):",
            f'  File "{srt}/managers/scheduler.py", line 1204 in event_loop_overlap',
            f'  File "{TORCH}/utils/_contextlib.py", line 120 in decorate_context',
            f'  File "{srt}/managers/scheduler.py", line 3034 in run_scheduler_process',
            f'  File "{PYTHON}/multiprocessing/process.py", line 108 in run',
            f'  File "{PYTHON}/multiprocessing/process.py", line 314 in _bootstrap',
            f'  File "{PYTHON}/multiprocessing/spawn.py", line 135 in _main',
            f'  File "{PYTHON}/multiprocessing/spawn.py", line 122 in spawn_main',
            '  File "<string>", line 1 in <module>',
            ""]


# --------------------------------------------------------------------------- the deaths


async def die(kind: str, after_s: float, node_dir: Path, ranks: list[RankHandle],
              gpu_total_bytes: int, gpu_reserved_bytes: int, held_on_gpu0: int,
              context_bytes: int) -> None:
    """``after_s`` seconds after ready, die as ``kind``. Returns only if cancelled first (a
    stop asked for): every kind ends the process."""
    await asyncio.sleep(after_s)
    victim = ranks[0]
    if kind == "killed":
        _sigterm_from_outside()
    elif kind in ("host-oom-kill", "cgroup-oom-kill"):
        await _grow_anon(victim)
        await asyncio.sleep(RECLAIM_S)
        kernel.oom_kill(node_dir, victim.proc.pid, "python3", anon_bytes=victim.host_anon,
                        shmem_bytes=victim.host_shmem,
                        memcg=CGROUP if kind == "cgroup-oom-kill" else None)
        _end_rank(victim, signal.SIGKILL)
    elif kind == "hbm-oom-running":
        # The GPU as full as the message says: what NVML shows for the rank just before.
        in_use = gpu_total_bytes - gpu_reserved_bytes - held_on_gpu0 - HBM_FREE_BYTES
        victim.gpu_bytes = max(victim.gpu_bytes, in_use)
        with contextlib.suppress(Exception):
            victim.push()
        lines = hbm_oom_lines(victim.rank, gpu_total_bytes, in_use, context_bytes)
        log(f"Scheduler hit an exception: {lines[0]}", victim.rank)  # SGLang's logger.error
        for line in lines[1:]:
            raw(line)
        raw("")
    elif kind == "shm-full":
        for line in shm_full_lines(victim.proc.pid, victim.rank):
            raw(line)
        _end_rank(victim, signal.SIGBUS)
    else:
        raise ValueError(f"not a kind that dies while serving: {kind}")
    log(fail_kinds.RUNNING_SIGQUIT)
    _kill_process_tree()


async def _grow_anon(rank: RankHandle) -> None:
    """The rank's heap grows until the kernel steps in; each step written to its state."""
    step = OOM_GROWTH_BYTES // GROWTH_STEPS
    for _ in range(GROWTH_STEPS):
        rank.host_anon += step
        rank.push()
        await asyncio.sleep(GROWTH_S / GROWTH_STEPS)


def _end_rank(rank: RankHandle, sig: signal.Signals) -> None:
    """Kill the rank by ``sig`` and reap it, as the kernel's signal would end it."""
    if sig != signal.SIGKILL:
        # SIGBUS dumps core by default: none from a simulation, wherever it runs.
        with contextlib.suppress(OSError, AttributeError):
            resource.prlimit(rank.proc.pid, resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(ProcessLookupError):
        os.kill(rank.proc.pid, sig)
    with contextlib.suppress(Exception):
        rank.proc.wait(timeout=5)


def _kill_process_tree() -> NoReturn:
    """SGLang's kill_process_tree(os.getpid()): SIGKILL to every child, then to itself; no
    cleanup, so the main process's exit status is -9."""
    sys.stdout.flush()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(137)  # not reached: SIGKILL cannot be caught


def _sigterm_from_outside() -> NoReturn:
    """SIGTERM under its default action, as from a sender the log never names: the server's
    own handler (a graceful stop) is taken off first, so the process just ends (-15) and its
    ranks follow it (PR_SET_PDEATHSIG)."""
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
    raise SystemExit(143)  # not reached: the default action ends the process
