"""A server in a container: its memory cgroup read from a test /proc and cgroup tree (v2's
unified hierarchy, v1's memory controller, a hybrid host that lists both), the fit check held
to the cgroup's limit where that leaves less than the host has, and a death the cgroup's own
OOM count explains where the kernel log cannot be read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fit_nodes import demo, free_of, line, make_node

from collectors import cgroup
from collectors.host import ProcBackend, sample
from collectors.readings import CgroupMemory, Reading, Status
from engram_top.model.death import DeathKind, Evidence, classify
from scenarios import fit

GIB = 1024**3
SCOPE = "/system.slice/docker-ab12.scope"


def proc_with(tmp_path: Path, pid: int, lines: str) -> Path:
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(lines)
    (proc / "meminfo").write_text("MemTotal: 2147483648 kB\nMemAvailable: 2000000000 kB\n"
                                  "MemFree: 1900000000 kB\n")
    (proc / "vmstat").write_text("pswpin 0\npswpout 0\noom_kill 3\n")
    return proc


def v2_cgroup(root: Path, path: str, limit: str, current: int, oom_kill: int = 0) -> None:
    folder = root / path.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "memory.max").write_text(limit + "\n")
    (folder / "memory.current").write_text(f"{current}\n")
    (folder / "memory.stat").write_text(f"anon {current - 3 * GIB}\nfile {3 * GIB}\n"
                                        f"kernel 1\nshmem {GIB}\n")
    (folder / "memory.events").write_text(f"low 0\nhigh 0\nmax 12\noom 1\noom_kill {oom_kill}\n")


def test_v2_v1_and_a_hybrid_host_each_name_the_memory_cgroup(tmp_path: Path) -> None:
    proc = proc_with(tmp_path, 10, f"0::{SCOPE}\n")
    assert cgroup.cgroup_of(10, proc) == (2, SCOPE)
    (proc / "11").mkdir()
    (proc / "11" / "cgroup").write_text("12:pids:/docker/ab12\n4:memory:/docker/ab12\n0::/\n")
    assert cgroup.cgroup_of(11, proc) == (1, "/docker/ab12")  # hybrid: memory is v1's
    (proc / "12").mkdir()
    (proc / "12" / "cgroup").write_text("0::/\n")
    assert cgroup.cgroup_of(12, proc) is None  # the root: the host itself, no container
    assert cgroup.cgroup_of(99, proc) is None  # gone


def test_v2_figures_and_what_the_limit_leaves(tmp_path: Path) -> None:
    root = tmp_path / "sys" / "fs" / "cgroup"
    v2_cgroup(root, SCOPE, str(256 * GIB), 250 * GIB, oom_kill=2)
    cg = cgroup.read_memory(2, SCOPE, root)
    assert cg == CgroupMemory(SCOPE, 2, 256 * GIB, 250 * GIB, 247 * GIB, 3 * GIB, GIB, 2)
    # The limit less what it holds, its page cache (file less shmem, 2 GiB) reclaimable.
    assert cg.available_bytes == 8 * GIB
    v2_cgroup(root, "/unlimited", "max", 10 * GIB)
    free = cgroup.read_memory(2, "/unlimited", root)
    assert free is not None and free.limit_bytes is None and free.available_bytes is None
    assert cgroup.read_memory(2, "/gone", root) is None


def test_v1_figures_with_its_unlimited_sentinel(tmp_path: Path) -> None:
    folder = tmp_path / "cg" / "memory" / "docker" / "ab12"
    folder.mkdir(parents=True)
    (folder / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (folder / "memory.usage_in_bytes").write_text(f"{5 * GIB}\n")
    (folder / "memory.stat").write_text(f"cache {GIB}\nrss {4 * GIB}\nshmem 0\n")
    (folder / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    cg = cgroup.read_memory(1, "/docker/ab12", tmp_path / "cg")
    assert cg == CgroupMemory("/docker/ab12", 1, None, 5 * GIB, 4 * GIB, GIB, 0, 1)
    (folder / "memory.limit_in_bytes").write_text(f"{8 * GIB}\n")
    cg = cgroup.read_memory(1, "/docker/ab12", tmp_path / "cg")
    assert cg is not None and cg.available_bytes == 4 * GIB


def test_the_host_reading_carries_the_servers_cgroup(tmp_path: Path) -> None:
    proc = proc_with(tmp_path, 10, f"0::{SCOPE}\n")
    v2_cgroup(tmp_path / "sys" / "fs" / "cgroup", SCOPE, str(64 * GIB), 60 * GIB)
    data = sample(ProcBackend(proc=proc, sys=tmp_path / "sys"), 10)
    assert data.cgroup is not None and data.cgroup.path == SCOPE
    assert data.cgroup.limit_bytes == 64 * GIB and data.oom_kills == 3


def test_the_fit_check_holds_a_host_placement_to_the_containers_limit(tmp_path: Path) -> None:
    node = free_of(make_node(tmp_path))  # 2 TiB of host: the host placement fits
    assert fit.predict(demo("host"), node).level == fit.OK
    proc_with(tmp_path, 10, f"0::{SCOPE}\n")
    v2_cgroup(tmp_path / "sys" / "fs" / "cgroup", SCOPE, str(256 * GIB), 100 * GIB)
    host = sample(ProcBackend(proc=tmp_path / "proc", sys=tmp_path / "sys"), 10)
    contained = fit.node_free(None, host)
    assert contained.host_available_bytes == 158 * GIB  # 256 - 100 + 2 of page cache
    assert contained.host_bound == f"memory cgroup {SCOPE}: its limit less what it holds"
    verdict = fit.predict(demo("host"), dataclasses.replace(
        node, host_total_bytes=contained.host_total_bytes,
        host_available_bytes=contained.host_available_bytes, host_bound=contained.host_bound))
    text = line(verdict, "host").text
    assert verdict.refused and "free 158.0 GiB of 256.0 GiB (memory cgroup " in text, text
    # A limit that leaves more than the host has free changes nothing.
    v2_cgroup(tmp_path / "sys" / "fs" / "cgroup", "/big", str(4096 * GIB), GIB)
    (tmp_path / "proc" / "10" / "cgroup").write_text("0::/big\n")
    host = sample(ProcBackend(proc=tmp_path / "proc", sys=tmp_path / "sys"), 10)
    assert fit.node_free(None, host).host_bound == ""


def test_a_death_the_cgroups_own_count_explains() -> None:
    cg = CgroupMemory(SCOPE, 2, 256 * GIB, 256 * GIB, 250 * GIB, GIB, 0, 1)
    d = classify(Evidence(scenario="host", exit_code=-9, was_ready=True, phase="running",
                          pids=(4242,), cgroup_oom_kills_delta=1, cgroup_now=cg,
                          kernel_log_problem="/dev/kmsg: Permission denied"))
    assert d.kind == DeathKind.CGROUP_OOM_KILL
    assert d.evidence[0] == (f"memory cgroup {SCOPE}: memory.events oom_kill rose by 1 while "
                             f"it ran; its limit 256.0 GiB")


def test_the_host_panel_shows_the_containers_limit(tmp_path: Path) -> None:
    from engram_top.app.panels.host import host_panel
    from engram_top.model.store import RunStore
    proc_with(tmp_path, 10, f"0::{SCOPE}\n")
    backend = ProcBackend(proc=tmp_path / "proc", sys=tmp_path / "sys")
    store = RunStore()
    store.add("host", Reading("proc", Status.OK, sample(backend, 10), at=1.0))
    assert not [t.plain for t in host_panel(store).renderables
                if t.plain.startswith("limit")]  # no cgroup folder: no limit to show
    v2_cgroup(tmp_path / "sys" / "fs" / "cgroup", SCOPE, str(256 * GIB), 250 * GIB)
    store.add("host", Reading("proc", Status.OK, sample(backend, 10), at=2.0))
    (limit,) = [t.plain for t in host_panel(store).renderables if t.plain.startswith("limit")]
    assert limit.endswith(f"250.0 of 256 GiB · {SCOPE}"), limit


DOCKER_ID = "3f2a1b4c5d6e" + "0" * 52
DOCKER = f"/system.slice/docker-{DOCKER_ID}.scope"
POD = "pod7d1c0e2a_1b2c_4d5e_8f90_123456789abc"


@pytest.mark.parametrize(("path", "name"), [
    (DOCKER, "docker 3f2a1b4c5d6e"),
    (f"/docker/{DOCKER_ID}", "docker 3f2a1b4c5d6e"),  # cgroupfs' driver
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-{POD}.slice/"
     f"cri-containerd-{DOCKER_ID}.scope", "k8s pod 7d1c0e2a, containerd 3f2a1b4c5d6e"),
    (f"/kubepods/burstable/{POD.replace('_', '-')}/{DOCKER_ID}",
     "k8s pod 7d1c0e2a, container 3f2a1b4c5d6e"),
    (f"/kubepods/besteffort/{POD.replace('_', '-')}", "k8s pod 7d1c0e2a"),
    (f"/machine.slice/libpod-{DOCKER_ID}.scope", "podman 3f2a1b4c5d6e"),
    (f"/system.slice/crio-{DOCKER_ID}.scope", "cri-o 3f2a1b4c5d6e"),
    ("/lxc/web", "lxc web"), ("/lxc.payload.db/init.scope", "lxc db"),
    ("/lxc/\x1b]0;owned\x07", "lxc"),  # a name from outside with a control: not shown
    ("/system.slice/sglang.service", "sglang.service"),
    # The host itself, a login session, a user's own services: no container to name.
    ("/", ""), ("", ""), ("/init.scope", ""), ("/user.slice/user-0.slice/session-3.scope", ""),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service", ""),
    (SCOPE, ""),  # not a runtime's id: not guessed at
])
def test_a_cgroup_path_names_its_container(path: str, name: str) -> None:
    assert cgroup.container_name(path) == name


def test_the_host_panel_names_the_servers_container(tmp_path: Path) -> None:
    from engram_top.app.panels.host import host_panel
    from engram_top.model.store import RunStore
    proc = proc_with(tmp_path, 10, f"0::{DOCKER}\n")
    (proc / "10" / "status").write_text("Name:\tsglang\nVmRSS:\t1048576 kB\nRssAnon:\t1048576 kB\n")
    backend = ProcBackend(proc=proc, sys=tmp_path / "sys")
    root = tmp_path / "sys" / "fs" / "cgroup"
    v2_cgroup(root, DOCKER, "max", 60 * GIB)  # no limit of its own: named on a line alone
    store = RunStore()
    store.add("host", Reading("proc", Status.OK, sample(backend, 10), at=1.0))
    plain = [t.plain for t in host_panel(store).renderables]
    assert any(t.startswith("in") and t.endswith("docker 3f2a1b4c5d6e") for t in plain), plain
    # The host ledger says it too, in snapshot.json and summary.md.
    from engram_top.export.summary import ledger_lines
    from engram_top.model.ledger import host_ledger
    book = host_ledger(store)
    assert book is not None and book.to_json()["container"] == "docker 3f2a1b4c5d6e"
    assert ledger_lines(book.to_json())[0].startswith(
        "- Host RAM ledger (the server in docker 3f2a1b4c5d6e): ")
    (root / DOCKER.lstrip("/") / "memory.max").write_text(f"{64 * GIB}\n")
    store.add("host", Reading("proc", Status.OK, sample(backend, 10), at=2.0))
    (limit,) = [t.plain for t in host_panel(store).renderables if t.plain.startswith("limit")]
    assert limit.endswith("60.0 of 64 GiB · docker 3f2a1b4c5d6e"), limit
    # Without the server's tree the cgroup read is this process's own: no container named.
    store.add("host", Reading("proc", Status.OK, sample(backend, None), at=3.0))
    assert not any("docker" in t.plain for t in host_panel(store).renderables)


def test_other_processes_are_named_with_their_container(tmp_path: Path) -> None:
    """The HBM ledger's line, the HBM alert's holder and the host alert's largest process
    outside the server say which container holds the memory."""
    from collectors.proc_names import ProcessNames
    from collectors.readings import GpuData, GpuDevice, GpuProcess
    from engram_top.alerts.pressure import hbm_holders, largest_others
    from engram_top.model.facts import gpu_facts
    from engram_top.model.ledger import hbm_ledger
    from engram_top.model.store import RunStore
    proc = proc_with(tmp_path, 4242, f"0::{DOCKER}\n")
    (proc / "4242" / "comm").write_text("python3\n")
    (proc / "4242" / "status").write_text("Name:\tpython3\nVmRSS:\t20971520 kB\n")
    assert ProcessNames(proc).container(4242) == "docker 3f2a1b4c5d6e"
    assert ProcessNames(proc).container(4343) == ""  # no such process here
    (held,) = ProcBackend(proc=proc, sys=tmp_path / "sys").largest(3, frozenset())
    assert held.container == "docker 3f2a1b4c5d6e"
    host = dataclasses.replace(sample(ProcBackend(proc=proc, sys=tmp_path / "sys"), None),
                               largest_others=(held,))
    assert largest_others(host) == ("; largest outside the server: python3 (pid 4242, docker "
                                    "3f2a1b4c5d6e) 20.0 GiB")
    dev = GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-0", total_bytes=141 * GIB,
                    reserved_bytes=GIB // 2, used_bytes=20 * GIB, free_bytes=120 * GIB,
                    processes=(GpuProcess(4242, 20 * GIB, "python3", True,
                                          "docker 3f2a1b4c5d6e"),))
    store = RunStore()
    store.add("gpu", Reading("gpu", Status.OK, GpuData("575.57", (dev,)), at=1.0))
    assert "python3 (pid 4242, docker 3f2a1b4c5d6e)" in [
        ln.name for ln in hbm_ledger(store)[0].lines]
    (view,) = gpu_facts(store)
    assert hbm_holders(view).startswith(
        "python3 (pid 4242, docker 3f2a1b4c5d6e, not the server's) holds 20.0 GiB")


def test_the_dev_shm_the_server_sees_is_shown_where_it_is_its_own_or_full(
        tmp_path: Path) -> None:
    """A container's own /dev/shm (Docker's 64 MiB default) is a line of the Host RAM panel,
    as is one fuller than 80%; the host's own half-of-RAM tmpfs with room says nothing."""
    import os

    from engram_top.app.panels.host import host_panel
    from engram_top.model.store import RunStore
    st = os.statvfs("/dev/shm")
    assert ProcBackend().shm_mount(None) == (st.f_blocks * st.f_frsize,
                                             st.f_bavail * st.f_frsize)
    assert ProcBackend(proc=tmp_path).shm_mount(10) is None  # no such process: not read
    proc = proc_with(tmp_path, 10, "0::/\n")
    host = sample(ProcBackend(proc=proc, sys=tmp_path / "sys"), None)

    def shm_line(mount: tuple[int, int]) -> list[str]:
        store = RunStore()
        store.add("host", Reading("proc", Status.OK,
                                  dataclasses.replace(host, shm_mount=mount), at=1.0))
        return [t.plain for t in host_panel(store).renderables if t.plain.startswith("/dev")]

    assert shm_line((64 * 1024**2, 60 * 1024**2)) == [
        "/dev/shm 4.0 MiB used of 64.0 MiB (a mount of its own)"]
    assert shm_line((1024 * GIB, 1000 * GIB)) == []  # the host's own, with room
    assert shm_line((1024 * GIB, 100 * GIB)) == ["/dev/shm 924.0 GiB used of 1,024.0 GiB"]
