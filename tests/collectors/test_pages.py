"""collectors.pages: the poll's own HTTP/1.1 client, against a scripted server on
127.0.0.1 that answers each request with the bytes a test gives it (real sockets, real
HTTP framing: lengths, chunks, a body to the close, gzip, a connection closed while idle)."""

from __future__ import annotations

import asyncio
import base64
import gzip
from collections.abc import AsyncIterator

import pytest

from collectors.base import TooLarge
from collectors.pages import ConnectFailed, PageClient, PageError

LIMIT = 1024 * 1024


class Scripted:
    """Each accepted request gets the next answer of ``answers`` (bytes), then the server
    closes the connection if the answer says ``close``. What each request said is kept."""

    def __init__(self, *answers: bytes, close_after: bool = False, hold: bool = False) -> None:
        self.answers = list(answers)
        self.hold = hold  # after the last answer, keep the connection open, saying nothing
        self.requests: list[bytes] = []
        self.connections = 0
        self.close_after = close_after
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                answer = self.answers.pop(0)
                writer.write(answer)
                await writer.drain()
                if self.close_after or b"connection: close" in answer.lower():
                    break
            if self.hold:
                await reader.read()  # until the client gives up and closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n{head}\r\n".encode() + body


@pytest.fixture
async def client() -> AsyncIterator[list[PageClient]]:
    made: list[PageClient] = []
    yield made
    for c in made:
        await c.aclose()


def new(made: list[PageClient], url: str, **kw: object) -> PageClient:
    c = PageClient(url, **kw)  # type: ignore[arg-type]
    made.append(c)
    return c


async def test_a_length_a_chunked_body_and_one_kept_connection(client) -> None:  # type: ignore[no-untyped-def]
    chunked = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n"
               b"content-type: text/plain; charset=utf-8\r\n\r\n"
               b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nx-trailer: 1\r\n\r\n")
    async with Scripted(ok(b"first"), chunked, ok(b'{"a": 1}')) as server:
        c = new(client, server.url, headers={"Authorization": "Bearer k"})
        first = await c.get("/health", deadline_s=5, limit_bytes=LIMIT)
        second = await c.get("/metrics", deadline_s=5, limit_bytes=LIMIT)
        third = await c.get("/server_info", deadline_s=5, limit_bytes=LIMIT)
    assert (first.status_code, first.content) == (200, b"first")
    assert second.text == "hello, world"
    assert third.json() == {"a": 1}
    assert server.connections == 1  # kept alive
    assert server.requests[1].startswith(b"GET /metrics HTTP/1.1\r\n")
    assert b"Authorization: Bearer k\r\n" in server.requests[1]
    assert b"Accept-Encoding: identity\r\n" in server.requests[1]


async def test_a_body_to_the_close_and_basic_auth(client) -> None:  # type: ignore[no-untyped-def]
    async with Scripted(b"HTTP/1.0 200 OK\r\n\r\nall of it", ok(b"again"),
                        close_after=True) as server:
        c = new(client, server.url, auth=("user", "p:ss"))
        page = await c.get("/metrics", deadline_s=5, limit_bytes=LIMIT)
        again = await c.get("/metrics", deadline_s=5, limit_bytes=LIMIT)
    assert page.content == b"all of it" and again.content == b"again"
    assert server.connections == 2  # a read-to-close body spends its connection
    token = base64.b64encode(b"user:p:ss").decode()
    assert f"Authorization: Basic {token}\r\n".encode() in server.requests[0]


async def test_a_connection_closed_while_idle_is_opened_again_once(client) -> None:  # type: ignore[no-untyped-def]
    async with Scripted(ok(b"one"), ok(b"two"), close_after=True) as server:
        c = new(client, server.url)
        assert (await c.get("/x", deadline_s=5, limit_bytes=LIMIT)).content == b"one"
        await asyncio.sleep(0)  # the server has closed its side meanwhile
        assert (await c.get("/x", deadline_s=5, limit_bytes=LIMIT)).content == b"two"
    assert server.connections == 2


async def test_gzip_although_not_asked_and_a_bomb_meets_the_bound(client) -> None:  # type: ignore[no-untyped-def]
    small = gzip.compress(b"metric 1\n" * 10)
    bomb = gzip.compress(b"\0" * (8 * LIMIT))  # 8 MiB unpacked from a few kB
    async with Scripted(ok(small, "content-encoding: gzip"),
                        ok(bomb, "content-encoding: gzip")) as server:
        c = new(client, server.url)
        assert (await c.get("/m", deadline_s=5, limit_bytes=LIMIT)).text == "metric 1\n" * 10
        with pytest.raises(TooLarge, match="more than 1 MiB"):
            await c.get("/m", deadline_s=5, limit_bytes=LIMIT)


async def test_faults_are_named_and_never_hang(client) -> None:  # type: ignore[no-untyped-def]
    async with Scripted(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
                        close_after=True) as server:
        with pytest.raises(PageError, match="cut or malformed"):
            await new(client, server.url).get("/m", deadline_s=5, limit_bytes=LIMIT)
    async with Scripted(b"SSH-2.0-OpenSSH_9.2\r\n\r\n") as server:
        with pytest.raises(PageError, match="not an HTTP answer"):
            await new(client, server.url).get("/m", deadline_s=5, limit_bytes=LIMIT)
    async with Scripted(b"HTTP/1.1 200 OK\r\nx-long: " + b"a" * 70_000 + b"\r\n\r\n") as server:
        with pytest.raises(PageError, match="headers"):
            await new(client, server.url).get("/m", deadline_s=5, limit_bytes=LIMIT)
    # Headers and half a body, then silence: the total deadline ends it.
    async with Scripted(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf",
                        hold=True) as server:
        with pytest.raises(TimeoutError):
            await new(client, server.url).get("/m", deadline_s=0.5, limit_bytes=LIMIT)


async def test_nothing_listening_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectFailed) as info:
        await new(client, f"http://127.0.0.1:{port}").get("/m", deadline_s=5,
                                                          limit_bytes=LIMIT)
    assert info.value.refused and "connection refused" in str(info.value)


async def test_status_errors_and_a_path_prefix(client) -> None:  # type: ignore[no-untyped-def]
    async with Scripted(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n") as server:
        page = await new(client, server.url + "/sglang/").get("/metrics", deadline_s=5,
                                                              limit_bytes=LIMIT)
    assert page.status_code == 404
    assert server.requests[0].startswith(b"GET /sglang/metrics HTTP/1.1\r\n")
    with pytest.raises(PageError, match="HTTP 404"):
        page.raise_for_status()
