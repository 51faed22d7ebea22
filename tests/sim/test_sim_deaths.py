"""The simulated server dies while it serves, in five real ways (`sim serve --fail-as KIND
--fail-after S`), and leaves what a real node leaves: the kernel's OOM records naming TP rank
0 (host-oom-kill, cgroup-oom-kill), torch's CUDA out of memory through the event loop
(hbm-oom-running), NCCL's /dev/shm warnings then a SIGBUS (shm-full), each ended by SGLang's
running-phase SIGQUIT line and its process tree killed (exit status -9); or SIGTERM from
outside with nothing logged (killed, -15). Options that cannot go together are refused."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ServerSpec, SimServer, wait_until

from collectors.units import GIB
from engram_top.seed import reference
from engram_top.sim import fail_kinds, kernel, running_deaths, state
from engram_top.sim.backends import SimHostBackend
from engram_top.sim.options import RUNNING_KINDS
from engram_top.sim.server import main as sim_main
from engram_top.sim.server import parse_args

REF = reference.default()
READY_LINE = "The server is fired up and ready to roll!"
KIB = 1024


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[list[SimServer]]:
    """Servers a test starts (append them), all stopped after it, whatever happened in it,
    with no process of their groups left."""
    servers: list[SimServer] = []
    yield servers
    left = {s.name: s.stop(grace=5.0).survivors for s in servers}
    assert not any(left.values()), f"survivors: {left}"


def start(launch: list[SimServer], tmp_path: Path, kind: str, after: float) -> SimServer:
    server = SimServer(kind, ServerSpec("device", 0.01, (
        "--fail-as", kind, "--fail-after", str(after))), tmp_path)
    launch.append(server)
    return server


def rank0_pid(server: SimServer) -> int:
    """TP rank 0's scheduler, as the node's state names it once the server is ready."""
    def find() -> int | None:
        return next((p.pid for p in state.live_procs(server.node_dir)
                     if p.name == "sglang::scheduler_TP0"), None)
    pid = wait_until(find, 10.0, "rank 0's state")
    assert isinstance(pid, int)
    return pid


def exit_status(server: SimServer) -> int | None:
    rc = server.wait_exit(60)
    assert rc is not None, f"still running; log tail:\n{server.log_text()[-1500:]}"
    return rc


def after_ready(text: str) -> str:
    assert READY_LINE in text, text[-1500:]
    return text[text.index(READY_LINE) + len(READY_LINE):]


def all_gone(server: SimServer) -> None:
    """The whole server process group ended, and the node holds nothing of it (a killed
    process's state file counts only while it lives)."""
    wait_until(lambda: not server.proc.group_members(), 10.0, "the server's group to end")
    wait_until(lambda: not state.live_procs(server.node_dir), 10.0, "the node's memory to go")


def ends_with_sigquit(text: str) -> None:
    """SGLang's running-phase SIGQUIT line from the main process (no rank's prefix), last."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines[-1].endswith(f"] {fail_kinds.RUNNING_SIGQUIT}"), lines[-3:]
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] SIGQUIT received", lines[-1])


# --------------------------------------------------------------------------- kernel OOM kills


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["host-oom-kill", "cgroup-oom-kill"])
def test_the_kernel_kills_rank_0_after_its_host_memory_grows(
        launch: list[SimServer], tmp_path: Path, kind: str) -> None:
    server = start(launch, tmp_path, kind, 1.0).wait_ready()
    node = server.node_dir
    victim = rank0_pid(server)
    assert kernel.read_oom_kills(node) == 0

    def anon() -> int | None:
        return next((p.host_anon_bytes for p in state.live_procs(node) if p.pid == victim),
                    None)
    before = anon()
    assert before is not None
    seen = [before]

    def watch() -> bool:  # rank 0's pageable memory, read until the server is gone
        now = anon()
        if now is not None:
            seen.append(now)
        return not server.proc.alive()
    wait_until(watch, 60.0, "the server to die", every=0.02)
    # A reader of the node saw it grow, all 40 GiB of it, before the kill (the reclaim stall at
    # the top: what a poll a second sees, however late).
    assert max(seen) - before == running_deaths.OOM_GROWTH_BYTES

    assert exit_status(server) == -signal.SIGKILL  # kill_process_tree's own SIGKILL
    kmsg = kernel.kmsg_path(node).read_text()
    killed = re.findall(r"Killed process (\d+) \((\S+)\) total-vm:\d+kB, anon-rss:(\d+)kB", kmsg)
    assert [int(pid) for pid, _, _ in killed] == [victim]
    # What it held when killed: its anon memory after the whole growth.
    assert int(killed[0][2]) * KIB >= before + running_deaths.OOM_GROWTH_BYTES - KIB
    assert kernel.read_oom_kills(node) == 1
    if kind == "cgroup-oom-kill":
        assert f"Memory cgroup out of memory: Killed process {victim} " in kmsg
        assert "constraint=CONSTRAINT_MEMCG" in kmsg
        assert f"oom_memcg={running_deaths.CGROUP}" in kmsg
    else:
        assert f"Out of memory: Killed process {victim} " in kmsg
        assert "constraint=CONSTRAINT_NONE" in kmsg and "Memory cgroup" not in kmsg

    text = after_ready(server.log_text())
    ends_with_sigquit(text)
    assert "Traceback" not in text  # SIGKILL leaves the rank no word of its own
    all_gone(server)


# --------------------------------------------------------------------------- HBM, /dev/shm


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cuda_out_of_memory_in_the_event_loop_ends_the_server(
        launch: list[SimServer], tmp_path: Path) -> None:
    server = start(launch, tmp_path, "hbm-oom-running", 0.2).wait_ready()
    assert exit_status(server) == -signal.SIGKILL
    text = after_ready(server.log_text())
    lines = text.splitlines()
    # The scheduler's logger.error: rank 0's prefix, then the traceback's body unprefixed.
    head = next(i for i, line in enumerate(lines) if "Scheduler hit an exception" in line)
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Scheduler hit an exception: "
                    r"Traceback \(most recent call last\):$", lines[head])
    error = next(line for line in lines if line.startswith("torch.OutOfMemoryError"))
    body = lines[head + 1:lines.index(error)]
    assert body and not any(line.startswith("[") for line in body)
    funcs = [m.group(1) for line in body if (m := re.search(r", in (\w+)$", line))]
    for earlier, later in [("run_scheduler_process", "event_loop_overlap"),
                           ("event_loop_overlap", "run_batch"), ("run_batch", "forward")]:
        assert funcs.index(earlier) < funcs.index(later), funcs
    assert any("model_executor/model_runner.py" in line and line.endswith(", in forward")
               for line in body)
    # The node's GPU as torch writes it; the process holds all but the free 1.12 GiB and the
    # driver's reserve.
    total = REF.gpu_total_bytes / GIB
    in_use = (REF.gpu_total_bytes - REF.gpu_reserved_bytes - running_deaths.HBM_FREE_BYTES) / GIB
    assert error.startswith(
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
        f"a total capacity of {total:.2f} GiB of which 1.12 GiB is free. Including "
        f"non-PyTorch memory, this process has {in_use:.2f} GiB memory in use.")
    ends_with_sigquit(text)
    # No kernel kill: the GPU's memory, not the host's.
    assert kernel.read_oom_kills(server.node_dir) == 0
    assert not kernel.kmsg_path(server.node_dir).exists()
    all_gone(server)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_dev_shm_full_under_nccl_then_a_bus_error(
        launch: list[SimServer], tmp_path: Path) -> None:
    server = start(launch, tmp_path, "shm-full", 0.2).wait_ready()
    victim = rank0_pid(server)
    assert exit_status(server) == -signal.SIGKILL
    text = after_ready(server.log_text())
    warns = [m for line in text.splitlines() if (m := re.match(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] [^\s:]+:(\d+):(\d+) \[0\] misc/shmutils\.cc:\d+ "
        r"NCCL WARN (.*)$", line))]
    assert len(warns) == 2, text
    assert {int(m.group(1)) for m in warns} == {victim}  # rank 0's process said them
    segment = re.search(r"/dev/shm/(nccl-\w{6}) ", warns[0].group(3))
    assert segment is not None
    assert warns[0].group(3) == (f"Error: failed to extend /dev/shm/{segment.group(1)} to "
                                 f"9637892 bytes, error: No space left on device (28)")
    assert warns[1].group(3) == (f"Error while creating shared memory segment /dev/shm/"
                                 f"{segment.group(1)} (size 9637888), error: No space left on "
                                 f"device (28)")
    assert text.index("NCCL WARN") < text.index("Fatal Python error: Bus error")
    ends_with_sigquit(text)
    assert kernel.read_oom_kills(server.node_dir) == 0
    all_gone(server)


# --------------------------------------------------------------------------- from outside


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigterm_from_outside_leaves_no_word_in_the_log(
        launch: list[SimServer], tmp_path: Path) -> None:
    server = start(launch, tmp_path, "killed", 0.2).wait_ready()
    assert exit_status(server) == -signal.SIGTERM
    text = after_ready(server.log_text())
    for words in ("SIGTERM", "SIGQUIT", "Shutting down", "Traceback", "Error", "WARN"):
        assert words not in text, text
    # Its ranks follow it (their parent-death signal), taking their memory.
    all_gone(server)
    assert kernel.read_oom_kills(server.node_dir) == 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_server_leaves_its_dev_shm_segment_and_a_stopped_one_does_not(
        launch: list[SimServer], tmp_path: Path) -> None:
    """--shm-segment-gb: held (and counted in Shmem) while the server lives; a death by a
    signal leaves it unheld on the node's /dev/shm, as a killed engine's; a clean stop
    removes it."""
    killed = SimServer("killed", ServerSpec("device", 0.01, (
        "--fail-as", "killed", "--fail-after", "3", "--shm-segment-gb", "2")), tmp_path / "a")
    launch.append(killed)
    killed.wait_ready()
    backend = SimHostBackend(killed.node_dir)
    before = wait_until(lambda: kernel.segments(killed.node_dir, state.alive) or None, 10.0,
                        "the server's segment")
    ((name, nbytes, _, held),) = before
    assert name.startswith("sgl_shm_kv_") and nbytes == 2_000_000_000 and held
    assert backend.shm_unheld() == []
    assert exit_status(killed) == -signal.SIGTERM
    (left,) = backend.shm_unheld()
    assert (left.name, left.bytes) == (name, 2_000_000_000) and left.age_s < 60
    # Still host RAM (tmpfs): in the node's Shmem after its maker is gone.
    assert backend.meminfo()["Shmem"] >= 2 * GIB + 2_000_000_000

    stopped = SimServer("stopped", ServerSpec("device", 0.01, ("--shm-segment-gb", "2")),
                        tmp_path / "b")
    launch.append(stopped)
    stopped.wait_ready()
    wait_until(lambda: kernel.segments(stopped.node_dir, state.alive) or None, 10.0,
               "the server's segment")
    assert not stopped.stop(grace=10.0).survivors
    assert kernel.segments(stopped.node_dir, state.alive) == []


# --------------------------------------------------------------------------- options, words


@pytest.mark.parametrize(("argv", "says"), [
    (["--fail-after", "1"], "--fail-after: only with a --fail-as that dies while serving"),
    (["--fail-as", "sigquit", "--fail-after", "1"], "--fail-as sigquit dies during start-up"),
    (["--fail-as", "host-oom-kill", "--fail-at", "weights"],
     "leave out --fail-at weights"),
    (["--fail-as", "killed", "--fail-at", "warmup", "--fail-after", "3"],
     "--fail-as killed dies while serving"),
    (["--dialect", "vllm", "--fail-as", "shm-full"], "--fail-as"),
    # The start-up kinds' own checks still hold.
    (["--fail-as", "oom-kv-pool", "--fail-at", "weights"], "--fail-at kv_pool"),
])
def test_running_kinds_and_fail_after_refuse_what_cannot_go_together(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.startswith("engram-top sim serve: "), err


def test_fail_after_out_of_range_is_an_argument_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--fail-as", "killed", "--fail-after", "-1"])
    assert exited.value.code == 2
    assert "--fail-after" in capsys.readouterr().err


def test_the_help_names_every_kind_and_fail_after(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    for kind in RUNNING_KINDS:
        assert kind in text, kind
    assert "--fail-after SECONDS" in text and "(default 2)" in text
    assert "exit status -9" in text and "exit status -15" in text


def test_torch_writes_sizes_its_own_way() -> None:
    assert running_deaths.torch_size(2 * GIB) == "2.00 GiB"
    assert running_deaths.torch_size(int(312.5 * 1024**2)) == "312.50 MiB"
    assert running_deaths.torch_size(1024**3) == "1024.00 MiB"  # torch's <=, not <
    assert running_deaths.torch_size(2048) == "2.00 KiB"
    assert running_deaths.torch_size(1000) == "1000 bytes"


def test_the_shm_lines_carry_nccls_prefix() -> None:
    lines = running_deaths.shm_full_lines(4242, 0, segment="nccl-Ab12Cd", host="node7")
    warns = [line for line in lines if "NCCL WARN" in line]
    assert len(warns) == 2
    for line in warns:
        assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] node7:4242:\d+ \[0\] "
                        r"misc/shmutils\.cc:\d+ NCCL WARN Error", line), line
    # NCCL starts each WARN on a fresh line: a blank one before it.
    assert all(lines[lines.index(w) - 1] == "" for w in warns)
    assert "/dev/shm/nccl-Ab12Cd to 9637892 bytes" in warns[0]
