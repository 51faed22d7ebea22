"""An attached server on the simulated node: its GPUs and host are the node's folder, read
through the simulated backends in place of NVML and /proc, as a session that started the
server reads them. The folder is named by `attach --node-dir`, or by the server itself: a
simulated server serving on loopback names it in /server_info's "simulated" block."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from collectors.server_process import LOOPBACK


def node_dir_problem(path: Path) -> str | None:
    """Why ``path`` is not a simulated node's folder (None: it is one)."""
    spec = path / "node.json"
    try:
        raw = json.loads(spec.read_text())
    except FileNotFoundError:
        return f"{path}: not a simulated node's folder (no node.json in it)"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return f"{spec}: cannot read it: {getattr(exc, 'strerror', None) or exc}"
    if not isinstance(raw, dict) or not isinstance(raw.get("gpus"), int):
        return f"{spec}: not a simulated node's spec (no gpus)"
    return None


def named_node_dir(url: str, simulated: Mapping[str, object] | None) -> Path | None:
    """The node folder a simulated server on this machine names (in ServerData.simulated);
    None for any other server, a remote one (its folder would be another machine's), or a
    folder that is not a node's."""
    if urlsplit(url).hostname not in LOOPBACK or simulated is None:
        return None
    named = simulated.get("node_dir")
    if not isinstance(named, str) or not named or "\x00" in named:
        return None
    path = Path(named)
    return path if path.is_absolute() and node_dir_problem(path) is None else None
