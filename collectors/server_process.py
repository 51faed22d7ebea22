"""The process behind a server someone else started on this machine: the one listening on its
URL's port. An attached server tells nothing of its environment over HTTP, and the Engram
switches of SGLang's V4.1 preview builds are environment variables; reading them from the
process is how `attach` learns the placement without the start-up log.

Best effort by design: another user's process (without root), a server in a container or
on another host gives None, and the dashboard says the placement is unknown.
"""

from __future__ import annotations

import os
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


# An engine's launcher started without --port listens on its own default port.
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def names_port(argv: list[str], port: int) -> bool:
    """Whether a command line would serve on ``port``: `--port N`, `--port=N`, or an
    engine's launcher without --port where ``port`` is that engine's default."""
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            return argv[i + 1] == str(port)
        if arg.startswith("--port="):
            return arg == f"--port={port}"
    line = " ".join(argv).lower()
    return any(engine in line and port == default for engine, default in DEFAULT_PORTS.items())


def might_serve(url: str) -> bool | None:
    """Whether a process on this host listens on ``url``'s port, or was started to (an
    engine loading its weights listens only once they are loaded); None for a URL on
    another host, or a host whose sockets cannot be listed: nothing can be told."""
    if urlsplit(url).hostname not in LOOPBACK:
        return None
    port = url_port(url)
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    # Another user's socket has no pid without root, but it is listed: that is enough.
    if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
        return True
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid == os.getpid():  # its own `--engine sglang` is no server
            continue
        argv = proc.info.get("cmdline") or []
        if argv and names_port([str(a) for a in argv], port):
            return True
    return False


def server_environ(url: str, prefixes: tuple[str, ...]) -> tuple[int | None, dict[str, str]]:
    """(pid, the variables starting with one of ``prefixes``) of the local process that
    serves ``url``; (None, {}) for a remote URL or a process that cannot be read."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        return None, {}
    pid = listening_pid(url_port(url))
    if pid is None:
        return None, {}
    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return pid, {}
    return pid, {k: v for k, v in env.items() if k.startswith(prefixes)}
