"""Load for the VIP test beds, run inside the client namespace: WORKERS loops of one HTTP/1.0
request per connection to HOST:PORT, each printed as a JSON line {"t0", "t1", "ok", "who"}
(monotonic clock, shared by every namespace) until stdin closes."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

TIMEOUT = 0.5  # a request to a dead engine counts as failed after this long


def one(host: str, port: int) -> tuple[bool, str]:
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            s.settimeout(TIMEOUT)
            s.sendall(b"GET / HTTP/1.0\r\nHost: vip\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return False, ""
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n")[0] + b" ":
        return False, ""
    try:
        return True, str(json.loads(body).get("name", ""))
    except ValueError:
        return False, ""


def main() -> None:
    host, port, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    stop = threading.Event()
    lock = threading.Lock()

    def loop() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            ok, who = one(host, port)
            line = json.dumps({"t0": t0, "t1": time.monotonic(), "ok": ok, "who": who})
            with lock:
                print(line, flush=True)
            if not ok:
                time.sleep(0.01)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    sys.stdin.read()
    stop.set()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
