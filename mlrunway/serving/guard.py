"""The endpoint's HTTP limits, enforced by the server before any request reaches the app (and its key check):
uvicorn's httptools protocol with

- ``max_header_bytes`` and ``max_headers`` for each request's head (431 at once, the excess never parsed: a
  64 MB header value is cut at the limit, not accumulated), however the head arrives: whole in one read, in
  pieces, or behind other requests on a pipelined connection;
- ``header_timeout_s``: a connection's next request head must arrive whole within it (408, then closed), so a
  client sending half a head, or nothing, never holds a connection;
- ``body_timeout_s``: a request's body must arrive whole within it once its head has (408, then closed);
- ``send_timeout_s``: a client must go on reading its answers: once the server's writes to it are blocked (the
  socket's buffers full), it must take more within this time or the connection is dropped (as nginx's
  ``send_timeout``), so a client that pipelines requests and never reads holds no connection;
- a declared ``Content-Length`` over the drain cap is refused at once (413); smaller bodies over the endpoint's
  limit are read and drained by the app, so that the client sees its 413.

On a pipelined connection, a refusal answers the request it concerns: the requests before it are answered first, in
order, and the refusal follows the last of them.

uvicorn's own ``timeout_keep_alive`` closes idle keep-alive connections between requests. At shutdown, a connection
with no request under way is given :data:`SHUTDOWN_GRACE_S` to deliver one (uvicorn closes it at once, losing a
request already on the wire to a connection just accepted); that request is served with ``Connection: close``.
"""

from __future__ import annotations

import asyncio
import collections
import os
from dataclasses import dataclass, field
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

LIMITS_ENV = "MLRUNWAY_HTTP_LIMITS"  # the fields of Limits, in order, comma-separated
HEAD_SLICE = 1024  # a head is fed to the parser, and counted, this many bytes at a time
LINGER_S = 1.0  # how long a refused connection stays open, discarding what the client still sends
SHUTDOWN_GRACE_S = 0.5  # at shutdown, how long a connection between requests may still deliver one
REASONS = {400: b"Bad Request", 408: b"Request Timeout", 413: b"Content Too Large",
           431: b"Request Header Fields Too Large"}


@dataclass(frozen=True)
class Limits:
    """The server's limits, each with its words (``field(metadata={"doc": ...})``: the docs' reference shows them)."""

    max_header_bytes: int = field(default=32 * 1024, metadata={"doc": "a request head's size (431 past it)"})
    max_headers: int = field(default=100, metadata={"doc": "a request head's fields (431 past it)"})
    header_timeout_s: float = field(default=10.0, metadata={
        "doc": "a connection's next request head must arrive whole within it (408, then closed)"})
    body_timeout_s: float = field(default=30.0, metadata={
        "doc": "a request's body must arrive whole within it once its head has (408, then closed)"})
    max_body_bytes: int = field(default=64 * 1024 * 1024, metadata={
        "doc": "a request's body (413); a declared Content-Length over the drain cap is refused at once"})
    send_timeout_s: float = field(default=30.0, metadata={
        "doc": "a client whose reading stalled must take more of its answers within it, or is dropped"})

    def encode(self) -> str:
        return ",".join(str(v) for v in vars(self).values())

    @classmethod
    def decode(cls, text: str) -> Limits:
        a, b, c, d, e, f = text.split(",")
        return cls(int(a), int(b), float(c), float(d), int(e), float(f))


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _ClosingAware(RequestResponseCycle):
    """uvicorn's request cycle, whose connection counts as lost from the moment its transport closes, not only once
    the loop has reported it: with uvloop a write in between (an answer to a client that reset its connection, or
    that the guard dropped) raised "the handler is closed", logged as an exception in the app; asyncio's transport
    drops such a write, as this does."""

    @property
    def disconnected(self) -> bool:
        return bool(self.__dict__.get("disconnected", False)) or self.transport.is_closing()

    @disconnected.setter
    def disconnected(self, value: bool) -> None:
        self.__dict__["disconnected"] = value


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`Limits` (from ``MLRUNWAY_HTTP_LIMITS``)."""

    limits = Limits.decode(os.environ[LIMITS_ENV]) if LIMITS_ENV in os.environ else Limits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._headers = 0
        self._reading_head = True
        self._body_left: int | None = None  # of a body whose length is declared
        self._deadline: asyncio.TimerHandle | None = None
        self._refusal: tuple[int, str] | None = None  # once refused: the status and message to answer
        self._in_body: RequestResponseCycle | None = None  # the request whose body is being read
        self._closing = False
        self._stalled: asyncio.TimerHandle | None = None  # armed while the transport's writes are paused

    # -- deadlines -----------------------------------------------------------------------------------
    def _arm(self, seconds: float, message: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._refuse, 408, message)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with ``message``, stop reading, and close a second later: what the client still sends
        meanwhile is discarded unparsed (closing at once, with its data unread, would reset the connection, and the
        client could lose the answer). A request whose body was being read is given up (a response of it already
        begun is cut short instead); the requests before the refused one, complete and pipelined, are answered
        first (before, the one running was given up and the others never answered)."""
        self._disarm()
        if self.transport.is_closing() or self._refusal is not None:
            return
        self._refusal = (status, message)
        refused = self._in_body
        if refused is not None:
            refused.disconnected = True  # the app stops reading the body and answers nobody
            refused.message_event.set()
            if refused.response_started:
                self.transport.close()
                return
            self.pipeline = collections.deque(entry for entry in self.pipeline if entry[0] is not refused)
        if not self._answers_owed():
            self._send_refusal(status, message)

    def _answers_owed(self) -> bool:
        """Whether a request before the refused one awaits its response: queued behind the one that runs (uvicorn
        runs a connection's requests one at a time), or running as the newest (``cycle``), its body complete."""
        return bool(self.pipeline) or (self.cycle is not None and self.cycle is not self._in_body and
                                       not self.cycle.response_complete)

    def _send_refusal(self, status: int, message: str) -> None:
        body = message.encode()
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, REASONS[status], len(body), body))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    # -- uvicorn's protocol, guarded -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.limits.header_timeout_s, f"no complete request head within {self.limits.header_timeout_s:g} s")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._stalled is not None:
            self._stalled.cancel()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        """The transport's buffer is over its high-water mark: the client reads nothing more for now."""
        super().pause_writing()
        if self._stalled is None:
            self._stalled = self.loop.call_later(self.limits.send_timeout_s, self._drop_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _drop_stalled(self) -> None:
        """The client took nothing for ``send_timeout_s``: nothing more can reach it, so the connection is dropped
        at once (uvicorn then frees the answer waiting to be written, and the requests queued behind it)."""
        self._stalled = None
        self.transport.abort()

    def data_received(self, data: bytes) -> None:
        """As uvicorn's, with our refusals, a malformed request answered 400 without a log line, and each head's
        size checked as it arrives. A read may hold the end of one request and the heads of the next ones
        (pipelining), or a whole head at once: so a head is fed in slices of at most :data:`HEAD_SLICE` bytes,
        the last one ending a byte past the limit, counted after each: a head is refused at its first byte past
        ``max_header_bytes`` (a head exactly one byte over may complete in that slice and pass), never
        accumulated; a body whose length is declared is fed whole, up to its last byte."""
        if self._refusal is not None:
            return
        self._unset_keepalive_if_required()
        while data and self._refusal is None:
            in_head = self._reading_head
            if in_head:  # never past the limit's next byte: the limit is the limit, not a slice more
                size = min(HEAD_SLICE, self.limits.max_header_bytes + 1 - self._head_bytes)
            else:  # a body: to its declared end (the next head then starts a slice), or all of a chunked one
                size = max(1, self._body_left) if self._body_left is not None else len(data)
            piece, data = data[:size], data[size:]
            try:
                self.parser.feed_data(piece)
            except httptools.HttpParserError as exc:
                refused = exc.__context__ if isinstance(exc.__context__, _Refused) else _Refused(400, "malformed request")
                return self._refuse(refused.status, str(refused))
            except httptools.HttpParserUpgrade:
                return self._refuse(400, "protocol upgrades are not served here")
            if in_head and self._reading_head:  # a body piece ends at its message's end: it holds no head
                self._head_bytes += len(piece)
                if self._head_bytes > self.limits.max_header_bytes:
                    return self._refuse(431, f"request head over {self.limits.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head, self._head_bytes, self._headers = True, 0, 0
        if self._deadline is None:
            self._arm(self.limits.header_timeout_s,
                      f"no complete request head within {self.limits.header_timeout_s:g} s")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers += 1
        if self._headers > self.limits.max_headers:
            raise _Refused(431, f"over {self.limits.max_headers} request headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        length = next((v for k, v in self.headers if k == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.limits.max_body_bytes:
            raise _Refused(413, f"request body of {int(length)} bytes is over {self.limits.max_body_bytes}")
        self._body_left = int(length) if length is not None and length.isdigit() else None
        self._arm(self.limits.body_timeout_s, f"request body not complete within {self.limits.body_timeout_s:g} s")
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.__class__ = _ClosingAware
        self._in_body = self.cycle
        if self._closing and self.cycle is not None:  # the last request this connection carries
            self.cycle.keep_alive = False

    def shutdown(self) -> None:
        """As uvicorn's (a request under way is answered, then the connection closes), except that a connection
        between requests may still deliver one within :data:`SHUTDOWN_GRACE_S`."""
        self._closing = True
        if self.cycle is None or self.cycle.response_complete:
            self._disarm()
            self._deadline = self.loop.call_later(SHUTDOWN_GRACE_S, self._close_if_idle)
        else:
            self.cycle.keep_alive = False

    def _close_if_idle(self) -> None:
        self._deadline = None
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        if self._body_left is not None:
            self._body_left -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._reading_head, self._body_left, self._in_body = True, None, None  # what follows is the next head (its
        # count starts anew at on_message_begin)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._refusal is not None:  # a refusal that waited for the requests before it
            if not self._answers_owed():
                self._unset_keepalive_if_required()
                self._send_refusal(*self._refusal)
        else:  # the next request's head, on a kept-alive connection
            self._arm(max(self.limits.header_timeout_s, self.timeout_keep_alive),
                      f"no complete request head within {self.limits.header_timeout_s:g} s")

