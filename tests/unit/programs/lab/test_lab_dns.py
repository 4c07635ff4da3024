"""The lab's cluster DNS (``podway.programs.lab.dns``): what CoreDNS answers on a cluster,
from the lab's API, over a real UDP socket on loopback."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from podway.programs.lab import dns
from podway.programs.lab.plan import KUBERNETES_IP

Obj = dict[str, Any]

SERVICES: list[Obj] = [
    {"metadata": {"name": "podway-xds", "namespace": "podway"}, "spec": {"clusterIP": "None"}},
    {"metadata": {"name": "kubernetes", "namespace": "default"},
     "spec": {"clusterIP": KUBERNETES_IP}},
    {"metadata": {"name": "outside", "namespace": "podway"},
     "spec": {"type": "ExternalName", "externalName": "example.org"}}]


def slices(*ready: tuple[str, bool]) -> list[Obj]:
    return [{"metadata": {"name": "podway-xds-x", "namespace": "podway",
                          "labels": {"kubernetes.io/service-name": "podway-xds"}},
             "endpoints": [{"addresses": [a], "conditions": {"ready": ok}} for a, ok in ready]}]


def query(name: str, qtype: int = 1, ident: int = 0x1234) -> bytes:
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + b"\0" + \
        struct.pack("!HH", qtype, 1)


def parse(reply: bytes) -> tuple[int, int, list[str]]:
    """(id, rcode, A addresses) of a reply to one question."""
    ident, flags, qd, an = struct.unpack("!HHHH", reply[:8])
    assert qd == 1
    assert flags & 0x8000  # a response
    at = reply.index(b"\0", 12) + 5
    found = []
    for _ in range(an):
        assert reply[at:at + 2] == b"\xc0\x0c"  # the question's name
        kind, klass, ttl, size = struct.unpack("!HHIH", reply[at + 2:at + 12])
        assert (kind, klass, ttl, size) == (1, 1, dns.TTL_S, 4)
        found.append(socket.inet_ntoa(reply[at + 12:at + 16]))
        at += 16
    assert at == len(reply)
    return ident, flags & 0x0F, found


def test_names_are_cluster_ips_and_ready_endpoints_of_headless_services() -> None:
    known = dns.records(SERVICES, slices(("198.18.1.3", True), ("198.18.1.9", False),
                                         ("198.18.1.2", True)))
    assert known == {"podway-xds.podway.svc.cluster.local": ["198.18.1.2", "198.18.1.3"],
                     "kubernetes.default.svc.cluster.local": [KUBERNETES_IP]}
    assert parse(dns.answer(query("podway-xds.podway.svc.cluster.local"), known) or b"") == (
        0x1234, 0, ["198.18.1.2", "198.18.1.3"])
    # Case does not matter; the search list's tries are NXDOMAIN.
    assert parse(dns.answer(query("Kubernetes.DEFAULT.svc.cluster.local"), known) or b"")[1:] \
        == (0, [KUBERNETES_IP])
    for miss in ("podway-xds.podway.svc.podway.svc.cluster.local", "podway-xds.podway.svc",
                 "outside.podway.svc.cluster.local", "example.org"):
        assert parse(dns.answer(query(miss), known) or b"")[1:] == (3, []), miss
    # The name exists, AAAA: no answer, no error (the lab is IPv4).
    assert parse(dns.answer(query("podway-xds.podway.svc.cluster.local", 28), known) or b"")[
        1:] == (0, [])


def test_a_headless_service_resolves_only_once_an_endpoint_is_ready() -> None:
    """The start-up case: the engine asks for podway-xds before any controller is ready."""
    name = "podway-xds.podway.svc.cluster.local"
    before = dns.records(SERVICES, slices(("198.18.1.3", False)))
    assert parse(dns.answer(query(name), before) or b"")[1:] == (3, [])
    after = dns.records(SERVICES, slices(("198.18.1.3", True)))
    assert parse(dns.answer(query(name), after) or b"")[1:] == (0, ["198.18.1.3"])


def test_bad_packets_get_formerr_or_nothing() -> None:
    assert dns.answer(b"\x12", {}) is None  # too short
    assert dns.answer(query("a.b")[:2] + b"\x81\x00" + query("a.b")[4:], {}) is None  # reply
    cut = dns.answer(query("a.b")[:-3], {}) or b""
    assert cut[:2] == b"\x12\x34"
    assert cut[3] & 0x0F == 1  # FORMERR


def test_the_server_answers_over_udp_from_the_api_at_the_moment_of_the_question() -> None:
    async def main() -> list[tuple[int, int, list[str]]]:
        state = {"ready": False}
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
        transport = await dns.serve(sock, lambda: dns.records(
            SERVICES, slices(("198.18.1.3", state["ready"]))))
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.settimeout(5)
        out = []
        try:
            for ready in (False, True):
                state["ready"] = ready
                client.sendto(query("podway-xds.podway.svc.cluster.local", ident=7),
                              sock.getsockname())
                reply = await asyncio.get_running_loop().run_in_executor(
                    None, client.recv, 512)
                out.append(parse(reply))
        finally:
            client.close()
            transport.close()
        return out

    assert asyncio.run(main()) == [(7, 3, []), (7, 0, ["198.18.1.3"])]
