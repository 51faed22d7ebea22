"""The options of `engram-top sim serve`, apart from the server: the CLI defines every
command's options at start, and the server's own imports (uvicorn, starlette, httpx) would
cost the dashboard a tenth of a second before its first frame."""

from __future__ import annotations

import argparse
from pathlib import Path

from engram_top.seed import reference
from scenarios.bounds import bounded_float, bounded_int

DIALECTS = ("sglang", "vllm")
LAYOUTS = ("shared", "numa-replicated", "per-rank")  # the host tables' copies
# The ways `sim serve --fail-as` dies: during start-up (engram_top.sim.fail_kinds), or while
# serving, --fail-after seconds after ready (engram_top.sim.running_deaths). Here, not there:
# the CLI builds its options before any of the server's modules load.
START_KINDS = ("sigquit", "nccl-timeout", "no-kernel-image", "oom-kv-pool")
RUNNING_KINDS = ("host-oom-kill", "cgroup-oom-kill", "hbm-oom-running", "shm-full", "killed")
FAIL_KINDS = START_KINDS + RUNNING_KINDS
DEFAULT_FAIL_AFTER_S = 2.0
POOL_STYLES = ("dsv4", "swa", "mamba")
PARALLEL_LAYOUTS = ("tp", "dp-attention", "pp")
# The ranges, as the CLI's own: scales as a scenario file's (x0.001: the seed's start-up in an
# eighth of a second; x100: hours), ports as TCP has them (0 for an exporter: any free one),
# a stream's tokens per chunk up to a whole answer's worth.
SCALE = bounded_float(0.001, 100)
PORT = bounded_int(1, 65535)
ANY_PORT = bounded_int(0, 65535)
STREAM_INTERVAL = bounded_int(1, 100_000)
FAIL_AFTER = bounded_float(0, 86_400, unit="seconds")  # up to a day of serving first
HICACHE_GB = bounded_float(0, 100_000)  # per rank; 0 is off, as SGLang's 0
HICACHE_RATIO = bounded_float(0, 1000)  # of the rank's device KV pool
FRACTION = bounded_float(0, 1)
SHM_GB = bounded_float(0, 100_000)  # a /dev/shm segment's size; 0: none
# Another tenant's memory: up to a B200's whole HBM per GPU, up to 64 TiB of host RAM.
NEIGHBOUR_GIB = bounded_float(0, 192)
HOG_GIB = bounded_float(0, 65_536)
NUMA_NODE = bounded_int(0, 1)  # the simulated host's two sockets (engram_top.sim.sockets)


def gpu_list(text: str) -> tuple[int, ...]:
    """GPU indices as `0,2` (each 0 to 3, the node's TP4), for --neighbour-gpus."""
    try:
        out = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': GPU indices, such as 0,2") from None
    if not out or any(not 0 <= g < reference.default().gpus for g in out):
        raise argparse.ArgumentTypeError(
            f"'{text}': GPU indices from 0 to {reference.default().gpus - 1}, such as 0,2")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--placement", choices=reference.PLACEMENTS, default="device")
    p.add_argument("--dialect", choices=DIALECTS, default="sglang",
                   help="whose start-up log, endpoints and metrics it speaks (the same model "
                        "behind either; vLLM has no host placement)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=PORT, default=30000)
    p.add_argument("--time-scale", type=SCALE, default=1.0,
                   help="multiply start-up phase lengths by this (0.05 = 20x faster)")
    p.add_argument("--serve-scale", type=SCALE, default=1.0,
                   help="multiply request service times by this (default 1: node time)")
    p.add_argument("--node-dir", type=Path, default=None,
                   help="the simulated node's state folder (default: per user, under /tmp)")
    p.add_argument("--hide-node", action="store_true",
                   help="leave the node's folder out of /server_info: `attach` then reads "
                        "NVML and /proc, as beside a server on a real node")
    p.add_argument("--dcgm-exporter-port", type=ANY_PORT, default=None, metavar="PORT",
                   help="also serve the node's GPUs in dcgm-exporter's format on PORT "
                        "(0: any free port, logged)")
    p.add_argument("--node-exporter-port", type=ANY_PORT, default=None, metavar="PORT",
                   help="also serve the node's host memory in node-exporter's format on PORT")
    p.add_argument("--exporter-hostname", default=None,
                   help="the Hostname label of the dcgm page (default: this machine's name)")
    p.add_argument("--hicache-size", type=HICACHE_GB, default=0.0, metavar="GB",
                   help="SGLang's hierarchical KV cache: a host pool of GB (1e9 bytes) on "
                        "every TP rank, as SGLang's --hicache-size (default 0: off)")
    p.add_argument("--enable-hierarchical-cache", action="store_true",
                   help="SGLang's hierarchical KV cache without a size: --hicache-ratio times "
                        "each rank's KV pool, else sized as SGLang sizes it (its default ratio "
                        "lowered to fit --hicache-host-memory-fraction of the host memory "
                        "available less 10 GiB, shared by the ranks)")
    p.add_argument("--hicache-ratio", type=HICACHE_RATIO, default=None, metavar="R",
                   help="with --enable-hierarchical-cache: each rank's host pool as R times "
                        "its device KV pool")
    p.add_argument("--hicache-host-memory-fraction", type=FRACTION, default=None,
                   metavar="F", help="with --enable-hierarchical-cache and no size or ratio: "
                                     "the share of available host memory (default 0.8)")
    p.add_argument("--neighbour-hbm", type=NEIGHBOUR_GIB, default=0.0, metavar="GIB",
                   help="another tenant's process (noisy-neighbour) holding GIB of HBM on "
                        "each of --neighbour-gpus, from before the server loads: the server "
                        "plans its KV pool around it, as SGLang's memory profiling does")
    p.add_argument("--neighbour-gpus", type=gpu_list, default=None, metavar="LIST",
                   help="the GPUs the neighbour holds HBM on, as 0,2 (default: all)")
    p.add_argument("--host-hog", type=HOG_GIB, default=0.0, metavar="GIB",
                   help="another tenant's process (host-hog) holding GIB of host RAM")
    p.add_argument("--host-hog-node", type=NUMA_NODE, default=0, metavar="N",
                   help="the NUMA node the hog's memory sits on (0 or 1; default 0)")
    p.add_argument("--engram-layout", choices=LAYOUTS, default="shared",
                   help="host placements: the Engram tables once per node (shared), once per "
                        "NUMA node (numa-replicated) or once per TP rank (per-rank)")
    p.add_argument("--stream-interval", type=STREAM_INTERVAL, default=1)
    p.add_argument("--api-key", default=None)
    p.add_argument("--api-key-file", type=Path, default=None,
                   help="read the API key from this file (kept out of the argv `ps` shows)")
    p.add_argument("--fail-at", default=None,
                   choices=["distributed_init", "weights", "kv_pool", "graphs", "warmup"],
                   help="die during this start-up phase (for testing supervisors)")
    p.add_argument("--fail-as", default=None, choices=FAIL_KINDS, metavar="KIND",
                   help="die as a real server does, in its words. During start-up: a "
                        "scheduler's exception and SGLang's SIGQUIT line (sigquit, in "
                        "--fail-at's phase, default weights), an NCCL watchdog timeout "
                        "(nccl-timeout, default distributed_init), no kernel image in graph "
                        "capture (no-kernel-image), CUDA out of memory allocating the KV pool "
                        "(oom-kv-pool). While serving, --fail-after seconds after ready: TP "
                        "rank 0's host memory grows until the kernel's OOM killer kills it "
                        "(host-oom-kill) or its memory cgroup's does (cgroup-oom-kill), CUDA "
                        "out of memory in its event loop (hbm-oom-running), /dev/shm full "
                        "under NCCL, then SIGBUS (shm-full): each ends with SGLang's SIGQUIT "
                        "line and its process tree killed (exit status -9); SIGTERM from "
                        "outside, nothing logged (killed: exit status -15)")
    p.add_argument("--fail-after", type=FAIL_AFTER, default=None, metavar="SECONDS",
                   help="with a --fail-as that dies while serving: die this many real "
                        f"seconds after ready (default {DEFAULT_FAIL_AFTER_S:g})")
    p.add_argument("--shm-segment-gb", type=SHM_GB, default=0.0, metavar="GB",
                   help="once ready, make a /dev/shm segment of GB (1e9 bytes) on the node, "
                        "removed on a clean stop: a --fail-as death leaves it behind, as a "
                        "killed engine leaves its segments")
    p.add_argument("--kv-pools", choices=POOL_STYLES, default="dsv4",
                   help="how the memory pool phase logs its pools: DeepSeek-V4's configurator "
                        "(dsv4), SGLang's hybrid sliding-window pool (swa: full and SWA "
                        "layers' tokens, SWAKVPool's GB), or a hybrid linear-attention model's "
                        "Mamba state beside its KV cache (mamba); the same bytes and capacity")
    p.add_argument("--parallel", choices=PARALLEL_LAYOUTS, default="tp",
                   help="the ranks' layout and log prefixes: TP4 (tp: 'TP3'), data-parallel "
                        "attention DP4 TP4 EP4 (dp-attention: 'DP3 TP3 EP3'), or two pipeline "
                        "stages of TP2 (pp: 'PP1 TP1')")
    p.add_argument("--log-timestamps", action="store_true",
                   help="put an RFC 3339 UTC timestamp before every log line, as `kubectl "
                        "logs --timestamps` and `docker logs -t` show a container's log")
