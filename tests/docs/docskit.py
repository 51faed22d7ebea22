"""The docs tier's tools: README commands run as written, by bash, in a checkout of this
tree, with the installed `engram-top` on PATH; a dashboard on a real pseudo-terminal whose
screen is read through a terminal emulator (pyte), as a person reads it.

Every command gets its own state, config and temporary folders, and a tag in its
environment: what it started and left running is found by the tag and stopped at the end
of its test, on every path, and a test that left anything fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pyte
import pytest
from faults.faultkit import Terminal
from helpers import installed_script
from readme import ROOT

TAG = "ENGRAM_TOP_DOCS_TAG"
VENV = Path(sys.executable).parent.parent  # the environment pytest runs in: the README's .venv


def _tree_files() -> list[str]:
    """The checkout's files as a fresh clone with this session's changes would hold them:
    tracked and untracked ones, what git ignores left out."""
    done = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                          capture_output=True, check=True)
    return [f for f in done.stdout.decode().split("\0") if f and (ROOT / f).is_file()]


def copy_tree(dest: Path) -> Path:
    for name in _tree_files():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return dest


@pytest.fixture(scope="session")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the working tree whose `.venv` (and the real servers' environments) are
    this session's: `.venv/bin/pytest` and `scripts/setup-*.sh` run as written in it, and
    what a command writes beside the README (`--out B`) lands here, not in the repo."""
    dest = copy_tree(tmp_path_factory.mktemp("checkout"))
    for env in (".venv", ".venv-sglang", ".venv-vllm"):
        source = VENV if env == ".venv" else ROOT / env
        if source.exists():
            (dest / env).symlink_to(source)
    return dest


def until(what: Callable[[], object], timeout: float, why: str) -> None:
    """Wait for a condition, up to a total deadline; fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {why}")
        time.sleep(0.2)


def answered(screen: str) -> int:
    """Requests the demo's load has had answered, by its row in the latency panel."""
    found = re.search(r"(\d+) done", screen)
    return int(found.group(1)) if found else 0


def snapshot_folders(where: Path) -> set[Path]:
    """The finished snapshot folders under ``where``: a snapshot is written into a hidden
    temporary sibling (summary.md first) and renamed when whole, so a dot-name is one still
    being written."""
    return {p for p in where.iterdir() if not p.name.startswith(".")} if where.exists() \
        else set()


class Screen(Terminal):
    """A command on a pseudo-terminal, its screen kept by a terminal emulator."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path,
                 size: tuple[int, int]) -> None:
        super().__init__(argv, env, cwd, size)
        self._screen = pyte.Screen(size[1], size[0])
        self._stream = pyte.ByteStream(self._screen)
        self._fed = 0

    def lines(self) -> list[str]:
        chunks = self._chunks[self._fed:]
        self._fed += len(chunks)
        for chunk in chunks:
            self._stream.feed(chunk)
        return [line.rstrip() for line in self._screen.display]

    @property
    def text(self) -> str:
        return "\n".join(self.lines())

    def shown(self) -> str:
        return self.text

    def wait_for(self, what: Callable[[str], object], timeout: float,
                 why: str = "") -> str:
        """The screen once ``what`` holds for it; fails with the screen after ``timeout``
        (a dashboard that exits meanwhile fails at once)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            if what(text):
                return text
            if self.proc.poll() is not None:
                raise AssertionError(f"exited {self.proc.returncode} before {why}:\n"
                                     f"{self.output[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:.0f} s: {why}\nthe screen:\n{text}")
            time.sleep(0.2)


class Docs:
    """README commands as a user runs them: bash, in the checkout, `engram-top` the
    installed console script first on PATH."""

    def __init__(self, tmp: Path, cwd: Path) -> None:
        self.cwd = cwd
        self.tag = uuid.uuid4().hex
        self.state = tmp / "xdg-state"
        tmpdir = tmp / "tmp"
        tmpdir.mkdir()
        path = os.pathsep.join([str(installed_script().parent), os.environ.get("PATH", "")])
        self.env = {**os.environ, TAG: self.tag, "PATH": path,
                    "XDG_STATE_HOME": str(self.state),
                    "XDG_CONFIG_HOME": str(tmp / "xdg-config"), "TMPDIR": str(tmpdir),
                    "TERM": "xterm-256color"}
        for name in ("ENGRAM_TOP_CONFIG", "ENGRAM_TOP_API_KEY", "VIRTUAL_ENV"):
            self.env.pop(name, None)
        self._screens: list[Screen] = []

    def sh(self, command: str, *, timeout: float = 120.0,
           cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              timeout=timeout, env=self.env, cwd=cwd or self.cwd)

    def screen(self, command: str, *, size: tuple[int, int] = (40, 120),
               cwd: Path | None = None) -> Screen:
        """``size``: (rows, columns)."""
        term = Screen(["bash", "-c", command], self.env, cwd or self.cwd, size)
        self._screens.append(term)
        return term

    def processes(self) -> list[psutil.Process]:
        out = []
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.status() != psutil.STATUS_ZOMBIE and \
                        proc.environ().get(TAG) == self.tag:
                    out.append(proc)
        return out

    def command_lines(self) -> list[tuple[psutil.Process, str]]:
        """Each tagged process with its command line; one that ends between the listing and
        the read (a zombie by then: psutil raises) is left out, not an error."""
        out = []
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                out.append((proc, " ".join(proc.cmdline())))
        return out

    def close(self) -> list[str]:
        """Stop what is left: a dashboard still open is sent SIGTERM first (it stops what it
        started, as a closed terminal would have it), then anything tagged is killed.
        Returns what was still running once the dashboards had ended."""
        for term in self._screens:
            if term.proc.poll() is None:
                with contextlib.suppress(OSError):
                    term.proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    term.proc.wait(30)
            term.kill()
        left = self.processes()
        names = [_command_line(p)[:150] for p in left]
        for p in left:
            with contextlib.suppress(OSError, psutil.Error):
                os.killpg(p.pid, signal.SIGKILL) if p.pid == os.getpgid(p.pid) else p.kill()
        psutil.wait_procs(left, timeout=10)
        return names


@pytest.fixture
def docs(tmp_path: Path, checkout: Path) -> Iterator[Docs]:
    d = Docs(tmp_path, checkout)
    try:
        yield d
    finally:
        left = d.close()
    assert not left, f"processes outlived the test: {left}"


def _command_line(proc: psutil.Process) -> str:
    """Its command line, or what psutil says instead for one that ended as we looked."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error as e:
        return f"pid {proc.pid} ({type(e).__name__})"
