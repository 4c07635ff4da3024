"""Client side of the kernel engine tests, run inside the client namespace (stdlib only).

    ask  PROTO HOST PORT [SPORT]   one ``whoami``: the echo's JSON (nothing when unanswered);
                                   SPORT fixes the client's source port (UDP: one flow)
    many PROTO HOST PORT COUNT [SPORT]
                                   COUNT new connections (UDP: new source ports), one line each:
                                   the echo's JSON, or {"error": ...}; SPORT: the source ports
                                   are SPORT, SPORT+1, ... (UDP: flows no earlier call made)
    loop HOST PORT SECONDS         new TCP connections back to back for SECONDS, each with one
                                   exchange; prints {"ok": n, "failed": n, "names": {...}}
"""

from __future__ import annotations

import json
import socket
import sys
import time

TIMEOUT_S = 2.0


def whoami(proto: str, host: str, port: int, sport: int = 0) -> dict[str, str]:
    if proto == "udp":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", sport))
            s.settimeout(TIMEOUT_S)
            s.sendto(b"whoami", (host, port))
            data, _ = s.recvfrom(65535)
            return dict(json.loads(data))
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as s:
        s.sendall(b"whoami\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65535)
            if not chunk:
                break
            data += chunk
        return dict(json.loads(data))


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "ask":
        try:
            sport = int(argv[4]) if len(argv) > 4 else 0
            print(json.dumps(whoami(argv[1], argv[2], int(argv[3]), sport)))
        except (OSError, ValueError):
            return 1
        return 0
    if mode == "many":
        base = int(argv[5]) if len(argv) > 5 else 0
        for i in range(int(argv[4])):
            try:
                print(json.dumps(whoami(argv[1], argv[2], int(argv[3]), base + i if base else 0)))
            except (OSError, ValueError) as exc:
                print(json.dumps({"error": str(exc)}))
        return 0
    if mode == "loop":
        end = time.monotonic() + float(argv[3])
        ok = failed = 0
        names: dict[str, int] = {}
        errors: list[str] = []
        while time.monotonic() < end:
            try:
                name = whoami("tcp", argv[1], int(argv[2]))["name"]
            except (OSError, ValueError, KeyError) as exc:
                failed += 1
                errors.append(str(exc))
                continue
            ok += 1
            names[name] = names.get(name, 0) + 1
        print(json.dumps({"ok": ok, "failed": failed, "names": names, "errors": errors[:5]}))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
