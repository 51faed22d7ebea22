"""What the simulated vLLM 0.32 writes to its log, and its start-up as that log tells it:
the banner and engine config, the workers' weights, torch.compile, KV cache and CUDA graph
lines, the API server's routes, a failure's last words and the ``[shutdown]`` lines (see
engram_top.sim.vllm for the dialect as a whole, and which seed phase is which)."""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import datetime
from typing import Any

from collectors.units import GIB
from engram_top.seed.reference import Placement, Reference
from engram_top.sim.memory import MemoryPlan
from engram_top.sim.pools import CHUNKED_PREFILL_SIZE
from engram_top.sim.server_args import CONTEXT_LEN
from engram_top.sim.startup import TABLES, RankHandle, Startup, StartupFailed

VERSION = "0.32.0+engram-top-sim"
ARCHITECTURE = "DeepseekV41ForCausalLM"  # vLLM's registry name for the V4.1 checkpoints
# Assumption: one Engram row is 256 fp8 values (engram.ROW_BYTES' row); vLLM's tables add
# one E8M0 scale byte per block of 32 (ParallelEngramEmbedding's default block_size).
ENGRAM_DIM = 256
ENGRAM_SCALE_BLOCK = 32
SIMULATED = ("simulated by engram-top: every figure is the seed-calibrated model's "
             "(modelled, not measured on a vLLM)")
ROUTES = (("/health", "GET"), ("/load", "GET"), ("/version", "GET"), ("/metrics", "GET"),
          ("/v1/models", "GET"), ("/v1/completions", "POST"),
          ("/v1/chat/completions", "POST"))
API, ENGINE = "APIServer", "EngineCore"


# --------------------------------------------------------------------------- the log


def log(msg: str, proc: str = API, where: str = "api_server.py:1", level: str = "INFO",
        pid: int | None = None) -> None:
    """One line as vLLM's logger writes it: process tag, level, date without the year,
    the file and line that logged."""
    stamp = datetime.now().strftime("%m-%d %H:%M:%S")
    raw(f"({proc} pid={pid or os.getpid()}) {level} {stamp} [{where}] {msg}")


def raw(line: str) -> None:
    """A line without vLLM's prefix: tqdm's bars, tracebacks, uvicorn's own lines."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def worker(rank: RankHandle, msg: str, where: str, level: str = "INFO") -> None:
    # The workers are the rank processes: their own pids.
    log(msg, f"Worker_TP{rank.rank}", where, level, rank.proc.pid)


def format_gib(nbytes: float) -> str:
    """vLLM's format_gib: GiB rounded to two places."""
    return f"{round(nbytes / GIB, 2)}"


def engine_args(ref: Reference, placement: Placement, mem: MemoryPlan,
                args: Any) -> dict[str, Any]:
    """What its ``non-default args`` line holds: the launch a real vLLM of this placement
    gets (the model's cap on running requests and its GPU share as flags; the key
    redacted, as vLLM does)."""
    out: dict[str, Any] = {"host": args.host, "port": args.port}
    if args.api_key:
        out["api_key"] = "***"
    out.update({"model": ref.model, "trust_remote_code": True,
                "tensor_parallel_size": ref.gpus,
                "gpu_memory_utilization": mem.mem_fraction_static,
                "max_num_seqs": placement.service.max_running_requests})
    if placement.name == "device":
        out["engram_config"] = {"cpu_offload": False}  # --engram-config.cpu_offload false
    return out


def preamble(ref: Reference, placement: Placement, mem: MemoryPlan, args: Any) -> None:
    """The API server's first lines and the engine core's config, before the workers."""
    where = "api_utils.py:347"
    for line in ("", "       █     █     █▄   ▄█",
                 f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VERSION}",
                 f"  █▄█▀ █     █     █     █  model   {ref.model}",
                 "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""):
        log(line, where=where)
    log(SIMULATED, where="vllm.py:1", level="WARNING")
    log(f"non-default args: {engine_args(ref, placement, mem, args)}", where="api_utils.py:286")
    log(f"Resolved architecture: {ARCHITECTURE}", where="model.py:733")
    log(f"Using max model len {CONTEXT_LEN}", where="model.py:2152")
    log(f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{ref.model}', "
        f"speculative_config=None, tokenizer='{ref.model}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=True, dtype=torch.bfloat16, "
        f"max_seq_len={CONTEXT_LEN}, download_dir=None, load_format=auto, "
        f"tensor_parallel_size={ref.gpus}, pipeline_parallel_size=1, data_parallel_size=1, "
        f"disable_custom_all_reduce=False, quantization=fp8, enforce_eager=False, "
        f"kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name={ref.model}, "
        f"enable_prefix_caching=True, enable_chunked_prefill=True", ENGINE, "core.py:133")


def bind(host: str, port: int) -> socket.socket:
    """vLLM binds its port at launch and listens once the engine is up: until then a
    connection is refused, and no other server can take the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def http_lines(args: Any) -> None:
    log(f"Starting vLLM server on http://{args.host}:{args.port}", where="entry.py:140")
    log("Available routes are:", where="launcher.py:186")
    for path, methods in ROUTES:
        log(f"Route: {path}, Methods: {methods}", where="launcher.py:195")


def failed(why: str) -> None:
    """The API server's last words when the engine did not come up."""
    raw("Traceback (most recent call last):")
    raw('  File "vllm/v1/engine/utils.py", line 1, in wait_for_engine_startup')
    raw(f"RuntimeError: Engine core initialization failed. See root cause above. "
        f"Failed core proc(s): {{'EngineCore': 1}} ({why})")


def shutdown_lines(signame: str, workers: int) -> None:
    """What vLLM 0.32 logs on SIGTERM before uvicorn's own shutdown lines."""
    for proc, where, msg in (
            (API, "launcher.py:254", "[shutdown] API server: shutdown triggered"),
            (API, "launcher.py:270",
             "[shutdown] API server: stopping engine client mode=abort timeout=0s"),
            (ENGINE, "core.py:1454",
             f"[shutdown] EngineCore: trigger received signal={signame}"),
            (ENGINE, "core.py:1635", "[shutdown] EngineCore: start mode=abort timeout=0s"),
            (ENGINE, "core.py:1499", "[shutdown] EngineCore: exiting busy loop"),
            (ENGINE, "multiproc_executor.py:479",
             f"[shutdown] Executor: waiting for worker exit count={workers}"),
            (API, "core_client.py:777", "[shutdown] MPClient: complete"),
            (API, "launcher.py:279", "[shutdown] API server: engine client stopped"),
            (API, "launcher.py:304",
             "[shutdown] API server: shutting down FastAPI HTTP server")):
        log(msg, proc, where)


# --------------------------------------------------------------------------- start-up


class VllmStartup(Startup):
    """vLLM's GPU path over the same memory and the seed's phase lengths (see the module's
    note on which phase is which)."""

    compile_s = 0.0

    def check_fail(self, phase: str) -> None:
        if self.fail_at != phase:
            return
        worker(self.ranks[0], "WorkerProc failed to start.", "multiproc_executor.py:772",
               "ERROR")
        raw("Traceback (most recent call last):")
        raw(f'  File "engram_top/sim/vllm_log.py", line 1, in {phase}')
        raw(f"RuntimeError: simulated failure during {phase} (--fail-at {phase})")
        log("EngineCore failed to start.", ENGINE, "core.py:1093", "ERROR")
        raise StartupFailed(f"simulated failure during {phase}")

    async def run(self) -> None:
        n = len(self.ranks)
        lead = self.ranks[0]
        self.main_host()
        for r in self.ranks:
            worker(r, f"world_size={n} rank={r.rank} local_rank={r.rank} "
                      f"distributed_init_method=tcp://127.0.0.1:29500 backend=nccl",
                   "parallel_state.py:1907")
        await self.ramp(self.phase_s["distributed_init"], 4, self.dist_memory)
        self.check_fail("distributed_init")
        # info_once with the local scope: only local rank 0 says most of what follows.
        worker(lead, f"rank 0 in world size {n} is assigned as DP rank 0, PP rank 0, PCP rank "
                     f"0, TP rank 0, ETP rank 0, EP rank N/A, EPLB rank N/A",
               "parallel_state.py:2350")
        await self.load_weights()
        t0 = time.monotonic()
        await self.compile()
        await self.kv_pool()
        await self.graphs()
        log(f"init engine (profile, create kv cache, warmup model) took "
            f"{time.monotonic() - t0:.2f} s (compilation: {self.compile_s:.2f} s)",
            ENGINE, "core.py:395")
        log("Supported tasks: ['generate']", where="entry.py:136")

    def engram_lines(self) -> list[str]:
        """vLLM's offload line, once per table on every rank: each holds its share of the
        hash heads (TP-sharded, no DP replicas to share with)."""
        out = []
        row_bytes = ENGRAM_DIM + ENGRAM_DIM // ENGRAM_SCALE_BLOCK
        for _, share in TABLES:
            rows = int(self.mem.host_table_bytes * share / len(self.ranks) // row_bytes)
            out.append(f"Engram table offloaded to pinned host memory: {rows} rows x "
                       f"{ENGRAM_DIM}, {rows * row_bytes / GIB:.2f} GiB per rank")
        return out

    async def load_weights(self) -> None:
        lead = self.ranks[0]
        t0 = time.monotonic()
        worker(lead, f"Starting to load model {self.ref.model}...", "gpu_model_runner.py:5039")
        if self.host:  # logged as the model is built, before its weights load
            for r in self.ranks:
                for line in self.engram_lines():
                    worker(r, line, "engram.py:1021")
        shards = 64
        progress = {"shard": 0}

        def weights(frac: float) -> None:
            self.weights_memory(frac)
            shard = int(frac * shards)
            if shard >= progress["shard"] + 8 or shard == shards:
                progress["shard"] = shard
                raw(f"Loading safetensors checkpoint shards: {shard * 100 // shards:3d}% "
                    f"Completed | {shard}/{shards}")
        await self.ramp(self.phase_s["weights"], 40, weights)
        self.check_fail("weights")
        elapsed = time.monotonic() - t0
        worker(lead, f"Loading weights took {elapsed:.2f} seconds", "default_loader.py:501")
        worker(lead, f"Model loading took {format_gib(self.mem.weights_bytes)} GiB memory and "
                     f"{elapsed:.6f} seconds", "gpu_model_runner.py:5149")

    async def compile(self) -> None:
        t0 = time.monotonic()
        for r in self.ranks:
            worker(r, "[backbone] Starting torch.compile", "monitor.py:40")
        await self.ramp(self.phase_s["warmup"], 2, lambda f: None)
        self.check_fail("warmup")
        self.compile_s = time.monotonic() - t0
        for r in self.ranks:
            worker(r, f"[backbone] Compiling a graph for compile range (1, "
                      f"{CHUNKED_PREFILL_SIZE}) takes {self.compile_s:.2f} s", "backends.py:398")
            worker(r, f"[backbone] torch.compile took {self.compile_s:.2f} s in total",
                   "monitor.py:62")

    async def kv_pool(self) -> None:
        mem = self.mem
        worker(self.ranks[0], f"Available KV cache memory: {format_gib(mem.kv_bytes)} GiB",
               "gpu_worker.py:759")
        await self.ramp(self.phase_s["kv_pool"], 2, lambda f: None)
        self.check_fail("kv_pool")
        self.kv_memory()
        self.push_all()
        log(f"GPU KV cache size: {mem.kv_tokens:,} tokens, Maximum concurrency for "
            f"{CONTEXT_LEN:,} tokens per request: {mem.kv_tokens / CONTEXT_LEN:.2f}x",
            ENGINE, "kv_cache_utils.py:2327")

    async def graphs(self) -> None:
        t0 = time.monotonic()
        grow = self.graphs_memory()
        bar = "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)"
        raw(f"{bar}:   0%|          | 0/51 [00:00<?, ?it/s]")
        await self.ramp(self.phase_s["graphs"], 10, grow)
        raw(f"{bar}: 100%|██████████| 51/51")
        raw("Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35")
        self.check_fail("graphs")
        worker(self.ranks[0], f"Graph capturing finished in {time.monotonic() - t0:.0f} secs, "
                              f"took {self.mem.graphs_bytes / GIB:.2f} GiB",
               "gpu_model_runner.py:6581")


# --------------------------------------------------------------------------- serving
