"""A process's memory cgroup: where a server runs in a container (Docker, Kubernetes, a
systemd unit with MemoryMax=), the kernel kills it at the cgroup's limit, whatever the host
has free. Read from /proc/PID/cgroup (which cgroup) and the cgroup filesystem (v2's unified
hierarchy, else v1's memory controller); the roots are parameters, so tests read a fixture
tree as they read a test /proc.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from collectors.base import read_text
from collectors.readings import CgroupMemory

CGROUP_ROOT = Path("/sys/fs/cgroup")
# v1 writes "no limit" as the largest page-aligned long: anything past 2^60 is none.
V1_UNLIMITED = 1 << 60


def cgroup_of(pid: int | str, proc: Path = Path("/proc")) -> tuple[int, str] | None:
    """(version, path) of the process's memory cgroup; None where it has none or is gone.
    The root ("/") is the host itself: no container."""
    try:
        text = read_text(f"{proc}/{pid}/cgroup")
    except OSError:
        return None
    v1 = v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2].strip()
        elif "memory" in parts[1].split(","):
            v1 = parts[2].strip()
    # A hybrid host lists both: its memory controller is v1's, the unified line says nothing
    # of memory then.
    version, path = (1, v1) if v1 is not None else (2, v2)
    if path is None or path in ("", "/"):
        return None
    return version, path


def _int(path: str) -> int | None:
    try:
        text = read_text(path).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _keyed(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    """Of memory.stat or memory.events ("key value" lines), those keys that it has."""
    out: dict[str, int] = {}
    try:
        text = read_text(path)
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith(keys):
            key, _, value = line.partition(" ")
            if key in keys and value.strip().isdigit():
                out[key] = int(value)
    return out


def read_memory(version: int, path: str, root: Path = CGROUP_ROOT) -> CgroupMemory | None:
    """The cgroup's memory figures; None where its folder cannot be read (a container that
    does not mount the hierarchy, a cgroup gone)."""
    if version == 2:
        folder = f"{root}/{path.lstrip('/')}"
        if not os.path.isdir(folder):
            return None
        stat = _keyed(f"{folder}/memory.stat", ("anon", "file", "shmem"))
        return CgroupMemory(
            path=path, version=2, limit_bytes=_int(f"{folder}/memory.max"),  # "max": None
            current_bytes=_int(f"{folder}/memory.current"), anon_bytes=stat.get("anon"),
            file_bytes=stat.get("file"), shmem_bytes=stat.get("shmem"),
            oom_kills=_keyed(f"{folder}/memory.events", ("oom_kill",)).get("oom_kill"))
    folder = f"{root}/memory/{path.lstrip('/')}"
    if not os.path.isdir(folder):
        return None
    stat = _keyed(f"{folder}/memory.stat", ("rss", "cache", "shmem"))
    limit = _int(f"{folder}/memory.limit_in_bytes")
    return CgroupMemory(
        path=path, version=1, limit_bytes=None if limit is None or limit >= V1_UNLIMITED
        else limit, current_bytes=_int(f"{folder}/memory.usage_in_bytes"),
        anon_bytes=stat.get("rss"), file_bytes=stat.get("cache"), shmem_bytes=stat.get("shmem"),
        oom_kills=_keyed(f"{folder}/memory.oom_control", ("oom_kill",)).get("oom_kill"))


def memory_of(pid: int | str, proc: Path = Path("/proc"),
              root: Path = CGROUP_ROOT) -> CgroupMemory | None:
    found = cgroup_of(pid, proc)
    return None if found is None else read_memory(found[0], found[1], root)


# A container runtime's id in a cgroup path's last parts: docker-<id>.scope (systemd's
# driver), cri-containerd-<id>.scope, crio-<id>.scope, libpod-<id>.scope, or the bare id
# under docker/ or a Kubernetes pod (cgroupfs' driver). Twelve characters name it, as
# `docker ps` does.
_RUNTIME = re.compile(r"^(?:(docker|cri-containerd|crio|libpod)-)?([0-9a-f]{64})(?:\.scope)?\Z")
_RUNTIME_NAMES = {"docker": "docker", "cri-containerd": "containerd", "crio": "cri-o",
                  "libpod": "podman"}
_POD = re.compile(r"pod([0-9a-f]{8})[0-9a-f_-]{20,}(?:\.slice)?\Z")
_SERVICE = re.compile(r"^[\w@.:-]+\.service\Z", re.ASCII)
_NAME = re.compile(r"^[\w.-]+\Z", re.ASCII)


def container_name(path: str) -> str:
    """What a cgroup path says the process runs in, for a ledger line: "docker 3f2a1b4c5d6e",
    "k8s pod 7d1c0e2a, containerd 9b8a7c6d5e4f", "lxc web", "sglang.service"; "" for the host
    itself, a login session and anything not told apart (never a guess)."""
    parts = [p for p in path.strip().split("/") if p]
    if not parts:
        return ""
    pod = next((m.group(1) for p in parts if (m := _POD.search(p))), None)
    last = parts[-1]
    runtime = _RUNTIME.match(last)
    if runtime is not None:
        kind = _RUNTIME_NAMES.get(runtime.group(1) or "", "")
        if not kind:  # a bare id: its folder says whose
            kind = "docker" if "docker" in parts[:-1] else "container"
        found = f"{kind} {runtime.group(2)[:12]}"
        return f"k8s pod {pod}, {found}" if pod else found
    if pod is not None:
        return f"k8s pod {pod}"
    for i, p in enumerate(parts):
        lxc = parts[i + 1] if p == "lxc" and i + 1 < len(parts) else \
            p.removeprefix("lxc.payload.") if p.startswith("lxc.payload.") else None
        if lxc is not None:  # a name from outside: only a name's characters are shown
            return f"lxc {lxc[:40]}" if _NAME.match(lxc) else "lxc"
    if _SERVICE.match(last) and "user.slice" not in parts:
        return last[:60]
    return ""


def container_of(pid: int | str, proc: Path = Path("/proc")) -> str:
    """What the process runs in (container_name of its memory cgroup); "" where it has
    none, or is gone."""
    found = cgroup_of(pid, proc)
    return "" if found is None else container_name(found[1])
