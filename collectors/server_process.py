"""The process behind a server someone else started on this machine: the one listening on its
URL's port. An attached server tells nothing of its environment over HTTP, and the Engram
switches of SGLang's V4.1 preview builds are environment variables; reading them from the
process is how `attach` learns the placement without the start-up log.

Best effort by design: another user's process (without root), a server in a container or
on another host gives None, and the dashboard says the placement is unknown.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import psutil

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def listening_pid(port: int) -> int | None:
    """The pid listening on TCP ``port`` on this host, or None when none can be seen."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in conns:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def server_environ(url: str, prefixes: tuple[str, ...]) -> tuple[int | None, dict[str, str]]:
    """(pid, the variables starting with one of ``prefixes``) of the local process that
    serves ``url``; (None, {}) for a remote URL or a process that cannot be read."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        return None, {}
    port = parts.port or (443 if parts.scheme == "https" else 80)
    pid = listening_pid(port)
    if pid is None:
        return None, {}
    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return pid, {}
    return pid, {k: v for k, v in env.items() if k.startswith(prefixes)}
