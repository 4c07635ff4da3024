"""Load for the VIP test beds, run inside the client namespace (``load.py HOST PORT WORKERS
[MODE [TIMEOUT]]``): WORKERS loops of HTTP requests to HOST:PORT, each printed as a JSON line
{"t0", "t1", "ok", "who", "reused"} (monotonic clock, shared by every namespace) until stdin
closes; a request fails after TIMEOUT seconds (default 0.5).

MODE ``close``: one request per connection (``Connection: close``). MODE ``keepalive``: one
connection per loop for as long as the server keeps it; a ``Connection: close`` answer makes
the loop open a new one for its next request (what browsers and HTTP libraries do). A failed
request is never retried: it is counted."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

TIMEOUT = 0.5  # default: a request to a dead engine counts as failed after this long


def _read_response(s: socket.socket, buf: bytes) -> tuple[bytes, bytes, bytes]:
    """(head, body, rest) of one response with a Content-Length (or ended by close)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed before the answer")
        buf += chunk
    head, _, buf = buf.partition(b"\r\n\r\n")
    length = -1
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length < 0:  # read to the end
        while chunk := s.recv(65536):
            buf += chunk
        return head, buf, b""
    while len(buf) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed in the body")
        buf += chunk
    return head, buf[:length], buf[length:]


def _who(head: bytes, body: bytes) -> str:
    if b" 200 " not in head.split(b"\r\n")[0] + b" ":
        raise ValueError("not 200")
    return str(json.loads(body).get("name", ""))


class Worker:
    def __init__(self, host: str, port: int, keepalive: bool, timeout: float) -> None:
        self.host, self.port, self.keepalive, self.timeout = host, port, keepalive, timeout
        self.sock: socket.socket | None = None

    def _drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def one(self) -> tuple[bool, str, bool]:
        """(ok, who answered, whether the connection was reused)."""
        reused = self.sock is not None
        try:
            if self.sock is None:
                self.sock = socket.create_connection((self.host, self.port),
                                                     timeout=self.timeout)
                self.sock.settimeout(self.timeout)
            close = b"" if self.keepalive else b"Connection: close\r\n"
            self.sock.sendall(b"GET / HTTP/1.1\r\nHost: vip\r\n" + close + b"\r\n")
            head, body, _ = _read_response(self.sock, b"")
            who = _who(head, body)
        except (OSError, ValueError):
            self._drop()
            return False, "", reused
        if not self.keepalive or b"\r\nconnection: close" in head.lower():
            self._drop()
        return True, who, reused


def main() -> None:
    host, port, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    keepalive = len(sys.argv) > 4 and sys.argv[4] == "keepalive"
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else TIMEOUT
    stop = threading.Event()
    lock = threading.Lock()

    def loop() -> None:
        worker = Worker(host, port, keepalive, timeout)
        while not stop.is_set():
            t0 = time.monotonic()
            ok, who, reused = worker.one()
            line = json.dumps({"t0": t0, "t1": time.monotonic(), "ok": ok, "who": who,
                               "reused": reused})
            with lock:
                print(line, flush=True)
            if not ok:
                time.sleep(0.01)
        worker._drop()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    sys.stdin.read()
    stop.set()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
