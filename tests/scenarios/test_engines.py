"""The engine seam: an engine engram-top has never heard of (tests/toy/toy_engine: its own
log, pages and figures, nothing of SGLang's) comes in as one module and one registration,
an entry point of an installed distribution, and runs through the real CLI: a headless
switch that waits for ready, a snapshot of it, a stop. Also what a scenario file, a broken
plugin and a failing start look like through the seam."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import alive

from scenarios import engines, scenario_file

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

ROOT = Path(__file__).resolve().parents[2]
TOY = Path(__file__).parents[1] / "toy"
DEADLINE_S = 60.0  # the most one CLI command may take here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install_plugin(where: Path, entry: str) -> Path:
    """A distribution's metadata on a path entry, as pip would leave it: importlib.metadata
    finds its entry points there."""
    dist = where / "engram_top_toy-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: engram-top-toy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[engram_top.engines]\ntoy = {entry}\n")
    return where


class Toy:
    """The CLI in child processes that have the toy plugin installed."""

    def __init__(self, tmp: Path, entry: str = "toy_engine:ENGINE") -> None:
        plugins = install_plugin(tmp / "plugins", entry)
        self.env = {**os.environ,
                    "PYTHONPATH": os.pathsep.join([str(plugins), str(TOY), str(ROOT)])}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tmp / "state"
        self.file = tmp / "toy.toml"
        self.file.write_text(f'[scenarios.toy]\nkind = "toy"\nport = {self.port}\n'
                             f'placement = "device"\n\n[scenarios.broken]\nkind = "toy"\n'
                             f'port = {free_port()}\nargs = ["--fail"]\n')
        self.tmp = tmp

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "engram_top", *args], env=self.env,
                              cwd=self.tmp, capture_output=True, text=True, timeout=DEADLINE_S)

    def current_pid(self) -> int | None:
        try:
            return json.loads((self.state / "current.json").read_text())["pid"]
        except (OSError, ValueError):
            return None


@pytest.fixture
def toy(tmp_path: Path):  # type: ignore[no-untyped-def]
    t = Toy(tmp_path)
    yield t
    # Whatever a test left running is stopped here, by the CLI a user would use, and then
    # made sure of: no toy server outlives its test.
    pid = t.current_pid()
    t.cli("stop", str(t.file), "--state-dir", str(t.state))
    if pid is not None and alive(pid):
        psutil.Process(pid).kill()
        pytest.fail(f"the toy server (pid {pid}) survived `engram-top stop`")


def test_toy_engine_switch_wait_ready_snapshot_and_stop(toy: Toy) -> None:
    out = toy.cli("switch", str(toy.file), "--to", "toy", "--wait-ready",
                  "--state-dir", str(toy.state))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"started toy (pid {toy.current_pid()}) on {toy.url}" in out.stdout
    assert "toy ready after" in out.stdout
    log = next((toy.state / "logs").glob("toy-*.log")).read_text()
    assert "toy| ready" in log  # its own dialect, read by its own parser

    snap = toy.cli("snapshot", "--attach", toy.url, "--engine", "toy", "--after", "0.5",
                   "--out", str(toy.tmp / "snaps"))
    assert snap.returncode == 0, snap.stdout + snap.stderr
    folder = next((toy.tmp / "snaps").iterdir())
    data = json.loads((folder / "snapshot.json").read_text())
    server = data["readings"]["server"]
    assert server["status"] == "ok" and server["data"]["version"] == "toy 0.1"
    assert server["data"]["max_total_num_tokens"] == 4096  # the toy's /stats, by its collector
    assert data["run"]["state"] == "attached"
    assert "KV pool: 4,096 tokens" in (folder / "summary.md").read_text()

    pid = toy.current_pid()
    stop = toy.cli("stop", str(toy.file), "--state-dir", str(toy.state))
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert pid is not None and not alive(pid)


def test_toy_engine_failure_is_read_from_its_own_log(toy: Toy) -> None:
    out = toy.cli("switch", str(toy.file), "--to", "broken", "--wait-ready",
                  "--state-dir", str(toy.state))
    assert out.returncode == 1, out.stdout + out.stderr
    said = out.stdout + out.stderr
    # The phase from the toy's parser, the quoted line from the toy's error markers.
    assert "exited with code 3 during weights" in said
    assert "last error in the log: toy| fatal: cannot load the toy weights" in said
    assert "Traceback" not in said


def test_a_broken_plugin_is_said_and_the_built_in_engines_still_work(tmp_path: Path) -> None:
    t = Toy(tmp_path, entry="toy_engine:NO_SUCH_ENGINE")
    out = t.cli("switch", str(t.file), "--to", "toy", "--state-dir", str(t.state))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "kind: 'toy' is not one of sglang, simulated" in out.stderr
    assert "engine plugin 'toy' (toy_engine:NO_SUCH_ENGINE) did not load: AttributeError" \
        in out.stderr
    assert "Traceback" not in out.stderr
    demo = t.cli("inspect-log", "--engine", "simulated", os.devnull)
    assert demo.returncode == 0, demo.stderr


@pytest.fixture
def toy_registered():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(TOY))
    try:
        import toy_engine
        yield engines.register(toy_engine.ENGINE)
    finally:
        engines.unregister("toy")
        sys.path.remove(str(TOY))


def test_scenario_files_ask_the_engine_what_it_needs(tmp_path: Path, toy_registered) -> None:
    f = tmp_path / "s.toml"
    # A toy scenario needs no python or model_path (SGLang's), and gets the toy's argv.
    f.write_text('[scenarios.a]\nkind = "toy"\nport = 31001\n'
                 '[scenarios.b]\nkind = "sglang"\nport = 31002\n')
    with pytest.raises(scenario_file.ScenarioError) as err:
        scenario_file.load(f)
    assert [p.split(": ", 1)[1] for p in err.value.problems] == [
        "scenarios.b.python: missing: an SGLang scenario needs 'python'",
        "scenarios.b.model_path: missing: an SGLang scenario needs 'model_path'"]
    f.write_text('[scenarios.a]\nkind = "toy"\nport = 31001\n')
    sc = scenario_file.load(f).get("a")
    assert sc.engine is toy_registered
    assert sc.argv()[1:] == [str(TOY / "toy_engine" / "server.py"), "--host", "127.0.0.1",
                             "--port", "31001"]
    assert sc.launch_env() == {} and not sc.key_by_file


def test_no_kind_is_compared_outside_the_engine_modules() -> None:
    """The seam's promise, as the grep a reviewer would run: no code outside
    scenarios/engines compares a scenario's kind with an engine's name."""
    import re
    names = "|".join(re.escape(k) for k in ("sglang", "simulated"))
    pattern = re.compile(rf"""kind\s*(==|!=|in)\s*[("'].*({names})""")
    hits = []
    for folder in ("engram_top", "scenarios", "collectors"):
        for path in (ROOT / folder).rglob("*.py"):
            if "engines" in path.relative_to(ROOT).parts:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []
