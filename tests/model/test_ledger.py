"""The host-RAM and HBM ledgers: whose memory it is, each line with its source, a figure
nobody reports read as unknown (never 0), and a run's host Δ as the server's share alone.

The end-to-end test runs a real simulated server (host placement) and another tenant on the
same simulated node (a real process holding host RAM and HBM there), and reads the ledgers
on the dashboard (Pilot) and in a snapshot written without a terminal."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import GIB, running, screen_text, until
from scene import scene_store

from collectors.host import ProcBackend, sample
from collectors.readings import GpuProcess, Reading, Status
from engram_top.app.main import EngramTopApp
from engram_top.export import snapshot
from engram_top.live.demo import DemoOptions, DemoSession
from engram_top.model import facts, ledger
from engram_top.seed import reference
from engram_top.sim import state
from scenarios.proc_start import start_of

NOW = 1000.0


# --------------------------------------------------------------------------- collector


def test_the_host_collector_reads_pinned_memory_and_buffers(tmp_path: Path) -> None:
    """VmPin and VmLck summed over the tree; a kernel that gives neither leaves pinned
    unknown (None), not 0. Buffers is kept for the page-cache line."""
    proc = tmp_path / "proc"
    me = proc / str(os.getpid())
    me.mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal: 1048576 kB\nMemFree: 524288 kB\n"
                                  "MemAvailable: 786432 kB\nBuffers: 2048 kB\n"
                                  "Cached: 131072 kB\nShmem: 4096 kB\n")
    (proc / "vmstat").write_text("pswpin 0\npswpout 0\n")
    (me / "status").write_text("VmRSS: 3072 kB\nRssAnon: 2048 kB\nRssFile: 1024 kB\n"
                               "RssShmem: 0 kB\nVmPin: 512 kB\nVmLck: 256 kB\n")
    backend = ProcBackend(proc=proc, sys=tmp_path / "sys")
    data = sample(backend, os.getpid())
    assert data.buffers_bytes == 2048 * 1024
    assert data.server_tree is not None
    assert data.server_tree.pinned_bytes == 768 * 1024
    (me / "status").write_text("VmRSS: 3072 kB\nRssAnon: 2048 kB\n")
    assert sample(backend, os.getpid()).server_tree.pinned_bytes is None


# --------------------------------------------------------------------------- pure


def test_other_tenants_growth_is_not_the_server_s() -> None:
    """The observed +1,806.5 GiB: the node's used memory grew by a tenant's 1,800 GiB while
    the server held 6.6 GiB. Host Δ is the server's 6.6; the tenant is 'other tenants'."""
    store = scene_store()
    run = store.run
    host = store.data("host")
    tree = dataclasses.replace(host.server_tree, rss_anon_bytes=round(6.6 * GIB),
                               rss_shmem_bytes=0)
    used = run.baseline_host_used + round(1806.6 * GIB)
    store.add("host", Reading("host", Status.OK, dataclasses.replace(
        host, used_bytes=used, available_bytes=host.total_bytes - used,
        free_bytes=host.total_bytes - used - 50 * GIB, shmem_bytes=2 * GIB,
        server_tree=tree), at=NOW))
    book = ledger.host_ledger(store)
    assert book is not None
    assert ledger.run_server_delta_bytes(store, run) == pytest.approx(6.6 * GIB)
    assert facts.run_host_delta_bytes(store, run) == pytest.approx(6.6 * GIB)
    assert ledger.others_delta_bytes(store) == pytest.approx(1800.0 * GIB)
    assert book.line("server anonymous").bytes == pytest.approx(6.6 * GIB)
    assert book.line("/dev/shm, tmpfs").bytes == 2 * GIB
    # in use (total - free) = used + 50 GiB of cache; cache = Cached - Shmem = 48 GiB.
    assert book.line("page cache").bytes == 48 * GIB
    tenants = book.line("other tenants")
    assert tenants.server is False
    assert tenants.bytes == pytest.approx(used + 50 * GIB - 6.6 * GIB - 2 * GIB - 48 * GIB,
                                          abs=2)
    assert book.server_bytes == pytest.approx(6.6 * GIB)
    # The lines split what is in use, nothing left over.
    assert sum(ln.bytes for ln in book.lines) == pytest.approx(book.in_use_bytes, abs=2)


def test_a_dead_server_s_kept_figure_is_never_set_against_the_others() -> None:
    """A server killed after ready held +211.4 GiB; the node's memory fell back with it.
    The others' growth is the node's, not the node's less a figure of a server that is
    gone (which read "others -211.4"); the Δ row says the server ended."""
    from engram_top.app.panels.host import delta_row
    from scenarios.runstate import RunState
    store = scene_store()
    run = store.run
    host = store.data("host")
    run.results = dataclasses.replace(run.results, host_delta_gib=211.4)
    run.state = RunState.EXITED
    used = run.baseline_host_used + round(3.0 * GIB)  # others took 3 GiB meanwhile
    store.add("host", Reading("host", Status.OK, dataclasses.replace(
        host, used_bytes=used, available_bytes=host.total_bytes - used, server_tree=None),
        at=NOW))
    assert ledger.others_delta_bytes(store) == pytest.approx(3.0 * GIB)
    assert delta_row(store).plain.split(None, 1)[1] == \
        "server exited (had +211.4 GiB) · others +3.0"


def test_a_zero_kv_gauge_is_unknown_and_the_rest_unexplained() -> None:
    """SGLang's 0 kv_cache_memory_usage_gb on DeepSeek-V4 pools reads as unknown, not 0;
    the HBM the lines do not explain is shown, never hidden; another process is named."""
    store = scene_store()
    server = store.data("server")
    ranks = {r: {**v, "kv_cache_gb": 0.0} for r, v in server.ranks.items()}
    store.add("server", Reading("server", Status.OK, dataclasses.replace(
        server, ranks=ranks, kv_cache_gb=0.0), at=NOW))
    store.run.startup = dataclasses.replace(store.run.startup, ranks={})
    books = ledger.hbm_ledger(store)
    assert [b.index for b in books] == [0, 1, 2, 3]
    gpu0 = books[0]
    kv = gpu0.line("KV pool")
    assert kv is not None and kv.bytes is None and "known wrong" in kv.source
    weights = gpu0.line("weights")
    assert weights.bytes == pytest.approx(ranks[0]["weight_gb"] * GIB)
    other = next(ln for ln in gpu0.lines if not ln.server)
    assert other.name == "python (pid 999)" and other.bytes == 512 * 1024**2
    known = sum(ln.bytes or 0 for ln in gpu0.lines)
    assert gpu0.unexplained_bytes == pytest.approx(gpu0.used_bytes - known)
    # A process NVML cannot size (None) is unknown too, not 0.
    gpu1 = books[1]
    assert next(ln for ln in gpu1.lines if not ln.server).bytes is None


def test_nvml_pids_of_another_pid_namespace_are_the_server_s_not_a_tenant() -> None:
    """The dashboard in the server's container: the driver answers with the host's pids,
    which this /proc lacks. On a GPU the server's metrics name, those are the server's (its
    own memory is not counted twice, nor called a stranger's); a tenant this host sees is
    still another's; on a GPU the server does not use, an unseen pid stays another's."""
    from engram_top.alerts.pressure import hbm_cause
    store = scene_store()
    gpus = store.data("gpu")
    devices = []
    for d in gpus.devices:
        server_mem = round(140 * GIB)
        devices.append(dataclasses.replace(d, processes=(
            GpuProcess(900_000 + d.index, server_mem, "", seen=False),
            GpuProcess(999, 2 * GIB, "python", seen=True))))
    store.add("gpu", Reading("gpu", Status.OK, dataclasses.replace(
        gpus, devices=tuple(devices)), at=NOW))
    server = store.data("server")
    ranks = {r: v for r, v in server.ranks.items() if r != 3}  # GPU 3: not the server's
    store.add("server", Reading("server", Status.OK, dataclasses.replace(server, ranks=ranks),
                                at=NOW))
    store.run.startup = dataclasses.replace(store.run.startup, ranks={})
    books = ledger.hbm_ledger(store)
    gpu0 = books[0]
    assert [ln.name for ln in gpu0.lines if not ln.server] == ["python (pid 999)"]
    assert gpu0.server_bytes == round(140 * GIB)
    assert gpu0.note == ("NVML's pid 900000 not on this host (another PID namespace: a "
                         "container): taken as the server's")
    known = sum(ln.bytes or 0 for ln in gpu0.lines)
    assert gpu0.unexplained_bytes == pytest.approx(gpu0.used_bytes - known)
    assert gpu0.to_json()["note"] == gpu0.note
    from engram_top.app.panels.hbm import hbm_rows
    said = [text.plain for _, text in hbm_rows(store, cols=120)]
    assert "GPUs 0,1,2: NVML's pids are not on this host (another PID namespace): taken as " \
        "the server's" in said
    assert "GPUs 0,1,2: pids of another PID namespace, taken as the server's" in \
        [text.plain for _, text in hbm_rows(store, cols=70)]
    views = facts.gpu_facts(store)
    assert views[0].server_bytes == round(140 * GIB)
    assert [(p.pid, p.server) for p in views[0].processes] == [(900_000, True), (999, False)]
    # GPU 3, where no rank of the server runs: the unseen pid is another tenant's.
    gpu3 = books[3]
    assert gpu3.note == "" and gpu3.server_bytes == 0
    assert "another PID namespace's process (pid 900003)" in [ln.name for ln in gpu3.lines]
    cause = hbm_cause(store)
    assert cause[0] == "python (pid 999, not the server's) holds 2.0 GiB, the server 140.0 GiB"
    assert cause[3].startswith("a process of another PID namespace (pid 900003, not the "
                               "server's) holds 140.0 GiB")


# --------------------------------------------------------------------------- end to end


def tenant(node_dir: Path, pid: int, host_gib: float, gpu: int, gpu_gib: float) -> None:
    """Another tenant on the simulated node: a live process holding host RAM and HBM."""
    state.procs_dir(node_dir).mkdir(parents=True, exist_ok=True)
    state.write_proc(node_dir, state.ProcState(
        pid=pid, started=start_of(pid) or 0.0, name="tenant",
        gpu_bytes={gpu: round(gpu_gib * GIB)}, host_anon_bytes=round(host_gib * GIB)))


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_the_ledgers_on_a_simulated_node_with_another_tenant(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    session = DemoSession(DemoOptions(placement="host", time_scale=0.03, node_dir=node_dir,
                                      run_dir=tmp_path / "runs", poll_interval=0.5,
                                      load=None))
    app = EngramTopApp(session)
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    with running(sleeper) as other:
        async with app.run_test(size=(100, 30)) as pilot:
            store = session.store
            await until(pilot, lambda: store.run is not None and store.run.state == "ready",
                        90, "the server to be ready")
            # The tenant arrives after the launch: the node grows by 300 GiB, not the server.
            tenant(node_dir, other.pid, 300.0, 1, 20.0)
            await until(pilot, lambda: "others +300.0" in screen_text(app), 15,
                        "the Host RAM panel's other tenants' growth")
            text = screen_text(app)
            # The seed's host placement: 195.4 GiB since launch, the server's alone; the HBM
            # panel's ledger row for GPU 1. Both as the README quotes them (its example).
            rows = [" ".join(line.split()) for line in text.splitlines()]
            for quoted in ("Δ server +195.4 GiB · others +300.0",
                           f"GPU1 tenant (pid {other.pid}) 20.0 · ? 1.6"):
                assert any(" ".join(quoted.split()) in row for row in rows), (quoted, text)
            book = ledger.host_ledger(store)
            tables = book.line("Engram tables")
            assert tables is not None and tables.server
            assert tables.bytes == pytest.approx(187.37 * GIB, rel=1e-3)
            assert "layout" not in tables.source and "shared x1" in tables.source
            assert book.line("other tenants").bytes >= 300 * GIB

            # Without a terminal: the snapshot's JSON and summary.md say the same.
            folder = snapshot.write_folder(tmp_path / "snaps", store, reference.default(),
                                           svg=None)
            data = json.loads((folder / "snapshot.json").read_text())
            host = data["host_ledger"]
            assert host["server_delta_bytes"] == pytest.approx(195.4 * GIB, rel=2e-3)
            assert host["others_delta_bytes"] == pytest.approx(300 * GIB, rel=1e-3)
            names = {ln["name"]: ln for ln in host["lines"]}
            assert names["Engram tables"]["bytes"] == pytest.approx(187.37 * GIB, rel=1e-3)
            assert names["other tenants"]["server"] is False
            assert set(host["per_node"]) == {"0", "1"}
            gpu1 = data["hbm_ledger"][1]
            other_line = next(ln for ln in gpu1["lines"] if not ln["server"])
            assert other_line["name"] == f"tenant (pid {other.pid})"
            assert other_line["bytes"] == 20 * GIB
            kv = next(ln for ln in gpu1["lines"] if ln["name"] == "KV pool")
            assert kv["bytes"] > 0 and kv["source"] == "metrics"
            known = sum(ln["bytes"] or 0 for ln in gpu1["lines"])
            assert gpu1["unexplained_bytes"] == pytest.approx(gpu1["used_bytes"] - known)
            md = (folder / "summary.md").read_text()
            assert "the server +195.4 GiB since launch (others +300.0 GiB)" in md
            assert f"tenant (pid {other.pid}) 20.0 GiB (NVML processes)" in md
            await pilot.press("q")


def test_an_attached_servers_ranks_are_not_other_tenants_while_its_process_is_looked_for() -> None:
    from collectors.source import SourceName
    from engram_top.model.ledger import hbm_ledger
    store = scene_store()
    host = store.data(SourceName.HOST)
    store.add(SourceName.HOST, Reading("host", Status.OK, dataclasses.replace(
        host, server_tree=None), at=NOW))
    assert store.run is not None
    store.run.finding_processes = True  # attach's first second: its port's owner unknown
    gpu0 = hbm_ledger(store)[0]
    # Its own weights, KV pool and graphs; no process named as another tenant beside them.
    assert [ln.name for ln in gpu0.lines] == ["weights", "KV pool", "CUDA graphs"]
    assert gpu0.note == ("the server's processes not found on this host yet: other "
                         "processes not told apart")
    store.run.finding_processes = False  # looked for and not found: what NVML says, named
    gpu0 = hbm_ledger(store)[0]
    assert any(ln.name.startswith("python (pid ") for ln in gpu0.lines)
    assert gpu0.note == ""


def test_a_killed_servers_last_figures_are_not_set_against_nvml_now() -> None:
    from collectors.source import SourceName
    from engram_top.model.ledger import hbm_ledger
    store = scene_store()
    gpus = store.data(SourceName.GPU)
    # Killed: its processes gone from every GPU (the neighbour's stay), NVML's used with
    # them; the server no longer answers, its last good figures still in the store.
    freed = dataclasses.replace(gpus, devices=tuple(dataclasses.replace(
        d, processes=tuple(p for p in d.processes if p.name == "python"),
        used_bytes=sum(p.used_bytes or 0 for p in d.processes if p.name == "python"))
        for d in gpus.devices))
    store.add(SourceName.GPU, Reading("nvml", Status.OK, freed, at=NOW))
    store.add(SourceName.SERVER, Reading("sglang", Status.ERROR, None, at=NOW,
                                         message="no server at http://127.0.0.1:30000"))
    host = store.data(SourceName.HOST)
    store.add(SourceName.HOST, Reading("host", Status.OK, dataclasses.replace(
        host, server_tree=None), at=NOW))
    gpu0 = hbm_ledger(store)[0]
    # What NVML says now, the neighbour named; nothing of the dead server, nothing negative.
    assert [ln.name for ln in gpu0.lines] == ["python (pid 999)"]
    assert gpu0.unexplained_bytes == 0
    assert gpu0.note == "the server is not answering and holds nothing here: its last " \
                        "figures left out"
