"""How the simulated server dies with `sim serve --fail-as KIND`: in a real server's words,
so readers of start-up logs meet the shapes they meet on real nodes.

- sigquit: a scheduler's exception (its stack through the phase it was in), then the main
  process's SIGQUIT line in SGLang 0.5.18's running-phase words ("SIGQUIT received. ... It
  usually means one child failed.").
- nccl-timeout: torch's NCCL watchdog on one rank (`[rank3]:[E302 10:00:05.123456789
  ProcessGroupNCCL.cpp:...] ... Timeout at NCCL work ...`): C++ lines, no logger prefix.
- no-kernel-image: graph capture stops on "CUDA error: no kernel image is available for
  execution on the device" (a build without this GPU's architecture), SGLang's advice after.
- oom-kv-pool: torch's CUDA out of memory while the KV pool's buffers are allocated, the
  traceback as a dying child process prints it, with no timestamp on any line.

The three that end in the main process's launch-phase words say "Received sigquit from a
child process"."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from collectors.units import GIB

Say = Callable[[str, "int | None"], None]

# Where a kind happens, whatever --fail-at says; None: in --fail-at's phase (or the default).
FIXED_PHASE = {"no-kernel-image": "graphs", "oom-kv-pool": "kv_pool"}
DEFAULT_PHASE = {"sigquit": "weights", "nccl-timeout": "distributed_init"}

SRT = "/sgl-workspace/sglang/python/sglang/srt"
LAUNCH_SIGQUIT = "Received sigquit from a child process. It usually means the child failed."
RUNNING_SIGQUIT = ("SIGQUIT received. signum=3, frame=<frame at 0x7f3a2c1b5a40, file "
                   "'/usr/lib/python3.12/threading.py', line 359, code wait>. It usually "
                   "means one child failed.")

# Each phase's stack below the scheduler's constructor, and the exception it ends in.
PHASE_STACK: dict[str, tuple[list[tuple[str, int, str, str]], str]] = {
    "distributed_init": ([
        ("model_executor/model_runner.py", 612, "init_torch_distributed",
         "initialize_model_parallel("),
        ("distributed/parallel_state.py", 1391, "initialize_model_parallel",
         "_TP = init_model_parallel_group(")],
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
        "c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.27.3"),
    "weights": ([
        ("model_executor/model_runner.py", 905, "load_model",
         "self.model = get_model(model_config=self.model_config,"),
        ("model_loader/loader.py", 642, "load_weights_and_postprocess",
         "model.load_weights(weights)")],
        "safetensors_rust.SafetensorError: Error while deserializing header: "
        "MetadataIncompleteBuffer"),
    "kv_pool": ([
        ("model_executor/model_runner.py", 1890, "init_memory_pool",
         "self.token_to_kv_pool = DeepSeekV4TokenToKVPool(")],
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    "graphs": ([
        ("model_executor/model_runner.py", 2204, "init_device_graphs",
         "self.graph_runner = graph_runners[self.device](self)")],
        "RuntimeError: CUDA error: an illegal memory access was encountered"),
    "warmup": ([
        ("managers/scheduler.py", 1204, "event_loop_overlap",
         "batch_result = self.run_batch(batch)")],
        "RuntimeError: CUDA error: an illegal memory access was encountered"),
}


def phase_of(kind: str, fail_at: str | None) -> str:
    """The phase ``kind`` happens in; ValueError where --fail-at names another."""
    fixed = FIXED_PHASE.get(kind)
    if fixed is not None and fail_at not in (None, fixed):
        raise ValueError(f"--fail-as {kind} happens in {fixed}, not in {fail_at}: leave out "
                         f"--fail-at, or give --fail-at {fixed}")
    return fixed or fail_at or DEFAULT_PHASE[kind]


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{SRT}/{path}", line {line}, in {func}', f"    {code}"]


def _scheduler_stack(frames: list[tuple[str, int, str, str]]) -> list[str]:
    """From the scheduler process's entry down to ``frames``: through the constructor and
    the model runner while it starts, through the event loop once it serves."""
    out = ["Traceback (most recent call last):"]
    if frames and frames[0][0] == "managers/scheduler.py":  # serving: the event loop
        out += _frame("managers/scheduler.py", 3034, "run_scheduler_process",
                      "scheduler.event_loop_overlap()")
    else:
        out += _frame("managers/scheduler.py", 3021, "run_scheduler_process",
                      "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, "
                      "moe_ep_rank, pp_rank, dp_rank)")
        out += _frame("managers/scheduler.py", 412, "__init__", "self.init_model_worker()")
        out += _frame("managers/tp_worker.py", 247, "__init__",
                      "self.model_runner = ModelRunner(")
        first = frames[0][2] if frames else "load_model"
        out += _frame("model_executor/model_runner.py", 431, "initialize", f"self.{first}()")
    for f in frames:
        out += _frame(*f)
    return out


def emit(kind: str, phase: str, rank: int, gpu_total_bytes: int, say: Say,
         raw: Callable[[str], None]) -> str:
    """Write ``kind``'s lines for ``rank`` in ``phase``; return the failure in one line."""
    if kind == "nccl-timeout":
        return _nccl_timeout(rank, phase, say, raw)
    if kind == "oom-kv-pool":
        return _oom_kv_pool(rank, gpu_total_bytes, say, raw)
    if kind == "no-kernel-image":
        frames = [*PHASE_STACK["graphs"][0],
                  ("model_executor/runner/decode_cuda_graph_runner.py", 603, "__init__",
                   "raise Exception(")]
        error = ("Exception: Capture cuda graph failed: CUDA error: no kernel image is "
                 "available for execution on the device")
        body = [*_scheduler_stack(frames), error,
                "CUDA kernel errors might be asynchronously reported at some other API call, "
                "so the stacktrace below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", "",
                "Possible solutions:",
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
                "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
                "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not "
                "recommended. Huge performance loss)",
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose "]
        say(f"Scheduler hit an exception: {body[0]}", rank)
        for line in body[1:]:
            raw(line)
        say(LAUNCH_SIGQUIT, None)
        return "CUDA error: no kernel image is available for execution on the device " \
               "(capturing the CUDA graphs)"
    frames, error = PHASE_STACK[phase]
    body = [*_scheduler_stack(frames), error]
    say(f"Scheduler hit an exception: {body[0]}", rank)
    for line in body[1:]:
        raw(line)
    raw("")
    say(RUNNING_SIGQUIT, None)
    return f"{error} (rank {rank}, during {phase}; SIGQUIT from the failed child)"


def _nccl_timeout(rank: int, phase: str, say: Say, raw: Callable[[str], None]) -> str:
    now = datetime.now()
    ops = {"distributed_init": "ALLREDUCE", "weights": "BROADCAST", "kv_pool": "ALLREDUCE",
           "graphs": "ALLREDUCE", "warmup": "ALLGATHER"}

    def c10(line_no: int, text: str) -> str:  # torch's c10 logging: E, month, day, time
        stamp = f"{now.month}{now.day:02d} {now:%H:%M:%S}.{now.microsecond:06d}123"
        return f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:{line_no}] {text}"

    work = (f"WorkNCCL(SeqNum=1, OpType={ops.get(phase, 'ALLREDUCE')}, NumelIn=1, NumelOut=1, "
            f"Timeout(ms)=600000) ran for 600083 milliseconds before timing out.")
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    for line in (
            c10(632, f"[Rank {rank}] Watchdog caught collective operation timeout: {work}"),
            c10(2268, f"{pg}  failure detected by watchdog at work sequence id: 1 PG status: "
                      "last enqueued work: 1, last completed work: 0"),
            c10(670, f"[Rank {rank}] Timeout at NCCL work: 1, last enqueued NCCL work: 1, "
                     "last completed NCCL work: 0."),
            c10(684, f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the "
                     "asynchronous nature of CUDA kernels, subsequent GPU operations might "
                     "run on corrupted/incomplete data."),
            c10(690, f"[Rank {rank}] To avoid data inconsistency, we are taking the entire "
                     "process down."),
            c10(1595, f"{pg} Process group watchdog thread terminated with exception: "
                      f"[Rank {rank}] Watchdog caught collective operation timeout: {work}"),
            "terminate called after throwing an instance of 'c10::DistBackendError'"):
        raw(line)
    say(LAUNCH_SIGQUIT, None)
    return f"NCCL watchdog timeout on rank {rank} (collective ran 600 s past its timeout)"


def _oom_kv_pool(rank: int, gpu_total_bytes: int, say: Say, raw: Callable[[str], None]) -> str:
    frames = [*PHASE_STACK["kv_pool"][0],
              ("mem_cache/memory_pool.py", 812, "__init__", "self._create_buffers()"),
              ("mem_cache/memory_pool.py", 861, "_create_buffers",
               "torch.zeros((self.size + self.page_size, 1, self.kv_cache_dim),")]
    total = gpu_total_bytes / GIB
    free = 1.12
    body = [f"Process SpawnProcess-{rank + 1}:", *_scheduler_stack(frames),
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU "
            f"{rank} has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is free. "
            f"Including non-PyTorch memory, this process has {total - free:.2f} GiB memory in "
            f"use. Of the allocated memory {total - free - 0.9:.2f} GiB is allocated by "
            f"PyTorch, and 312.50 MiB is reserved by PyTorch but unallocated."]
    for line in body:
        raw(line)
    say(LAUNCH_SIGQUIT, None)
    return f"CUDA out of memory on GPU {rank} allocating the KV cache pool (tried 8.00 GiB)"
