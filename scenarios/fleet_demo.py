"""A fleet on one machine: N simulated nodes' exporters, the machine's own node-exporter, and
a real Prometheus scraping them all, started together and stopped together.

The simulated nodes are one process (`engram_top.sim.fleet_server`) serving every node's
dcgm-exporter, node-exporter and SGLang pages. When Debian's `prometheus-node-exporter` is
installed, the first node's host figures come from it, that is from this machine: one node of
the fleet is then read from the real thing end to end.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios import owned_folder
from scenarios.process import ManagedProcess
from scenarios.prometheus import (
    NODE_EXPORTER,
    Prometheus,
    PrometheusError,
    Target,
    free_port,
    log_tail,
    start_child,
)

JOBS = {"dcgm": "dcgm-exporter", "node": "node-exporter", "sglang": "sglang"}
FOLDER_PREFIX = "engram-top-fleet-"


@dataclass(frozen=True)
class DemoNode:
    node: str
    placement: str
    gpus: int
    ports: dict[str, int]
    real_host: bool = False  # its host figures are this machine's, from node-exporter


class FleetDemo:
    def __init__(self, nodes: int, *, scrape_s: float = 2.0, skip: tuple[str, ...] = (),
                 real_node_exporter: bool = True, folder: Path | None = None) -> None:
        if nodes < 1:
            raise ValueError("a fleet needs at least one node")
        self.count = nodes
        self.scrape_s = scrape_s
        self.skip = skip  # "NODE:EXPORTER" left down, to show a node missing an exporter
        self.real_node_exporter = real_node_exporter and shutil.which(NODE_EXPORTER) is not None
        self._own_folder = folder is None
        # Our own temp folder says whose it is: one a killed demo left is removed here, by
        # the next demo (with whatever it started, should anything of it still run).
        self.folder = folder or owned_folder.make(FOLDER_PREFIX)
        self.nodes: list[DemoNode] = []
        self.exporters: ManagedProcess | None = None
        self.node_exporter: ManagedProcess | None = None
        self.prometheus: Prometheus | None = None

    @property
    def url(self) -> str:
        assert self.prometheus is not None
        return self.prometheus.url

    async def start(self, deadline_s: float = 60.0) -> str:
        """Everything up and every target scraped once; the Prometheus URL. On any failure
        what was started is stopped again before the error goes up."""
        try:
            await self._start(deadline_s)
        except BaseException:
            await self.stop()
            raise
        return self.url

    async def _start(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        ports_file = self.folder / "ports.json"
        argv = [sys.executable, "-m", "engram_top.sim.fleet_server",
                "--nodes", str(self.count), "--ports-file", str(ports_file)]
        for item in self.skip:
            argv += ["--skip", item]
        # stdin a pipe we hold: the exporters end when this process does.
        self.exporters = start_child(argv, self.folder / "exporters.log", stdin=subprocess.PIPE)
        self._started(self.exporters)
        table = await self._ports(ports_file, end)
        self.nodes = [DemoNode(n["node"], n["placement"], n["gpus"], n["ports"])
                      for n in table]
        targets: list[Target] = []
        down = 0
        for n in self.nodes:
            labels = {"node": n.node, "placement": n.placement}
            for exporter, job in JOBS.items():
                if exporter == "node" and self.real_node_exporter and n is self.nodes[0]:
                    continue  # this node's host is read by the real node-exporter below
                port = n.ports.get(exporter)
                if port is None:  # skipped: a target nobody answers, as a dead exporter's
                    port, down = free_port(), down + 1
                targets.append(Target(job, f"127.0.0.1:{port}", labels))
        if self.real_node_exporter and "node" in self.nodes[0].ports:
            port = free_port()
            binary = shutil.which(NODE_EXPORTER)
            assert binary is not None
            self.node_exporter = start_child(
                [binary, f"--web.listen-address=127.0.0.1:{port}", "--no-collector.systemd",
                 "--collector.disable-defaults", "--collector.meminfo"],
                self.folder / "node-exporter.log")
            self._started(self.node_exporter)
            first = self.nodes[0]
            self.nodes[0] = DemoNode(first.node, first.placement, first.gpus,
                                     {**first.ports, "node": port}, real_host=True)
            targets.append(Target(JOBS["node"], f"127.0.0.1:{port}",
                                  {"node": first.node, "placement": first.placement}))
        self.prometheus = Prometheus(self.folder / "prometheus", targets, self.scrape_s)
        self.prometheus.folder.mkdir(parents=True, exist_ok=True)
        self.prometheus.start()
        assert self.prometheus.proc is not None
        self._started(self.prometheus.proc)
        await self.prometheus.wait_ready(max(1.0, end - time.monotonic()))
        await self.prometheus.wait_scraped(len(targets) - down, max(1.0, end - time.monotonic()))

    def _started(self, proc: ManagedProcess) -> None:
        if self._own_folder:
            owned_folder.note_child(self.folder, proc.pid)

    async def _ports(self, path: Path, end: float) -> list[dict[str, Any]]:
        assert self.exporters is not None
        while time.monotonic() < end:
            if not self.exporters.alive():
                raise PrometheusError("the simulated exporters exited at start:\n"
                                      + log_tail(self.folder / "exporters.log"))
            try:
                return list(json.loads(path.read_text())["nodes"])
            except (OSError, ValueError, KeyError):
                await asyncio.sleep(0.05)
        raise PrometheusError("the simulated exporters did not start in time:\n"
                              + log_tail(self.folder / "exporters.log"))

    async def stop(self) -> None:
        for proc in self._procs():
            await proc.stop(grace=5.0)
        self._cleanup()

    def stop_now(self) -> None:
        for proc in self._procs():
            proc.stop_now(grace=5.0)
        self._cleanup()

    def _procs(self) -> list[ManagedProcess]:
        out = []
        if self.prometheus is not None and self.prometheus.proc is not None:
            out.append(self.prometheus.proc)
        out += [p for p in (self.node_exporter, self.exporters) if p is not None]
        return out

    def _cleanup(self) -> None:
        if self.exporters is not None and self.exporters.popen is not None \
                and self.exporters.popen.stdin is not None:
            self.exporters.popen.stdin.close()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
