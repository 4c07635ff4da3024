"""Attached routes → IR listeners, one per address, port and transport.

Several Gateway listeners on one port share one IR listener — of one Gateway, or of several
Gateways bound to the same address (``share_ports`` decides who may join): HTTP listeners are
told apart by
virtual host, HTTPS ones by virtual host and SNI certificate, TLS ones by the SNI hostnames of
their L4 routes. Within a virtual host routes are ordered by the precedence key from
``httproute``; hostnames go most specific first (exact, then wildcards by length, then ``*``),
and a request for a hostname no exact route matches falls through to the routes of the wildcard
hostnames that cover it (same Gateway listener only), as the specification orders precedence by
hostname before path. Listener hostnames come first of all: a request is served by the most
specific listener whose hostname matches it, and only by routes attached to that listener.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from podway.ir import (
    L4Route,
    Listener,
    ListenerProtocol,
    ListenerSection,
    Route,
    RouteMatch,
    TLSCertificate,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir.hosts import covers, host_order
from podway.model import ObjectRef
from podway.translate.gateway.httproute import PlacedRoute
from podway.translate.gateway.listeners import GatewayInfo, GwListener
from podway.translate.gateway.memo import VhostPart


@dataclass(frozen=True, slots=True)
class _Entry:
    placed: PlacedRoute
    owner: str  # the Gateway listener (ns/gateway/listener)

    @property
    def route(self) -> Route:
        return self.placed.route


@dataclass(frozen=True, slots=True)
class Shadow:
    """A route match that another object's identical match always wins over, on ``host``."""

    lost: PlacedRoute
    won: PlacedRoute
    host: str


def _entry_key(entry: _Entry) -> tuple[object, ...]:
    return entry.placed.key


def listener_id(ls: GwListener) -> str:
    """``ns/gateway/listener``; ``ns/gateway/set-ns/set/listener`` for a ListenerSet's (whose
    names need not differ from the Gateway's)."""
    ns, name = ls.gateway.key
    if ls.owner is not None:
        set_ns, set_name = ls.owner.key
        return f"{ns}/{name}/{set_ns}/{set_name}/{ls.name}"
    return f"{ns}/{name}/{ls.name}"


@dataclass(slots=True)
class PortBuilder:
    """Everything bound to one (address, port, transport), from one or more Gateways."""

    info: GatewayInfo  # the oldest Gateway on the port: it names the IR listener
    port: int
    protocol: ListenerProtocol
    members: list[GwListener] = field(default_factory=list)
    hosts: dict[str, list[_Entry]] = field(default_factory=dict)
    l4: dict[str, tuple[tuple[float, str], L4Route, set[str]]] = field(default_factory=dict)
    claimed: dict[str, str] = field(default_factory=dict)  # SNI hostname → route name
    shadowed: list[Shadow] = field(default_factory=list)
    # Virtual hosts of the previous run and of this one (``memo.GatewayMemo.vhosts``).
    memo: dict[tuple[str, str], Any] | None = None
    memo_next: dict[tuple[str, str], Any] | None = None
    # The last ``build``'s virtual hosts in host order (hosts, their order keys, the IR
    # nodes), the Gateway listeners' (hostname, id) most specific first and the wildcard
    # hostnames with routes: what ``refresh`` patches.
    _order: list[str] = field(default_factory=list)
    _keys: list[tuple[int, int, str]] = field(default_factory=list)
    _built: list[VirtualHost] = field(default_factory=list)
    _owners: list[tuple[str, str]] = field(default_factory=list)
    _wildcards: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        ns, name = self.info.gateway.key
        suffix = "/udp" if self.protocol is ListenerProtocol.UDP else ""
        return f"gateway/{ns}/{name}/{self.port}{suffix}"

    @property
    def origins(self) -> tuple[ObjectRef, ...]:
        return tuple(dict.fromkeys(ls.gateway.ref for ls in self.members))

    @property
    def sections(self) -> tuple[ListenerSection, ...]:
        """The Gateway API listeners served here, each on the object that declared it."""
        return tuple(ListenerSection(origin=(ls.owner or ls.gateway).ref, name=ls.name)
                     for ls in self.members)

    def add_http(self, owner: GwListener, hostnames: tuple[str, ...],
                 routes: list[PlacedRoute]) -> list[tuple[str, tuple[Any, ...]]]:
        """Add a route's matches to each of its hostnames; returns what was added, by host."""
        owner_id = listener_id(owner)
        entries = tuple(_Entry(placed, owner_id) for placed in routes)
        for host in hostnames:
            self.hosts.setdefault(host, []).extend(entries)
        return [(host, entries) for host in hostnames]

    def add_l4(self, *, name: str, age: tuple[float, str], hostnames: tuple[str, ...],
               backends: tuple[WeightedPool, ...], origin: ObjectRef,
               certificate: TLSCertificate | None = None) -> list[str]:
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
        self.l4[name] = (age, L4Route(name=name, backends=backends, origin=origin,
                                      certificate=certificate), names)
        return lost

    def build(self) -> Listener:
        if self.protocol in (ListenerProtocol.HTTP, ListenerProtocol.HTTPS):
            return Listener(name=self.name, address=self.info.address, port=self.port,
                            protocol=self.protocol, virtual_hosts=self._vhosts(),
                            certificates=self._certificates(), origins=self.origins,
                            sections=self.sections,
                            sni_host_check=self.protocol is ListenerProtocol.HTTPS)
        routes = []
        for _age, l4, names in sorted(self.l4.values(), key=lambda t: (t[0], t[1].name)):
            hosts = () if "*" in names or self.protocol is not ListenerProtocol.TLS else tuple(
                sorted(names, key=host_order))
            routes.append(L4Route(name=l4.name, backends=l4.backends, hostnames=hosts,
                                  origin=l4.origin, certificate=l4.certificate))
        return Listener(name=self.name, address=self.info.address, port=self.port,
                        protocol=self.protocol, l4_routes=tuple(routes), origins=self.origins,
                        sections=self.sections)

    def _vhosts(self) -> tuple[VirtualHost, ...]:
        """One virtual host per route hostname and per listener hostname.

        A request belongs to the most specific listener whose hostname matches it; so each
        virtual host serves only the routes of that listener: its own hostname's routes first,
        then those of the wildcard hostnames covering it. A listener hostname with no route
        still gets its (empty) virtual host, so its requests get 404 instead of leaking into a
        broader listener's wildcard.
        """
        listeners = sorted(((ls.hostname or "*", listener_id(ls)) for ls in self.members),
                           key=lambda hn: host_order(hn[0]))
        ordered = sorted(set(self.hosts) | {h for h, _ in listeners}, key=host_order)
        wildcards = [h for h in ordered if (h == "*" or h.startswith("*.")) and h in self.hosts]
        sorted_entries = {h: entries if len(entries) < 2 else sorted(entries, key=_entry_key)
                          for h, entries in self.hosts.items()}
        out = []
        for host in ordered:
            owner, sources = self._sources(host, listeners, wildcards)
            out.append(self._vhost(host, owner, sources, sorted_entries))
        self._order, self._keys, self._built = ordered, [host_order(h) for h in ordered], out
        self._owners, self._wildcards = listeners, wildcards
        return tuple(out)

    @staticmethod
    def _sources(host: str, listeners: list[tuple[str, str]], wildcards: list[str]
                 ) -> tuple[str | None, tuple[str, ...]]:
        """The Gateway listener owning ``host`` and the hostnames whose routes it serves."""
        owner = next((name for pattern, name in listeners
                      if covers(pattern, host, WildcardMode.SUFFIX)), None)
        return owner, (host, *(w for w in wildcards
                                if w != host and covers(w, host, WildcardMode.SUFFIX)))

    def can_refresh(self, hosts: set[str]) -> bool:
        """Whether ``refresh`` can patch these hostnames: exact names only (a wildcard's
        routes reach every host it covers) whose last virtual hosts shadowed nothing."""
        for host in hosts:
            if host == "*" or host.startswith("*."):
                return False
            kept = self.memo_next.get((self.name, host)) if self.memo_next is not None else None
            if kept is not None and kept.shadows:
                return False
        return True

    def refresh(self, hosts: set[str]) -> list[tuple[VirtualHost | None, VirtualHost | None]]:
        """Rebuild the virtual hosts of exact hostnames whose entries changed since the last
        ``build`` (``can_refresh`` said yes); the (old, new) node of each, None where there is
        none. ``listener`` then gives the IR listener. Equal to what ``build`` makes from
        the same entries: every other virtual host depends on other hostnames' entries and on
        the wildcards' (unchanged), and exact hostnames are placed in the same total order."""
        listener_hosts = {h for h, _ in self._owners}
        out: list[tuple[VirtualHost | None, VirtualHost | None]] = []
        for host in sorted(hosts):
            key = host_order(host)
            at = bisect_left(self._keys, key)
            exists = at < len(self._order) and self._order[at] == host
            old = self._built[at] if exists else None
            new = None
            if host in self.hosts or host in listener_hosts:
                owner, sources = self._sources(host, self._owners, self._wildcards)
                entries = {s: sorted(self.hosts.get(s, ()), key=_entry_key) for s in sources}
                new = self._vhost(host, owner, sources, entries)
                if exists:
                    self._built[at] = new
                else:
                    self._order.insert(at, host)
                    self._keys.insert(at, key)
                    self._built.insert(at, new)
            elif exists:
                del self._order[at], self._keys[at], self._built[at]
                if self.memo_next is not None:
                    self.memo_next.pop((self.name, host), None)
            out.append((old, new))
        return out

    def listener(self) -> Listener:
        """The HTTP/HTTPS IR listener of the current virtual hosts (after ``refresh``)."""
        return Listener(name=self.name, address=self.info.address, port=self.port,
                        protocol=self.protocol, virtual_hosts=tuple(self._built),
                        certificates=self._certificates(), origins=self.origins,
                        sections=self.sections,
                        sni_host_check=self.protocol is ListenerProtocol.HTTPS)

    def _vhost(self, host: str, owner: str | None, sources: tuple[str, ...],
               sorted_entries: dict[str, list[_Entry]]) -> VirtualHost:
        """One virtual host; the previous run's while it is made of the same placed routes."""
        # The entries themselves: equal entries (the very same ones, when the route was
        # replayed) make an equal virtual host.
        signature = (owner, sources, *(tuple(sorted_entries.get(source, ()))
                                       for source in sources))
        key = (self.name, host)
        kept = self.memo.get(key) if self.memo is not None else None
        if kept is not None and kept.signature == signature:
            self.shadowed.extend(kept.shadows)
        else:
            before = len(self.shadowed)
            vhost = self._new_vhost(host, owner, sources, sorted_entries)
            kept = VhostPart(signature, vhost, tuple(self.shadowed[before:]))
        if self.memo_next is not None:
            self.memo_next[key] = kept
        return kept.vhost

    def _new_vhost(self, host: str, owner: str | None, sources: tuple[str, ...],
                   sorted_entries: dict[str, list[_Entry]]) -> VirtualHost:
        routes: dict[str, Route] = {}
        first: dict[RouteMatch, PlacedRoute] = {}
        for source in sources:
            for e in sorted_entries.get(source, ()):
                if e.owner != owner or e.route.name in routes:
                    continue
                routes[e.route.name] = e.route
                if source == host:
                    winner = first.setdefault(e.route.match, e.placed)
                    if winner is not e.placed and winner.route.origin != e.route.origin:
                        self.shadowed.append(Shadow(e.placed, winner, host))
        return VirtualHost(name=f"{self.name}/{host}", hostname=host,
                           wildcard=WildcardMode.SUFFIX, routes=tuple(routes.values()))

    def _certificates(self) -> tuple[TLSCertificate, ...]:
        named: dict[str, TLSCertificate] = {}
        hosts: dict[str, list[str]] = {}
        for ls in self.members:
            for cert in ls.certificates:
                name = cert.name if cert.hostnames else f"{cert.name}/default"
                named.setdefault(name, cert)
                hosts.setdefault(name, []).extend(cert.hostnames)
        return tuple(TLSCertificate(name=n, hostnames=tuple(sorted(set(hosts[n]), key=host_order)),
                                    cert_pem=c.cert_pem, key_pem=c.key_pem, origin=c.origin,
                                    options=c.options)
                     for n, c in sorted(named.items()))


PortKey = tuple[str, int, ListenerProtocol]  # (address, port, protocol)


def share_ports(infos: list[GatewayInfo]) -> dict[PortKey, PortBuilder]:
    """Builders for every usable listener, oldest Gateway first; who cannot join is unbound.

    Within one Gateway, conflicts are already settled (``listeners._conflicts``). Across
    Gateways on one address and port, a younger Gateway's listener joins when it speaks the
    same protocol and, for HTTP, HTTPS and TLS, brings a hostname nobody on the port serves yet;
    otherwise it is left unbound (``PortUnavailable``) and the older Gateway keeps the port.
    """
    out: dict[PortKey, PortBuilder] = {}
    families: dict[tuple[str, int, bool], PortBuilder] = {}  # (address, port, is UDP)
    for info in infos:
        for ls in info.listeners:
            if not ls.usable or ls.blocked or ls.protocol is None:
                continue
            family = (info.address, ls.spec.port, ls.protocol is ListenerProtocol.UDP)
            held = families.get(family)
            if held is None:
                builder = PortBuilder(info=info, port=ls.spec.port, protocol=ls.protocol)
                families[family] = out[(info.address, ls.spec.port, ls.protocol)] = builder
                builder.members.append(ls)
                continue
            if held.info is not info:
                why = _refusal(held, ls)
                if why:
                    ls.unbound = why
                    continue
            if ls.protocol is not held.protocol:
                # HTTPS beside TLS in one Gateway (listeners._conflicts allowed it): a builder
                # of its own, merged into the HTTPS listener by ``merge_sni_shared``.
                key = (info.address, ls.spec.port, ls.protocol)
                out.setdefault(key, PortBuilder(info=info, port=ls.spec.port,
                                                protocol=ls.protocol)).members.append(ls)
                continue
            held.members.append(ls)
    return out


def merge_sni_shared(https: Listener, tls: Listener) -> Listener:
    """One engine listener for an HTTPS and a TLS Gateway listener on the same port: the
    terminating filter chains (certificates by SNI) and the passthrough ones (L4 routes by SNI).
    An SNI name both claim stays with the terminating chain (the engine picks one chain per
    name; ``envoy_config.listeners`` skips the duplicate)."""
    return Listener(name=https.name, address=https.address, port=https.port,
                    protocol=https.protocol, virtual_hosts=https.virtual_hosts,
                    certificates=https.certificates, l4_routes=tls.l4_routes,
                    origins=tuple(dict.fromkeys((*https.origins, *tls.origins))),
                    sections=(*https.sections, *tls.sections),
                    sni_host_check=https.sni_host_check)


def _refusal(held: PortBuilder, ls: GwListener) -> str:
    """Why a younger Gateway's listener cannot share ``held``'s port, or ""."""
    first = held.members[0]
    where = f"{held.info.address}:{held.port}"
    if ls.protocol is not held.protocol:
        return (f"{where} is used by {held.protocol} listener {listener_id(first)} of an older "
                "Gateway")
    if ls.protocol in (ListenerProtocol.TCP, ListenerProtocol.UDP):
        return f"{where} is used by listener {listener_id(first)} of an older Gateway"
    same = next((m for m in held.members if (m.hostname or "") == (ls.hostname or "")), None)
    if same is not None:
        shown = ls.hostname or "(no hostname)"
        return (f"{where} hostname {shown} is already served by listener {listener_id(same)} "
                "of an older Gateway")
    return ""
