"""Who holds a TCP port on this machine: a launch on a taken port is refused up front,
naming the holder."""

from __future__ import annotations

import contextlib
import socket

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
