"""`engram-top probe`: what an Engram placement costs per decode step on this machine.

A synthetic Engram-like table lives in HBM (device) or in pinned host memory (host,
host-prefetch). Each decode-like step gathers rows_per_token rows per token per Engram layer
at random and then runs the step's compute, a bf16 GEMM, which reads the rows; the three
modes are timed:

- device: the gather runs on the GPU, from the HBM table;
- host: the gather runs on the CPU into a pinned staging buffer, the rows are copied to the
  GPU, then the compute runs (the whole lookup sits on the step);
- host-prefetch: the gather and copy for step k+1 run on a side stream (from a worker
  thread) while step k's compute runs, into double buffers.

A step ends with a synchronize in every mode: the next step's tokens are the outcome of this
one, as in a server. Without CUDA the same code runs on the CPU with tiny sizes (the side
stream becomes the worker thread alone); those figures are labelled not meaningful.

torch is imported lazily: engram-top does not install it, and this module must stay
importable without it (and without Textual: benchmarks/gpu_check.py runs it on a GPU node
that has neither the app nor its dependencies). It imports nothing of engram_top but
probe_report, and scenarios.bounds for its options' ranges (the standard library alone).
statistics and the thread pool are imported where used too: the CLI imports
this module for its arguments on every start, the dashboard's included. Also runnable as
`python -m engram_top.probe.gpu` from a torch environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_top.probe.report import (
    HOST_MODES,
    MODES,
    NOT_MEANINGFUL,
    SCHEMA,
    table_size,
    to_markdown,
)
from scenarios.bounds import IntList, bounded_float, bounded_int

if TYPE_CHECKING:
    from concurrent.futures import Future

GIB = 1024**3
# A realistic Engram row: a 4 KiB row is 2,048 fp8 values (or 1,024 bf16), the order of a
# hashed N-gram embedding of a DeepSeek-style Engram head group; an assumption, --row-bytes.
ROW_BYTES = 4096
ROWS_PER_TOKEN = 8  # N-gram orders x hash heads per token: an assumption, --rows-per-token
LAYERS = 2  # the two Engram tables of DeepSeek-V4.1-Flash, one per Engram layer
BATCHES = (1, 8, 64, 256)
WARMUP_STEPS = 3
MIN_STEPS = 5


@dataclass(frozen=True)
class Sizes:
    """Defaults by device: a GPU gets the real sizes, a CPU tiny ones that finish fast."""

    rows_gib: float
    hidden: int
    compute_ms: float
    seconds: float


# 7168: DeepSeek-V3's hidden size (V4.1-Flash's is not public; an assumption). 17.5 ms: the
# seeds' assumed decode step ([service] step_s) the GEMMs are repeated to last, so that the
# prefetch has a realistic step to hide behind.
GPU_SIZES = Sizes(rows_gib=8.0, hidden=7168, compute_ms=17.5, seconds=2.0)
CPU_SIZES = Sizes(rows_gib=4 / 1024, hidden=256, compute_ms=1.0, seconds=0.25)

TORCH_MISSING = (
    "needs PyTorch, which engram-top does not install (torch is optional). Run it with "
    "an interpreter that has torch, e.g. the SGLang server's environment: "
    "PYTHONPATH=/path/to/engram-top /path/to/sglang-venv/bin/python -m engram_top probe "
    "(or `pip install torch` into this environment)")


class ProbeError(RuntimeError):
    """A probe that cannot run here (no torch, too little memory); said without traceback."""


# The options' ranges, and why: the table from a MiB (a CPU's smoke test) to 4 TiB (past
# any host's memory: the probe says so itself); a row of 2 bytes to 1 MiB (an Engram row is
# KiBs); a batch up to 65,536 tokens a step and 32 batch sizes; seconds per measurement up to
# an hour; the GEMM's side up to 65,536 (a 8 GiB bf16 matrix); a step's compute up to a
# minute. Past them torch fails deep inside (a batch of 1e20 overflowed its sizes).
ROWS_GIB = bounded_float(0.001, 4096, unit="GiB")
ROW_BYTES_RANGE = bounded_int(2, 1024 * 1024, unit="bytes")
PER_TOKEN = bounded_int(1, 4096)
BATCH_LIST = IntList(bounded_int(1, 65536), most=32)
LAYER_COUNT = bounded_int(1, 1024)
SECONDS = bounded_float(0.01, 3600, unit="seconds")
HIDDEN = bounded_int(1, 65536)
COMPUTE_MS = bounded_float(0.001, 60_000, unit="milliseconds")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g, c = GPU_SIZES, CPU_SIZES
    p.add_argument("--out", type=Path, default=Path("probe"), metavar="DIR",
                   help="folder for probe.json and probe.md (default: ./probe)")
    p.add_argument("--rows-gib", type=ROWS_GIB, default=None, metavar="N",
                   help=f"the synthetic table's size in GiB (default {g.rows_gib:g} on a GPU, "
                        f"{c.rows_gib * 1024:g} MiB on a CPU)")
    p.add_argument("--row-bytes", type=ROW_BYTES_RANGE, default=ROW_BYTES, metavar="B",
                   help=f"bytes per table row (default {ROW_BYTES}: a 4 KiB Engram row, 2,048 "
                        "fp8 values; even, as rows are read as bf16)")
    p.add_argument("--rows-per-token", type=PER_TOKEN, default=ROWS_PER_TOKEN,
                   metavar="R", help=f"rows each token reads per Engram layer (default "
                                     f"{ROWS_PER_TOKEN})")
    p.add_argument("--batch", type=BATCH_LIST, default=BATCHES, metavar="1,8,64,256",
                   help="decode batch sizes, comma-separated (default 1,8,64,256)")
    p.add_argument("--layers", type=LAYER_COUNT, default=LAYERS, metavar="L",
                   help=f"Engram layers per step (default {LAYERS})")
    p.add_argument("--seconds", type=SECONDS, default=None, metavar="S",
                   help=f"seconds timed per batch and mode (default {g.seconds:g} on a GPU, "
                        f"{c.seconds:g} on a CPU): 3 x batches x S in all, plus set-up")
    p.add_argument("--hidden", type=HIDDEN, default=None, metavar="H",
                   help=f"the GEMM's size: [batch x H] @ [H x H] bf16 (default {g.hidden} on "
                        f"a GPU, {c.hidden} on a CPU)")
    p.add_argument("--compute-ms", type=COMPUTE_MS, default=None, metavar="MS",
                   help=f"the GEMM is repeated so the step's compute at the smallest batch "
                        f"lasts about this long (default {g.compute_ms:g} ms on a GPU: the "
                        f"seeds' assumed decode step; {c.compute_ms:g} ms on a CPU)")


@dataclass(frozen=True)
class Settings:
    rows_gib: float
    row_bytes: int
    rows_per_token: int
    batches: tuple[int, ...]
    layers: int
    seconds: float
    hidden: int
    compute_ms: float


def settings(args: argparse.Namespace, cuda: bool) -> Settings:
    d = GPU_SIZES if cuda else CPU_SIZES
    return Settings(
        rows_gib=args.rows_gib or d.rows_gib, row_bytes=args.row_bytes,
        rows_per_token=args.rows_per_token, batches=tuple(args.batch), layers=args.layers,
        seconds=args.seconds or d.seconds, hidden=args.hidden or d.hidden,
        compute_ms=args.compute_ms or d.compute_ms)


def import_torch() -> Any:
    try:
        import torch
    except (ImportError, OSError) as exc:  # OSError: a torch whose CUDA libraries are broken
        raise ProbeError(f"{TORCH_MISSING} [{type(exc).__name__}: {exc}]") from None
    return torch


def run(args: argparse.Namespace, prog: str = "engram-top probe") -> int:
    """The command: measure, write probe.json and probe.md, print where and the predictions."""
    try:
        torch = import_torch()
        data = measure(torch, settings(args, torch.cuda.is_available()),
                       progress=lambda text: print(f"{prog}: {text}", file=sys.stderr,
                                                   flush=True))
        json_path, md_path = write(data, args.out)
    except ProbeError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{prog}: cannot write to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(summary(data))
    print(f"wrote {json_path} and {md_path}")
    return 0


def write(data: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "probe.json", out / "probe.md"
    json_path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    md_path.write_text(to_markdown(data), encoding="utf-8")
    return json_path, md_path


def summary(data: dict[str, Any]) -> str:
    lines = [f"probe on {data['device']['name']}; compute: {data['compute']['what']}"]
    if not data["meaningful_for_placement"]:
        lines.append(f"NOT MEANINGFUL FOR PLACEMENT: {NOT_MEANINGFUL}")
    for b in data["batches"]:
        p = b["predicted_tpot_change"]
        parts = [f"{m} {'n/a' if p[m] is None else f'{p[m] * 100:+.2f}%'}" for m in HOST_MODES]
        lines.append(f"batch {b['batch']}: device step {b['modes']['device']['step_ms']:.3f} "
                     f"ms; predicted TPOT change vs device: {', '.join(parts)}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- measuring

# One decode step of a mode: (step ms, host gather ms or None, the copy's handle or None).
Step = tuple[float, float | None, Any]


class _Rig:
    """The tables, buffers and GEMM of one probe, on one device; a step of each mode."""

    def __init__(self, torch: Any, s: Settings, cuda: bool) -> None:
        self.torch, self.s, self.cuda = torch, s, cuda
        self.gpu = torch.device("cuda" if cuda else "cpu")
        self.dtype = torch.bfloat16
        self.row_elems = s.row_bytes // 2
        self.rows = max(1, int(s.rows_gib * GIB) // s.row_bytes)
        try:
            # fill_: every page touched, so no step pays a first-touch fault.
            self.hbm_table = torch.empty(self.rows, self.row_elems, dtype=self.dtype,
                                         device=self.gpu).fill_(0.001)
            # Pinned only with CUDA: pinning needs a driver, and a CPU gains nothing by it.
            self.host_table = torch.empty(self.rows, self.row_elems, dtype=self.dtype,
                                          pin_memory=cuda).fill_(0.001)
        except (RuntimeError, MemoryError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            raise ProbeError(f"cannot allocate two {table_size(s.rows_gib)} tables (HBM and "
                             f"{'pinned ' if cuda else ''}host): {exc}; try a smaller "
                             "--rows-gib") from None
        self.side = torch.cuda.Stream() if cuda else None
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(1, thread_name_prefix="probe-prefetch")
        self.weight = torch.full((s.hidden, s.hidden), 0.001, dtype=self.dtype, device=self.gpu)
        self.repeats = 1

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    # -- per batch

    def prepare(self, batch: int) -> None:
        t = self.torch
        self.batch = batch
        self.count = batch * self.s.layers * self.s.rows_per_token  # rows per step
        shape = (self.count, self.row_elems)
        self.dev_bufs = [t.empty(shape, dtype=self.dtype, device=self.gpu) for _ in range(2)]
        self.staging = [t.empty(shape, dtype=self.dtype, pin_memory=self.cuda)
                        for _ in range(2)]
        self.x = t.full((batch, self.s.hidden), 0.001, dtype=self.dtype, device=self.gpu)
        self.y = t.empty((batch, self.s.hidden), dtype=self.dtype, device=self.gpu)
        self.width = min(self.s.hidden, self.count * self.row_elems // batch)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.current_stream().synchronize()

    def compute(self, rows: Any) -> None:
        """The step's compute, after its rows: they are added into the activations the GEMMs
        read, so the compute truly waits for them."""
        x = self.x.clone()
        x[:, :self.width] += rows.view(self.batch, -1)[:, :self.width]
        for _ in range(self.repeats):
            self.torch.matmul(x, self.weight, out=self.y)

    def calibrate(self) -> None:
        """How many GEMMs make the smallest batch's compute last compute_ms."""
        self.prepare(min(self.s.batches))
        rows = self.dev_bufs[0].zero_()
        # GEMMs in runs of 20 per synchronize, as a step runs them back to back: one per
        # synchronize would count the launch and sync latency as compute.
        self.repeats = 20
        for _ in range(2):
            self.compute(rows)
        self.sync()
        for _ in range(2):  # a guess, then one correction at the guessed length
            n, start = 0, time.perf_counter()
            while n < 3 or time.perf_counter() - start < 0.2:
                self.compute(rows)
                self.sync()
                n += 1
            per_step_ms = (time.perf_counter() - start) * 1000 / n
            self.repeats = max(1, round(self.repeats * self.s.compute_ms / per_step_ms))

    def _indices(self, device: Any) -> Any:
        return self.torch.randint(self.rows, (self.count,), device=device)

    def _timed_copy(self, dst: Any, src: Any, stream: Any = None) -> Any:
        """Copies src to dst; a handle copy_ms() reads once the copy has finished."""
        if not self.cuda:
            t0 = time.perf_counter()
            dst.copy_(src)
            return (time.perf_counter() - t0) * 1000
        start = self.torch.cuda.Event(enable_timing=True)
        end = self.torch.cuda.Event(enable_timing=True)
        stream = stream or self.torch.cuda.current_stream()
        start.record(stream)
        dst.copy_(src, non_blocking=True)
        end.record(stream)
        return (start, end)

    @staticmethod
    def copy_ms(handle: Any) -> float:
        return handle if isinstance(handle, float) else handle[0].elapsed_time(handle[1])

    def _host_gather(self, k: int) -> tuple[Any, float]:
        t0 = time.perf_counter()
        staged = self.torch.index_select(self.host_table, 0, self._indices("cpu"),
                                         out=self.staging[k % 2])
        return staged, (time.perf_counter() - t0) * 1000

    # -- the three modes: each runs at least n steps and on until `until` (perf_counter
    # seconds), and returns (step ms, host gather ms, copy handle) per step.

    def device_steps(self, n: int, until: float = 0.0) -> list[Step]:
        out: list[Step] = []
        for k in _steps(n, until):
            t0 = time.perf_counter()
            rows = self.torch.index_select(self.hbm_table, 0, self._indices(self.gpu),
                                           out=self.dev_bufs[k % 2])
            self.compute(rows)
            self.sync()
            out.append(((time.perf_counter() - t0) * 1000, None, None))
        return out

    def host_steps(self, n: int, until: float = 0.0) -> list[Step]:
        out: list[Step] = []
        for k in _steps(n, until):
            t0 = time.perf_counter()
            staged, gather_ms = self._host_gather(k)
            copy = self._timed_copy(self.dev_bufs[k % 2], staged)
            self.compute(self.dev_bufs[k % 2])
            self.sync()
            out.append(((time.perf_counter() - t0) * 1000, gather_ms, copy))
        return out

    def _fetch(self, k: int) -> tuple[float, Any]:
        """On the worker thread: step k's rows gathered and their copy queued on the side
        stream (on a CPU, done) into buffer k % 2."""
        staged, gather_ms = self._host_gather(k)
        if not self.cuda:
            return gather_ms, self._timed_copy(self.dev_bufs[k % 2], staged)
        with self.torch.cuda.stream(self.side):
            return gather_ms, self._timed_copy(self.dev_bufs[k % 2], staged, self.side)

    def prefetch_steps(self, n: int, until: float = 0.0) -> list[Step]:
        # Buffer k % 2 is free when step k+1's fetch starts: step k-1, which read it, ended
        # with a synchronize, and so had its copy, before step k began.
        out: list[Step] = []
        pending: Future[tuple[float, Any]] | None = self.pool.submit(self._fetch, 0)
        k = 0
        while pending is not None:
            t0 = time.perf_counter()
            gather_ms, copy = pending.result()
            pending = None
            if k + 1 < n or t0 < until:  # step k+1 will run: its rows are fetched now
                pending = self.pool.submit(self._fetch, k + 1)
            if self.cuda:  # the compute waits on the side stream's copy, not on the CPU
                self.torch.cuda.current_stream().wait_event(copy[1])
            self.compute(self.dev_bufs[k % 2])
            self.sync()
            out.append(((time.perf_counter() - t0) * 1000, gather_ms, copy))
            k += 1
        return out


def _steps(n: int, until: float) -> Iterator[int]:
    """0, 1, ...: at least n, and on while perf_counter() is before `until`."""
    k = 0
    while k < n or time.perf_counter() < until:
        yield k
        k += 1


def _timed(rig: _Rig, mode: str, seconds: float) -> dict[str, Any]:
    steps = {"device": rig.device_steps, "host": rig.host_steps,
             "host-prefetch": rig.prefetch_steps}[mode]
    steps(WARMUP_STEPS)
    # One run of steps (the prefetch pipeline is a run, not a step at a time) to a deadline.
    records = steps(MIN_STEPS, time.perf_counter() + seconds)
    if rig.cuda:
        rig.torch.cuda.synchronize()  # every copy's end event has happened
    import statistics

    step = [s for s, _, _ in records]
    gather = [g for _, g, _ in records if g is not None]
    copy = [rig.copy_ms(c) for _, _, c in records if c is not None]
    copy_ms = statistics.fmean(copy) if copy else None
    nbytes = rig.count * rig.s.row_bytes
    return {
        "steps": len(step),
        "step_ms": statistics.fmean(step),
        "step_ms_p50": statistics.median(step),
        "gather_ms": statistics.fmean(gather) if gather else None,
        "copy_ms": copy_ms,
        "copy_gb_s": nbytes / (copy_ms / 1000) / 1e9 if copy_ms else None,
    }


def _overlap(device: float, sync: float, prefetch: float) -> float | None:
    """The share of the synchronous lookup's cost the prefetch hid; None when there was
    nothing to hide."""
    exposed_sync = sync - device
    if exposed_sync <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - (prefetch - device) / exposed_sync))


def measure(torch: Any, s: Settings, progress: Any = None) -> dict[str, Any]:
    """Every batch in every mode; probe.json's content."""
    if s.row_bytes % 2:
        raise ProbeError(f"--row-bytes must be even (rows are read as bf16), got {s.row_bytes}")
    say = progress or (lambda text: None)
    cuda = bool(torch.cuda.is_available())
    name = torch.cuda.get_device_name(0) if cuda else f"CPU ({_cpu_name()})"
    say(f"{name}: two {table_size(s.rows_gib)} tables of {s.row_bytes}-byte rows"
        + ("" if cuda else " (no CUDA: CPU path, tiny sizes, not meaningful for placement)"))
    started = time.monotonic()
    threads = torch.get_num_threads()
    if not cuda:
        # One intra-op thread: the main thread stands for the GPU, the worker for the host's
        # gather; more threads on a small, shared CPU spin against each other for ms.
        torch.set_num_threads(1)
    rig = _Rig(torch, s, cuda)
    try:
        rig.calibrate()
        what = (f"bf16 GEMM [batch x {s.hidden}] @ [{s.hidden} x {s.hidden}] x {rig.repeats} "
                f"(repeated to last about {s.compute_ms:g} ms at batch {min(s.batches)}), "
                f"after the gathered rows are added into its input")
        say(f"compute: {what}")
        batches = []
        for batch in s.batches:
            rig.prepare(batch)
            modes = {m: _timed(rig, m, s.seconds) for m in MODES}
            device = modes["device"]["step_ms"]
            for m in HOST_MODES:
                modes[m]["exposed_ms"] = modes[m]["step_ms"] - device
            modes["device"]["exposed_ms"] = 0.0
            batches.append({
                "batch": batch,
                "rows_per_step": rig.count,
                "bytes_per_step": rig.count * s.row_bytes,
                "modes": modes,
                "overlap_fraction": _overlap(device, modes["host"]["step_ms"],
                                             modes["host-prefetch"]["step_ms"]),
                "predicted_tpot_change": {m: modes[m]["exposed_ms"] / device
                                          for m in HOST_MODES},
            })
            say(f"batch {batch}: " + ", ".join(f"{m} {modes[m]['step_ms']:.3f} ms"
                                               for m in MODES))
    finally:
        rig.close()
        torch.set_num_threads(threads)
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "meaningful_for_placement": cuda,
        "why_not_meaningful": None if cuda else NOT_MEANINGFUL,
        "device": {"kind": "cuda" if cuda else "cpu", "name": name,
                   "torch": str(torch.__version__),
                   "cuda": getattr(torch.version, "cuda", None) if cuda else None},
        "sizes": {"table_gib": s.rows_gib, "row_bytes": s.row_bytes, "rows": rig.rows,
                  "rows_per_token": s.rows_per_token, "layers": s.layers,
                  "hbm_table_gib": rig.rows * s.row_bytes / GIB,
                  "pinned_table_gib": rig.rows * s.row_bytes / GIB if cuda else 0.0},
        "compute": {"what": what, "dtype": "bfloat16", "m": "batch", "k": s.hidden,
                    "n": s.hidden, "repeats": rig.repeats, "target_ms": s.compute_ms},
        "seconds_per_mode": s.seconds,
        "warmup_steps": WARMUP_STEPS,
        "wall_s": round(time.monotonic() - started, 2),
        "batches": batches,
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engram_top.probe.gpu", description=__doc__.split(
        "\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv), prog="probe")


if __name__ == "__main__":
    sys.exit(main())
