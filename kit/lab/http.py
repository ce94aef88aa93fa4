"""A small HTTP/1.1 server on asyncio, made for many long-lived streams.

The lab runs on hosts that need nothing but ``python3``, so it cannot depend on aiohttp
or uvicorn. Handlers are plain functions that either return a :class:`Response` or take
the :class:`Connection` over to stream (SSE with chunked transfer encoding), which is how
uvicorn answers sglang's streaming endpoints.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import select
import selectors
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["Connection", "PreciseSelector", "Request", "Response", "json_response", "serve"]

MAX_HEADER = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
access_log = logging.getLogger("uvicorn.access")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer: str
    version: str = "HTTP/1.1"

    def json(self):
        return json.loads(self.body or b"null")


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(obj, status: int = 200) -> Response:
    return Response(status, json.dumps(obj, separators=(",", ":"), default=str).encode())


Handler = Callable[[Request, "Connection"], "Response | None"]


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class Connection(asyncio.Protocol):
    """One client connection: parses requests, one at a time, and writes responses."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.peer = "-"
        self.busy = False           # a handler owns the connection (streaming or waiting)
        self.closed = False
        self.keep_alive = True
        self.continued = False
        self.on_close: list[Callable[[], None]] = []

    # -- asyncio.Protocol -------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "-"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > MAX_BODY + MAX_HEADER:
            self._fail(413, "request too large")
            return
        self._next_request()

    def connection_lost(self, exc) -> None:
        self.closed = True
        callbacks, self.on_close = self.on_close, []
        for callback in callbacks:
            callback()

    # -- requests ---------------------------------------------------------
    def _next_request(self) -> None:
        while not self.busy and not self.closed:
            try:
                request = self._parse()
            except ValueError as exc:
                self._fail(400, str(exc))
                return
            if request is None:
                return
            self._dispatch(request)

    def _parse(self) -> Request | None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEADER:
                raise ValueError("request header too large")
            return None
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        try:
            method, target, version = head[0].split(" ", 2)
        except ValueError:
            raise ValueError(f"bad request line {head[0][:80]!r}") from None
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body, used = self._body(headers, end + 4)
        if body is None:
            return None
        del self.buf[:used]
        self.continued = False
        parts = urlsplit(target)
        self.keep_alive = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
        return Request(method.upper(), unquote(parts.path), dict(parse_qsl(parts.query)), headers, body,
                       self.peer, version)

    def _body(self, headers: dict[str, str], start: int) -> tuple[bytes | None, int]:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return self._chunked_body(start)
        length = int(headers.get("content-length") or 0)
        if length < 0 or length > MAX_BODY:
            raise ValueError("bad Content-Length")
        if len(self.buf) < start + length:
            if headers.get("expect", "").lower() == "100-continue" and not self.continued:
                self.continued = True  # curl waits a second for this before sending a large body
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None, 0
        return bytes(self.buf[start:start + length]), start + length

    def _chunked_body(self, pos: int) -> tuple[bytes | None, int]:
        body = bytearray()
        while True:
            eol = self.buf.find(b"\r\n", pos)
            if eol < 0:
                return None, 0
            size = int(bytes(self.buf[pos:eol]).split(b";")[0] or b"0", 16)
            if size == 0:
                trailer = self.buf.find(b"\r\n", eol + 2)
                return (bytes(body), trailer + 2) if trailer >= 0 else (None, 0)
            if len(self.buf) < eol + 2 + size + 2:
                return None, 0
            body += self.buf[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2

    def _dispatch(self, request: Request) -> None:
        try:
            response = self.handler(request, self)
        except Exception as exc:  # a handler bug must not take the server down
            logging.getLogger("kit.lab").exception("handler error for %s %s", request.method, request.path)
            response = json_response({"object": "error", "message": f"Internal server error: {exc}",
                                      "type": "InternalServerError", "param": None, "code": 500}, 500)
        if response is not None:
            self.respond(request, response)

    # -- responses --------------------------------------------------------
    def respond(self, request: Request, response: Response) -> None:
        """A complete response; the connection is then free for the next request."""
        if self.closed:
            return
        self._access(request, response.status)
        head = [f"HTTP/1.1 {response.status} {_phrase(response.status)}", f"content-length: {len(response.body)}"]
        if response.content_type:  # "": none, as Starlette's Response(status_code=...) sends
            head.append(f"content-type: {response.content_type}")
        head += [f"{k}: {v}" for k, v in response.headers.items()]
        if not self.keep_alive:
            head.append("connection: close")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        self._done()

    def start_stream(self, request: Request, content_type: str = "text/event-stream; charset=utf-8") -> None:
        """Headers of a chunked streaming response; then write() chunks and end_stream()."""
        self.busy = True
        self._access(request, 200)
        self.transport.write(
            f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n"
            f"cache-control: no-cache\r\n\r\n".encode("latin-1")
        )

    def write(self, data: bytes) -> None:
        if not self.closed and data:
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_stream(self) -> None:
        if not self.closed:
            self.transport.write(b"0\r\n\r\n")
        self._done()

    def hold(self) -> None:
        """A handler will answer later (with respond())."""
        self.busy = True

    def _done(self) -> None:
        self.busy = False
        if self.closed:
            return
        if not self.keep_alive:
            self.transport.close()
            return
        if self.buf:
            asyncio.get_running_loop().call_soon(self._next_request)

    def _access(self, request: Request, status: int) -> None:
        if access_log.isEnabledFor(logging.INFO):
            access_log.info('%s - "%s %s %s" %d %s', request.peer, request.method, request.path,
                            request.version, status, _phrase(status))

    def _fail(self, status: int, message: str) -> None:
        body = json.dumps({"detail": message}).encode()
        self.transport.write(f"HTTP/1.1 {status} {_phrase(status)}\r\ncontent-length: {len(body)}\r\n"
                             f"content-type: application/json\r\nconnection: close\r\n\r\n".encode() + body)
        self.transport.close()


class PreciseSelector(selectors.EpollSelector):
    """epoll with a microsecond timeout.

    ``epoll_wait`` counts its timeout in milliseconds and Python rounds it up, so a timer
    that asyncio asked for fires up to a millisecond late. The lab promises emission within
    a millisecond of its schedule, so the wait goes through ``select()`` on the epoll file
    descriptor, which takes microseconds, and then collects the events without waiting.
    """

    def select(self, timeout=None):
        if timeout is not None and 0 < timeout < 3600:
            frac = timeout - math.floor(timeout * 1e3) / 1e3
            if frac > 1e-6:
                select.select([self._selector.fileno()], [], [], timeout)
                timeout = 0
        return super().select(timeout)


def new_event_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(PreciseSelector())


async def serve(handler: Handler, host: str, port: int, backlog: int = 2048):
    """Listen on host:port; returns the asyncio Server (raises OSError when the port is taken)."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: Connection(handler), host, port, backlog=backlog,
                                    reuse_address=True)
