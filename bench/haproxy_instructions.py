"""Instructions per request of a HAProxy process, counted by Valgrind's callgrind.

The machine has no hardware counters to read (``perf stat -e instructions`` answers "not
supported" in this VM), and CPU-seconds move with the load others put on it. Callgrind counts
every user-space instruction the process executes, exactly: the same config and the same
requests give the same count (to well under 1 %), whatever else runs. HAProxy runs under it
(about 30-50x slower, so few requests suffice); a warm-up, then the counters are zeroed
(``callgrind_control -z``), a fixed number of requests is sent, and the counters are dumped
(``-d``): the dump's total divided by the request count. Kernel work (system calls, TCP) is not
counted: this is the proxy's own logic, what a configuration rule changes. Used by
``bench/haproxy_engine.py --instructions``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

VALGRIND = "valgrind"
REQUEST = b"GET / HTTP/1.1\r\nHost: shop.test\r\n%s\r\n"
OTHER_HAPROXY = "PODWAY_BENCH_OTHER_HAPROXY"


def haproxy_command(*, other: bool = False) -> list[str]:
    """Debian's HAProxy, or with ``other`` the one ``PODWAY_BENCH_OTHER_HAPROXY`` names (shell
    words: another build, e.g. one ``bench/debian_haproxy.py`` unpacked), for the benches'
    hand-written files side by side with the system's."""
    if not other:
        return [shutil.which("haproxy") or "/usr/sbin/haproxy"]
    command = shlex.split(os.environ.get(OTHER_HAPROXY, ""))
    if not command:
        raise SystemExit(f"set {OTHER_HAPROXY} to another HAProxy's command "
                         "(bench/debian_haproxy.py prints one)")
    return command


def haproxy_version(*, other: bool = False) -> str:
    """The first line of that HAProxy's ``-vv`` and the OpenSSL it runs on."""
    lines = subprocess.run([*haproxy_command(other=other), "-vv"], capture_output=True,
                           text=True, check=True).stdout.splitlines() or ["(no version)"]
    ssl = next((line.split(":", 1)[1].strip() for line in lines
                if line.startswith(("Running on OpenSSL version",  # 2.6, 3.0
                                    "Running on SSL library version"))), "no OpenSSL")  # 3.2
    return f"{lines[0]}, on {ssl}"


@contextlib.contextmanager
def under_callgrind(command: list[str], out: Path) -> Iterator[int]:
    """``command`` (one process: HAProxy without master, nginx with ``master_process off``)
    under callgrind (dumps in ``out``); yields its pid."""
    proc = subprocess.Popen([VALGRIND, "--tool=callgrind", f"--callgrind-out-file={out}.%p",
                             *command],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _context() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _connect(port: int, tls: bool) -> socket.socket:
    raw = socket.create_connection(("127.0.0.1", port), 30)
    if not tls:
        return raw
    return _context().wrap_socket(raw, server_hostname="shop.test")


def _answer(conn: socket.socket, *, close: bool) -> None:
    """Read one answer (the upstream's ``ok``); a non-200 answer aborts the bench."""
    buf = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
        if not close and buf.endswith(b"\r\n\r\nok\n"):
            break
    if not buf.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"answer: {buf[:200]!r}")


def send(port: int, count: int, *, tls: bool, close: bool) -> None:
    """``count`` requests, one after the other: on one connection, or one connection each."""
    request = REQUEST % (b"Connection: close\r\n" if close else b"")
    conn = None if close else _connect(port, tls)
    for _ in range(count):
        c = _connect(port, tls) if close else conn
        assert c is not None
        c.sendall(request)
        _answer(c, close=close)
        if close:
            c.close()
    if conn is not None:
        conn.close()


def wait_listening(port: int, limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def _control(pid: int, flag: str) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True)


def per_request(pid: int, out: Path, port: int, count: int, *, tls: bool, close: bool) -> float:
    """Instructions per request of ``count`` requests (after a warm-up of 50)."""
    send(port, 50, tls=tls, close=close)
    _control(pid, "-z")
    before = set(out.parent.glob(f"{out.name}.{pid}.*"))
    send(port, count, tls=tls, close=close)
    _control(pid, "-d")
    for _ in range(100):
        new = set(out.parent.glob(f"{out.name}.{pid}.*")) - before
        if new:
            dump = max(new, key=lambda p: int(p.name.rsplit(".", 1)[1]))
            text = dump.read_text(errors="replace")
            found = re.search(r"^summary: (\d+)", text, re.M)
            if found:
                return int(found.group(1)) / count
        time.sleep(0.1)
    raise RuntimeError(f"callgrind wrote no dump for pid {pid}")
