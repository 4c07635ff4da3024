"""Tiny TCP/UDP echo workload and client for the netns tests (stdlib only).

    netprobe.py serve NAME PROTO PORT   reply "NAME PEER_IP:PEER_PORT" to every connection/datagram
    netprobe.py ask PROTO HOST PORT [SPORT]   print the reply; exit 1 if none within 2 s

The reply names the address the server saw, so tests can assert there is no SNAT.
"""

from __future__ import annotations

import socket
import sys


def serve(name: str, proto: str, port: int) -> None:
    if proto == "tcp":
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen(64)
        print("ready", flush=True)
        while True:
            conn, peer = server.accept()
            with conn:
                conn.sendall(f"{name} {peer[0]}:{peer[1]}\n".encode())
    else:
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        server.bind(("0.0.0.0", port))
        print("ready", flush=True)
        while True:
            _, peer = server.recvfrom(2048)
            server.sendto(f"{name} {peer[0]}:{peer[1]}\n".encode(), peer)


def ask(proto: str, host: str, port: int, sport: int = 0) -> int:
    try:
        if proto == "tcp":
            with socket.create_connection((host, port), timeout=2) as conn:
                data = conn.recv(2048)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.bind(("0.0.0.0", sport))  # a fixed source port keeps one UDP flow
                sock.settimeout(2)
                sock.sendto(b"hi", (host, port))
                data, _ = sock.recvfrom(2048)
    except OSError as exc:
        print(f"error {exc}", file=sys.stderr)
        return 1
    print(data.decode().strip())
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(ask(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                     int(sys.argv[5]) if len(sys.argv) > 5 else 0))
