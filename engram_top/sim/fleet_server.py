"""Many simulated nodes' exporters in one process: `python -m engram_top.sim.fleet_server`.

Every node gets three ports on 127.0.0.1 (dcgm-exporter, node-exporter, SGLang's /metrics),
each answering GET /metrics with its page rendered when asked. Ports are the kernel's choice;
once all listen, the process writes them to --ports-file (JSON, written whole) for whoever
writes the Prometheus config. It ends on SIGTERM, and by itself when its parent goes (its
stdin is the parent's pipe: end of file means nobody is left).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engram_top.seed import reference
from engram_top.sim.exporters import listen, port_of
from engram_top.sim.fleet import EXPORTERS, FleetNode


def _renderer(node: FleetNode, exporter: str) -> Callable[[], str]:
    """The exporter's page of the node, rendered when asked."""
    return lambda: node.page(exporter, time.monotonic())


async def serve(nodes: int, ports_file: Path, skip: set[tuple[str, str]]) -> None:
    ref = reference.default()
    started = time.monotonic()
    servers: list[asyncio.Server] = []
    table: list[dict[str, object]] = []
    for i in range(nodes):
        node = FleetNode(ref, i, started)
        ports: dict[str, int] = {}
        entry: dict[str, object] = {"node": node.name, "placement": node.placement,
                                    "gpus": ref.gpus, "ports": ports}
        for exporter in EXPORTERS:
            if (node.name, exporter) in skip:
                continue  # that exporter is down on that node: its port answers nothing
            server = await listen(_renderer(node, exporter), "127.0.0.1", 0)
            servers.append(server)
            ports[exporter] = port_of(server)
        table.append(entry)
    tmp = ports_file.with_name(ports_file.name + ".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "nodes": table}))
    tmp.replace(ports_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # stdin's end of file: the parent is gone.
    await loop.connect_read_pipe(lambda: _EofProtocol(stop), sys.stdin)
    try:
        await stop.wait()
    finally:
        for server in servers:
            server.close()


class _EofProtocol(asyncio.Protocol):
    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop

    def eof_received(self) -> bool:
        self.stop.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop.set()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engram_top.sim.fleet_server")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--ports-file", type=Path, required=True)
    p.add_argument("--skip", action="append", default=[], metavar="NODE:EXPORTER",
                   help="an exporter that is down on a node (dcgm, node or sglang)")
    args = p.parse_args(argv)
    skip = set()
    for item in args.skip:
        node, _, exporter = item.partition(":")
        if exporter not in EXPORTERS:
            p.error(f"--skip {item}: EXPORTER is one of {', '.join(EXPORTERS)}")
        skip.add((node, exporter))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.nodes, args.ports_file, skip))
    return 0


if __name__ == "__main__":
    sys.exit(main())
