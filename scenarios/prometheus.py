"""A real Prometheus (the one Debian packages) started for a fleet demo or a test.

Always with a config file of our own, a fresh data folder and a loopback address: without
them Prometheus reads /etc/prometheus and listens on every interface, and an old data folder
brings back old samples that look live. The config is written as JSON, which YAML reads.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.pages import PageClient, PageError
from collectors.prom_answer import labels_of, number, result_of, value_of
from scenarios.ports import free_port as free_port  # re-exported: the fleet demo's
from scenarios.private import open_private
from scenarios.process import LaunchSpec, ManagedProcess

BINARY = "prometheus"
NODE_EXPORTER = "prometheus-node-exporter"
INSTALL_HINT = ("install it with `apt-get install prometheus prometheus-node-exporter` "
                "(Debian, Ubuntu) or put its binary on PATH")


class PrometheusError(RuntimeError):
    """Prometheus could not be started or never became ready; says why, with its log."""


@dataclass(frozen=True)
class Target:
    """One scrape target: an address and the labels Prometheus adds to its series."""

    job: str
    address: str  # host:port
    labels: dict[str, str] = field(default_factory=dict)


def config(targets: list[Target], scrape_s: float) -> str:
    jobs: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append({"targets": [t.address], "labels": t.labels})
    interval = f"{max(1, round(scrape_s))}s"
    return json.dumps({
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "scrape_configs": [{"job_name": job, "static_configs": groups}
                           for job, groups in jobs.items()],
    }, indent=1)


def _die_with(parent: int) -> Callable[[], None]:
    """What the child runs before exec: the kernel's parent-death signal (Linux), so that
    it gets SIGTERM when the process that started it dies, even by SIGKILL, which runs no
    cleanup of ours. Chosen over a watchdog process (one more thing to outlive us) and over
    sharing our process group (a terminal's Ctrl-C would reach the children before we could
    stop them in order). The signal follows the *thread* that forked: start children from
    the event loop's thread, never a worker thread that ends. A parent already gone by the
    time the child asks (the race before prctl) means the child ends at once."""
    def run() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
    return run


def start_child(argv: list[str], log_path: Path, *, stdin: int | None = None,
                env: dict[str, str] | None = None) -> ManagedProcess:
    """A child in its own process group that dies with us; its output into `log_path`."""
    log = open_private(log_path, "ab")
    try:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL if stdin is None else stdin,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, **(env or {})},
                                 preexec_fn=_die_with(os.getpid()))
    finally:
        log.close()
    return ManagedProcess(LaunchSpec(argv, log_path), popen)


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n".join(text)


class Prometheus:
    """One Prometheus process on 127.0.0.1 with its config and data under `folder`."""

    def __init__(self, folder: Path, targets: list[Target], scrape_s: float = 2.0,
                 port: int | None = None) -> None:
        self.folder = folder
        self.targets = targets
        self.scrape_s = scrape_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "prometheus.log"
        self.proc: ManagedProcess | None = None

    def start(self) -> None:
        binary = shutil.which(BINARY)
        if binary is None:
            raise PrometheusError(f"`{BINARY}` was not found: {INSTALL_HINT}")
        data = self.folder / "data"
        shutil.rmtree(data, ignore_errors=True)  # never an old folder's samples
        data.mkdir(parents=True)
        conf = self.folder / "prometheus.json"
        conf.write_text(config(self.targets, self.scrape_s))
        self.proc = start_child(
            [binary, f"--config.file={conf}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1d"], self.log_path)

    async def wait_ready(self, deadline_s: float = 30.0) -> None:
        """Until /-/ready answers 200; PrometheusError with its log if it exits or the
        deadline passes first."""
        assert self.proc is not None
        client = PageClient(self.url, connect_timeout_s=1.0)
        end = time.monotonic() + deadline_s
        try:
            while time.monotonic() < end:
                if not self.proc.alive():
                    raise PrometheusError(f"Prometheus exited at start:\n{log_tail(self.log_path)}")
                try:
                    page = await client.get("/-/ready", deadline_s=2.0, limit_bytes=4096)
                    if page.status_code == 200:
                        return
                except (PageError, TimeoutError):
                    pass
                await asyncio.sleep(0.1)
        finally:
            await client.aclose()
        raise PrometheusError(f"Prometheus was not ready in {deadline_s:g} s:\n"
                              f"{log_tail(self.log_path)}")

    async def wait_scraped(self, targets: int, deadline_s: float = 40.0) -> None:
        """Until `targets` targets are up with samples stored (Prometheus 2.42 applies its
        target list every 5 s, so the first samples come 5-6 s after start)."""
        client = PageClient(self.url, connect_timeout_s=1.0)
        end = time.monotonic() + deadline_s
        seen = 0
        try:
            while time.monotonic() < end:
                try:
                    page = await client.get("/api/v1/query?query=count(up%3D%3D1)",
                                            deadline_s=2.0, limit_bytes=65536)
                    result = result_of(page.json(), self.url)
                    count = number(value_of(result[0])) if result and labels_of(
                        result[0]) is not None else 0.0
                    seen = int(count) if count is not None and 0 <= count < 2**31 else 0
                    if seen >= targets:
                        return
                except (PageError, TimeoutError, ValueError, RecursionError):
                    pass
                await asyncio.sleep(0.5)
        finally:
            await client.aclose()
        raise PrometheusError(f"Prometheus scraped {seen} of {targets} targets in "
                              f"{deadline_s:g} s:\n{log_tail(self.log_path)}")

    async def stop(self) -> None:
        if self.proc is not None:
            await self.proc.stop(grace=5.0)

    def stop_now(self) -> None:
        if self.proc is not None:
            self.proc.stop_now(grace=5.0)
