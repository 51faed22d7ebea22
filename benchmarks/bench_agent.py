"""The agent left running on a node: its CPU and memory beside prometheus-node-exporter's,
in one window, each scraped as a Prometheus would.

The agent watches a simulated device server as it would one on a real node (the server
hides its node's folder, so the agent reads the GPUs through the stand-in NVML library, N
GPUs, and /proc for the host), polling once a second, recording, and scraped every
--scrape seconds; node-exporter (Debian's package, what a site runs on every node anyway)
is scraped at the same rate. Optionally under a load of clients sending short completions
to the watched server (benchmarks/ui_load.py), where the server's histograms change every
second. Only each exporter's own process is counted (user + system time from /proc, over
the same window after a warm-up; RSS at the end).

    python benchmarks/bench_agent.py [--gpus 8] [--clients 0,4] [--seconds 60]
                                     [--warmup 30] [--scrape 5] [--against DIR]

--against DIR runs a second agent, another checkout's (a worktree of the commit before a
change), against the same server in the same window: before and after share one noise,
where two runs one after the other on this shared machine differ by a fifth.

Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "nvml_stub"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_ui_cpu import cpu_seconds, free_port, py_spy, py_spy_path, wait_for  # noqa: E402
from build import build  # noqa: E402  (tests/nvml_stub/build.py)

BIN = Path(sys.executable).parent
AGENT = "engram-top agent"


def scraper(url: str, every: float, stop: threading.Event, sizes: list[int]) -> None:
    import httpx
    while not stop.wait(every):
        try:
            sizes.append(len(httpx.get(url, timeout=5).content))
        except httpx.HTTPError:
            sizes.append(-1)


def measure(gpus: int, clients: int, seconds: float, warmup: float, scrape: float,
            work: Path, profile: Path | None = None,
            cprofile: Path | None = None,
            agent_args: tuple[str, ...] = (), against: Path | None = None,
            against_args: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    import httpx
    exporter = shutil.which("prometheus-node-exporter")
    lib = build(work / "nvml")
    env = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_COUNT": str(gpus),
           "HOME": str(work), "XDG_STATE_HOME": str(work / "state"), "PATH": str(BIN)}
    port, agent_port, node_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, **kw)  # type: ignore[call-overload]
        procs.append(p)
        return p

    stop = threading.Event()
    try:
        start([sys.executable, "-m", "engram_top", "sim", "serve", "--placement", "device",
               "--port", str(port), "--time-scale", "0.02", "--node-dir", str(work / "node"),
               "--hide-node"])
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(httpx, url), 60, "the simulated server")
        if clients:
            start([sys.executable, str(ROOT / "benchmarks" / "ui_load.py"), url, "--clients",
                   str(clients), "--seconds", str(warmup + seconds + 60)])
        # Under cProfile the agent's event-loop thread is timed call by call (its figures
        # inflated alike); the file is written when the agent ends on SIGTERM.
        head = [str(BIN / "engram-top")] if cprofile is None else \
            [sys.executable, "-m", "cProfile", "-o", str(cprofile), "-m", "engram_top"]
        agents = {AGENT: (head, ROOT, agent_args)}
        if against is not None:  # another checkout's agent, in the same window
            agents[f"{AGENT} ({' '.join((against.name, *against_args))})"] = (
                [sys.executable, "-m", "engram_top"], against, against_args)
        pids: dict[str, int] = {}
        urls: dict[str, str] = {}
        for i, (name, (argv, tree, extra)) in enumerate(agents.items()):
            listen = agent_port if i == 0 else free_port()
            pids[name] = start([*argv, "agent", url, "--listen", f"127.0.0.1:{listen}",
                                "--record-dir", str(work / f"rec{i}"), *extra],
                               env={**env, "PYTHONPATH": str(tree)}, cwd=str(tree)).pid
            urls[name] = f"http://127.0.0.1:{listen}/metrics"
        if exporter is not None:
            node = start([exporter, f"--web.listen-address=127.0.0.1:{node_port}"])
            pids["node-exporter"] = node.pid
            urls["node-exporter"] = f"http://127.0.0.1:{node_port}/metrics"
        wait_for(lambda: all(_healthy(httpx, u) for u in urls.values()), 60, "the exporters")
        sizes: dict[str, list[int]] = {name: [] for name in urls}
        threads = [threading.Thread(target=scraper, args=(u, scrape, stop, sizes[n]),
                                    daemon=True) for n, u in urls.items()]
        for t in threads:
            t.start()
        time.sleep(warmup)
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        t0 = time.monotonic()
        spy = None if profile is None else py_spy(pids[AGENT], seconds, profile)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        if spy is not None:
            spy.wait(60)
        elapsed = time.monotonic() - t0
        out = {}
        for name, pid in pids.items():
            used = cpu_seconds(pid) - before[name]
            out[name] = {"cpu_pct": 100 * used / elapsed,
                         "rss_mib": psutil.Process(pid).memory_info().rss / 2**20,
                         "page_kb": max(sizes[name] or [0]) / 1000}
        return out
    finally:
        stop.set()
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def _healthy(httpx, url: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        return httpx.get(url if url.endswith("/metrics") else f"{url}/health",
                         timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="8")
    ap.add_argument("--clients", default="0,4")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=30.0)
    ap.add_argument("--scrape", type=float, default=5.0)
    ap.add_argument("--profile", type=Path, default=None, metavar="DIR",
                    help="py-spy's samples of the agent (collapsed stacks) into DIR")
    ap.add_argument("--cprofile", type=Path, default=None, metavar="DIR",
                    help="run the agent under cProfile, its stats into DIR (its CPU figure "
                         "then includes cProfile's own cost)")
    ap.add_argument("--agent-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for the agent (repeat), e.g. --agent-arg=--no-record "
                         "to see what its recording costs")
    ap.add_argument("--against", type=Path, default=None, metavar="DIR",
                    help="also run the agent of another checkout (a git worktree of an "
                         "earlier commit) in the same window: before and after, one noise")
    ap.add_argument("--against-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for that agent (repeat); with --against .: this "
                         "checkout with and without an option, side by side")
    args = ap.parse_args()
    if args.cprofile is not None:
        args.cprofile.mkdir(parents=True, exist_ok=True)
    if args.profile is not None:
        py_spy_path()
        args.profile.mkdir(parents=True, exist_ok=True)
    for gpus in (int(g) for g in args.gpus.split(",")):
        for clients in (int(c) for c in args.clients.split(",")):
            with tempfile.TemporaryDirectory(prefix="engram-bench-agent-") as tmp:
                out = measure(gpus, clients, args.seconds, args.warmup, args.scrape, Path(tmp),
                              args.profile / f"agent-{gpus}gpus-{clients}clients.txt"
                              if args.profile else None,
                              args.cprofile.resolve() / f"agent-{gpus}gpus-{clients}clients.prof"
                              if args.cprofile else None, tuple(args.agent_arg),
                              args.against.resolve() if args.against else None,
                              tuple(args.against_arg))
            load = f"{clients} clients" if clients else "idle"
            for name, f in out.items():
                print(f"{gpus} GPUs, {load}: {name}: {f['cpu_pct']:.2f}% of a core, "
                      f"RSS {f['rss_mib']:.0f} MiB, /metrics {f['page_kb']:.1f} kB",
                      flush=True)
            a = out[AGENT]
            for name, f in out.items():
                if name != AGENT:
                    print(f"{gpus} GPUs, {load}: agent / {name} CPU "
                          f"{a['cpu_pct'] / max(f['cpu_pct'], 1e-9):.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
