"""A simulated node's exporters: its virtual GPUs in dcgm-exporter's format and its virtual
host memory in node-exporter's, each on a port of its own, as a real node runs them beside
its SGLang server. The pages are rendered from the same state the dashboard's simulated
backends read, so Prometheus and engram-top see one node.

Also the pages' formats for the exporter-only fleet (sim/fleet.py), and the small HTTP
loop both serve them with (GET /metrics, keep-alive, nothing else).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterable
from pathlib import Path

from collectors.readings import GpuDevice
from collectors.units import MIB
from engram_top.sim.metrics_page import MetricsPage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_HEAD = 16 * 1024
IDLE_S = 60.0  # a scraper's idle keep-alive connection is closed after this
DCGM_FIELDS = (
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - "
     "including both protocol headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including "
     "both protocol headers and data payloads - in bytes per second."),
)


def dcgm_page(devices: Iterable[GpuDevice], hostname: str, driver: str) -> str:
    """dcgm-exporter's default fields for these GPUs (memory in whole MiB, as it reports)."""
    m = MetricsPage()
    for name, text in DCGM_FIELDS:
        m.declare(name, "gauge", text)
    for d in devices:
        labels = {"gpu": str(d.index), "UUID": d.uuid,
                  "pci_bus_id": f"00000000:{0x18 + 0x10 * d.index:02X}:00.0",
                  "device": f"nvidia{d.index}", "modelName": d.name, "Hostname": hostname,
                  "DCGM_FI_DRIVER_VERSION": driver}
        m.set("DCGM_FI_DEV_FB_USED", labels, d.used_bytes // MIB)
        m.set("DCGM_FI_DEV_FB_FREE", labels, d.free_bytes // MIB)
        m.set("DCGM_FI_DEV_FB_RESERVED", labels, d.reserved_bytes // MIB)
        for name, value in (("DCGM_FI_DEV_GPU_UTIL", d.util_gpu_pct),
                            ("DCGM_FI_DEV_POWER_USAGE", d.power_w),
                            ("DCGM_FI_PROF_PCIE_TX_BYTES", d.pcie_tx_bytes_per_s),
                            ("DCGM_FI_PROF_PCIE_RX_BYTES", d.pcie_rx_bytes_per_s)):
            if value is not None:
                m.set(name, labels, value)
    return m.render()


def node_page(meminfo: dict[str, int]) -> str:
    """node-exporter's meminfo collector: /proc/meminfo's fields in bytes (HugePages_*
    counts stay counts), named as node-exporter names them."""
    m = MetricsPage()
    for key, value in meminfo.items():
        name = f"node_memory_{key}" if key.startswith("HugePages_") \
            else f"node_memory_{key}_bytes"
        m.declare(name, "gauge", f"Memory information field {key}.")
        m.set(name, {}, value)
    return m.render()


async def serve_metrics(render: Callable[[], str], reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
    """One scraper's connection: GET /metrics answered with ``render()``, kept alive."""
    try:
        while True:  # keep-alive: Prometheus reuses its connection scrape after scrape
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
            if len(head) > MAX_HEAD:
                break
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method == "GET" and path.split("?")[0] == "/metrics":
                status, body = "200 OK", render().encode()
            else:
                status, body = "404 Not Found", b"not found: only /metrics is served\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
            ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def listen(render: Callable[[], str], host: str, port: int) -> asyncio.Server:
    return await asyncio.start_server(lambda r, w: serve_metrics(render, r, w), host, port,
                                      limit=MAX_HEAD)


async def start(node_dir: Path, host: str, dcgm_port: int | None, node_port: int | None,
                hostname: str | None = None) -> dict[str, asyncio.Server]:
    """The node's exporters on their ports (0: the kernel's choice), by name ("dcgm",
    "node"); each page rendered when scraped, from the node's state at that moment."""
    from engram_top.sim.backends import DRIVER, SimGpuBackend, SimHostBackend
    gpus, mem = SimGpuBackend(node_dir), SimHostBackend(node_dir)
    name = hostname or socket.gethostname()
    driver = DRIVER.split(" ")[0]
    out: dict[str, asyncio.Server] = {}
    if dcgm_port is not None:
        out["dcgm"] = await listen(lambda: dcgm_page(gpus.sample().devices, name, driver),
                                   host, dcgm_port)
    if node_port is not None:
        out["node"] = await listen(lambda: node_page(mem.meminfo()), host, node_port)
    return out


def port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])
