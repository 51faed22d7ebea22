"""How the simulated server's log looks beyond its words: the ranks' prefixes for its
parallel layout (`sim serve --parallel`), as SGLang's scheduler builds them ("DP1 TP1 EP1",
"PP1 TP0"), and a container runtime's timestamp before every line (`--log-timestamps`).

Set once at start: every line of the process, uvicorn's included, goes through them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Layout:
    """The sizes SGLang's ServerArgs would hold for this layout, on the node's ``gpus``."""

    name: str
    tp: int
    dp: int
    pp: int
    ep: int

    def tag(self, rank: int) -> str:
        """SGLang's order: DP, PP, TP, EP; a dimension of size 1 is left out (DP is shown
        whenever DP attention gives the rank one)."""
        tp_rank = rank % self.tp
        out = ""
        if self.dp > 1:
            out += f" DP{rank % self.dp}"
        if self.pp > 1:
            out += f" PP{rank // self.tp}"
        if self.tp > 1:
            out += f" TP{tp_rank}"
        if self.ep > 1:
            out += f" EP{rank % self.ep}"
        return out


def layout(name: str, gpus: int) -> Layout:
    if name == "dp-attention":  # --tp N --dp N --enable-dp-attention --ep N
        return Layout(name, tp=gpus, dp=gpus, pp=1, ep=gpus)
    if name == "pp":  # two stages, each a TP group of half the GPUs
        return Layout(name, tp=max(1, gpus // 2), dp=1, pp=2 if gpus > 1 else 1, ep=1)
    return Layout("tp", tp=gpus, dp=1, pp=1, ep=1)


_current = {"layout": Layout("tp", tp=4, dp=1, pp=1, ep=1)}


def set_layout(value: Layout) -> None:
    _current["layout"] = value


def rank_tag(rank: int | None) -> str:
    return "" if rank is None else _current["layout"].tag(rank)


def rfc3339_now() -> str:
    """`2026-03-02T10:00:00.123456789Z`, as kubectl and docker print a line's time."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) \
        + f".{ns % 1_000_000_000:09d}Z"


class Timestamped:
    """A text stream that puts the time before each line it is given, as a container
    runtime does to what the process writes; the rest passes through."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.at_line_start = True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self.at_line_start:
                out.append(rfc3339_now() + " ")
            out.append(piece)
            self.at_line_start = piece.endswith("\n")
        self.inner.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.inner.fileno()

    def __getattr__(self, name: str) -> object:  # encoding, errors, ... as the stream has them
        return getattr(self.inner, name)


def uvicorn_log_config(prefix: str = "") -> dict[str, Any]:
    """uvicorn's loggers on stdout beside the server's own lines, each line after ``prefix``
    (SGLang gives them its timestamp, "[%(asctime)s] "; vLLM leaves uvicorn's format alone)."""
    def formatter(kind: str, fmt: str) -> dict[str, Any]:
        return {"()": f"uvicorn.logging.{kind}", "fmt": prefix + fmt,
                "datefmt": "%Y-%m-%d %H:%M:%S", "use_colors": False}

    def handler(formatter_name: str) -> dict[str, Any]:
        return {"formatter": formatter_name, "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout"}

    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": formatter("DefaultFormatter", "%(levelprefix)s %(message)s"),
            "access": formatter("AccessFormatter", '%(levelprefix)s %(client_addr)s - '
                                '"%(request_line)s" %(status_code)s'),
        },
        "handlers": {"default": handler("default"), "access": handler("access")},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }
