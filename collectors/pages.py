"""GET a server's pages once a second for hours, cheaply: HTTP/1.1 over one kept-alive
connection on asyncio streams, each answer whole within a total deadline and a size bound.

Why not httpx for these polls: for a 30 KB /metrics page on loopback it costs about 2 ms of
CPU a request, this about 0.15 ms (benchmarks/RESULTS.md); at one poll a second that is the
difference between a dashboard that costs what nvitop does and one that costs more. httpx
stays for everything else (the load driver, the supervisor, the CLI) and serves https://
URLs here too, with the same deadline and bound (collectors.base.get_bounded).

What it speaks: GET only, no redirects followed (a 3xx is an answer like any other),
Content-Length, chunked and read-to-close bodies, a gzip or deflate body from a server that
compresses although asked not to (counted as it unpacks, so a gzip bomb meets the bound),
basic auth and bearer keys. A connection the server closed while idle is opened again once;
any other fault closes it, and the next GET opens a fresh one.

Credentials: a URL's user:password@ is basic auth, taken off the URL (an error message or a
screen never quotes it); an Authorization header given (an API key, a bearer token) wins over
it, as a server reads one Authorization header. A header value with a control character is
refused (HeaderError) rather than written: a CR or LF in a key would start headers of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from collectors.base import TooLarge, get_bounded
from collectors.units import MIB

if TYPE_CHECKING:
    import httpx

MAX_HEAD = 64 * 1024  # status line and headers together
MAX_LINE = 64 * 1024  # one header line, one chunk-size line


class HeaderError(ValueError):
    """A header value (an API key, a token) that HTTP cannot carry as it is."""


_CHAR_NAMES = {"\r": "a carriage return (CR)", "\n": "a line feed (LF)", "\t": "a tab",
               "\x00": "a NUL byte", "\x1b": "an escape (ESC)", "\x7f": "a DEL"}


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an HTTP header's value, or None. Printable ASCII only:
    a CR or LF would end the header and start another (header injection), other controls and
    non-ASCII characters are refused by HTTP clients or read otherwise by servers; spaces at
    either end are dropped by the server, so the key it compares would not be this one."""
    if not value:
        return "is empty"
    for i, ch in enumerate(value):
        if not " " <= ch <= "~":
            what = _CHAR_NAMES.get(ch) or (f"the control character U+{ord(ch):04X}"
                                           if ch.isascii() or not ch.isprintable()
                                           else f"the non-ASCII character U+{ord(ch):04X}")
            return (f"holds {what} at character {i + 1} of {len(value)}: an HTTP header "
                    "carries printable ASCII only")
    if value != value.strip():
        return "begins or ends with a space, which the server would not see"
    return None


def bearer(key: str | None, what: str = "the API key") -> dict[str, str]:
    """The Authorization header of an API key or token ({} without one); HeaderError for a
    key HTTP cannot carry. Every client that sends a key builds its header here."""
    if not key:
        return {}
    problem = header_value_problem(key)
    if problem is not None:
        raise HeaderError(f"{what} {problem}")
    return {"Authorization": f"Bearer {key}"}


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without its user:password@, and the (user, password) pair, or None without
    one. What a screen, a message or a file may show is the first."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None and "@" not in parts.netloc:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
    netloc = host + (f":{port}" if port else "")
    shown = urlunsplit(parts._replace(netloc=netloc))
    return shown, (unquote(parts.username or ""), unquote(parts.password or ""))


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be polled, or None: http(s), a host, a port that is a number from
    1 to 65535, printable ASCII (a CR or LF would split the request line)."""
    if not url.startswith(("http://", "https://")):
        return "not an http(s) URL"
    bad = next((ch for ch in url if not "!" <= ch <= "~"), None)
    if bad is not None:
        return (f"holds {_CHAR_NAMES.get(bad) or f'U+{ord(bad):04X}'}: a URL is printable "
                "ASCII without spaces (percent-encode the rest)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # an unclosed [, a port of letters or past 65535
        return f"not a URL ({exc})"
    if not parts.hostname:
        return "no host"
    if port == 0:
        return "port 0 is no server's port"
    return None


class PageError(Exception):
    """An answer that is not HTTP as it should be, or a connection that failed."""


class ConnectFailed(PageError):
    """Nothing answers at the address (refused, unreachable, no such host)."""

    def __init__(self, where: str, exc: OSError) -> None:
        self.refused = isinstance(exc, ConnectionRefusedError)
        super().__init__(f"{where}: {'connection refused' if self.refused else exc}")


class StatusError(PageError):
    """raise_for_status() on a 4xx or 5xx answer."""


@dataclass
class Page:
    status_code: int
    content: bytes
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names, last one wins
    url: str = ""

    @property
    def text(self) -> str:
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def raise_for_status(self) -> Page:
        if self.status_code >= 400:
            raise StatusError(f"{self.url} answered HTTP {self.status_code}")
        return self


class PageClient:
    """Pages of one server, ``base_url`` (http:// or https://), with the given headers and
    optional basic auth. One request at a time (the poll loops never overlap)."""

    def __init__(self, base_url: str, *, headers: dict[str, str] | None = None,
                 auth: tuple[str, str] | None = None, connect_timeout_s: float = 2.0) -> None:
        shown, userinfo = split_userinfo(base_url)
        self.base_url = shown.rstrip("/")  # quoted by every message: no password in it
        parts = urlsplit(self.base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._connect_timeout_s = connect_timeout_s
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._hostport = host if parts.port is None else f"{host}:{parts.port}"
        extra = dict(headers or {})
        for name, value in extra.items():  # the callers check; this never writes a bad one
            problem = header_value_problem(value)
            if problem is not None or not name.isascii() or not name.replace("-", "").isalnum():
                raise HeaderError(f"the {name!r} header " + (problem or "has a bad name"))
        auth = auth or userinfo
        # One Authorization header: one given (an API key) wins over basic auth.
        if auth is not None and not any(k.lower() == "authorization" for k in extra):
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            extra["Authorization"] = f"Basic {token}"
        self._head = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._httpx: httpx.AsyncClient | None = None
        if self._https:
            import httpx  # TLS only: loaded when a URL needs it (it costs ~80 ms at start)
            self._httpx = httpx.AsyncClient(base_url=self.base_url, headers=extra,
                                            timeout=connect_timeout_s,
                                            follow_redirects=False)

    async def aclose(self) -> None:
        self._drop()
        if self._httpx is not None:
            await self._httpx.aclose()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            self._conn = None

    async def get(self, path: str, *, deadline_s: float, limit_bytes: int) -> Page:
        """The whole answer to GET ``path`` within ``deadline_s``, at most ``limit_bytes`` of
        body once decoded: TimeoutError or TooLarge past them, ConnectFailed or PageError
        for the rest."""
        url = self.base_url + path
        if self._httpx is not None:
            import httpx
            try:
                resp = await get_bounded(self._httpx, path, deadline_s=deadline_s,
                                         limit_bytes=limit_bytes)
            except httpx.ConnectError as exc:
                raise ConnectFailed(self._hostport, OSError(str(exc))) from exc
            except httpx.HTTPError as exc:
                raise PageError(f"{url}: {type(exc).__name__}: {exc}") from exc
            return Page(resp.status_code, resp.content, {k.lower(): v for k, v in
                                                         resp.headers.items()}, url)
        try:
            async with asyncio.timeout(deadline_s):
                return await self._get(path, url, limit_bytes)
        except BaseException:
            self._drop()  # whatever it was in the middle of, the connection is spent
            raise

    async def _get(self, path: str, url: str, limit_bytes: int) -> Page:
        request = (f"GET {self._prefix}{path} HTTP/1.1\r\nHost: {self._hostport}\r\n"
                   "User-Agent: engram-top\r\nAccept: */*\r\nAccept-Encoding: identity\r\n"
                   f"{self._head}\r\n").encode()
        for attempt in (0, 1):
            fresh = self._conn is None
            reader, writer = await self._connect()
            writer.write(request)
            await writer.drain()
            try:
                status_line = await reader.readuntil(b"\r\n")
            except asyncio.IncompleteReadError:
                self._drop()
                if fresh or attempt:  # a new connection that says nothing: the server's fault
                    raise PageError(f"{url}: the server closed the connection without an "
                                    "answer") from None
                continue  # the server had closed this kept-alive connection: once more
            return await self._answer(status_line, reader, url, limit_bytes)
        raise PageError(f"{url}: no answer")  # not reached

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._conn is None:
            try:
                async with asyncio.timeout(self._connect_timeout_s):
                    self._conn = await asyncio.open_connection(self._host, self._port,
                                                               limit=MAX_LINE)
            except TimeoutError:
                raise ConnectFailed(self._hostport,
                                    OSError("no connection within "
                                            f"{self._connect_timeout_s:g} s")) from None
            except OSError as exc:
                raise ConnectFailed(self._hostport, exc) from exc
        return self._conn

    async def _answer(self, status_line: bytes, reader: asyncio.StreamReader, url: str,
                      limit_bytes: int) -> Page:
        try:
            version, status, _ = status_line.decode("latin-1").split(" ", 2)
            code = int(status)
        except ValueError:
            raise PageError(f"{url}: not an HTTP answer: {status_line[:80]!r}") from None
        headers: dict[str, str] = {}
        size = len(status_line)
        while True:
            try:
                line = await reader.readuntil(b"\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                raise PageError(f"{url}: the headers were cut or too long") from None
            size += len(line)
            if size > MAX_HEAD:
                raise PageError(f"{url}: headers over {MAX_HEAD // 1024} KiB")
            if line == b"\r\n":
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        body = await self._body(reader, headers, code, url, limit_bytes)
        keep = version.upper() == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if not keep or ("content-length" not in headers
                        and "chunked" not in headers.get("transfer-encoding", "").lower()):
            self._drop()
        return Page(code, body, headers, url)

    async def _body(self, reader: asyncio.StreamReader, headers: dict[str, str], code: int,
                    url: str, limit_bytes: int) -> bytes:
        if code in (204, 304) or 100 <= code < 200:
            return b""
        encoding = headers.get("content-encoding", "identity").lower()
        unpack = None
        if encoding in ("gzip", "x-gzip"):
            unpack = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            unpack = zlib.decompressobj()
        body = bytearray()

        def take(data: bytes) -> None:
            # A compressed body is bounded as it unpacks: a gzip bomb stops at the bound.
            body.extend(unpack.decompress(data, limit_bytes + 1 - len(body))
                        if unpack is not None else data)
            if len(body) > limit_bytes:
                raise TooLarge(f"{url}: more than {limit_bytes / MIB:g} MiB")

        try:
            if "chunked" in headers.get("transfer-encoding", "").lower():
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers
                        break
                    take(await reader.readexactly(size))
                    if await reader.readexactly(2) != b"\r\n":
                        raise PageError(f"{url}: a chunk without its end")
            elif "content-length" in headers:
                left = int(headers["content-length"])
                while left > 0:
                    data = await reader.read(min(left, 256 * 1024))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(data)
                    take(data)
            else:  # to the end of the connection
                while data := await reader.read(256 * 1024):
                    take(data)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                zlib.error) as exc:
            if isinstance(exc, TooLarge):
                raise
            raise PageError(f"{url}: the answer was cut or malformed") from None
        if unpack is not None:
            body.extend(unpack.flush())
            if len(body) > limit_bytes:
                raise TooLarge(f"{url}: more than {limit_bytes / MIB:g} MiB")
        return bytes(body)
