"""Fault classes 16-18: no secret leaves in an export, run logs are their owner's alone, and
a launched server's API key is not on its command line for every local user to read."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx
from drive import SIZE
from faultkit import Cli, no_traceback, sim_scenario_file
from helpers import quit_app, screen_text, until, wait_until

from engram_top.app.main import EngramTopApp
from engram_top.recording import Recorder
from engram_top.session import Session, SessionOptions

PASSWORD = "hunter2-url-secret"
KEY = "sk-fault-18-do-not-leak"


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


async def test_fault_16_a_password_in_a_url_is_in_no_file(bad_server, cli: Cli,
                                                          tmp_path: Path) -> None:
    url = bad_server.url.replace("http://", f"http://alice:{PASSWORD}@")
    res = cli.run("snapshot", "--attach", url, "--after", "0.5", "--out", str(tmp_path / "s"))
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip())
    assert {p.name for p in files_under(folder)} >= {"snapshot.json", "summary.md", "screen.svg"}
    for path in files_under(folder):
        assert PASSWORD not in path.read_bytes().decode("utf-8", "replace"), path
    assert bad_server.url in (folder / "snapshot.json").read_text()  # known by its URL

    # The dashboard and its recording.
    session = Session(SessionOptions(attach=(url,), load=None, poll_interval=0.2))
    recording = tmp_path / "rec.jsonl"
    recorder = Recorder(session.store, recording).start()
    app = EngramTopApp(session)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: session.store.latest.get("server") is not None
                    and session.store.latest["server"].ok, 15, "a good reading")
        assert PASSWORD not in screen_text(app)
        await quit_app(app, pilot)
    recorder.close()
    assert PASSWORD not in recording.read_text() and "alice" not in recording.read_text()


def test_fault_17_and_18_keys_stay_out_of_ps_and_logs_stay_private(cli: Cli,
                                                                   tmp_path: Path) -> None:
    scenarios = sim_scenario_file(tmp_path, f'api_key = "{KEY}"\n')
    res = cli.run("switch", str(scenarios), "--to", "device", "--wait-ready", timeout=90)
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert "visible to every local user" not in res.stderr

    # 18: not on any command line, yet the server requires it.
    servers = cli.servers()
    assert len(servers) == 5
    for proc in servers:
        assert KEY not in " ".join(proc.cmdline())
    url = res.stdout.split(" on ", 1)[1].split(";", 1)[0]
    assert httpx.get(f"{url}/server_info", timeout=5).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{url}/server_info", headers=auth, timeout=5).status_code == 200

    # 17: the state folder is its owner's: folders 0700, files 0600; the log holds the key
    # (the server's raw output), which is why.
    (state,) = (cli.state / "engram-top").glob("sim-*")
    found = [state, *state.rglob("*")]
    assert any(p.name.endswith(".log") for p in found) and (state / "current.json").exists()
    for path in found:
        if "node" in path.relative_to(state).parts:
            continue  # the simulated node's own GPU files: no secrets, and inside 0700
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert (cli.state / "engram-top").stat().st_mode & 0o077 == 0

    assert not list(state.glob("keys/*")), "the key file outlived the start-up"
    res = cli.run("stop", str(scenarios))
    assert res.returncode == 0 and res.stdout.startswith("stopped device"), res.stderr
    wait_until(lambda: not cli.servers(), 10, "no server left")

    # A key given on the command line instead: said once, at load.
    scenarios.write_text(scenarios.read_text().replace(f'api_key = "{KEY}"',
                                                       f'args = ["--api-key", "{KEY}"]'))
    res = cli.run("stop", str(scenarios))
    assert "args holds --api-key: its value is visible to every local user" in res.stderr
    assert KEY not in res.stderr
