"""Fault classes 16-18: no secret leaves in an export, run logs are their owner's alone, and
a launched server's API key is not on its command line for every local user to read. And the
credentials themselves: a URL's user:password@ is sent as basic auth (to an attached server
and to Prometheus), a bearer token from the environment or a file goes to Prometheus, an API
key wins over a URL's user name and the user is told so, each checked on the Authorization
header a real loopback server received; a key or token holding CR, LF or any control is
refused before anything is sent."""

from __future__ import annotations

import base64
import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from drive import SIZE
from faultkit import Cli, no_traceback, sim_scenario_file
from helpers import quit_app, screen_text, until, wait_until
from textual.widgets import Static

from collectors.pages import HeaderError, PageClient, bearer
from engram_top.app.fleet_screen import FleetApp
from engram_top.app.main import EngramTopApp
from engram_top.cli import credentials
from engram_top.fleet.session import FleetSession
from engram_top.live.session import Session, SessionOptions
from engram_top.record.recorder import Recorder

pytestmark = pytest.mark.slow  # starts processes (tests/quick_tier.py)

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
    # The server got the password, as basic auth, on every request.
    assert set(bad_server.authorizations) == {basic("alice", PASSWORD)}
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


# --------------------------------------------------------------------------- credentials

TOKEN = "prom-token-do-not-leak"
EMPTY_VECTOR = json.dumps({"status": "success",
                           "data": {"resultType": "vector", "result": []}}).encode()


def header(app: FleetApp) -> str:
    return str(app.query_one("#fleet-header", Static).render())


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Prom:
    """A Prometheus query API on 127.0.0.1 that answers an empty vector to whoever sends
    ``expected`` as Authorization, 401 to anyone else, and records what each request sent."""

    def __init__(self, expected: str) -> None:
        self.expected = expected
        self.seen: list[str | None] = []
        prom = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                got = self.headers.get("Authorization")
                prom.seen.append(got)
                ok = got == prom.expected
                body = EMPTY_VECTOR if ok else b"Unauthorized"
                self.send_response(200 if ok else 401)
                self.send_header("Content-Type", "application/json" if ok else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def prom_basic() -> Iterator[Prom]:
    prom = Prom(basic("alice", PASSWORD))
    try:
        yield prom
    finally:
        prom.close()


@pytest.fixture
def prom_bearer() -> Iterator[Prom]:
    prom = Prom(f"Bearer {TOKEN}")
    try:
        yield prom
    finally:
        prom.close()


def test_fleet_sends_a_urls_password_as_basic_auth_and_never_shows_it(prom_basic: Prom,
                                                                      cli: Cli) -> None:
    url = prom_basic.url.replace("http://", f"http://alice:{PASSWORD}@")
    term = cli.terminal("fleet", "--prometheus", url, "--interval", "1")
    wait_until(lambda: len(prom_basic.seen) >= 10, 30, "two refreshes")
    wait_until(lambda: "basic auth as alice" in term.output, 10, "the credential in the header")
    term.press("q")
    assert term.wait(30) == 0, term.output[-2000:]
    assert set(prom_basic.seen) == {basic("alice", PASSWORD)}  # every query, authorised
    assert PASSWORD not in term.output and prom_basic.url in term.output
    assert "HTTP 401" not in term.output  # (a bare "401" may be in the URL's port)
    no_traceback(term.output)


async def test_a_wrong_password_reads_as_a_401_with_no_password_in_it(prom_basic: Prom) -> None:
    creds = credentials.prometheus(prom_basic.url.replace("http://", "http://alice:wrong-pw@"),
                                   None, environ={})
    session = FleetSession(creds.url, interval=1.0, headers=creds.headers, auth=creds.auth,
                           credential=creds.described)
    app = FleetApp(session)
    async with app.run_test(size=(120, 30)) as pilot:
        await until(pilot, lambda: session.status is not None and not session.ok, 15,
                    "the refusal")
        text = header(app)
        assert "HTTP 401" in text and "basic auth as alice" in text and prom_basic.url in text
        assert "wrong-pw" not in screen_text(app) and "wrong-pw" not in app.export_screenshot()
        await pilot.press("q")
    assert set(prom_basic.seen) == {basic("alice", "wrong-pw")}


@pytest.mark.parametrize("where", ["environment", "file"])
async def test_fleet_sends_a_bearer_token_from_the_environment_or_a_file(
        prom_bearer: Prom, tmp_path: Path, where: str) -> None:
    token_file = None
    environ = {"ENGRAM_TOP_PROMETHEUS_TOKEN": TOKEN}
    if where == "file":
        token_file = tmp_path / "token"
        token_file.write_text(f"{TOKEN}\nsecond line ignored\n")
        token_file.chmod(0o600)
        environ = {"ENGRAM_TOP_PROMETHEUS_TOKEN": "not-this-one"}  # the file wins
    # A user name in the URL too: the token wins, and the header says so.
    creds = credentials.prometheus(prom_bearer.url.replace("http://", "http://bob@"),
                                   token_file, environ=environ)
    assert creds.url == prom_bearer.url and creds.auth is None and not creds.warnings
    session = FleetSession(creds.url, interval=1.0, headers=creds.headers, auth=creds.auth,
                           credential=creds.described)
    app = FleetApp(session)
    async with app.run_test(size=(160, 30)) as pilot:
        await until(pilot, lambda: session.ok, 15, "an authorised answer")
        text = header(app)
        source = str(token_file) if token_file else "$ENGRAM_TOP_PROMETHEUS_TOKEN"
        assert f"({'bearer token from ' + source}; the URL's user name 'bob' is not sent)" \
            in text
        assert TOKEN not in screen_text(app) and TOKEN not in app.export_screenshot()
        await pilot.press("q")
    assert set(prom_bearer.seen) == {f"Bearer {TOKEN}"}


def test_a_token_file_that_cannot_be_used_is_said(cli: Cli, tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"
    for content, says in ((b"", "is empty"), (b"tok\x1ben\n", "an escape (ESC)"),
                          (b"\xff\xfe", "not UTF-8 text"), (b" tok\n", "begins or ends")):
        path = tmp_path / "token"
        path.write_bytes(content)
        res = cli.run("fleet", "--prometheus", url, "--prometheus-token-file", str(path))
        no_traceback(res.stderr)
        assert res.returncode == 2 and f"--prometheus-token-file {path}: " in res.stderr
        assert says in res.stderr, res.stderr
    res = cli.run("fleet", "--prometheus", url, "--prometheus-token-file",
                  str(tmp_path / "missing"))
    assert res.returncode == 2 and "cannot read: No such file or directory" in res.stderr
    path.write_text("tok\n")
    path.chmod(0o644)
    _, warnings = credentials.read_token_file(path)
    assert "every user of this machine can read it (mode 644): chmod 600 it" in warnings[0]


async def test_an_api_key_wins_over_a_urls_user_name_and_the_user_is_told(
        bad_server, cli: Cli, tmp_path: Path) -> None:
    url = bad_server.url.replace("http://", f"http://alice:{PASSWORD}@")
    res = cli.run("snapshot", "--attach", url, "--after", "0.5", "--out", str(tmp_path / "s"),
                  env={"ENGRAM_TOP_API_KEY": KEY})
    no_traceback(res.stdout, res.stderr)
    assert res.returncode == 0, res.stderr
    assert set(bad_server.authorizations) == {f"Bearer {KEY}"}  # no Basic, ever
    folder = Path(res.stdout.strip())
    said = (folder / "snapshot.json").read_text()
    assert f"{bad_server.url}: using the API key (Bearer); the URL's user name 'alice'" in said
    for path in files_under(folder):
        text = path.read_bytes().decode("utf-8", "replace")
        assert PASSWORD not in text and KEY not in text, path
    assert PASSWORD not in res.stderr + res.stdout and KEY not in res.stderr + res.stdout


BAD_KEYS = ["a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b", "a\x1b[31mb", "a\x7fb", "a\x85b",
            "kéy", "a\u202eb", " padded", "tab\tkey", ""]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_key_http_cannot_carry_is_refused_before_anything_is_sent(key: str) -> None:
    # Where the CLI checks it, and where a client builds its header (defence in depth).
    with pytest.raises(credentials.CredentialError) as err:
        credentials.api_key(key)
    assert str(err.value).startswith("--api-key: the API key ")
    with pytest.raises(HeaderError, match="printable ASCII|begins or ends|is empty"):
        PageClient("http://127.0.0.1:9", headers={"X-Key": key})
    if key:
        with pytest.raises(HeaderError, match="^the API key "):
            bearer(key)
        with pytest.raises(credentials.CredentialError) as err:
            credentials.prometheus("http://127.0.0.1:9", None,
                                   environ={"ENGRAM_TOP_PROMETHEUS_TOKEN": key})
        assert "$ENGRAM_TOP_PROMETHEUS_TOKEN: the token " in str(err.value)


def test_cr_lf_keys_are_refused_by_every_command_and_file(bad_server, cli: Cli,
                                                          tmp_path: Path) -> None:
    evil = "sk-real\r\nX-Injected: yes"
    res = cli.run("attach", bad_server.url, "--api-key", evil, "--no-record")
    no_traceback(res.stderr)
    assert res.returncode == 2 and "--api-key: the API key holds a carriage return (CR) at " \
        "character 8 of 24" in res.stderr
    assert "X-Injected" not in res.stderr
    res = cli.run("snapshot", "--attach", bad_server.url, "--out", str(tmp_path / "s"),
                  env={"ENGRAM_TOP_API_KEY": "sk\nX: y"})
    no_traceback(res.stderr)
    assert res.returncode == 2 and "$ENGRAM_TOP_API_KEY: the API key holds a line feed (LF)" \
        in res.stderr
    assert "X: y" not in res.stderr
    assert bad_server.requests == []  # nothing was sent
    scenarios = sim_scenario_file(tmp_path, 'api_key = "sk-real\\r\\nX-Injected: yes"\n')
    res = cli.run("stop", str(scenarios))
    no_traceback(res.stderr)
    assert res.returncode == 2 and "scenarios.device.api_key: holds a carriage return (CR) " \
        "at character 8 of 24" in res.stderr
    assert "X-Injected" not in res.stderr and not cli.servers()
