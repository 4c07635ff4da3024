"""Client side of the kernel engine tests, run inside the client namespace (stdlib only).

    ask  PROTO HOST PORT [SPORT]   one ``whoami``: the echo's JSON (nothing when unanswered);
                                   SPORT fixes the client's source port (UDP: one flow)
    many PROTO HOST PORT COUNT [SPORT]
                                   COUNT new connections (UDP: new source ports), one line each:
                                   the echo's JSON, or {"error": ...}; SPORT: the source ports
                                   are SPORT, SPORT+1, ... (UDP: flows no earlier call made)
    loop HOST PORT SECONDS         new TCP connections back to back for SECONDS, each with one
                                   exchange; prints {"ok": n, "failed": n, "names": {...}}
    invalid HOST PORT              one TCP connection: ``whoami``, then raw segments on its
                                   addresses that conntrack calls invalid (SYN and FIN together;
                                   data far outside the window), then ``whoami`` again on it;
                                   prints {"before": name, "after": name or {"error": ...}}
"""

from __future__ import annotations

import json
import random
import socket
import struct
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


def _ask(s: socket.socket) -> str:
    s.sendall(b"whoami\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65535)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return str(json.loads(data)["name"])


def _checksum(data: bytes) -> int:
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF


def _segment(src: str, sport: int, dst: str, dport: int, *, seq: int, flags: int) -> bytes:
    """An IPv4 packet holding one TCP segment (one byte of data), checksums right."""
    saddr, daddr = socket.inet_aton(src), socket.inet_aton(dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 1, 5 << 4, flags, 1000, 0, 0) + b"x"
    tcp = tcp[:16] + struct.pack("!H", _checksum(
        saddr + daddr + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp)) + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, socket.IPPROTO_TCP,
                     0, saddr, daddr)
    return ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:] + tcp


def invalid(host: str, port: int) -> dict[str, object]:
    with socket.create_connection((host, port), timeout=TIMEOUT_S) as s:
        before = _ask(s)
        src, sport = s.getsockname()
        with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as raw:
            for flags in (0x03, 0x18, 0x03, 0x18):  # SYN+FIN; PSH+ACK far outside the window
                packet = _segment(src, sport, host, port, seq=random.getrandbits(32),
                                  flags=flags)
                raw.sendto(packet, (host, 0))
        time.sleep(0.5)
        try:
            after: object = _ask(s)
        except OSError as exc:
            after = {"error": str(exc)}
    return {"before": before, "after": after}


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
    if mode == "invalid":
        print(json.dumps(invalid(argv[1], int(argv[2]))))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
