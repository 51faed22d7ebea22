"""Snapshot folders: their contents and values, atomic writes, and no secret in any file.

Most tests fill a store by hand (fixed values, no processes); one runs a simulated server
started with an API key, from a scenario file whose environment holds a token.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest
from helpers import until
from scene import filled_store

from engram_top.alerts.monitor import Alert
from engram_top.export import snapshot
from engram_top.export.snapshot import SnapshotError, write_folder
from engram_top.model.redact import REDACTED, redact, redact_text
from engram_top.model.store import RunStore
from engram_top.record.recorder import Recorder
from engram_top.seed import reference

GIB = 1024**3
FOLDER = re.compile(r"^engram-top-\d{8}-\d{6}(-\d+)?$")
HF_TOKEN = "hf_secret123"
API_KEY = "sk-engram-top-snapshot-secret-42"


def read_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_folder_holds_the_whole_story(tmp_path: Path) -> None:
    store = filled_store()
    store.alerts = {"hbm:gpu0": Alert(id="hbm:gpu0", severity="warning",
                                      message="GPU 0 HBM 96.3% used (> 95%)",
                                      since=time.time(), started_at=time.monotonic())}
    out = write_folder(tmp_path / "snaps", store, reference.default(),
                       svg="<svg><text>HBM per GPU</text></svg>", extra={"source": "test"})
    assert out.parent == tmp_path / "snaps" and FOLDER.match(out.name)
    assert sorted(read_files(out)) == ["history.png", "screen.svg", "snapshot.json",
                                       "summary.md", "timeseries.csv", "timeseries.parquet"]
    png = (out / "history.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000  # four charts drawn
    assert list((tmp_path / "snaps").iterdir()) == [out]  # no temporary folder left

    data = json.loads((out / "snapshot.json").read_text())
    assert data["source"] == "test"
    assert data["run"]["scenario"] == "host-prefetch"
    assert [r["scenario"] for r in data["runs"]] == ["device", "host-prefetch"]
    assert all("log_lines" not in r for r in data["runs"])
    assert data["runs"][0]["results"]["kv_tokens"] == 11_840_000
    assert data["runs"][0]["ready_s"] == pytest.approx(10.0)
    assert data["kv"]["capacity_tokens"] == 42_700_288
    assert data["host"]["delta_gib"] == pytest.approx(202.0)
    comparison = data["comparison"]
    assert comparison["baseline"] == "device"
    kv = next(r for r in comparison["rows"] if r["key"] == "kv_tokens")
    assert kv["cells"]["host-prefetch"]["mean"] == 42_700_288
    assert kv["cells"]["host-prefetch"]["delta"] == pytest.approx(42_700_288 / 11_840_000 - 1)

    summary = (out / "summary.md").read_text()
    assert "# engram-top snapshot: host-prefetch (host-prefetch)" in summary
    assert "| KV capacity | tokens | higher | 11.84M | 42.70M (Δ +260.64%) |" in summary
    assert "| weights per GPU | GB | lower | 119.043 | 72.201 (Δ -39.35%) |" in summary
    # The live run's figures as of the snapshot: its window holds 10 requests, too few to
    # mean anything, so its latency reads warming up, and the verdict says so.
    assert "| mean TTFT | ms | lower | 350.00 | warming up |" in summary
    assert "| measured over |  |  | – | 30 s window, 10 requests |" in summary
    assert ("### Verdict\n\n- KV capacity: host-prefetch wins (host-prefetch +260.6% vs "
            "device; fixed by the allocator, n=1).") in summary
    assert ("- TTFT: no verdict yet, warming up (host-prefetch: 10 of 30 requests in the "
            "30 s window).") in summary
    assert data["verdict"]["findings"][0]["winner"] == "host-prefetch"
    assert "seed reference" in summary
    assert "- KV pool: 42,700,288 tokens, usage 27.0%, 8 running, 3 queued" in summary
    assert "TTFT p50 400.0 ms, p99 900.0 ms" in summary
    assert "- Host RAM: 242.0 of 2048.0 GiB used" in summary
    assert "## Alerts\n\n- warning: GPU 0 HBM 96.3% used (> 95%)" in summary
    assert data["alerts"][0]["id"] == "hbm:gpu0"
    assert (out / "screen.svg").read_text() == "<svg><text>HBM per GPU</text></svg>"


def test_timeseries_parquet_equals_csv_and_the_store(tmp_path: Path) -> None:
    store = filled_store()
    out = write_folder(tmp_path, store, reference.default(), svg=None)
    assert not (out / "screen.svg").exists()
    with warnings.catch_warnings():  # pandas 3 deprecates its fastparquet engine for reading
        warnings.simplefilter("ignore")
        parquet = pd.read_parquet(out / "timeseries.parquet")
    csv = pd.read_csv(out / "timeseries.csv", parse_dates=["wall_utc"],
                      dtype={"gpu": "Int64"}, keep_default_na=False, na_values={"gpu": [""]})
    assert list(parquet.columns) == snapshot.TIMESERIES_COLUMNS
    pd.testing.assert_frame_equal(parquet, csv, check_dtype=False)

    origin = store.run.launched_at
    for key, series in store.series.items():
        rows = parquet[parquet["series"] == key.name]
        assert list(rows["value"]) == [v for _, v in series.points()]
        assert list(rows["t_s"]) == pytest.approx([t - origin for t, _ in series.points()])
    used = parquet[parquet["series"] == "gpu0.used"]
    assert list(used["gpu"]) == [0, 0, 0] and set(used["unit"]) == {"bytes"}
    assert list(used["value"]) == [100 * GIB, 101 * GIB, 102 * GIB]
    assert list(used["t_s"]) == pytest.approx([70.0, 80.0, 90.0])
    host = parquet[parquet["series"] == "host.used"]
    assert host["gpu"].isna().all() and set(host["source"]) == {"host"}
    # Wall time follows the monotonic spacing of the points.
    assert list(used["wall_utc"].diff().dt.total_seconds().dropna()) == \
        pytest.approx([10.0, 10.0], abs=1e-3)
    assert abs(used["wall_utc"].iloc[-1] - pd.Timestamp.now("UTC").tz_localize(None)) < \
        pd.Timedelta(seconds=60)


def test_no_runs_yet_and_names_never_overwrite(tmp_path: Path) -> None:
    store = RunStore()
    first = write_folder(tmp_path, store, reference.default(), svg=None, name="snap")
    second = write_folder(tmp_path, store, reference.default(), svg=None, name="snap")
    assert (first.name, second.name) == ("snap", "snap-2")
    summary = (first / "summary.md").read_text()
    assert "No finished runs yet" in summary and "- no reading yet" in summary
    data = json.loads((first / "snapshot.json").read_text())
    assert data["comparison"] is None and data["runs"] == [] and data["scenarios"] is None
    assert pd.read_csv(first / "timeseries.csv").empty
    with pytest.raises(SnapshotError, match="plain folder name"):
        write_folder(tmp_path, store, reference.default(), svg=None, name="../escape")


# ----------------------------------------------------------------------------- failures

def test_parent_that_is_a_file_fails_cleanly(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    with pytest.raises(SnapshotError, match=f"cannot write into {blocker}: not a folder"):
        write_folder(blocker, filled_store(), reference.default(), svg=None)
    with pytest.raises(SnapshotError, match=f"cannot write into {blocker / 'sub'}: "
                                            "Not a directory"):
        write_folder(blocker / "sub", filled_store(), reference.default(), svg=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


@pytest.mark.slow
def test_read_only_folder_fails_cleanly(tmp_path: Path) -> None:
    """`engram-top snapshot --out RO` into a folder it may not write: a clear message, exit 1,
    nothing left. Root writes through chmod 0o555 by its capability CAP_DAC_OVERRIDE, so as
    root (as in CI) the command runs with that capability dropped (setpriv, util-linux)."""
    recording = tmp_path / "run.jsonl"
    Recorder(filled_store(), recording).start().close()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    command = [sys.executable, "-m", "engram_top", "snapshot", "--recording", str(recording),
               "--out", str(ro)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "root needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE"
        command = [setpriv, "--inh-caps=-dac_override,-dac_read_search",
                   "--bounding-set=-dac_override,-dac_read_search", *command]
    try:
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "HOME": str(tmp_path)})
        assert done.returncode == 1, done.stderr
        assert f"into {ro}: Permission denied" in done.stderr
        assert "Traceback" not in done.stderr
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_snapshots_of_the_same_name_written_at_once_both_land(tmp_path: Path) -> None:
    """The dashboard writes on a thread, so two `s` presses in one second write at once."""
    store = filled_store()
    taken = [snapshot.prepare(tmp_path, store, reference.default(), svg=None, name="same")
             for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        paths = sorted(pool.map(lambda p: p.write(), taken))
    assert [p.name for p in paths] == ["same", "same-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same", "same-2"]
    first, second = read_files(paths[0]), read_files(paths[1])
    assert first.keys() == second.keys() and len(first) == 5  # no screen.svg: svg=None
    assert first["timeseries.csv"] == second["timeseries.csv"]  # taken from the same store


def test_full_disk_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_put = snapshot._put
    calls: list[str] = []

    def put(path: Path, data: bytes) -> None:
        calls.append(path.name)
        if len(calls) == 3:  # two files are already down when the disk fills
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real_put(path, data)

    monkeypatch.setattr(snapshot, "_put", put)
    with pytest.raises(SnapshotError) as caught:
        write_folder(tmp_path / "snaps", filled_store(), reference.default(), svg="<svg/>")
    message = str(caught.value)
    assert f"cannot write a snapshot into {tmp_path / 'snaps'}: No space left on device" \
        in message
    assert calls[-1] in message  # the file it was writing
    assert list((tmp_path / "snaps").iterdir()) == []  # no folder, no temporary folder


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_failing_parquet_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              code: int) -> None:
    """The same as root, where chmod cannot make a folder unwritable: the Parquet writer
    fails half-way through its file."""
    def half_written(path: Path, frame: object) -> None:
        path.write_bytes(b"PAR1")
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(snapshot, "_write_parquet", half_written)
    with pytest.raises(SnapshotError, match=f"{os.strerror(code)} .*timeseries.parquet"):
        write_folder(tmp_path, filled_store(), reference.default(), svg=None)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- redaction

def test_redact_structures() -> None:
    found: set[str] = set()
    data = {
        "env": {"HF_TOKEN": HF_TOKEN, "OPENAI_API_KEY": "sk-openai-123456",
                "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "1"},
        "api_key": API_KEY, "admin_api_key": None, "x-api-key": "xk-998877",
        "Authorization": "Bearer bearer-abcdef", "db_password": "hunter22",
        "args": ["--tp-size", "4", "--api-key", "sk-args-654321", "--hf-token=hf_inline987"],
        "command": "python -m sglang.launch_server --api-key sk-cmd-777777 --port 30000",
        # Not secrets: SGLang's counts and metrics, the tokenizer's path.
        "max_total_num_tokens": 11_840_000, "token_usage": 0.25, "tokenizer_path": "/m",
    }
    out = redact(data, found)
    assert out["env"] == {"HF_TOKEN": REDACTED, "OPENAI_API_KEY": REDACTED,
                          "SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE": "1"}
    assert out["api_key"] == REDACTED and out["admin_api_key"] is None
    assert out["x-api-key"] == REDACTED and out["Authorization"] == REDACTED
    assert out["db_password"] == REDACTED
    assert out["args"] == ["--tp-size", "4", "--api-key", REDACTED, f"--hf-token={REDACTED}"]
    assert out["command"] == f"python -m sglang.launch_server --api-key {REDACTED} --port 30000"
    assert (out["max_total_num_tokens"], out["token_usage"], out["tokenizer_path"]) == \
        (11_840_000, 0.25, "/m")
    assert data["api_key"] == API_KEY  # a copy: the original is untouched
    assert found == {HF_TOKEN, "sk-openai-123456", API_KEY, "xk-998877", "Bearer bearer-abcdef",
                     "bearer-abcdef", "hunter22", "sk-args-654321", "hf_inline987",
                     "sk-cmd-777777"}


def test_redact_text() -> None:
    line = ("server_args=ServerArgs(api_key='sk-unseen-1', admin_api_key=None, "
            "token_usage=0.5) GET /v1 Authorization: Bearer tok-unseen-2 "
            f"echo {HF_TOKEN} inter-token latency --api-key sk-unseen-3")
    out = redact_text(line, {HF_TOKEN, "1"})
    assert out == ("server_args=ServerArgs(api_key='<redacted>', admin_api_key=None, "
                   "token_usage=0.5) GET /v1 Authorization: Bearer <redacted> "
                   "echo <redacted> inter-token latency --api-key <redacted>")
    # Short values are not scrubbed from free text (a "1" would wipe every digit).
    assert redact_text("gpu 1 of 4", {"1"}) == "gpu 1 of 4"
    assert redact_text("a b&c", {"a b&c"}, "&lt;redacted&gt;") == "a b&c"  # too short
    # In an SVG: spaces as &#160;, quotes as &#x27;; a number after "token:" is a count.
    svg = ("<text>#cached-token:&#160;0,&#160;api_key=&#x27;sk-unseen-4&#x27;</text>"
           "<text>--api-key&#160;sk-unseen-5</text>")
    assert redact_text(svg, (), "&lt;redacted&gt;") == (
        "<text>#cached-token:&#160;0,&#160;api_key=&#x27;&lt;redacted&gt;&#x27;</text>"
        "<text>--api-key&#160;&lt;redacted&gt;</text>")
    svg = "<text>key&#160;is&#160;s3cr3t&amp;more</text>"
    assert redact_text(svg, {"key is s3cr3t&more"}, "&lt;redacted&gt;") == \
        "<text>&lt;redacted&gt;</text>"


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.toml"
    path.write_text(f"""
[defaults]
kind = "simulated"
host = "127.0.0.1"
time_scale = 0.02
readiness_timeout_s = 60
stop_grace_s = 5

[scenarios.device]
placement = "device"
port = 30999
api_key = "{API_KEY}"
env = {{ HF_TOKEN = "{HF_TOKEN}" }}
""")
    return path


@pytest.mark.timeout(120)
@pytest.mark.slow
async def test_no_secret_leaves_a_live_snapshot(tmp_path: Path) -> None:
    from engram_top.app.headless import render_svg
    from engram_top.live.session import Session, SessionOptions

    session = Session(SessionOptions(
        scenario_file=_scenario_file(tmp_path), start="device", state_dir=tmp_path / "state",
        node_dir=tmp_path / "node", poll_interval=0.3, load=None, free_ports=True))
    try:
        await session.start()
        assert await session.wait_ready(60), session.store.run
        await until(None, lambda: session.store.data("server") is not None
                    and session.store.data("server").max_total_num_tokens is not None, 20,
                    "a /server_info reading")
        # A key echoed where the structured data cannot see it: the events bar on screen.
        session.store.event("warning", f"echo {HF_TOKEN} {API_KEY}")
        svg = await render_svg(session, size=(150, 42))
        assert HF_TOKEN in svg and API_KEY in svg  # the screen shows them before the export
        assert session.run is not None and session.run.alive  # rendering kept the server
        out = write_folder(tmp_path / "snaps", session.store, session.ref, svg=svg)
        # The same server through `engram-top snapshot --attach URL --api-key KEY`.
        from engram_top.cli import commands
        from engram_top.cli.snapshot import take_snapshot
        args = commands.build_parser().parse_args([
            "snapshot", "--attach", session.store.run.url, "--api-key", API_KEY,
            "--after", "0", "--out", str(tmp_path / "attached")])
        assert await take_snapshot(args) == 0
        assert session.run.alive  # attaching never stops a server
    finally:
        await session.close()

    (attached,) = (tmp_path / "attached").iterdir()
    attached_files = read_files(attached)
    for name, data in attached_files.items():
        assert API_KEY.encode() not in data, f"the key in {name} (attach)"
    snap = json.loads(attached_files["snapshot.json"])
    assert snap["source"] == {"kind": "attach", "url": session.store.run.url, "after_s": 0.0}
    assert snap["kv"]["capacity_tokens"] == 11_840_000

    files = read_files(out)
    assert sorted(files) == ["history.png", "screen.svg", "snapshot.json", "summary.md",
                             "timeseries.csv", "timeseries.parquet"]
    for name, data in files.items():
        for secret in (HF_TOKEN, API_KEY):
            assert secret.encode() not in data, f"{secret} in {name}"
    snap = json.loads(files["snapshot.json"])
    device = snap["scenarios"]["scenarios"]["device"]
    assert device["env"] == {"HF_TOKEN": REDACTED}
    assert device["launch_env"]["HF_TOKEN"] == REDACTED
    assert device["api_key"] == REDACTED
    assert f"echo {REDACTED} {REDACTED}" in [e["text"] for e in snap["events"]]
    assert snap["run"]["state"] == "ready" and snap["kv"]["capacity_tokens"] == 11_840_000
    screen = files["screen.svg"].decode()
    assert screen.lstrip().startswith("<svg") and "&lt;redacted&gt;" in screen
    ElementTree.fromstring(screen)  # still well-formed after the scrub
    text = re.sub(r"<[^>]+>", "", screen).replace("&#160;", " ")
    assert "HBM per GPU" in text and "KV pool" in text and "11.84M" in text
