"""Sources: what a session polls, each at its own interval, one poll at a time.

A source answers for one node or many: a collector of this machine's GPUs answers for its
node, a Prometheus server for every node it scrapes. So a poll returns readings keyed by
(node, source), and the store keeps them apart by that key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from collectors.readings import Reading

LOCAL = ""  # the node this session runs on (or simulates): the one its panels show first


class SourceName(StrEnum):
    """The sources every node has, by the name their readings are kept under. A StrEnum:
    each is its string too, so a recording's "gpu" and a source of a name of its own read
    the same way."""

    GPU = "gpu"
    HOST = "host"
    SERVER = "server"  # a node's server; in the store, the watched one


class SourceKey(NamedTuple):
    """Where a reading comes from: the node it describes, and what read it there (a
    SourceName, or a name of a source's own). A named tuple: hashed and compared in C,
    for it keys every reading and every point of every series."""

    node: str
    source: str

    def __str__(self) -> str:
        return self.source if self.node == LOCAL else f"{self.node}/{self.source}"

    @classmethod
    def parse(cls, text: str) -> SourceKey:
        """The key str() wrote (a recording's "kind"): "gpu", or "NODE/SOURCE", where a
        node may be a URL with slashes of its own. One object per text: the store finds
        its series by identity first, and a replay parses a key for every reading."""
        key = _PARSED.get(text)
        if key is None:
            node, _, source = text.rpartition("/")
            key = _PARSED[text] = cls(node, source)
        return key


_PARSED: dict[str, SourceKey] = {}


Keyed = tuple[SourceKey, Reading[Any]]


class Source(Protocol):
    name: str  # unique in a session: adding a source of the same name replaces it

    def poll(self) -> Awaitable[list[Keyed]]: ...
    # A coroutine: the session closes a dropped source on a task of its own.
    async def close(self) -> None: ...


class NodeSource:
    """A collector that reads one node (GPUs, host memory, a server) as a source."""

    def __init__(self, name: str, poll: Callable[[], Awaitable[Reading[Any]]],
                 close: Callable[[], Awaitable[None]] | None = None, node: str = LOCAL,
                 kind: str | None = None) -> None:
        self.name = name
        self.key = SourceKey(node, kind or name)
        self._poll = poll
        self._close = close

    async def poll(self) -> list[Keyed]:
        return [(self.key, await self._poll())]

    async def close(self) -> None:
        if self._close is not None:
            await self._close()
