"""`engram-top sim serve`: one simulated server for DeepSeek-V4.1-Flash on a 4x B200 node.

A real process with real HTTP on loopback: SGLang's start-up log, its endpoints and metrics,
and a continuous-batching scheduler (engram_top.sim.model) whose service times follow
the placement's calibrated model. Like SGLang, the port opens only after the model is loaded
and the KV pool and graphs are ready; /health answers 503 until the warm-up request is done.

With ``--dialect vllm`` the same model speaks vLLM's log, endpoints and metrics instead
(engram_top.sim.vllm): its port is bound at launch and listened on once the engine is
up, and /health is 200 from then on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import httpx
import uvicorn

from engram_top.seed import reference
from engram_top.sim import (
    exporters,
    hicache,
    kernel,
    log_style,
    memory,
    running_deaths,
    server_args,
    state,
    tenant,
    vllm_log,
)
from engram_top.sim import vllm as simvllm
from engram_top.sim.backends import SimHostBackend
from engram_top.sim.core import WARMUP_HEADER, ServerCore
from engram_top.sim.http import build_app
from engram_top.sim.options import DEFAULT_FAIL_AFTER_S, RUNNING_KINDS, add_arguments
from engram_top.sim.startup import Startup, StartupFailed, log, ranks_settled, spawn_ranks
from scenarios.proc_start import start_of

VERSION = "0.5.23+engram-top-sim"
VLLM_PLACEMENTS = ("device", "host-prefetch")  # vLLM has no synchronous host placement


def default_node_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(base) / f"engram-top-simnode-{os.getuid()}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="engram-top sim serve",
                                description="Run one simulated server, SGLang's dialect or "
                                            "vLLM's (DeepSeek-V4.1-Flash, TP4).")
    add_arguments(p)
    return p.parse_args(argv)


class _UvicornServer(uvicorn.Server):
    # The scheduler loop shares the event loop; let main() own the signals.
    def install_signal_handlers(self) -> None:
        pass


async def serve(args: argparse.Namespace) -> int:
    ref = reference.default()
    placement = ref.placements[args.placement]
    vllm = args.dialect == "vllm"
    say = vllm_log.log if vllm else log
    node_dir = args.node_dir or default_node_dir()
    spec = state.ensure_node(node_dir, ref)
    if spec.gpus != ref.gpus:
        say(f"Node {node_dir} has {spec.gpus} GPUs; the model needs TP{ref.gpus}")
        return 1
    # Other tenants first: a neighbour's HBM is there before the server profiles its memory.
    tenants = tenant.Tenants(node_dir)
    try:
        tenants.start(tenant.from_options(args, ref.gpus))
        tenants.wait_shown()
    except (OSError, tenant.TenantFailed) as exc:
        tenants.stop()
        say(f"Initialization failed. The simulated tenants did not start: {exc}")
        return 1
    try:
        return await _serve(args, ref, placement, vllm, say, node_dir, spec)
    finally:
        tenants.stop()


async def _serve(args: argparse.Namespace, ref: reference.Reference,
                 placement: reference.Placement, vllm: bool, say: Callable[[str], None],
                 node_dir: Path, spec: state.NodeSpec) -> int:
    held = _held_by_others(node_dir, spec)
    mem = memory.plan(ref, args.placement, max(held, default=0))
    me = os.getpid()
    main_state = state.ProcState(pid=me, started=start_of(me) or 0.0,
                                 name="vllm::APIServer" if vllm else "sglang::main")
    stop = asyncio.Event()
    signals: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        signals.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    sock = None
    if vllm:
        vllm_log.preamble(ref, placement, mem, args)
        try:
            sock = vllm_log.bind(args.host, args.port)
        except OSError as exc:
            vllm_log.raw(f"OSError: [Errno {exc.errno}] {exc.strerror}")
            return 1
    else:
        # What SGLang prints as ServerArgs applies its DeepSeek-V4 defaults, then the args.
        log(f"Use dsv4 attention backend for DeepseekV4ForCausalLM, setting page_size to "
            f"{memory.PAGE_SIZE}.")
        log(f"Setting KV cache dtype to {server_args.KV_CACHE_DTYPE} for "
            f"DeepseekV4ForCausalLM.")
        log(f"INFO server_args.py:1187: Setting swa_full_tokens_ratio to "
            f"{ref.kv_pools.swa_full_tokens_ratio} for DeepseekV4ForCausalLM.")
        log(server_args.repr_line(server_args.build(ref, placement, mem, args)))
        for key, value in placement.env.items():
            log(f"env {key}={value}")
    # The node's exporters run whatever the server's phase, as a real node's do.
    try:
        exporters_up = await exporters.start(
            node_dir, args.host, args.dcgm_exporter_port, args.node_exporter_port,
            args.exporter_hostname)
    except OSError as exc:
        say(f"Initialization failed. The simulated exporters cannot listen: {exc}")
        if sock is not None:
            sock.close()
        return 1
    for exporter, listener in exporters_up.items():
        say(f"simulated {exporter}-exporter serving /metrics on {args.host}:"
            f"{exporters.port_of(listener)}")

    # SGLang names a scheduler by its prefix: sglang::scheduler_DP1_TP1_EP1.
    def scheduler_name(rank: int) -> str:
        return "sglang::scheduler" + log_style.rank_tag(rank).replace(" ", "_")

    name: str | Callable[[int], str] | None = "VLLM::Worker_TP{rank}" if vllm else None
    if not vllm and args.parallel != "tp":
        name = scheduler_name
    ranks = spawn_ranks(node_dir, ref.gpus, name)

    def main_host(nbytes: int) -> None:
        main_state.host_anon_bytes = nbytes
        state.write_proc(node_dir, main_state)

    if vllm:
        vcore = simvllm.VllmCore(ref, placement, mem, args, vllm_log.VERSION)
        core: ServerCore = vcore
        startup: Startup = vllm_log.VllmStartup(ref, placement, mem, ranks, args.time_scale,
                                               args.fail_at, main_host)
        app, log_config = simvllm.build_app(vcore), log_style.uvicorn_log_config()
    else:
        core = ServerCore(ref, placement, mem, args, VERSION)
        startup = Startup(ref, placement, mem, ranks, args.time_scale, args.fail_at, main_host)
        startup.hicache_size = hicache.pool_size(args, mem.kv_bytes)
        # A size or a ratio is known now; a pool SGLang sizes, at the KV phase (on_hicache).
        hicache.put_on_page(core, startup.hicache_size.fixed_bytes_per_rank)
        startup.host_available = lambda: SimHostBackend(node_dir).meminfo()["MemAvailable"]
        startup.on_hicache = lambda pool: hicache.put_on_page(core, pool)
        startup.layout = getattr(args, "engram_layout", "shared")
        # A kind that dies while serving is not start-up's business.
        startup.fail_as = None if args.fail_as in RUNNING_KINDS else args.fail_as
        startup.pool_style = args.kv_pools
        # SGLang gives uvicorn's loggers its own timestamp prefix (set_uvicorn_logging_configs).
        app, log_config = build_app(core), log_style.uvicorn_log_config("[%(asctime)s] ")
    startup.held_by_others = held
    core.node_dir = node_dir.resolve()
    server: _UvicornServer | None = None
    segment: str | None = None  # a /dev/shm segment it made (--shm-segment-gb)
    rc = 0
    try:
        await _until_stopped(startup.run(), stop)
        await _until_stopped(ranks_settled(node_dir, ranks), stop)
        await _until_stopped(startup.wait_phase("http"), stop)
        if vllm:
            vllm_log.http_lines(args)
            core.ready = True  # once it listens, vLLM's engine is up
        config = uvicorn.Config(app, host=args.host, port=args.port, log_config=log_config,
                                lifespan="on")
        server = _UvicornServer(config)
        serving = asyncio.create_task(server.serve(sockets=[sock] if sock else None))
        while not server.started:
            if serving.done():
                raise StartupFailed(f"the HTTP server did not start on port {args.port}")
            await asyncio.sleep(0.01)
        core.start(ranks)
        if not vllm:
            await _until_stopped(_warm_up(args, placement, core, startup), stop)
            core.ready = True
        core.startup_seconds = time.monotonic() - core.launched
        if not vllm:
            log("The server is fired up and ready to roll!")
        if args.shm_segment_gb:  # removed in `finally`: only a death leaves it
            segment = f"sgl_shm_kv_{os.getpid()}_{secrets.token_hex(4)}"
            kernel.make_segment(node_dir, segment, int(args.shm_segment_gb * 1e9),
                                main_state.pid, main_state.started)
        if args.fail_as in RUNNING_KINDS:  # it ends the process, unless a stop comes first
            after = getattr(args, "fail_after", None)
            after = DEFAULT_FAIL_AFTER_S if after is None else after
            await _until_stopped(running_deaths.die(
                args.fail_as, after, node_dir, ranks, ref.gpu_total_bytes,
                ref.gpu_reserved_bytes, held[0] if held else 0, mem.context_bytes), stop)
        await stop.wait()
    except StartupFailed as exc:
        if vllm:
            vllm_log.failed(str(exc))
        elif not exc.said:  # a real server's own words already end the log
            log(f"Initialization failed. {exc}")
        rc = 1
    except _Stopped:
        pass
    finally:
        if segment is not None:
            kernel.remove_segment(node_dir, segment)
        if vllm:
            vllm_log.shutdown_lines(signals[0] if signals else "SIGTERM", len(ranks))
        else:
            log("Shutting down.")
        if server is not None:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(serving, 5)
        await core.close()
        for r in ranks:
            with contextlib.suppress(Exception):
                if r.proc.stdin is not None:
                    r.proc.stdin.close()  # EOF: the rank removes its memory and exits
        for r in ranks:
            try:
                r.proc.wait(timeout=5)
            except Exception:
                r.proc.kill()
        state.remove_proc(node_dir, main_state.pid)
        for listener in exporters_up.values():
            listener.close()
        if sock is not None:
            sock.close()
    return rc


def _held_by_others(node_dir: Path, spec: state.NodeSpec) -> list[int]:
    """HBM other processes on the node hold on each GPU, as the server finds it."""
    held = [0] * spec.gpus
    for proc in state.live_procs(node_dir):
        for gpu, nbytes in proc.gpu_bytes.items():
            if 0 <= gpu < spec.gpus:
                held[gpu] += nbytes
    return held


T = TypeVar("T")


class _Stopped(Exception):
    pass


async def _until_stopped(coro: Coroutine[Any, Any, T], stop: asyncio.Event) -> T:
    """Run ``coro`` unless a stop signal comes first."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise _Stopped


async def _warm_up(args: argparse.Namespace, placement: reference.Placement, core: ServerCore,
                   startup: Startup) -> None:
    """What SGLang's warm-up thread does: poll /model_info, then one /generate request."""
    # The warm-up request itself takes a little service time; leave room for it.
    startup.phase_s["warmup"] = max(0.0, startup.phase_s["warmup"] - 0.2)
    await startup.wait_phase("warmup")
    startup.check_fail("warmup")
    base = f"http://{args.host}:{args.port}"
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    headers[WARMUP_HEADER] = core.warmup_token
    try:
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
            (await client.get("/model_info")).raise_for_status()
            resp = await client.post("/generate", json={
                "input_ids": [10, 11, 12], "sampling_params": {"max_new_tokens": 1}})
    except httpx.HTTPError as exc:  # SGLang's warm-up thread says so and the server exits
        raise StartupFailed(f"warmup error: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise StartupFailed(f"warmup error: /generate answered {resp.status_code}")



def main(argv: list[str] | None = None, args: argparse.Namespace | None = None) -> int:
    args = args or parse_args(argv)
    if not (0 < args.time_scale < math.inf and 0 < args.serve_scale < math.inf):  # NaN too
        print("engram-top sim serve: --time-scale and --serve-scale must be finite and > 0",
              file=sys.stderr)
        return 2
    if args.api_key_file is not None:
        try:
            args.api_key = args.api_key_file.read_text().strip() or None
        except (OSError, UnicodeDecodeError) as exc:
            print(f"engram-top sim serve: --api-key-file {args.api_key_file}: cannot read: "
                  f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
    sglang_only = [opt for opt, on in (("--fail-as", args.fail_as is not None),
                                       ("--kv-pools", args.kv_pools != "dsv4"),
                                       ("--parallel", args.parallel != "tp")) if on]
    if args.dialect == "vllm" and sglang_only:
        print(f"engram-top sim serve: {', '.join(sglang_only)}: SGLang's shapes, not vLLM's "
              f"(leave out --dialect vllm)", file=sys.stderr)
        return 2
    problem = running_deaths.option_problem(args.fail_as, args.fail_at,
                                            getattr(args, "fail_after", None))
    if problem is not None:
        print(f"engram-top sim serve: {problem}", file=sys.stderr)
        return 2
    if args.log_timestamps:  # as a container runtime stamps what the process writes
        sys.stdout = log_style.Timestamped(sys.stdout)
    log_style.set_layout(log_style.layout(args.parallel, reference.default().gpus))
    if args.dialect == "vllm" and args.placement not in VLLM_PLACEMENTS:
        print(f"engram-top sim serve: vLLM has no '{args.placement}' placement: it keeps the "
              f"Engram tables in HBM (device) or in pinned host memory read ahead on a side "
              f"stream (host-prefetch, its default)", file=sys.stderr)
        return 2
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
