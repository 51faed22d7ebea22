"""Who holds a TCP port on this machine: a launch on a taken port is refused up front,
naming the holder; and a free port for a server of ours (a scenario, Prometheus, an
exporter)."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

import psutil


def port_in_use(host: str, port: int) -> bool:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else host
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((target, port)) == 0


def who_listens(port: int) -> str:
    """'pid 123 (python)' for a local listener, where the OS lets us see it."""
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            laddr = conn.laddr  # an empty tuple where the socket has no address
            if conn.status == psutil.CONN_LISTEN and laddr and laddr.port == port and conn.pid:
                with contextlib.suppress(psutil.Error):
                    return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
                return f"pid {conn.pid}"
    return "another process"


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below: the ports services are configured on
# Ours are drawn from here up to the ephemeral range; 10000-19999 is left to a test suite's
# own servers, which bind theirs seconds after drawing them (a port drawn by both clashed).
OURS = 20_000


def free_port() -> int:
    """A port free now for a server of ours, below the kernel's ephemeral range where one
    is room for it: a port bind(0) gives is drawn from the range every outgoing connection
    takes its source port from too, and a busy node (or test suite) took it in the second
    before the server bound it (uvicorn: address already in use, exit 3). Else bind(0)."""
    low = ephemeral_start()
    if low - OURS >= 1000:
        # The OS's randomness, not the random module's: a process that seeded it (a bench
        # drawing its requests) would offer every process the same ports.
        for port in random.SystemRandom().sample(range(OURS, low), 20):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ephemeral_start() -> int:
    try:
        return int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default
