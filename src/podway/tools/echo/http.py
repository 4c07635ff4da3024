"""The echo HTTP server: HTTP/1.1 with keep-alive, and h2c through the ``h2`` state machine.

Parsing is deliberately small (request line, headers, Content-Length or chunked bodies) and
runs in an ``asyncio.Protocol`` without per-request tasks, so the server is cheap enough not to
be the bottleneck when Envoy's added latency is measured. ``/delay/<ms>`` answers after ``ms``
milliseconds (at most a minute), for tests of in-flight requests; on HTTP/1.1 the connection
reads nothing more until that answer is written, so pipelined answers keep their order.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from podway.tools.echo import Health, Identity, websocket

_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_STATUS = re.compile(r"^/status/(\d{3})$")
_DELAY = re.compile(r"^/delay/(\d{1,5})$")
_MAX_DELAY_S = 60.0
_REASONS = {200: "OK", 404: "Not Found", 101: "Switching Protocols",
            503: "Service Unavailable"}


def answer(identity: Identity, *, method: str, path: str, host: str, headers: dict[str, str],
           client: str, protocol: str, health: Health | None = None) -> tuple[int, bytes, str]:
    """``(status, body, content type)`` for one request, shared by HTTP/1.1 and h2; pure but
    for ``health``, which ``POST /healthz/fail|ok`` flips and ``/healthz`` reads and counts."""
    bare = path.split("?", 1)[0]
    health = health if health is not None else Health()
    if method == "POST" and bare in ("/healthz/fail", "/healthz/ok"):
        health.healthy = bare == "/healthz/ok"
        return 200, f"healthy: {str(health.healthy).lower()}\n".encode(), "text/plain"
    if bare in ("/healthz", "/readyz"):
        health.checks += 1
        if not health.healthy:
            health.failed += 1
            return 503, b"failing\n", "text/plain"
        return 200, b"ok\n", "text/plain"
    status = 200
    match = _STATUS.match(bare)
    if match:
        status = int(match.group(1))
    body: dict[str, Any] = {**identity.as_dict(), "client": client, "method": method,
                            "host": host, "path": path, "protocol": protocol,
                            "headers": headers}
    return status, (json.dumps(body) + "\n").encode(), "application/json"


def delay_s(path: str) -> float:
    """How long to wait before answering ``path``: ``/delay/<ms>``, else 0."""
    match = _DELAY.match(path.split("?", 1)[0])
    return min(int(match.group(1)) / 1000, _MAX_DELAY_S) if match else 0.0


class EchoHTTP(asyncio.Protocol):
    def __init__(self, identity: Identity, health: Health | None = None) -> None:
        self.identity = identity
        self.health = health if health is not None else Health()
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.client = ""
        self.h2: h2.connection.H2Connection | None = None
        self.streams: dict[int, dict[str, str]] = {}
        self.waiting = False  # an HTTP/1.1 answer is delayed: read nothing more until it is sent
        self.websocket = False  # upgraded: the buffer holds WebSocket frames

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = f"{peer[0]}:{peer[1]}" if peer else ""

    def data_received(self, data: bytes) -> None:
        if self.h2 is not None:
            self._h2_data(data)
            return
        if self.websocket:
            self.buffer += data
            self._ws_frames()
            return
        self.buffer += data
        while self.h2 is None and self.transport is not None and not self.waiting:
            if self.buffer.startswith(_H2_PREFACE[:len(self.buffer)]) and self.buffer:
                if len(self.buffer) < len(_H2_PREFACE):
                    return
                self._start_h2(None)
                rest, self.buffer = self.buffer, b""
                self._h2_data(rest)
                return
            try:
                if not self._http1():
                    return
            except (ValueError, h2.exceptions.H2Error):  # malformed framing or h2c settings
                if self.transport is not None:
                    self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                         b"connection: close\r\n\r\n")
                self._close()
                return

    # --- HTTP/1.1 -----------------------------------------------------------------------------
    def _http1(self) -> bool:
        """Handle one complete request from the buffer; False when more bytes are needed."""
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > 65536:
                self._close()
            return False
        head = self.buffer[:end].decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            self._close()
            return False
        method, path, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        body_start = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            consumed = _chunked_length(self.buffer, body_start)
            if consumed is None:
                return False
            self.buffer = self.buffer[consumed:]
        else:
            length = int(headers.get("content-length", "0") or 0)
            if length < 0:
                raise ValueError("negative content-length")
            if len(self.buffer) < body_start + length:
                return False
            self.buffer = self.buffer[body_start + length:]
        if headers.get("upgrade", "").lower() == "h2c" and "http2-settings" in headers:
            self._upgrade(method, path, headers)
            return False
        if method == "GET" and websocket.wants_websocket(headers):
            self._websocket(path, headers)
            return False
        keep = (headers.get("connection", "").lower() != "close" if version == "HTTP/1.1"
                else headers.get("connection", "").lower() == "keep-alive")
        status, body, ctype = answer(self.identity, method=method, path=path,
                                     host=headers.get("host", ""), headers=headers,
                                     client=self.client, protocol=version,
                                     health=self.health)
        reason = _REASONS.get(status, "Status")
        out = (f"{version} {status} {reason}\r\ncontent-type: {ctype}\r\n"
               f"content-length: {len(body)}\r\n"
               f"{'' if keep else 'connection: close' + chr(13) + chr(10)}\r\n").encode()
        payload = out + (b"" if method == "HEAD" else body)
        delay = delay_s(path)
        if delay:
            self.waiting = True
            asyncio.get_running_loop().call_later(delay, self._send_delayed, payload, keep)
            return False
        assert self.transport is not None
        self.transport.write(payload)
        if not keep:
            self._close()
            return False
        return True

    def _send_delayed(self, payload: bytes, keep: bool) -> None:
        self.waiting = False
        if self.transport is None:
            return  # the client went away meanwhile
        self.transport.write(payload)
        if not keep:
            self._close()
            return
        self.data_received(b"")  # answer what was pipelined meanwhile

    def _upgrade(self, method: str, path: str, headers: dict[str, str]) -> None:
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\n"
                             b"upgrade: h2c\r\n\r\n")
        self._start_h2(headers["http2-settings"])
        h1_headers = {k: v for k, v in headers.items()
                      if k not in ("connection", "upgrade", "http2-settings")}
        self._h2_respond(1, method=method, path=path, host=headers.get("host", ""),
                         headers=h1_headers)
        rest, self.buffer = self.buffer, b""
        if rest:
            self._h2_data(rest)

    # --- WebSocket ------------------------------------------------------------------------------
    def _websocket(self, path: str, headers: dict[str, str]) -> None:
        """Answer 101, send the identity JSON as the first message, then echo."""
        assert self.transport is not None
        self.transport.write(websocket.handshake(headers["sec-websocket-key"]))
        self.websocket = True
        _, body, _ = answer(self.identity, method="GET", path=path,
                            host=headers.get("host", ""), headers=headers, client=self.client,
                            protocol="websocket")
        self.transport.write(websocket.encode(websocket.TEXT, body))
        self._ws_frames()

    def _ws_frames(self) -> None:
        while self.transport is not None:
            try:
                frame, used = websocket.decode(self.buffer)
            except websocket.ProtocolError as error:
                self.transport.write(websocket.encode(websocket.CLOSE,
                                                      error.code.to_bytes(2, "big")))
                self._close()
                return
            if frame is None:
                return
            self.buffer = self.buffer[used:]
            data, close = websocket.reply(frame)
            if data:
                self.transport.write(data)
            if close:
                self._close()
                return

    # --- h2c ------------------------------------------------------------------------------------
    def _start_h2(self, settings: str | None) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        if settings is None:
            self.h2.initiate_connection()
        else:
            self.h2.initiate_upgrade_connection(settings.encode("ascii"))
        self._flush()

    def _h2_data(self, data: bytes) -> None:
        assert self.h2 is not None
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.H2Error:  # a protocol error ends this connection only
            self._close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.streams[event.stream_id] = {_text(k): _text(v) for k, v in event.headers or []}
                if event.stream_ended is not None:
                    self._h2_request(event.stream_id)
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self._h2_request(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self._flush()
                self._close()
                return
        self._flush()

    def _h2_request(self, stream_id: int) -> None:
        raw = self.streams.pop(stream_id, None)
        if raw is None:
            return
        headers = {str(k): str(v) for k, v in raw.items() if not str(k).startswith(":")}
        self._h2_respond(stream_id, method=str(raw.get(":method", "")),
                         path=str(raw.get(":path", "")), host=str(raw.get(":authority", "")),
                         headers=headers)

    def _h2_respond(self, stream_id: int, *, method: str, path: str, host: str,
                    headers: dict[str, str]) -> None:
        delay = delay_s(path)
        if delay:
            asyncio.get_running_loop().call_later(
                delay, lambda: self._h2_send(stream_id, method=method, path=path, host=host,
                                             headers=headers))
            return
        self._h2_send(stream_id, method=method, path=path, host=host, headers=headers)

    def _h2_send(self, stream_id: int, *, method: str, path: str, host: str,
                 headers: dict[str, str]) -> None:
        if self.h2 is None or self.transport is None:
            return  # closed while the answer waited
        status, body, ctype = answer(self.identity, method=method, path=path, host=host,
                                     headers=headers, client=self.client, protocol="HTTP/2",
                                     health=self.health)
        self.h2.send_headers(stream_id, [(":status", str(status)), ("content-type", ctype),
                                         ("content-length", str(len(body)))])
        self.h2.send_data(stream_id, body, end_stream=True)
        self._flush()

    def _flush(self) -> None:
        if self.h2 is not None and self.transport is not None:
            data = self.h2.data_to_send()
            if data:
                self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _chunked_length(buffer: bytes, start: int) -> int | None:
    """Bytes up to the end of a chunked body starting at ``start``; None if incomplete."""
    pos = start
    while True:
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size = int(buffer[pos:line_end].split(b";")[0] or b"0", 16)
        pos = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n\r\n", pos - 2)
            return None if trailer_end < 0 else trailer_end + 4
        pos += size + 2
        if pos > len(buffer):
            return None
