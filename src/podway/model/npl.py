"""Antrea's NodePortLocal pod annotation, read and written byte-compatibly.

    nodeportlocal.antrea.io: '[{"podPort":8080,"nodeIP":"192.0.2.10","nodePort":61000,
                                "protocol":"tcp","ipFamily":"IPv4"}]'

The agent writes it; load balancers (Podway's translator in ``nodeportlocal`` mode, or AKO with
Antrea) read it, which is why the codec lives in the model layer. Encoding
is deterministic (sorted, compact) and comparison is order-insensitive, so an annotation written
by Antrea in another order is not rewritten for nothing. Decoding never raises: an invalid value
comes back as an error message, and the agent replaces it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypedDict

ANNOTATION = "nodeportlocal.antrea.io"
ENABLED_ANNOTATION = "nodeportlocal.antrea.io/enabled"
# Podway's agent vouches for its mapping (issue 23.9): an HMAC, with its node's key
# (``node_key``), of the pod's uid and the exact annotation value. Whoever can patch a pod can
# rewrite ``ANNOTATION``; without that node's key nobody can make this match the rewrite, and
# one node's key signs for no other node's pods.
SIGNATURE_ANNOTATION = "podway.io/npl-signature"
_SIGNATURE_VERSION = "v1"

L4 = Literal["tcp", "udp"]
IPFamily = Literal["IPv4", "IPv6"]


class RawEntry(TypedDict):
    podPort: int
    nodeIP: str
    nodePort: int
    protocol: L4
    ipFamily: IPFamily


@dataclass(frozen=True, slots=True, order=True, kw_only=True)
class NplEntry:
    pod_port: int
    node_ip: str
    node_port: int
    protocol: L4
    ip_family: IPFamily = "IPv4"

    def raw(self) -> RawEntry:
        return {"podPort": self.pod_port, "nodeIP": self.node_ip, "nodePort": self.node_port,
                "protocol": self.protocol, "ipFamily": self.ip_family}


def family_of(address: str) -> IPFamily:
    try:
        return "IPv6" if ipaddress.ip_address(address).version == 6 else "IPv4"
    except ValueError:
        return "IPv4"


def encode(entries: Iterable[NplEntry]) -> str | None:
    """The annotation value, or None (remove the annotation) when there is nothing to say."""
    ordered = sorted(set(entries))
    if not ordered:
        return None
    return json.dumps([e.raw() for e in ordered], separators=(",", ":"))


def _port(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        return None
    return value


def _short(value: object) -> str:
    """A bounded rendering of a value for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}… ({len(text)} characters)"


def decode(text: str | None) -> tuple[frozenset[NplEntry], str | None]:
    """Entries of an annotation value, and an error message if it was not valid."""
    if text is None:
        return frozenset(), None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:  # nesting too deep is RecursionError
        return frozenset(), f"not JSON: {exc}"
    if not isinstance(raw, list):
        return frozenset(), "not a JSON list"
    entries: set[NplEntry] = set()
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            return frozenset(entries), f"item {index} is not an object"
        pod_port, node_port = _port(item.get("podPort")), _port(item.get("nodePort"))
        node_ip = item.get("nodeIP")
        protocol = item.get("protocol")
        if protocol is None and isinstance(item.get("protocols"), list) and item["protocols"]:
            protocol = item["protocols"][0]  # Antrea < 1.7 wrote "protocols": ["tcp"]
        if pod_port is None or node_port is None or not isinstance(node_ip, str):
            return frozenset(entries), f"item {index}: bad podPort, nodePort or nodeIP"
        if protocol not in ("tcp", "udp"):
            return (frozenset(entries),
                    f"item {index}: protocol {_short(protocol)} is not tcp or udp")
        family = item.get("ipFamily", family_of(node_ip))
        if family not in ("IPv4", "IPv6"):
            return frozenset(entries), f"item {index}: ipFamily {_short(family)}"
        entries.add(NplEntry(pod_port=pod_port, node_ip=node_ip, node_port=node_port,
                             protocol="tcp" if protocol == "tcp" else "udp",
                             ip_family="IPv6" if family == "IPv6" else "IPv4"))
    return frozenset(entries), None


def needs_write(current: str | None, wanted: Iterable[NplEntry]) -> bool:
    """Whether the annotation must be patched: content differs, or the current one is invalid."""
    wanted_set = frozenset(wanted)
    entries, error = decode(current)
    if error is not None:
        return True
    if current is not None and not wanted_set:
        return True
    return entries != wanted_set


def node_key(master: bytes, node: str) -> bytes:
    """The key the agent of ``node`` signs with: derived from the controller's master key, so
    the controller checks any node's signatures with one secret while each agent holds only
    its own node's key (root on one node cannot sign for another)."""
    return hmac.new(master, f"podway-npl/{node}".encode(), hashlib.sha256).digest()


def signature(key: bytes, *, uid: str, value: str) -> str:
    """What Podway's agent writes in ``SIGNATURE_ANNOTATION`` for a pod (``uid``) whose
    ``ANNOTATION`` is ``value``: binding the mapping to that pod, so another pod's signed
    annotation copied over is not vouched for either."""
    mac = hmac.new(key, f"{_SIGNATURE_VERSION}\n{uid}\n{value}".encode(), hashlib.sha256)
    return f"{_SIGNATURE_VERSION}:{base64.urlsafe_b64encode(mac.digest()).decode().rstrip('=')}"


def vouched(key: bytes, *, uid: str, value: str | None, signed: str | None) -> bool:
    """Whether ``signed`` is the agent's signature of ``value`` on pod ``uid``."""
    if value is None or signed is None or not uid:
        return False
    return hmac.compare_digest(signature(key, uid=uid, value=value).encode(),
                               signed.encode(errors="replace"))
