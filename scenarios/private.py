"""Files only their owner can read. A state folder holds the servers' raw logs (SGLang prints
its whole ServerArgs, API keys included), the key files handed to servers, and what they left
running: 0700 folders, 0600 files, whatever the umask."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Any


def private_folder(path: Path) -> Path:
    """Make (or tighten) a folder only its owner can enter; returns it. Folders made on the
    way to it are 0700 too (~/.local/state/engram-top); existing ones are left as they are."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    with contextlib.suppress(OSError):
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a 0600 file atomically: a temporary file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def open_private(path: Path, mode: str = "a") -> IO[Any]:
    """open() for a 0600 file (created so, or tightened if it exists)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8", newline="\n")
