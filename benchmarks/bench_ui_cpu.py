"""A dashboard left open: engram-top's CPU and memory beside nvitop's, in one window.

Both run in tmux at 160x50 (a session each, as a user's terminal), over the same stand-in
libnvidia-ml.so.1 (tests/nvml_stub) with N GPUs, at one sample a second. engram-top watches
a simulated device server with `attach` (no load) as it would one on a real node: the server
hides its node's folder (--hide-node), so attach reads the GPUs through NVML as nvitop does,
and /proc for the host and the server's process tree (--follow-node measures attach
following the node's folder instead). The server's own CPU is not counted, only each UI
process's. Both are measured over the same window from /proc (user + system time of
the process and its threads; RSS at the end): the first minute after the first frame, while
the two-minute trend lines still grow, and a later minute once they are full, which is what
a dashboard left open for hours costs. First frames are timed with our modules' bytecode
written (compile_bytecode), as any start after the first has it.

    python benchmarks/bench_ui_cpu.py [--gpus 4,8] [--clients 0,4] [--seconds 60]
                                      [--steady-after 130] [--profile DIR]
                                      [--follow-node] [--demo] [--floor] [--against DIR]
                                      [--first-minutes N]

--clients: idle (0), then under a load of that many clients sending short completions to
the watched server in closed loops (benchmarks/ui_load.py; about 57 requests a second with
4 here), the load a served model is under and where a dashboard's cost is: its histograms
and counters change every second.

Prints, per GPU count: each program's CPU (% of one core) and RSS, and engram-top's ratio to
nvitop. Needs tmux, gcc and nvitop (the test extras install it). Figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "nvml_stub"))

from build import build  # noqa: E402  (tests/nvml_stub/build.py)

BIN = Path(sys.executable).parent
COLS, ROWS = 160, 50


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"bench_ui_cpu: gave up waiting for {what} after {timeout:g} s")


class Tmux:
    """One detached tmux session running one command at COLS x ROWS, on its own server
    socket so that nothing of the user's tmux is touched."""

    def __init__(self, name: str, socket: Path, argv: list[str], env: dict[str, str],
                 cwd: Path | None = None) -> None:
        self.name, self.socket = name, socket
        exports = " ".join(f"{k}={_quote(v)}" for k, v in env.items())
        command = f"env {exports} {' '.join(_quote(a) for a in argv)}"
        subprocess.run(["tmux", "-S", str(socket), "new-session", "-d", "-s", name,
                        "-x", str(COLS), "-y", str(ROWS),
                        *(("-c", str(cwd)) if cwd is not None else ()), command], check=True)

    def pid(self) -> int | None:
        """The program's pid: the pane's process (tmux runs `env`, which execs it)."""
        out = subprocess.run(["tmux", "-S", str(self.socket), "list-panes", "-t", self.name,
                              "-F", "#{pane_pid}"], capture_output=True, text=True)
        return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() \
            else None

    def screen(self) -> str:
        out = subprocess.run(["tmux", "-S", str(self.socket), "capture-pane", "-p", "-t",
                              self.name], capture_output=True, text=True)
        return out.stdout

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-session", "-t", self.name],
                       capture_output=True)


def _quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def measure(gpus: int, seconds: float, steady_after: float, work: Path,
            follow_node: bool = False, clients: int = 0, profile: Path | None = None,
            floor: bool = False, against: Path | None = None, first_minutes: int = 1
            ) -> tuple[dict[str, dict[str, dict[str, float]]], str]:
    nvitop = shutil.which("nvitop", path=str(BIN)) or shutil.which("nvitop")
    if nvitop is None:
        raise SystemExit("bench_ui_cpu: nvitop not found: pip install -e '.[test]'")
    lib = build(work / "nvml")
    env = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_COUNT": str(gpus), "TERM": "xterm-256color",
           "HOME": str(work), "XDG_STATE_HOME": str(work / "state")}
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "engram_top", "sim", "serve", "--placement", "device",
         "--port", str(port), "--time-scale", "0.02", "--node-dir", str(work / "node"),
         *(() if follow_node else ("--hide-node",))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    socket = work / "tmux.sock"
    sessions: list[Tmux] = []
    load: subprocess.Popen[str] | None = None
    try:
        import httpx
        wait_for(lambda: _healthy(httpx, port), 60, "the simulated server")
        if clients:  # the watched server busy all along, as a served model is
            load = subprocess.Popen(
                [sys.executable, str(ROOT / "benchmarks" / "ui_load.py"),
                 f"http://127.0.0.1:{port}", "--clients", str(clients),
                 "--seconds", str(steady_after + (first_minutes + 1) * (seconds + 20) + 120)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)
        argv = [str(BIN / "engram-top"), "attach", f"http://127.0.0.1:{port}", "--no-record"]
        compile_bytecode()
        starts = sorted(first_frame(socket, argv, env, i) for i in range(FIRST_FRAMES))
        out: dict[str, dict[str, dict[str, float]]] = {
            "start": {"engram-top": {"median_s": starts[len(starts) // 2],
                                     "min_s": starts[0], "max_s": starts[-1]}}}
        pids: dict[str, int] = {}
        for launch in range(1, first_minutes + 1):
            # Every program launched afresh for each first minute (the last ones stay for
            # the steady minute): how much a first minute varies from launch to launch.
            close(sessions, pids)
            sessions = [Tmux("nvitop", socket, [nvitop, "--interval", "1"], env),
                        Tmux("engram-top", socket, argv, env)]
            if floor:  # the framework's own cost of a screen like ours, redrawn each second
                for name, mode in (("textual floor", ()),
                                   ("textual floor, lines", ("--lines",))):
                    sessions.append(Tmux(name, socket, [
                        sys.executable, str(ROOT / "benchmarks" / "textual_floor.py"), *mode],
                        env))
            if against is not None:  # another checkout's attach (run from its folder)
                sessions.append(Tmux(f"engram-top ({against.name})", socket,
                                     [sys.executable, "-m", "engram_top", *argv[1:]],
                                     {**env, "PYTHONPATH": str(against)}, cwd=against))
            pids = {s.name: wait_for(s.pid, 10, f"{s.name}'s pane") for s in sessions}
            shown = sessions[1]
            wait_for(lambda shown=shown: "GPU" in shown.screen()
                     and "KV pool" in shown.screen(), 30, "engram-top's first frame")
            shown_at = time.monotonic()
            label = "first minute" if first_minutes == 1 else \
                f"first minute (launch {launch} of {first_minutes})"
            out[label] = window(pids, seconds)
        time.sleep(max(0.0, shown_at + steady_after - time.monotonic()))
        spy = None if profile is None else py_spy(pids["engram-top"], seconds, profile)
        out["steady"] = window(pids, seconds)
        if spy is not None:
            spy.wait(60)
        said = ""
        if load is not None:
            load.terminate()
            said = (load.communicate(timeout=60)[0] or "").strip()
        return out, said
    finally:
        for s in sessions:
            s.kill()
        if load is not None and load.poll() is None:
            load.kill()
            load.wait(10)
        os.killpg(server.pid, 15)
        server.wait(30)


def close(sessions: list[Tmux], pids: dict[str, int]) -> None:
    """Each session ended and its program gone (a launch's programs before the next)."""
    for session in sessions:
        session.kill()
    for name, pid in pids.items():
        wait_for(lambda pid=pid: not psutil.pid_exists(pid), 15, f"{name} to end")


def py_spy_path() -> str:
    """py-spy, for --profile; the bench ends here, before it starts anything, without it."""
    found = shutil.which("py-spy", path=str(BIN)) or shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


def py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` from outside for ``seconds``, collapsed stacks into ``out``;
    without stopping it, so the window's CPU figures stay its own."""
    return subprocess.Popen(
        [py_spy_path(), "record", "--pid", str(pid), "--rate", "200", "--format", "raw",
         "--duration", str(int(seconds)), "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


FIRST_FRAMES = 5  # launches whose first frame is timed


def compile_bytecode() -> None:
    """Our modules' bytecode, as a start after the first has it: Python writes it on the
    first import, unless PYTHONDONTWRITEBYTECODE is set (some sandboxes and containers set
    it), and then every start compiles every module of ours again (~75 ms of the first
    frame here). An editable install has none until then."""
    import compileall
    for package in ("engram_top", "collectors", "scenarios"):
        compileall.compile_dir(ROOT / package, quiet=2)


def first_frame(socket: Path, argv: list[str], env: dict[str, str], i: int) -> float:
    """Seconds from launching the dashboard in a fresh tmux session to its panels on
    screen (polled every 20 ms); it is quit with q at once."""
    launched = time.monotonic()
    session = Tmux(f"start{i}", socket, argv, env)
    try:
        wait_for(lambda: "KV pool" in session.screen(), 30, "engram-top's first frame")
        return time.monotonic() - launched
    finally:
        subprocess.run(["tmux", "-S", str(socket), "send-keys", "-t", session.name, "q"],
                       capture_output=True)
        wait_for(lambda: session.pid() is None, 15, "the dashboard to quit")


def window(pids: dict[str, int], seconds: float) -> dict[str, dict[str, float]]:
    """CPU (% of one core) over the next ``seconds`` and RSS at their end, per program."""
    start = {name: cpu_seconds(pid) for name, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    return {name: {"cpu_pct": 100 * (cpu_seconds(pid) - start[name]) / elapsed,
                   "rss_mib": psutil.Process(pid).memory_info().rss / 2**20}
            for name, pid in pids.items()}


def measure_demo(seconds: float, settle: float, work: Path) -> dict[str, float]:
    """The demo (its own simulated server, a steady load of 8 streams): its dashboard's CPU
    apart from its load driver's, which runs in a process of its own."""
    env = {"TERM": "xterm-256color", "HOME": str(work), "XDG_STATE_HOME": str(work / "state")}
    socket = work / "tmux.sock"
    demo = Tmux("demo", socket, [str(BIN / "engram-top"), "demo", "--no-record"], env)
    try:
        ui = wait_for(demo.pid, 10, "the demo's pane")

        def driver() -> int | None:
            for child in psutil.Process(ui).children(recursive=True):
                if "scenarios.load_process" in " ".join(child.cmdline()):
                    return child.pid
            return None

        load = wait_for(driver, 120, "the demo's load to start")
        time.sleep(settle)
        pids = {"dashboard": ui, "load driver": load}
        return {name: r["cpu_pct"] for name, r in window(pids, seconds).items()}
    finally:
        demo.kill()


def _healthy(httpx, port: int) -> bool:  # type: ignore[no-untyped-def]
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def report(gpus: int, clients: int, seconds: float,
           result: dict[str, dict[str, dict[str, float]]], load: str) -> None:
    under = f"under load ({load})" if clients else "idle"
    start = result.pop("start")["engram-top"]
    print(f"{gpus} GPUs, {under}: engram-top's first frame {start['median_s']:.2f} s after "
          f"its launch (median of {FIRST_FRAMES}, {start['min_s']:.2f}-{start['max_s']:.2f} "
          "s; tmux polled every 20 ms)", flush=True)
    for label, r in result.items():
        n, e = r["nvitop"], r["engram-top"]
        print(f"{gpus} GPUs, {'loaded' if clients else 'idle'}, {label} ({seconds:g} s at "
              f"{COLS}x{ROWS}): nvitop {n['cpu_pct']:.2f}% CPU, {n['rss_mib']:.0f} MiB; "
              f"engram-top attach {e['cpu_pct']:.2f}% CPU, {e['rss_mib']:.0f} MiB; "
              f"ratio {e['cpu_pct'] / n['cpu_pct']:.2f}", flush=True)
        for name, how in (("textual floor", ""), ("textual floor, lines", " --lines")):
            if name not in r:
                continue
            f = r[name]
            print(f"{gpus} GPUs, {'loaded' if clients else 'idle'}, {label}: textual_floor.py"
                  f"{how} {f['cpu_pct']:.2f}% CPU, {f['rss_mib']:.0f} MiB (ratio to nvitop "
                  f"{f['cpu_pct'] / n['cpu_pct']:.2f}; engram-top over it "
                  f"{e['cpu_pct'] - f['cpu_pct']:+.2f} points)", flush=True)
        for name, f in r.items():
            if name.startswith("engram-top ("):
                print(f"{gpus} GPUs, {'loaded' if clients else 'idle'}, {label}: {name} "
                      f"{f['cpu_pct']:.2f}% CPU, {f['rss_mib']:.0f} MiB (ratio to nvitop "
                      f"{f['cpu_pct'] / n['cpu_pct']:.2f}; this checkout / it "
                      f"{e['cpu_pct'] / max(f['cpu_pct'], 1e-9):.2f})", flush=True)
    launches = [r for label, r in result.items() if label.startswith("first minute (")]
    if launches:
        for name in launches[0]:
            if name == "nvitop":
                continue
            ratios = sorted(r[name]["cpu_pct"] / r["nvitop"]["cpu_pct"] for r in launches)
            print(f"{gpus} GPUs, {'loaded' if clients else 'idle'}, first minute over "
                  f"{len(launches)} launches: {name} / nvitop median {median(ratios):.2f} "
                  f"({ratios[0]:.2f}-{ratios[-1]:.2f})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="4,8", help="GPU counts, comma-separated")
    ap.add_argument("--seconds", type=float, default=60.0, help="each window's length")
    ap.add_argument("--steady-after", type=float, default=130.0,
                    help="seconds after the first frame the steady window starts")
    ap.add_argument("--clients", default="0,4",
                    help="load levels, comma-separated: clients sending short completions to "
                         "the watched server in closed loops (0: idle)")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="py-spy's samples of engram-top over the steady window, collapsed "
                         "stacks in DIR/GPUS-CLIENTS.txt (pip install py-spy)")
    ap.add_argument("--follow-node", action="store_true",
                    help="let attach follow the simulated node's folder (the server names "
                         "it) instead of reading the stand-in NVML and /proc as nvitop does")
    ap.add_argument("--floor", action="store_true",
                    help="also benchmarks/textual_floor.py: six panels' text changed once a "
                         "second with nothing read, the framework's own cost of such a screen "
                         "(redrawn whole, and --lines: line by line, as engram-top's panels)")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="also another checkout's attach (a git worktree of an earlier "
                         "commit), in the same window: before and after, one noise")
    ap.add_argument("--first-minutes", type=int, default=1, metavar="N",
                    help="first minutes measured, each with every program launched afresh "
                         "(the last launch's steady minute follows): their ratios' median "
                         "and range")
    ap.add_argument("--demo", action="store_true",
                    help="also the demo: its dashboard's CPU apart from its load driver's")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("bench_ui_cpu: tmux not found (apt-get install tmux)")
    if args.profile is not None:
        py_spy_path()
    for gpus in (int(g) for g in args.gpus.split(",")):
        for clients in (int(c) for c in args.clients.split(",")):
            with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
                prof = None
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    prof = args.profile.resolve() / f"{gpus}-{clients}.txt"
                    prof.unlink(missing_ok=True)
                result, load = measure(gpus, args.seconds, args.steady_after, Path(tmp),
                                       args.follow_node, clients, prof, args.floor,
                                       args.against.resolve() if args.against else None,
                                       max(1, args.first_minutes))
            report(gpus, clients, args.seconds, result, load)
    if args.demo:
        with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
            d = measure_demo(args.seconds, 30.0, Path(tmp))
        print(f"demo, under its load ({args.seconds:g} s at {COLS}x{ROWS}): dashboard "
              f"{d['dashboard']:.2f}% CPU, load driver (its own process) "
              f"{d['load driver']:.2f}% CPU", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
