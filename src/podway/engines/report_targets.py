"""Where an engine sends its member health: every controller replica its ``--xds`` names.

The readiness gate is written by the one leading replica, and it can count only the engines it
hears (``podway.programs.controller.readiness``). An engine's Envoy holds one xDS stream, to any
replica, so the reporter (``podway.engines.reporter``) does not follow Envoy: it reports
to all of
them. ``targets`` turns the configured addresses into one ``Target`` per replica:

* ``unix:/path``: that socket;
* an IP literal ``host:port``: that address, dialled as given;
* a DNS name ``name:port`` (e.g. the headless Service ``podway-xds``): every address it
  resolves to, IPv4 preferred as the engine's Envoy resolves it (``V4_PREFERRED``: IPv6 only
  when the name has no IPv4 address), so "localhost" is one replica, not two. Names are
  resolved again every ``resolve_s`` by the reporter; a failed lookup keeps the name's last
  addresses (a DNS hiccup must not close streams to live replicas).

Invariants:

* TLS checks the same name Envoy's xDS connection checks (``podway.envoy.engine.bootstrap``):
  ``--xds-sni`` when given, else the DNS name the address came from, else the IP literal
  itself. A replica dialled by a resolved IP is still verified against the name, never
  against the IP.
* One target per dialled address: two ``--xds`` entries that reach the same address give one
  stream (the first entry's TLS name), since two streams of one engine to one replica would
  only replace each other's view there.
* ``targets`` is pure: resolution results come in as data (``Names`` does the lookups, through a
  resolver that tests replace), so the fan-out is tested without DNS.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from podway.base.errors import ConfigError
from podway.base.netaddr import format_host_port, is_ip, parse_host_port

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[tuple[str, ...]]]


@dataclass(frozen=True, slots=True)
class Target:
    """One controller replica to report to."""

    dial: str  # what gRPC dials: "unix:/path", "10.0.0.7:18000", "ipv4:10.0.0.7:18000"
    name: str  # the TLS name to verify and send as SNI; "" = the dialled host (an IP, a path)
    source: str  # the --xds address it came from (for logs)


def dns_names(addresses: Iterable[str]) -> tuple[str, ...]:
    """The ``host:port`` addresses whose host is a name to resolve (not unix, not an IP)."""
    return tuple(a for a in addresses
                 if not a.startswith("unix:") and not is_ip(parse_host_port(a).host))


def targets(addresses: Iterable[str], resolved: Mapping[str, tuple[str, ...]], *,
            sni: str = "") -> tuple[Target, ...]:
    """Every replica to report to, in the order configured: ``resolved`` maps each DNS-name
    address to the IPs it resolves to now (missing or empty: no replica known for it yet)."""
    out: dict[str, Target] = {}
    for address in addresses:
        if address.startswith("unix:"):
            found = [Target(dial=address, name=sni, source=address)]
        else:
            target = parse_host_port(address, what="xDS address")
            if is_ip(target.host):
                found = [Target(dial=address, name=sni, source=address)]
            else:
                found = [Target(dial=_dial(ip, target.port), name=sni or target.host,
                                source=address) for ip in resolved.get(address, ())]
        for one in found:
            out.setdefault(one.dial, one)
    return tuple(out.values())


def _dial(ip: str, port: int) -> str:
    """A resolved address in gRPC's own address schemes (no second lookup by gRPC)."""
    return f"ipv6:{format_host_port(ip, port)}" if ":" in ip else f"ipv4:{ip}:{port}"


def preferred(ips: Iterable[str]) -> tuple[str, ...]:
    """IPv4 addresses when there are any, else the IPv6 ones; de-duplicated and sorted (the
    order a resolver returns changes from one answer to the next)."""
    unique = set(ips)
    v4 = sorted(ip for ip in unique if ":" not in ip)
    return tuple(v4) if v4 else tuple(sorted(unique))


async def resolve(host: str, port: int) -> tuple[str, ...]:
    """The addresses ``host`` resolves to now (``OSError`` when it does not)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return preferred(str(info[4][0]) for info in infos)


class Names:
    """The DNS-name addresses of ``--xds`` and what each resolved to last (module docstring)."""

    def __init__(self, addresses: Iterable[str], *, resolver: Resolver = resolve) -> None:
        self.names = dns_names(addresses)
        self.resolved: dict[str, tuple[str, ...]] = {}
        self._resolver = resolver
        self._failing: set[str] = set()  # names whose last lookup failed (logged once)

    async def refresh(self) -> Mapping[str, tuple[str, ...]]:
        """Look every name up again; a name that does not resolve keeps its last answer."""
        for address in self.names:
            target = parse_host_port(address, what="xDS address")
            try:
                self.resolved[address] = await self._resolver(target.host, target.port)
            except (OSError, UnicodeError) as exc:
                if address not in self._failing:
                    kept = self.resolved.get(address, ())
                    log.warning("member health: %s does not resolve (%s); keeping %s",
                                target.host, exc, ", ".join(kept) or "no replica")
                self._failing.add(address)
            else:
                self._failing.discard(address)
        return self.resolved


def xds_addresses(xds: str | tuple[str, ...]) -> tuple[str, ...]:
    """The xDS addresses, de-duplicated in order; a mix of unix sockets and host:port, or
    none at all, is one ``ConfigError``."""
    found = tuple(dict.fromkeys((xds,) if isinstance(xds, str) else xds))
    if not found:
        raise ConfigError("--xds: give the controller's address (host:port or unix:/path)")
    if len({a.startswith("unix:") for a in found}) > 1:
        raise ConfigError("--xds: unix sockets and host:port addresses cannot be mixed")
    return found
