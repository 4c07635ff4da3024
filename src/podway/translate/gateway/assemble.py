"""Attached routes → IR listeners, one per Gateway, port and transport.

Several Gateway listeners on one port share one IR listener: HTTP listeners are told apart by
virtual host, HTTPS ones by virtual host and SNI certificate, TLS ones by the SNI hostnames of
their L4 routes. Within a virtual host routes are ordered by the precedence key from
``httproute``; hostnames go most specific first (exact, then wildcards by length, then ``*``),
and a request for a hostname no exact route matches falls through to the routes of the wildcard
hostnames that cover it (same Gateway listener only), as the specification orders precedence by
hostname before path. Listener hostnames come first of all: a request is served by the most
specific listener whose hostname matches it, and only by routes attached to that listener.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.ir import (
    L4Route,
    Listener,
    Protocol,
    Route,
    TLSCertificate,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.model import ObjectRef
from podway.translate.gateway.listeners import GatewayInfo, GwListener
from podway.translate.hosts import covers, host_order

Key = tuple[object, ...]


@dataclass(slots=True)
class _Entry:
    key: Key
    route: Route
    owner: str  # Gateway listener name


@dataclass(slots=True)
class PortBuilder:
    """Everything bound to one (address, port, transport) of one Gateway."""

    info: GatewayInfo
    port: int
    protocol: Protocol
    members: list[GwListener] = field(default_factory=list)
    hosts: dict[str, list[_Entry]] = field(default_factory=dict)
    l4: dict[str, tuple[tuple[float, str, str], L4Route, set[str]]] = field(default_factory=dict)
    claimed: dict[str, str] = field(default_factory=dict)  # SNI hostname → route name

    @property
    def name(self) -> str:
        ns, name = self.info.gateway.key
        suffix = "/udp" if self.protocol is Protocol.UDP else ""
        return f"gateway/{ns}/{name}/{self.port}{suffix}"

    def add_http(self, owner: GwListener, hostnames: tuple[str, ...],
                 routes: list[tuple[Key, Route]]) -> None:
        for host in hostnames:
            bucket = self.hosts.setdefault(host, [])
            bucket.extend(_Entry(key, route, owner.name) for key, route in routes)

    def add_l4(self, *, name: str, age: tuple[float, str, str], hostnames: tuple[str, ...],
               backends: tuple[WeightedPool, ...], origin: ObjectRef) -> list[str]:
        """Add an L4 route; returns the SNI hostnames already taken by older routes."""
        lost: list[str] = []
        mine: list[str] = []
        for host in hostnames or ("*",):
            holder = self.claimed.get(host)
            if holder is not None and holder != name:
                lost.append(host)
                continue
            self.claimed[host] = name
            mine.append(host)
        if not mine:
            return lost
        held = self.l4.get(name)
        names = held[2] if held else set()
        names.update(mine)
        self.l4[name] = (age, L4Route(name=name, backends=backends, origin=origin), names)
        return lost

    def build(self) -> Listener:
        gateway = self.info.gateway.ref
        if self.protocol in (Protocol.HTTP, Protocol.HTTPS):
            return Listener(name=self.name, address=self.info.address, port=self.port,
                            protocol=self.protocol, virtual_hosts=self._vhosts(),
                            certificates=self._certificates(), origins=(gateway,))
        routes = []
        for _age, l4, names in sorted(self.l4.values(), key=lambda t: (t[0], t[1].name)):
            hosts = () if "*" in names or self.protocol is not Protocol.TLS else tuple(
                sorted(names, key=host_order))
            routes.append(L4Route(name=l4.name, backends=l4.backends, hostnames=hosts,
                                  origin=l4.origin))
        return Listener(name=self.name, address=self.info.address, port=self.port,
                        protocol=self.protocol, l4_routes=tuple(routes), origins=(gateway,))

    def _vhosts(self) -> tuple[VirtualHost, ...]:
        """One virtual host per route hostname and per listener hostname.

        A request belongs to the most specific listener whose hostname matches it; so each
        virtual host serves only the routes of that listener: its own hostname's routes first,
        then those of the wildcard hostnames covering it. A listener hostname with no route
        still gets its (empty) virtual host, so its requests get 404 instead of leaking into a
        broader listener's wildcard.
        """
        listeners = sorted(((ls.hostname or "*", ls.name) for ls in self.members),
                           key=lambda hn: host_order(hn[0]))
        ordered = sorted(set(self.hosts) | {h for h, _ in listeners}, key=host_order)
        wildcards = [h for h in ordered if (h == "*" or h.startswith("*.")) and h in self.hosts]
        sorted_entries = {h: sorted(entries, key=lambda e: e.key)
                          for h, entries in self.hosts.items()}
        out = []
        for host in ordered:
            owner = next((name for pattern, name in listeners
                          if covers(pattern, host, WildcardMode.SUFFIX)), None)
            routes: dict[str, Route] = {}
            for source in (host, *(w for w in wildcards
                                   if w != host and covers(w, host, WildcardMode.SUFFIX))):
                for e in sorted_entries.get(source, ()):
                    if e.owner == owner:
                        routes.setdefault(e.route.name, e.route)
            out.append(VirtualHost(name=f"{self.name}/{host}", hostname=host,
                                   wildcard=WildcardMode.SUFFIX, routes=tuple(routes.values())))
        return tuple(out)

    def _certificates(self) -> tuple[TLSCertificate, ...]:
        named: dict[str, TLSCertificate] = {}
        hosts: dict[str, list[str]] = {}
        for ls in self.members:
            for cert in ls.certificates:
                name = cert.name if cert.hostnames else f"{cert.name}/default"
                named.setdefault(name, cert)
                hosts.setdefault(name, []).extend(cert.hostnames)
        return tuple(TLSCertificate(name=n, hostnames=tuple(sorted(set(hosts[n]), key=host_order)),
                                    cert_pem=c.cert_pem, key_pem=c.key_pem, origin=c.origin)
                     for n, c in sorted(named.items()))


def builders(info: GatewayInfo) -> dict[tuple[int, Protocol], PortBuilder]:
    """One builder per port and protocol of the Gateway's usable listeners."""
    out: dict[tuple[int, Protocol], PortBuilder] = {}
    for ls in info.listeners:
        if not ls.usable or ls.blocked or ls.protocol is None:
            continue
        key = (ls.spec.port, ls.protocol)
        builder = out.get(key)
        if builder is None:
            builder = out[key] = PortBuilder(info=info, port=ls.spec.port, protocol=ls.protocol)
        builder.members.append(ls)
    return out
