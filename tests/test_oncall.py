"""The README's on-call walkthrough, driven end to end on the simulated node with
`scenarios/oncall.toml` as a user runs it (start-ups faster, ports free): a noisy neighbour
in HBM and a host-RAM hog headless (`switch`, `snapshot --attach`), HiCache too small and a
KV pool exhausted by long prompts in the dashboard (Pilot). Every alert at the default
[alerts] and [slo] settings; real server processes, real loopback HTTP, none left behind.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from helpers import ENGRAM_TOP, GIB, ROOT, alive, free_port, quit_app, until
from rich.console import Console

from engram_top.app.main import EngramTopApp
from engram_top.live.load import LoadSpec
from engram_top.live.session import Session, SessionOptions
from engram_top.model import facts
from engram_top.seed import reference
from engram_top.sim import memory, state
from engram_top.sim.tenant import HOG_NAME, NEIGHBOUR_NAME

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ONCALL = ROOT / "scenarios" / "oncall.toml"
REF = reference.default()
SIZE = (120, 40)  # a terminal with room for three alerts in the events pane


def oncall_file(tmp_path: Path) -> Path:
    """The shipped file, its start-ups faster (x0.02) and its ports free."""
    text = ONCALL.read_text()
    assert "time_scale = 0.05" in text
    text = text.replace("time_scale = 0.05", "time_scale = 0.02")
    for port in sorted(set(re.findall(r"^port = (\d+)$", text, re.M))):
        text = text.replace(f"port = {port}\n", f"port = {free_port()}\n")
    path = tmp_path / "oncall.toml"
    path.write_text(text)
    return path


def url_of(file: Path, scenario: str) -> str:
    from scenarios import scenario_file
    return scenario_file.load(file).get(scenario).url


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGRAM_TOP, *args], capture_output=True, text=True,
                          timeout=timeout)


def strays(tmp_path: Path) -> list[int]:
    """Processes of this test's (a server, its ranks, its tenants: all name its folder)."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or ())
        if str(tmp_path) in cmd and proc.info["status"] != psutil.STATUS_ZOMBIE:
            out.append(proc.info["pid"])
    return out


@pytest.fixture
def headless(tmp_path: Path) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """`engram-top CMD oncall.toml --state-dir S ...`; what it left running is stopped at
    the end, and nothing of the test's may survive."""
    file, state_dir = oncall_file(tmp_path), tmp_path / "state"

    def run(command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(command, str(file), "--state-dir", str(state_dir), *args)
    run.file, run.state_dir = file, state_dir  # type: ignore[attr-defined]
    try:
        yield run
    finally:
        cli("stop", str(file), "--state-dir", str(state_dir))
        for pid in strays(tmp_path):  # a stop that failed must not leave a server behind
            psutil.Process(pid).kill()
        assert strays(tmp_path) == []


def snapshot(url: str, out: Path) -> tuple[str, dict]:  # type: ignore[type-arg]
    done = cli("snapshot", "--attach", url, "--after", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (folder,) = out.iterdir()
    return ((folder / "summary.md").read_text(),
            json.loads((folder / "snapshot.json").read_text()))


def tenant_pid(node_dir: Path, name: str) -> int:
    (pid,) = [p.pid for p in state.live_procs(node_dir) if p.name == name]
    return pid


@pytest.mark.timeout(150)
def test_a_noisy_neighbour_shrinks_every_ranks_kv_pool(headless, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = headless("switch", "--to", "neighbour", "--wait-ready")
    assert out.returncode == 0, out.stderr
    assert "neighbour ready after" in out.stdout
    pid = tenant_pid(headless.state_dir / "node", NEIGHBOUR_NAME)
    summary, snap = snapshot(url_of(headless.file, "neighbour"), tmp_path / "snap")

    # 16 GiB held on GPU 0 before the server loaded: SGLang sizes every rank's pool by the
    # fullest GPU, so all four lose it, and the capacity reads far under the seed's.
    kv = memory.plan(REF, "device", 16 * GIB).kv_tokens
    assert kv < memory.plan(REF, "device").kv_tokens
    for gpu in range(4):
        assert f"- GPU {gpu} (NVIDIA B200): HBM " in summary
        assert f"weights 119.043 GB, KV {kv:,} tokens" in summary
    assert f"| KV capacity | tokens | higher | {kv / 1e6:.2f}M | device 11.84M |" in summary
    ledger = {line.split(":")[0]: line for line in summary.splitlines()
              if line.startswith("- HBM ledger GPU ")}
    assert f"{NEIGHBOUR_NAME} (pid {pid}) 16.0 GiB (NVML processes)" in \
        ledger["- HBM ledger GPU 0"]
    assert "- GPU 0 (NVIDIA B200): HBM 143.4 of 179.1 GiB used, server 127.4 GiB" in summary
    for gpu in (1, 2, 3):
        assert NEIGHBOUR_NAME not in ledger[f"- HBM ledger GPU {gpu}"]
        assert f"- GPU {gpu} (NVIDIA B200): HBM 127.4 of 179.1 GiB used" in summary
    # No alert at the default thresholds: the server planned around the neighbour, so no
    # GPU is near full; the KV capacity and the ledger are what tell.
    assert snap["alerts"] == []


@pytest.mark.timeout(150)
def test_a_host_hog_raises_host_available_and_refuses_the_host_placement(
        headless, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = headless("switch", "--to", "host-hog", "--wait-ready")
    assert out.returncode == 0, out.stderr
    server_pid = json.loads((headless.state_dir / "current.json").read_text())["pid"]
    tenant_pid(headless.state_dir / "node", HOG_NAME)  # it runs, outside the server's tree
    summary, snap = snapshot(url_of(headless.file, "host-hog"), tmp_path / "snap")

    # 2 TiB less the node's 42 GiB, the server's 6.5 and the hog's 1,820 GiB: 179.5 left.
    (alert,) = snap["alerts"]
    assert alert["id"] == "host-available"
    assert alert["message"].startswith(
        "host memory 8.8% available (< 10%): 179.5 of 2048.0 GiB; other tenants ")
    assert alert["message"].endswith("look at the Host RAM panel's ledger")
    assert f"- warning: {alert['message']}" in summary
    assert "server anonymous 6.5 GiB (RssAnon of 5 processes)" in summary
    assert "other tenants 1860.0 GiB (in use - the lines above)" in summary
    assert "the server +6.5 GiB since launch" in summary

    # The switch to the host placement: refused before anything stops, with the figures.
    out = headless("switch", "--to", "host")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "engram-top switch: alert: host memory 8.8% available (< 10%): 179.5 of 2048.0 " \
        "GiB; " in out.stderr
    assert "engram-top switch: 'host' does not fit on this node:\n  refuse: host: needs " \
        "195.4 GiB (Engram tables (shared) 187.4 + server processes 6.5 + pinned staging " \
        "1.5), free 186.0 GiB of 2048.0 GiB (MemAvailable): short of 9.4 GiB; the kernel " \
        "would kill a rank (OOM)" in out.stderr, out.stderr
    assert "(--force starts it anyway)" in out.stderr
    assert "Traceback" not in out.stderr
    assert alive(server_pid)
    # It found host-hog running (the first switch's) and left it so; it says how to stop it.
    assert f"engram-top switch: left running: host-hog (pid {server_pid}) on " \
        f"127.0.0.1:{url_of(headless.file, 'host-hog').rsplit(':', 1)[1]}, adopted; stop it " \
        f"with `engram-top stop {headless.file} --state-dir {headless.state_dir}`" \
        in out.stderr, out.stderr
    assert json.loads((headless.state_dir / "current.json").read_text())["scenario"] == \
        "host-hog"


def screen_rows(app: EngramTopApp) -> str:
    """The terminal's rows as text, as a viewer reads them (what the README quotes)."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(),
                      force_terminal=True, record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def dashboard(tmp_path: Path, start: str, load: LoadSpec) -> tuple[Session, EngramTopApp]:
    session = Session(SessionOptions(scenario_file=oncall_file(tmp_path), start=start,
                                     state_dir=tmp_path / "state", poll_interval=0.5,
                                     load=load))
    return session, EngramTopApp(session)


@pytest.mark.timeout(150)
async def test_hicache_too_small_drops_for_host_pressure(tmp_path: Path) -> None:
    # `engram-top run scenarios/oncall.toml --start hicache-small`: the default load.
    session, app = dashboard(tmp_path, "hicache-small", LoadSpec())
    store = session.store
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: store.run is not None and store.run.state == "ready", 60,
                    "the server to be ready")
        await until(pilot, lambda: "hicache-drops" in store.alerts, 60, "the HiCache alert")
        view = facts.hicache_facts(store)
        assert view is not None and view.pool_bytes_per_rank == 1e7 and view.ranks == 4
        tokens = f"{int(1e7 // REF.kv_bytes_per_token):,}"
        message = store.alerts["hicache-drops"].message
        said = re.compile(
            r"HiCache dropped [\d,]+ tokens/s for host pressure \(> 0/s\): host pool "
            f"{tokens} of {tokens} tokens, host memory "
            r"[\d,.]+ GiB available; look at the Host RAM ledger \(HiCache host pools, "
            r"other tenants\) and --hicache-size")
        assert said.fullmatch(message), message
        # The KV panel's HiCache row: the pool full on every rank, and dropping.
        row = re.compile(rf"HiCache  10\.0 MB × 4 · {tokens}/{tokens} tokens · drop [\d,]+/s")
        await until(pilot, lambda: row.search(screen_rows(app)),
                    15, lambda: "the full pool on screen:\n" + screen_rows(app))
        assert "load-back" in screen_rows(app)
        # Said in the events (the toast, the events line while it holds).
        assert any(said.fullmatch(e.text) for e in store.events)
        print(screen_rows(app))  # what the README quotes (pytest -s shows it)
        print(sorted((a.id, a.message) for a in store.alerts.values()))
        await quit_app(app, pilot)
    assert strays(tmp_path) == []


@pytest.mark.timeout(180)
async def test_long_prompts_exhaust_the_kv_pool(tmp_path: Path) -> None:
    # `engram-top run scenarios/oncall.toml --start kv-full --concurrency 32
    #  --prompt-tokens 524288 --output-tokens 65536`
    session, app = dashboard(tmp_path, "kv-full", LoadSpec(
        concurrency=32, input_len=524288, output_len=65536))
    store = session.store
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: {"kv", "slo"} <= set(store.alerts), 90,
                    lambda: f"the KV and SLO alerts; alerts: {sorted(store.alerts)}")
        kv = store.alerts["kv"].message
        said = re.compile(r"KV pool \d+\.\d% used \(> 90%\): [\d,]+ of 11,840,000 tokens; "
                          r"look at the KV panel \(retracted/s, queue\)")
        assert said.fullmatch(kv), kv
        assert float(kv.split("%")[0].removeprefix("KV pool ")) > 90
        slo = store.alerts["slo"].message
        # The figure where its bucket resolves it ("5.3 s"), else the bucket ("10-20 s",
        # "> 30 s": a bucket past 2 s; SGLang's TTFT buckets have a bound at 2 s).
        assert re.fullmatch(r"p99 TTFT (>? ?[\d.]+|[\d.]+-[\d.]+) s over the last 30 s, "
                            r"past the \[slo\] bound "
                            r"of 2,000 ms \(\d+ queued\); look at the queue and the KV panel, "
                            r"and the latency panel's p50 against p99", slo), slo
        server = store.latest["server"].data
        assert server.num_queue_reqs > 0 and server.num_running_reqs < 32  # KV, not the cap
        assert server.token_usage > 0.85  # (the alert holds 2 points under its 90%)
        # The KV panel: the full pool nearly whole, requests waiting under the cap.
        panel = re.compile(r"full pool [89]\d\.\d% · [\d.]+M tokens(.|\n)*requests \d+ running "
                           r"· [1-9]\d* queued")
        await until(pilot, lambda: panel.search(screen_rows(app)), 15,
                    lambda: "the KV panel:\n" + screen_rows(app))
        assert any(said.fullmatch(e.text) for e in store.events)  # a toast, the events line
        print(screen_rows(app))  # what the README quotes (pytest -s shows it)
        print(sorted((a.id, a.message) for a in store.alerts.values()))
        await quit_app(app, pilot)
    assert strays(tmp_path) == []
