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

from collectors.base import read_text
from collectors.listening import listening_inodes

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


def listening_pid(port: int, proc: str = "/proc") -> int | None:
    """The pid listening on TCP ``port`` on this host, or None when none can be seen (none
    listens, or its process is another user's). Its socket's inode, then the processes'
    descriptors newest first, stopping at the first that holds it (a server is younger than
    the node's daemons): a few processes read rather than every descriptor of every one, as
    psutil.net_connections reads them (12 ms at an attach on a quiet 2-core machine, far
    more on a node of thousands). Of a family that holds it (a launcher and the workers it
    forked), the eldest."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        pids = sorted((int(e) for e in os.listdir(proc) if e.isdigit()), reverse=True)
    except OSError:
        return None
    for pid in pids:
        if _holds(proc, pid, wanted):
            while (parent := _parent(proc, pid)) and _holds(proc, parent, wanted):
                pid = parent
            return pid
    return None


def _holds(proc: str, pid: int, wanted: set[str]) -> bool:
    """Whether the process has one of these sockets open (False where it cannot be read)."""
    folder = f"{proc}/{pid}/fd"
    try:
        fds = os.listdir(folder)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{folder}/{fd}") in wanted:
                return True
        except OSError:
            continue
    return False


def _parent(proc: str, pid: int) -> int | None:
    try:
        # The fields after the name (which may hold any character but the closing one):
        # state, then the parent's pid.
        return int(read_text(f"{proc}/{pid}/stat").rpartition(")")[2].split()[1]) or None
    except (OSError, ValueError, IndexError):
        return None


# An engine's launcher started without --port listens on its own default port.
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000}


def url_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)


def _port_named(argv: list[str]) -> str | None:
    """The port a command line names (`--port N`, `--port=N`), as written; None if none."""
    for i, arg in enumerate(argv):
        if arg == "--port" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--port="):
            return arg.removeprefix("--port=")
    return None


def names_port(argv: list[str], port: int) -> bool:
    """Whether a command line would serve on ``port``: `--port N`, `--port=N`, or an
    engine's launcher without --port where ``port`` is that engine's default."""
    if (named := _port_named(argv)) is not None:
        return named == str(port)
    line = " ".join(argv).lower()
    return any(engine in line and port == default for engine, default in DEFAULT_PORTS.items())


def might_serve(url: str) -> bool | None:
    """Whether a process on this host listens on ``url``'s port, or was started to (an
    engine loading its weights listens only once they are loaded); None for a URL on
    another host, or a host whose sockets cannot be listed: nothing can be told."""
    if urlsplit(url).hostname not in LOOPBACK:
        return None
    port = url_port(url)
    listening = listening_inodes(port)
    if listening is None:
        return None
    # Another user's socket has no pid without root, but it is listed: that is enough.
    if listening:
        return True
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid == os.getpid():  # its own `--engine sglang` is no server
            continue
        argv = proc.info.get("cmdline") or []
        if argv and names_port([str(a) for a in argv], port):
            return True
    return False


# Engine launchers that serve on their engine's default port when no --port is given.
LAUNCHERS = {"sglang.launch_server": 30000, "sglang serve": 30000,
             "vllm.entrypoints.openai.api_server": 8000, "vllm serve": 8000}


def _started_for(argv: list[str], port: int) -> bool:
    """Whether a command line was started to serve on ``port``: it names the port (`--port N`,
    `--port=N`), or it is an engine's launcher without --port and ``port`` is its default.
    Narrower than names_port: a command that only mentions an engine (this dashboard's own
    `--engine sglang`) is no server."""
    if (named := _port_named(argv)) is not None:
        return named == str(port)
    words = " ".join(os.path.basename(a) for a in argv[:3])
    return any(name in words and port == default for name, default in LAUNCHERS.items())


def starting_pid(url: str) -> int | None:
    """The process on this host started to serve ``url`` that does not listen yet (an
    engine loading its weights): its launcher, the oldest such process whose parent is not
    one too. None for a URL on another host, or where none can be seen."""
    if urlsplit(url).hostname not in LOOPBACK:
        return None
    port = url_port(url)
    found: dict[int, tuple[int, float]] = {}  # pid -> (its parent, when it started)
    for proc in psutil.process_iter(["ppid", "cmdline", "create_time"]):
        if proc.pid == os.getpid():
            continue
        argv = proc.info.get("cmdline") or []
        if argv and _started_for([str(a) for a in argv], port):
            found[proc.pid] = (proc.info.get("ppid") or 0, proc.info.get("create_time") or 0.0)
    roots = [pid for pid, (parent, _) in found.items() if parent not in found]
    return min(roots, key=lambda pid: found[pid][1]) if roots else None


def output_file(pid: int) -> str | None:
    """The regular file a process writes its standard error (else its output) to, where it
    has one (`... > server.log 2>&1`, a supervisor's log file): the server log of a server
    someone else started. None for a terminal, a pipe, a journal socket or a deleted file."""
    for fd in (2, 1):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if path.startswith("/") and not path.endswith(" (deleted)") and os.path.isfile(path):
            return path
    return None


def server_environ(url: str, prefixes: tuple[str, ...]) -> tuple[int | None, dict[str, str]]:
    """(pid, the variables starting with one of ``prefixes``) of the local process that
    serves ``url``, or was started to and does not listen yet (starting_pid); (None, {})
    for a remote URL or a process that cannot be read."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        return None, {}
    pid = listening_pid(url_port(url)) or starting_pid(url)
    if pid is None:
        return None, {}
    try:
        env = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return pid, {}
    return pid, {k: v for k, v in env.items() if k.startswith(prefixes)}
