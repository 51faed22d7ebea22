"""`engram-top agent`: the node's figures in Prometheus' text format, scraped by a real
Prometheus; its recording rotated and kept within its retention; SIGTERM ends it at once,
exit 0, the server it watched still running. The exposition and the rotation are checked
in-process against figures worked out by hand; the agent itself as a user runs it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from helpers import GIB, SimServer, installed_script, running, wait_until
from prometheus_client.parser import text_string_to_metric_families
from scene import NOW, SERVER_PID, scene_store

from collectors.readings import Reading, Status
from collectors.source import SourceName
from engram_top.cli.ranges import listen_address
from engram_top.export import prometheus_text
from engram_top.export.prometheus_text import AgentHealth, Family, render
from engram_top.model.store import RunStore
from engram_top.record.file_format import RecordingError
from engram_top.record.reader import read_recording
from engram_top.record.rotation import Retention, RotatingRecording
from scenarios.prometheus import Prometheus, Target, free_port

HEALTH = AgentHealth(recording=True, recording_bytes=1234, started_wall=1_795_000_000.0)


def test_families_follow_prometheus_conventions_and_escape_their_labels() -> None:
    fam = Family("hbm_ledger_bytes", "GPU memory by ledger line.")
    fam.add(127_817_000_000, gpu="0", line='weights "fp8"\\ \n')
    fam.add(float("nan"), gpu="1", line="unknown")  # nobody reports it: left out, never 0
    fam.add(None, gpu="2", line="unknown")
    text = render([fam, Family("empty_bytes", "nothing")])
    assert text == ("# HELP engram_top_hbm_ledger_bytes GPU memory by ledger line.\n"
                    "# TYPE engram_top_hbm_ledger_bytes gauge\n"
                    'engram_top_hbm_ledger_bytes{gpu="0",line="weights \\"fp8\\"\\\\ \\n"} '
                    "127817000000\n")
    (parsed,) = text_string_to_metric_families(text)  # prometheus_client reads it back
    assert parsed.samples[0].labels["line"] == 'weights "fp8"\\ \n'


def test_an_empty_store_serves_the_agents_own_figures_only() -> None:
    store = RunStore()
    store.add(SourceName.SERVER, Reading("sglang", Status.ERROR, None, at=5.0,
                                         message="no server at http://127.0.0.1:1"))
    text = render(prometheus_text.node_families(store, HEALTH, now=10.0))
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names == {"engram_top_source_up", "engram_top_recording_up",
                     "engram_top_recording_bytes", "engram_top_agent_start_time_seconds"}
    assert 'engram_top_source_up{source="server"} 0' in text


def test_the_ledgers_of_a_filled_store_by_gpu_numa_node_and_line() -> None:
    # The scene: host-prefetch on 4 GPUs, a python process of 512 MiB on GPUs 0 and 2.
    text = render(prometheus_text.node_families(scene_store(), HEALTH, NOW))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    hbm = {(s.labels["gpu"], s.labels["line"]): s.value
           for s in fams["engram_top_hbm_ledger_bytes"].samples}
    assert hbm[("0", "weights")] == pytest.approx(72.201 * GIB)
    # Another process by its name alone (a pid label would be a new series each restart).
    assert hbm[("0", "python")] == 512 * 1024**2 and ("1", "python") not in hbm
    assert not any("pid" in line for _, line in hbm) and str(SERVER_PID) not in text
    (capacity,) = fams["engram_top_kv_capacity_tokens"].samples
    assert capacity.value == 42_700_288
    host = {s.labels["line"] for s in fams["engram_top_host_ledger_bytes"].samples}
    assert {"Engram tables", "page cache", "other tenants"} <= host
    (info,) = fams["engram_top_server_info"].samples
    assert info.labels == {"scenario": "host-prefetch", "placement": "host-prefetch",
                           "state": "ready"}


def test_a_process_in_a_container_is_still_a_line_by_its_name_alone() -> None:
    """The ledger names it "python (pid N, docker 3f2a1b4c5d6e)"; its label is "python": a
    container id would be a new series with each container, as a pid would each restart."""
    store = scene_store()
    gpu = store.latest[SourceName.GPU]
    devices = tuple(replace(d, processes=tuple(replace(p, container="docker 3f2a1b4c5d6e")
                                               for p in d.processes)) for d in gpu.data.devices)
    store.add(SourceName.GPU, replace(gpu, data=replace(gpu.data, devices=devices)))
    text = render(prometheus_text.node_families(store, HEALTH, NOW))
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    lines = {s.labels["line"] for s in fams["engram_top_hbm_ledger_bytes"].samples}
    assert "python" in lines and "docker" not in text and "pid" not in text


def test_the_engram_estimate_per_gpu_where_hicache_says_its_load_back() -> None:
    from scene import hicache_store
    fams = {f.name: f for f in text_string_to_metric_families(render(
        prometheus_text.node_families(hicache_store(), HEALTH, NOW)))}
    est = {s.labels["gpu"]: s.value
           for s in fams["engram_top_engram_rx_estimate_bytes_per_second"].samples}
    # Receive less the rank's load-back: 2.0e9 - 1.5e9, none below 0, 4.2e6 - 1.0e6.
    assert est == {"0": 5e8, "1": 5e8, "2": 0.0, "3": 3.2e6}
    # HiCache off: no estimate at all (the receive is not called Engram's), the receive is.
    text = render(prometheus_text.node_families(scene_store(), HEALTH, NOW))
    assert "engram_rx_estimate" not in text and "engram_top_gpu_pcie_rx_bytes_per_second{" in text


def test_each_scenario_of_the_file_is_fitted_against_the_node_in_place_of_the_server() -> None:
    from engram_top.export.fit_series import fit_families
    from scenarios.fit import node_free, predict
    from scenarios.scenario_file import load
    store = scene_store()  # host-prefetch serving, 2,008.4 GiB available
    scenarios = list(load(Path(__file__).parents[2] / "scenarios" / "demo.toml")
                     .scenarios.values())
    fams = {f.name: f for f in text_string_to_metric_families(render(
        fit_families(store, scenarios)))}
    levels = {s.labels["scenario"]: s.value for s in fams["engram_top_fit_level"].samples}
    assert levels == {"device": 0, "host": 0, "host-prefetch": 0}
    room = {(s.labels["placement"], s.labels["where"]): s.value
            for s in fams["engram_top_fit_headroom_bytes"].samples}
    assert set(room) == {(p, w) for p in ("device", "host", "host-prefetch")
                         for w in ("GPU 0", "GPU 1", "GPU 2", "GPU 3", "host")}
    # The host: MemAvailable with the serving server's own memory given back, less each
    # placement's need (the tables, their staging, the server's processes): the check's own.
    node = node_free(store.data(SourceName.GPU), store.data(SourceName.HOST),
                     server_pids={SERVER_PID})
    for sc in scenarios:
        (host,) = [ln for ln in predict(sc, node).lines if ln.where == "host"]
        assert room[(sc.placement, "host")] == host.free_bytes - host.need_bytes
    # The tables in host memory need 187.4 GiB more of it than the device placement does.
    assert room[("device", "host")] - room[("host", "host")] == pytest.approx(
        188.9 * GIB, abs=0.1 * GIB)
    # A host with 150 GiB available once the serving server's memory is given back: the
    # placements with their tables there do not fit.
    host = store.data(SourceName.HOST)
    own = host.server_tree.rss_anon_bytes + host.server_tree.rss_shmem_bytes
    store.add(SourceName.HOST, Reading("host", Status.OK, replace(
        host, available_bytes=150 * GIB - own), at=NOW))
    fams = {f.name: f for f in text_string_to_metric_families(render(
        fit_families(store, scenarios)))}
    levels = {s.labels["scenario"]: s.value for s in fams["engram_top_fit_level"].samples}
    assert levels == {"device": 0, "host": 2, "host-prefetch": 2}
    # No scenario file: no fit families at all.
    assert render(fit_families(store, [])) == "\n"


def test_retention_reads_an_age_a_size_or_both() -> None:
    assert Retention.parse("7d,1GB") == Retention(7 * 86400.0, 10**9)
    assert Retention.parse("90m") == Retention(5400.0, None)
    assert Retention.parse("2GiB") == Retention(None, 2 * 2**30)
    for bad in ("7 days", "0h", "-1GB", "GB", "", "99999d", "9" * 400 + "GB"):
        with pytest.raises(ValueError):
            Retention.parse(bad)
    assert listen_address("[::1]:9478") == ("::1", 9478)
    for bad in ("9478", "host:", "host:70000", "host:９"):
        with pytest.raises(Exception, match="HOST:PORT"):
            listen_address(bad)


def test_recordings_rotate_by_size_and_the_oldest_go_past_the_retention(
        tmp_path: Path) -> None:
    store = RunStore()
    clock = [0.0]
    rec = RotatingRecording(store, tmp_path, Retention(None, 30_000), file_bytes=10_000,
                            file_age_s=3600.0, clock=lambda: clock[0])
    rec.start()
    first = rec.current.path if rec.current else None
    for i in range(400):  # events of ~150 bytes each, a check every 20
        store.event("info", f"event {i:04d} " + "x" * 100)
        if i % 20 == 19:
            os.utime(rec.current.path if rec.current else tmp_path, None)
            rec.check()
    rec.close()
    files = rec.files()
    assert first not in files  # the oldest went
    assert len(files) >= 2 and rec.kept_bytes() <= 30_000 + 10_000 + 3_000
    # Every file kept is a recording of its own, readable whole.
    events = [p for f in files for _, kind, p in read_recording(f).records if kind == "event"]
    assert any("event 0399" in str(e) for e in events)
    # Past its age, a file goes too; the current one never does.
    clock[0] = 4000.0
    rec2 = RotatingRecording(store, tmp_path, Retention(1.0, None))
    for f in files:
        os.utime(f, (time.time() - 10, time.time() - 10))
    rec2.start()
    assert rec2.files() == [rec2.current.path] if rec2.current else False
    rec2.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_agent_serves_a_real_prometheus_and_ends_on_sigterm(sim_device: SimServer,
                                                                 tmp_path: Path) -> None:
    port = free_port()
    # Its recordings in the state folder's agent/, where a later attach looks for them.
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [str(installed_script()), "agent", sim_device.url, "--node-dir",
            str(sim_device.node_dir), "--listen", f"127.0.0.1:{port}", "--retain", "1h,50MB",
            "--scenarios", str(Path(__file__).parents[2] / "scenarios" / "demo.toml")]
    url = f"http://127.0.0.1:{port}/metrics"
    with running(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                 start_new_session=True, env=env) as agent:
        def scraped() -> str:
            try:
                text = httpx.get(url, timeout=5).text
            except httpx.HTTPError:
                return ""
            return text if all(f"engram_top_{name}" in text for name in (
                "kv_capacity_tokens", "host_ledger_bytes", "fit_level")) else ""

        # The fit check's once the server's own processes are told apart from others'.
        wait_until(scraped, 90, "the agent's /metrics with the KV pool, the host ledger and "
                   "the fit check")
        families = {f.name: f for f in text_string_to_metric_families(scraped())}
        # The device placement's figures, as the seed gives them.
        (capacity,) = families["engram_top_kv_capacity_tokens"].samples
        assert capacity.value == 11_840_000
        weights = [s for s in families["engram_top_hbm_ledger_bytes"].samples
                   if s.labels["line"].startswith("weights")]
        assert sorted(s.labels["gpu"] for s in weights) == ["0", "1", "2", "3"]
        assert all(abs(s.value - 119.043 * GIB) < 0.01 * GIB for s in weights), weights
        assert all(f.documentation for f in families.values())
        # Each placement of the file, fitted in place of the server it watches.
        assert {(s.labels["scenario"], s.value) for s in families[
            "engram_top_fit_level"].samples} == {("device", 0), ("host", 0),
                                                  ("host-prefetch", 0)}
        # A real Prometheus scrapes it: the KV capacity, by PromQL.
        prom = Prometheus(tmp_path / "prom", [Target("engram-top", f"127.0.0.1:{port}")],
                          scrape_s=1.0)
        prom.start()
        try:
            asyncio.run(prom.wait_ready())
            asyncio.run(prom.wait_scraped(1))
            answer = httpx.get(f"{prom.url}/api/v1/query",
                               params={"query": "engram_top_kv_capacity_tokens"},
                               timeout=10).json()
            (series,) = answer["data"]["result"]
            assert float(series["value"][1]) == 11_840_000
            # Every query of the Grafana dashboard in the repository returns data.
            board = json.loads((Path(__file__).parents[2] / "scenarios" /
                                "grafana-engram-top.json").read_text())
            exprs = [t["expr"].replace("$node", ".*") for panel in board["panels"]
                     for t in panel["targets"]]
            assert len(exprs) >= 11
            empty = [e for e in exprs if not httpx.get(
                f"{prom.url}/api/v1/query", params={"query": e},
                timeout=10).json()["data"]["result"]]
            assert not empty, f"dashboard queries without data: {empty}"
        finally:
            prom.stop_now()
        # Its /health: the verdict first, what it watches and where it records; the
        # command exits by that verdict.
        page = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert page.status_code == 200
        lines = page.text.splitlines()
        assert lines[0] in ("engram-top agent: ok", "engram-top agent: warning",
                            "engram-top agent: error"), page.text
        assert lines[1] == f"watching: {sim_device.url} (attached)"
        assert lines[2] == f"recording: {tmp_path / 'state' / 'engram-top' / 'agent'}"
        checked = subprocess.run([str(installed_script()), "health", f"127.0.0.1:{port}"],
                                 capture_output=True, text=True, timeout=30)
        worst = checked.stdout.splitlines()[0].removeprefix("engram-top agent: ")
        assert checked.returncode == {"ok": 0, "warning": 3, "error": 4}[worst], checked
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=10)
        assert agent.returncode == 0, err
        assert "stopped by SIGTERM" in err and "Traceback" not in err
    # It never stops what it watched; its recording is a recording, read back whole.
    assert httpx.get(f"{sim_device.url}/health", timeout=5).status_code == 200
    (path,) = sorted((tmp_path / "state" / "engram-top" / "agent").glob("agent-*.jsonl"))
    rec = read_recording(path)
    assert any(kind == "reading" for _, kind, _ in rec.records)
    assert json.loads(path.read_text().splitlines()[-1])["type"] == "end"
    # A snapshot of the same server later starts with the agent's history behind it.
    done = subprocess.run([str(installed_script()), "snapshot", "--attach", sim_device.url,
                           "--node-dir", str(sim_device.node_dir), "--after", "1", "--out",
                           str(tmp_path / "snap")], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    (folder,) = (tmp_path / "snap").iterdir()
    snap = json.loads((folder / "snapshot.json").read_text())
    assert any(e["text"].startswith("history from the agent's recording since ")
               for e in snap["events"]), [e["text"] for e in snap["events"]]


@pytest.mark.slow
def test_the_agent_says_a_taken_port_and_starts_nothing(tmp_path: Path) -> None:
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([str(installed_script()), "agent", "http://127.0.0.1:9",
                               "--listen", f"127.0.0.1:{port}", "--record-dir",
                               str(tmp_path / "rec")], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert not (tmp_path / "rec").exists()  # nothing recorded, nothing started


def test_a_scenario_file_with_a_typo_is_refused_with_its_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from engram_top.cli.commands import main
    bad = tmp_path / "s.toml"
    bad.write_text('[scenarios.device]\nplacment = "device"\n')
    code = main(["agent", "http://127.0.0.1:9", "--scenarios", str(bad), "--record-dir",
                 str(tmp_path / "rec")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"engram-top agent: --scenarios: {bad}:2:"), err
    assert "placment" in err and not (tmp_path / "rec").exists()


def test_the_systemd_unit_starts_the_agent_with_options_it_takes() -> None:
    import shlex

    from engram_top.cli.parser import build_parser
    unit = (Path(__file__).parents[2] / "scenarios" / "engram-top-agent.service").read_text()
    (line,) = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    argv = shlex.split(line.removeprefix("ExecStart="))
    assert Path(argv[0]).name == "engram-top"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "agent" and args.listen == ("127.0.0.1", 9478)
    assert args.retain == Retention(7 * 86400.0, 10**9)
    assert "KillSignal=SIGTERM" in unit and "Restart=on-failure" in unit


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_agent_leaves_its_recording_readable_to_its_last_flush(
        sim_device: SimServer, tmp_path: Path) -> None:
    folder = tmp_path / "rec"
    argv = [str(installed_script()), "agent", sim_device.url, "--node-dir",
            str(sim_device.node_dir), "--listen", f"127.0.0.1:{free_port()}", "--record-dir",
            str(folder)]
    # Killed, it cannot remove its temporary folder: the test's own, not the system's.
    env = {**os.environ, "TMPDIR": str(tmp_path)}

    def readings() -> int:
        files = sorted(folder.glob("agent-*.jsonl"))
        try:
            rec = read_recording(files[0])
        except (IndexError, RecordingError):  # not there yet, or nothing flushed yet
            return 0
        return sum(1 for _, kind, _ in rec.records if kind == "reading")

    with running(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                 start_new_session=True) as agent:
        wait_until(lambda: readings() >= 6, 60, "the agent's recording of a few polls")
        agent.kill()  # SIGKILL: no cleanup of its own runs
        agent.wait(10)
    (path,) = folder.glob("agent-*.jsonl")
    rec = read_recording(path)  # up to the last flush, whole lines only
    assert sum(1 for _, kind, _ in rec.records if kind == "reading") >= 6
    assert json.loads(path.read_text().splitlines()[0])["type"] == "header"


def test_an_agents_recording_goes_behind_a_later_attach_of_the_same_server(
        tmp_path: Path) -> None:
    from collectors.readings import ServerData
    from collectors.source import SourceKey
    from engram_top.model.store import RunFacts, SeriesKey
    from engram_top.record import history
    from engram_top.record.recorder import Recorder

    def agent_file(url: str, name: str, usage: list[float]) -> None:
        store = RunStore()
        rec = Recorder(store, tmp_path / name).start()
        store.set_run(RunFacts(scenario=url, placement="device", node="n", time_scale=1.0,
                               launched_wall=time.time() - 60, launched_at=time.monotonic() - 60,
                               state="ready", ready_at=time.monotonic() - 60, url=url,
                               server_node=url))
        for i, u in enumerate(usage):  # a reading 40, 30, 20 s ago
            store.add(SourceKey(url, "server"), Reading(
                "sglang", Status.OK, ServerData(url=url, healthy=True, token_usage=u),
                at=time.monotonic() - 40 + 10 * i))
        rec.close()

    url = "http://127.0.0.1:30000"
    agent_file(url, "agent-1.jsonl", [0.25, 0.5, 0.75])
    agent_file("http://127.0.0.1:30001", "agent-2.jsonl", [0.9])  # another server's
    store = RunStore()
    since = history.put_behind(store, history.recorded(tmp_path, [url]))
    series = store.series[SeriesKey(url, "server", "token_usage")]
    points = series.points()
    assert [v for _, v in points] == [0.25, 0.5, 0.75]  # this server's alone, in order
    # On this process's clock: 40 s ago, give or take the file's wall-clock rounding.
    assert abs(points[0][0] - (time.monotonic() - 40)) < 2
    assert since is not None and abs(since - (time.time() - 40)) < 2
    # An hour's window: a file last written before it is passed over.
    old = time.time() - 7200
    os.utime(tmp_path / "agent-1.jsonl", (old, old))
    assert history.recorded(tmp_path, [url]) == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_agent_outlives_a_killed_server_and_records_its_death(tmp_path: Path) -> None:
    from helpers import ServerSpec
    server = SimServer("dies", ServerSpec("device", 0.02), tmp_path)
    folder, port = tmp_path / "rec", free_port()
    url = f"http://127.0.0.1:{port}/metrics"

    def page() -> str:
        try:
            return httpx.get(url, timeout=5).text
        except httpx.HTTPError:
            return ""
    try:
        server.wait_ready()
        argv = [str(installed_script()), "agent", server.url, "--node-dir",
                str(server.node_dir), "--listen", f"127.0.0.1:{port}", "--record-dir",
                str(folder)]
        with running(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     start_new_session=True) as agent:
            wait_until(lambda: "engram_top_kv_capacity_tokens " in page(), 90,
                       "the agent's figures of the live server")
            os.killpg(server.pid, signal.SIGKILL)  # the whole server at once, no goodbye
            # The agent goes on: its /metrics says the server is gone, and why.
            wait_until(lambda: 'alert="server-gone"' in page(), 60,
                       "the server-gone alert on the agent's /metrics")
            # Its death, classified as far as an attached server's can be: no exit status
            # to read (not the agent's child), nothing in the kernel's records.
            wait_until(lambda: 'engram_top_server_death_timestamp_seconds{scenario="'
                       f'{server.url}",kind="unknown"}}' in page(), 30,
                       "the death on the agent's /metrics")
            text = page()
            assert any(line.startswith('engram_top_source_up{source="') and "server" in line
                       and line.endswith(" 0") for line in text.splitlines()), text
            agent.send_signal(signal.SIGTERM)
            out, err = agent.communicate(timeout=10)
        assert agent.returncode == 0, err
        assert "alert raised: " in err or "server-gone" in err or "not answering" in err, err
    finally:
        server.stop(grace=5.0)
    # The recording holds the server's last figures, then its death, in order.
    (path,) = folder.glob("agent-*.jsonl")
    records = read_recording(path).records
    readings = [(t, p) for t, kind, p in records if kind == "reading"
                and str(p[0]).endswith("server")]
    statuses = [getattr(r, "status", None) for _, (_, r) in readings]
    ok = [i for i, s in enumerate(statuses) if s is Status.OK]
    assert ok and any(s is Status.ERROR for s in statuses[ok[-1] + 1:]), statuses[-5:]
    said = [getattr(p, "text", "") for _, kind, p in records if kind == "event"]
    assert any(t.startswith(f"server {server.url} not answering since ") for t in said), said
    assert any(t.startswith(f"{server.url} died: ended, cause unknown. exit status not known")
               for t in said), said
    # `why` on the agent's folder reads it back.
    why = subprocess.run([str(installed_script()), "why", str(folder)], capture_output=True,
                         text=True, timeout=60)
    assert why.returncode == 0, why.stderr
    assert f"- **{server.url}** died: ended, cause unknown (`unknown`)" in why.stdout
