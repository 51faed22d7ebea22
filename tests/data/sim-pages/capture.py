"""Regenerate the recorded corpus in this folder (README.md says what each file is):

    nice -n 19 .venv/bin/python tests/data/sim-pages/capture.py

It starts the simulated node (`engram_top sim serve`) as the slow tests do, speaking SGLang's
dialect (and once with --api-key) and vLLM's, asks each server what the HTTP collectors ask
(/health, /server_info or /version and /v1/models, /metrics) while a closed-loop load runs,
and writes every answer byte for byte with the monotonic time of its poll, relative to the
first, and what the load's client measured; then a small /proc and /sys tree of this process
and a child. The quick tier replays them into the collectors with a clock of its own
(tests/corpus.py, tests/test_collectors_corpus.py): no server, no sleep.

Timings follow the live test it replaced: a poll, the load started, a poll after 1.0 s and
another 1.5 s later. A page's figures move with the machine's load; the tests compare the
collectors' figures with what the recorded pages and client say, never with fixed latencies.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from scenarios.workload import ClosedLoopLoad  # noqa: E402

API_KEY = "sk-engram-top-test"
LOAD = {"concurrency": 4, "input_len": 200, "output_len": 24, "seed": 7}
STEPS_S = (1.0, 1.5)  # the polls after the load starts, each this long after the last


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, work: Path, name: str, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / f"{name}.log"
        flags = " ".join("<key>" if a == API_KEY else a for a in extra)
        self.command = f"engram_top sim serve --placement device --time-scale 0.03 {flags}"
        argv = [sys.executable, "-m", "engram_top", "sim", "serve", "--placement", "device",
                "--port", str(self.port), "--time-scale", "0.03",
                "--node-dir", str(work / f"{name}-node"), *extra]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("the server never became ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Recorder:
    """Each answer to a file of its own; the manifest lists the polls that asked them."""

    def __init__(self, folder: Path, client: httpx.AsyncClient) -> None:
        self.folder = folder
        self.client = client
        self.polls: list[dict[str, Any]] = []
        self.t0: float | None = None
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)

    async def poll(self, paths: tuple[str, ...]) -> None:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        n = len(self.polls)
        answers: dict[str, Any] = {}
        for path in paths:
            resp = await self.client.get(path)
            ext = "txt" if path == "/metrics" or not resp.content.strip() else "json"
            name = f"{n}{path.replace('/', '-')}.{ext}"
            (self.folder / name).write_bytes(resp.content)
            answers[path] = {"status": resp.status_code,
                             "content_type": resp.headers.get("content-type", ""),
                             "file": name}
        self.polls.append({"t": round(now - self.t0, 6), "answers": answers})

    def write(self, **more: Any) -> None:
        manifest = {"polls": self.polls, **more}
        (self.folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


async def under_load(server: Server, folder: Path, info: tuple[str, ...],
                     headers: dict[str, str] | None = None) -> None:
    """The first poll asks every page; the ones under load /metrics alone, as a collector
    asks them (/health every 5 s, the info pages every 15 s)."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0,
                                 headers=headers or {}) as client:
        rec = Recorder(folder, client)
        await rec.poll(("/health", *info, "/metrics"))
        load = ClosedLoopLoad(server.url, **LOAD)
        started = time.monotonic()
        await load.start()
        try:
            tokens_before_last = 0
            for step in STEPS_S:
                await asyncio.sleep(step)
                tokens_before_last = load.stats.output_tokens
                await rec.poll(("/metrics",))
            elapsed = time.monotonic() - started
        finally:
            await load.stop()
        s = load.stats
        records = list(s.recent)
        tpots = [r.tpot for r in records if r.tpot is not None]
        rec.write(
            server=server.command.strip(),
            load={**LOAD, "completed": s.completed, "failed": s.failed,
                  "output_tokens_before_last": tokens_before_last,
                  "elapsed_s": round(elapsed, 6),
                  "client_tpot_mean_s": statistics.mean(tpots) if tpots else None,
                  "client_ttft_mean_s": statistics.mean(r.ttft for r in records)
                  if records else None})


async def api_key_answers(server: Server, folder: Path) -> None:
    """What a collector without the key is answered: /health and /metrics, and a 401."""
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
        rec = Recorder(folder, client)
        await rec.poll(("/health", "/server_info", "/metrics"))
        rec.write(server=f"{server.command}; asked without the key")


def proc_tree(folder: Path) -> None:
    """This process and a child: /proc/meminfo, /proc/vmstat, each one's status and its
    main thread's children file, and /sys's NUMA nodes' meminfo, copied as they read."""
    shutil.rmtree(folder, ignore_errors=True)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        time.sleep(0.2)  # its interpreter started: its memory is its own
        root = os.getpid()
        proc = folder / "proc"
        for name in ("meminfo", "vmstat"):
            (proc).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f"/proc/{name}", proc / name)
        for pid in (root, child.pid):
            task = proc / str(pid) / "task" / str(pid)
            task.mkdir(parents=True)
            shutil.copyfile(f"/proc/{pid}/status", proc / str(pid) / "status")
            children = Path(f"/proc/{pid}/task/{pid}/children")
            (task / "children").write_text(children.read_text() if children.exists() else "")
        nodes = Path("/sys/devices/system/node")
        for node in sorted(nodes.glob("node[0-9]*")) if nodes.is_dir() else ():
            out = folder / "sys" / "devices" / "system" / "node" / node.name
            out.mkdir(parents=True)
            shutil.copyfile(node / "meminfo", out / "meminfo")
        (folder / "tree.json").write_text(json.dumps({"root": root, "child": child.pid}) + "\n")
    finally:
        child.stdin.close()  # type: ignore[union-attr]
        child.wait(10)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        servers = {"sglang": Server(work, "sglang"),
                   "apikey": Server(work, "apikey", "--api-key", API_KEY),
                   "vllm": Server(work, "vllm", "--dialect", "vllm")}
        try:
            for server in servers.values():
                server.wait_ready()
            await under_load(servers["sglang"], HERE / "sglang-device", ("/server_info",))
            await api_key_answers(servers["apikey"], HERE / "sglang-apikey")
            await under_load(servers["vllm"], HERE / "vllm-device", ("/version", "/v1/models"))
        finally:
            for server in servers.values():
                server.stop()
        shutil.copyfile(servers["sglang"].log, HERE / "sglang-device" / "server.log")
        shutil.copyfile(servers["vllm"].log, HERE / "vllm-device" / "server.log")
    proc_tree(HERE / "host")


if __name__ == "__main__":
    asyncio.run(main())
