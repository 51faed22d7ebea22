"""A death classified from what is left to read: the kernel's OOM records (in /dev/kmsg's,
dmesg's and journalctl's shapes), /proc/vmstat's oom_kill counter read from a test /proc,
the server's log errors, its exit status; and `engram-top why` over a snapshot folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple

import pytest

from collectors.host import ProcBackend, sample
from collectors.kernel_log import oom_kills, read_kernel_log
from collectors.readings import (
    GpuData,
    GpuDevice,
    GpuProcess,
    HostData,
    KernelKill,
    ProcessTreeMemory,
)
from collectors.startup_facts import LogError
from engram_top.cli.commands import main
from engram_top.model.death import Death, DeathKind, Evidence, classify, death_lines, signal_name

GIB = 1024**3

KERNEL = Path(__file__).parents[1] / "data" / "kernel"
# A real kernel's words (6.x), as /dev/kmsg gives them (and dmesg, the cgroup one): the
# oom-kill line names the constraint and the memcg, then "Killed process" the victim and its
# memory by kind.
KMSG_HOST = (KERNEL / "kmsg-host-oom").read_text()
DMESG_CGROUP = (KERNEL / "dmesg-cgroup-oom").read_text()
JOURNAL = ("Dec 04 03:12:09 node7 kernel: Out of memory: Killed process 31337 (python3) "
           "total-vm:1kB, anon-rss:2kB, file-rss:3kB, shmem-rss:4kB, UID:0 pgtables:0kB "
           "oom_score_adj:0\n")


def test_kernel_oom_records_in_each_shape_name_the_victim_and_its_memory() -> None:
    (host,) = oom_kills(KMSG_HOST)
    assert (host.pid, host.comm, host.cgroup_limit) == (4242, "python3", False)
    assert (host.anon_bytes, host.shmem_bytes, host.file_bytes) == (
        40960000 * 1024, 667942912 * 1024, 2048 * 1024)
    assert host.line.startswith("Out of memory: Killed process 4242 (python3)")
    (cg,) = oom_kills(DMESG_CGROUP)
    assert (cg.pid, cg.comm, cg.cgroup_limit, cg.memcg) == (
        777, "sglang::schedul", True, "/system.slice/docker-ab12.scope")
    (j,) = oom_kills(JOURNAL)
    assert (j.pid, j.anon_bytes) == (31337, 2048)
    # Noise, half lines and another process's OOM lines beside them are not kills.
    assert oom_kills("Out of memory: Killed proc\nrandom\x1b[31m line\n") == []
    assert [k.pid for k in oom_kills(KMSG_HOST + DMESG_CGROUP + JOURNAL)] == [4242, 777, 31337]


def test_a_kernel_log_file_is_read_to_its_end_and_a_closed_one_says_why(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text("x" * 5_000_000 + "\n" + KMSG_HOST)
    text, problem = read_kernel_log(log)
    assert problem == "" and text is not None
    assert len(text) <= 4 * 1024 * 1024 + 8192  # the tail, bounded: a huge file is not read whole
    assert [k.pid for k in oom_kills(text)] == [4242]
    log.chmod(0)
    if os.geteuid() != 0:  # root reads a mode-0 file
        text, problem = read_kernel_log(log)
        assert text is None and str(log) in problem and "Permission denied" in problem
    text, problem = read_kernel_log(tmp_path / "none")
    assert text is None and "No such file" in problem


def test_the_oom_kill_counter_is_read_from_vmstat(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 1000 kB\nMemAvailable: 600 kB\nMemFree: 500 kB\n")
    (proc / "vmstat").write_text("nr_free_pages 1\npswpin 2\npswpout 3\noom_kill 7\n")
    data = sample(ProcBackend(proc=proc, sys=tmp_path / "sys"), None)
    assert (data.oom_kills, data.swap_in_bytes) == (7, 2 * 4096)
    (proc / "vmstat").write_text("pswpin 0\npswpout 0\n")  # before Linux 4.13: unknown
    assert sample(ProcBackend(proc=proc, sys=tmp_path / "sys"), None).oom_kills is None


def host(anon_gib: float, shmem_gib: float, pids: tuple[int, ...] = (4242,)) -> HostData:
    tree = ProcessTreeMemory(pids[0], pids, int((anon_gib + shmem_gib) * GIB),
                             int(anon_gib * GIB), 0, int(shmem_gib * GIB))
    return HostData(total_bytes=1024 * GIB, available_bytes=3 * GIB, used_bytes=1021 * GIB,
                    free_bytes=GIB, cached_bytes=0, shmem_bytes=0, hugepages_total=0,
                    hugepages_free=0, hugepage_size_bytes=0, anon_hugepages_bytes=0,
                    swap_total_bytes=0, swap_used_bytes=0, swap_in_bytes=0, swap_out_bytes=0,
                    server_tree=tree)


def evidence(**kw: object) -> Evidence:
    base: dict[str, object] = dict(scenario="host-prefetch", exit_code=-9, was_ready=True,
                                   phase="running", pids=(4242, 4243))
    base.update(kw)
    return Evidence(**base)  # type: ignore[arg-type]


def test_a_host_oom_kill_names_the_victim_and_the_ledger_line_to_cut() -> None:
    d = classify(evidence(kernel_kills=tuple(oom_kills(KMSG_HOST)),
                          host_before=host(39.0, 637.0), host_at_launch=host(1.0, 500.0)))
    assert d.kind == DeathKind.HOST_OOM_KILL
    assert d.evidence[0].startswith("kernel: Out of memory: Killed process 4242")
    assert "ended by SIGKILL (exit status -9)" in d.evidence[1]
    assert "39.0 GiB pageable (anon) and 637.0 GiB shared/pinned" in d.evidence[2]
    assert "since launch: pageable +38.0 GiB, pinned +137.0 GiB" in d.evidence
    assert d.action.startswith("pinned host memory grew: a smaller --hicache-size")
    # Which line grew decides; without a launch reading, what the victim held most of.
    grew = classify(evidence(kernel_kills=tuple(oom_kills(KMSG_HOST)),
                             host_before=host(139.0, 637.0), host_at_launch=host(1.0, 600.0)))
    assert grew.action.startswith("pageable memory grew")
    held = classify(evidence(kernel_kills=tuple(oom_kills(KMSG_HOST))))
    assert held.action.startswith("pinned host memory grew")  # shmem-rss 637 GiB of 676
    # No poll saw it grow (a heap that grew within the last second): the victim alone holds
    # 39 GiB of heap where its whole tree held 1 at ready, its shmem no more than then.
    unseen = classify(evidence(kernel_kills=tuple(oom_kills(KMSG_HOST)),
                               host_before=host(1.0, 700.0), host_at_launch=host(1.0, 700.0)))
    assert unseen.action.startswith("pageable memory grew")
    # Another process's kill is not this server's death.
    other = classify(evidence(kernel_kills=tuple(oom_kills(JOURNAL))))
    assert other.kind == DeathKind.SIGNAL
    # Nor is a kill of the same pid while the kernel's count stood still (a recycled pid).
    stale = classify(evidence(kernel_kills=tuple(oom_kills(KMSG_HOST)), oom_kills_delta=0))
    assert stale.kind == DeathKind.SIGNAL


def test_a_cgroup_oom_kill_and_a_counter_without_a_readable_log() -> None:
    d = classify(evidence(pids=(777,), kernel_kills=tuple(oom_kills(DMESG_CGROUP))))
    assert d.kind == DeathKind.CGROUP_OOM_KILL
    assert "the cgroup whose limit was hit: /system.slice/docker-ab12.scope" in d.evidence
    assert "container's memory limit" in d.action
    d = classify(evidence(oom_kills_delta=1, kernel_log_problem="/dev/kmsg: Permission denied",
                          host_before=host(50.0, 1.0)))
    assert d.kind == DeathKind.HOST_OOM_KILL
    assert d.evidence[0] == ("/proc/vmstat oom_kill rose by 1 while it ran; the kernel log did "
                             "not name the process (/dev/kmsg: Permission denied)")
    assert d.action.startswith("pageable memory grew")
    # A SIGKILL with the counter still: from outside, and said how we know.
    d = classify(evidence(oom_kills_delta=0))
    assert d.kind == DeathKind.SIGNAL
    assert "no OOM kill in the kernel's counter while it ran" in d.evidence


OOM_TEXT = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
            "a total capacity of 178.35 GiB of which 1.12 GiB is free.")


def test_hbm_oom_at_start_up_and_while_serving_need_opposite_fixes() -> None:
    err = LogError(at=None, kind="oom", text=OOM_TEXT, exception=OOM_TEXT, phase="kv_pool")
    d = classify(evidence(exit_code=1, was_ready=False, phase="kv_pool", errors=(err,)))
    assert d.kind == DeathKind.HBM_OOM_STARTUP
    assert d.evidence[:2] == (f"log: {OOM_TEXT}", "during start-up, in kv pool")
    assert "--mem-fraction-static" in d.action
    weights = LogError(at=None, kind="oom", text=OOM_TEXT, phase="weights")
    d = classify(evidence(exit_code=1, was_ready=False, phase="weights", errors=(weights,)))
    assert "the weights do not fit" in d.action
    gpu = GpuData("580", devices=(GpuDevice(0, "B200", "u0", 180 * GIB, GIB, 178 * GIB, GIB,
                                     processes=(GpuProcess(4242, 150 * GIB, "python3"),
                                                GpuProcess(999, 24 * GIB, "trainer"))),))
    d = classify(evidence(exit_code=1, errors=(err,), gpu_before=gpu))
    assert d.kind == DeathKind.HBM_OOM_RUNTIME
    assert "GPU0: another process, pid 999 (trainer), held 24.0 GiB just before" in d.evidence
    assert "lower --mem-fraction-static" in d.action


def test_shm_nccl_crash_signal_and_unknown() -> None:
    shm = ("host:4242:4300 [0] NCCL WARN Error while creating shared memory segment "
           "/dev/shm/nccl-x1 (size 9637888), error: No space left on device (28)")
    assert classify(evidence(exit_code=-7, log_tail=(shm,))).kind == DeathKind.SHM_FULL
    assert classify(evidence(exit_code=-7)).kind == DeathKind.SHM_FULL  # SIGBUS alone
    nccl = LogError(at=None, kind="nccl_timeout", text="Watchdog caught collective operation "
                    "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 ms")
    assert classify(evidence(exit_code=1, errors=(nccl,))).kind == DeathKind.NCCL_TIMEOUT
    tb = LogError(at=None, kind="traceback", text="KeyError: 'x'", exception="KeyError: 'x'")
    assert classify(evidence(exit_code=1, errors=(tb,))).kind == DeathKind.CRASH
    term = classify(evidence(exit_code=-15))
    assert term.kind == DeathKind.SIGNAL and "SIGTERM" in term.action
    assert classify(evidence(exit_code=143)).kind == DeathKind.SIGNAL  # a shell's 128+15
    assert classify(evidence(exit_code=0)).kind == DeathKind.UNKNOWN
    assert (signal_name(-9), signal_name(137), signal_name(1), signal_name(None)) == (
        "SIGKILL", "SIGKILL", None, None)


class Out(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def test_why_reads_a_snapshot_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def why(*args: str) -> Out:  # the command's own entry point, in this process
        code = main(["why", *args])
        out, err = capsys.readouterr()
        return Out(code, out, err)

    death = classify(evidence(kernel_kills=tuple(oom_kills(KMSG_HOST)),
                              host_before=host(39.0, 637.0)))
    run = {"scenario": "host-prefetch", "death": {
        "scenario": death.scenario, "kind": death.kind.value, "title": death.title,
        "evidence": list(death.evidence), "action": death.action, "at": 1.0, "exit_code": -9}}
    folder = tmp_path / "snap"
    folder.mkdir()
    (folder / "snapshot.json").write_text(json.dumps({"runs": [{"scenario": "device"}, run]}))
    out = why(str(folder))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1:] == death_lines(death)
    assert "- **host-prefetch** died: killed by the kernel's OOM killer (host memory) " \
           "(`host-oom-kill`)" in out.stdout
    data = json.loads(why(str(folder), "--json").stdout)
    assert data["runs"] == 2 and data["deaths"][0]["kind"] == "host-oom-kill"
    # None died: 1, and said; a broken file: 2, named.
    (folder / "snapshot.json").write_text(json.dumps({"runs": [{"scenario": "device"}]}))
    out = why(str(folder))
    assert out.returncode == 1 and "No death recorded" in out.stdout
    (folder / "snapshot.json").write_text('{"runs": [{"death": {"kind": "eaten-by-bears"}}]}')
    out = why(str(folder))
    assert out.returncode == 2 and "runs[0].death" in out.stderr


def test_death_text_round_trips_in_its_lines() -> None:
    d = Death("a", DeathKind.UNKNOWN, "ended, cause unknown", ("x",), "y")
    assert death_lines(d) == ["- **a** died: ended, cause unknown (`unknown`)", "  - x",
                              "  - next: y"]


@pytest.mark.parametrize("kill", [KernelKill(5, "p", False)])
def test_a_kill_without_figures_still_names_its_victim(kill: KernelKill) -> None:
    d = classify(evidence(pids=(5,), kernel_kills=(kill,)))
    assert d.kind == DeathKind.HOST_OOM_KILL
    assert "its host memory just before: not read" in " ".join(d.evidence)
