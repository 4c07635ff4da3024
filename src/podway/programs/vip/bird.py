"""BIRD 2 configuration for an engine host that announces its VIPs over BGP.

Pure text builders (the tests assert the exact text and run it in a real ``bird``):

- ``engine_config``: the engine host's speaker. Each VIP is a host route (/32, /128) of a
  ``static`` protocol, exported to every neighbour and never to the host's kernel table (the
  addresses live on the host, ``lo``); eBGP sets the engine's own address as next hop. With no
  VIPs the same file withdraws everything — how a graceful stop starts.
A session carries the VIPs of its neighbour's family (an IPv6 VIP needs an IPv6 neighbour).

- ``router_config``: the upstream side as a lab (and a template for a network team): one
  session per engine host, ``merge paths`` so several hosts announcing a VIP become one ECMP
  route in the kernel; it takes nothing wider than a /24 (/64) from an engine host.

Announcing a whole pool (a CIDR) instead of each VIP keeps the speaker's configuration fixed
while the IPAM hands addresses out: the engine hosts accept the pool locally (``ip route add
local POOL dev lo``) and Envoy binds the allocated VIPs (``ip_nonlocal_bind``).

Failure detection: BFD (``bfd: true``, 100 ms x 3 by default) notices a dead host in well under
a second; without it the BGP hold time (default 3 s, keepalive 1 s) bounds it. Graceful stop
never waits for either: the engine withdraws (a reconfigure), waits until the route is gone,
then drains.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from podway.base.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class BfdProfile:
    """BFD timers of one session (MetalLB's ``BFDProfile``), overriding the host's."""

    receive_ms: int = 300
    transmit_ms: int = 300
    multiplier: int = 3
    passive: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    """Prefixes a session announces with the same attributes (MetalLB's ``BGPAdvertisement``
    for one peer): already aggregated, each among the routes ``engine_config`` is given."""

    prefixes: tuple[str, ...]
    communities: tuple[str, ...] = ()
    local_pref: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Neighbor:
    """One BGP session. The optional fields override the host's settings for this session
    (a MetalLB ``BGPPeer``); ``exports`` None: every VIP with the host's attributes."""

    address: str
    asn: int
    name: str = ""  # BIRD protocol name; default from the address
    local_as: int | None = None
    port: int | None = None
    source_address: str | None = None
    hold_time: int | None = None
    keepalive: int | None = None
    password: str | None = None
    bfd: BfdProfile | None = None  # None: the host's BFD setting
    multihop: int | None = None  # eBGP multi-hop (TTL); None: directly connected
    exports: tuple[Export, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BgpSettings:
    router_id: str
    """An IPv4 address unique among the speakers (usually the host's address)."""
    local_as: int
    neighbors: tuple[Neighbor, ...]
    bfd: bool = True
    """Bidirectional Forwarding Detection on every session: sub-second failure detection."""
    bfd_interval_ms: int = 100
    """BFD transmit/receive interval; a session is down after 3 missed packets."""
    hold_time: int = 3
    """BGP hold time in seconds (3 is BGP's minimum); the bound when BFD is off."""
    keepalive: int = 1
    """BGP keepalive in seconds (at most a third of the hold time)."""
    communities: tuple[str, ...] = ()
    """Added to every announcement: standard ``ASN:VALUE`` (each 0..65535) or large
    ``ASN:VALUE:VALUE`` (each 0..4294967295) communities, as MetalLB's BGPAdvertisement."""
    local_pref: int | None = None
    """BGP LOCAL_PREF of the announcements (iBGP neighbours; eBGP ones ignore it)."""
    aggregation_length: int = 32
    """Announce each IPv4 VIP as its covering prefix of this length (MetalLB's
    ``aggregationLength``); 32: the host route."""
    aggregation_length_v6: int = 128
    password: str | None = None
    """TCP MD5 password of every session (from ``--password-file``)."""
    require_neighbors: bool = True
    """False: no session is fine (a host no MetalLB ``BGPPeer`` selects announces nothing)."""


def parse_neighbor(text: str) -> Neighbor:
    """``ADDRESS:AS`` (IPv6: ``[ADDRESS]:AS``), e.g. ``198.18.51.1:65000``."""
    host, sep, asn = text.rpartition(":")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
        number = int(asn)
    except ValueError:
        raise ConfigError(f"--neighbor {text!r}: give ADDRESS:AS, e.g. 198.18.51.1:65000"
                          ) from None
    if not sep or not 1 <= number <= 4294967295:
        raise ConfigError(f"--neighbor {text!r}: the AS number must be 1..4294967295")
    return Neighbor(address=host, asn=number)


def check_settings(settings: BgpSettings) -> None:
    """One-line ``ConfigError`` for settings BIRD would refuse or that defeat the design."""
    try:
        if ipaddress.ip_address(settings.router_id).version != 4:
            raise ValueError
    except ValueError:
        raise ConfigError(f"router id {settings.router_id!r} must be an IPv4 address") from None
    if not 1 <= settings.local_as <= 4294967295:
        raise ConfigError(f"local AS {settings.local_as} must be 1..4294967295")
    if not settings.neighbors and settings.require_neighbors:
        raise ConfigError("at least one BGP neighbour is needed (--neighbor ADDRESS:AS)")
    if settings.hold_time < 3 or settings.keepalive < 1 or \
            settings.keepalive * 3 > settings.hold_time:
        raise ConfigError(f"hold time {settings.hold_time}s / keepalive {settings.keepalive}s: "
                          "hold time at least 3 s and keepalive at most a third of it")
    if not 10 <= settings.bfd_interval_ms <= 10000:
        raise ConfigError(f"BFD interval {settings.bfd_interval_ms} ms must be 10..10000")
    for community in settings.communities:
        _community(community)
    if settings.local_pref is not None and not 0 <= settings.local_pref <= 4294967295:
        raise ConfigError(f"local preference {settings.local_pref} must be 0..4294967295")
    if not 1 <= settings.aggregation_length <= 32 or \
            not 1 <= settings.aggregation_length_v6 <= 128:
        raise ConfigError("aggregation length: 1..32 for IPv4, 1..128 for IPv6")
    _check_password(settings.password)
    for neighbor in settings.neighbors:
        _check_neighbor(neighbor)


def _check_password(password: str | None) -> None:
    if password is not None and (not password or not all(
            c.isprintable() and c not in '"\\' for c in password)):
        raise ConfigError("BGP password: printable characters without quotes or backslashes")


def _check_neighbor(n: Neighbor) -> None:
    """One-line ``ConfigError`` for a session's own values BIRD would refuse."""
    where = f"BGP neighbour {n.name or n.address}"
    try:
        ipaddress.ip_address(n.address)
        if n.source_address is not None:
            ipaddress.ip_address(n.source_address)
    except ValueError:
        raise ConfigError(f"{where}: not an IP address") from None
    if not 1 <= n.asn <= 4294967295 or (n.local_as is not None
                                        and not 1 <= n.local_as <= 4294967295):
        raise ConfigError(f"{where}: AS numbers must be 1..4294967295")
    if n.port is not None and not 1 <= n.port <= 65535:
        raise ConfigError(f"{where}: port {n.port} must be 1..65535")
    hold, keepalive = n.hold_time, n.keepalive
    if (hold is not None and hold < 3) or (keepalive is not None and keepalive < 1) or (
            hold is not None and keepalive is not None and keepalive * 3 > hold):
        raise ConfigError(f"{where}: hold time at least 3 s and keepalive at most a third of it")
    if n.bfd is not None and not (10 <= n.bfd.receive_ms <= 60000
                                  and 10 <= n.bfd.transmit_ms <= 60000
                                  and 1 <= n.bfd.multiplier <= 255):
        raise ConfigError(f"{where}: BFD intervals 10..60000 ms, multiplier 1..255")
    if n.multihop is not None and not 1 <= n.multihop <= 255:
        raise ConfigError(f"{where}: multi-hop TTL must be 1..255")
    _check_password(n.password)
    for export in n.exports or ():
        for community in export.communities:
            _community(community)
        if export.local_pref is not None and not 0 <= export.local_pref <= 4294967295:
            raise ConfigError(f"{where}: local preference {export.local_pref} must be "
                              "0..4294967295")
        for prefix in export.prefixes:
            try:
                ipaddress.ip_network(prefix)
            except ValueError:
                raise ConfigError(f"{where}: {prefix!r} is not a prefix") from None


def _community(text: str) -> str:
    """A community as BIRD writes it: ``(a,b)`` standard or ``(a,b,c)`` large."""
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    limit = 65535 if len(parts) == 2 else 4294967295
    if len(parts) not in (2, 3) or len(numbers) != len(parts) or not all(
            0 <= n <= limit for n in numbers):
        raise ConfigError(f"community {text!r}: give ASN:VALUE (each 0..65535) or "
                          "ASN:VALUE:VALUE (a large community)")
    return "(" + ",".join(map(str, numbers)) + ")"


def aggregated(vips: Iterable[str], length_v4: int, length_v6: int) -> list[str]:
    """Each VIP address as its covering prefix of the given length (a CIDR stays as it is when
    it is already as long or longer)."""
    out: list[str] = []
    for text in vips:
        net = ipaddress.ip_network(text, strict=False)
        length = length_v4 if net.version == 4 else length_v6
        out.append(str(net.supernet(new_prefix=length)) if net.prefixlen > length else text)
    return list(dict.fromkeys(out))


def host_routes(vips: Iterable[str]) -> tuple[list[str], list[str]]:
    """The VIPs as sorted IPv4 and IPv6 routes: an address is a host route (/32, /128); a CIDR
    (a whole VIP pool, e.g. ``198.18.60.0/28``) is announced as it is. Anything else is a
    ``ConfigError``."""
    v4: set[ipaddress.IPv4Network] = set()
    v6: set[ipaddress.IPv6Network] = set()
    for text in vips:
        try:
            net = ipaddress.ip_network(text, strict=True)
        except ValueError:
            raise ConfigError(f"VIP {text!r} is not an IP address or a CIDR") from None
        if isinstance(net, ipaddress.IPv4Network):
            v4.add(net)
        else:
            v6.add(net)
    return [str(n) for n in sorted(v4)], [str(n) for n in sorted(v6)]


def _name(neighbor: Neighbor, index: int) -> str:
    return neighbor.name or f"peer{index}"


def _session(neighbor: Neighbor, index: int, settings: BgpSettings, *, export: str,
             imports: str) -> list[str]:
    family = "ipv4" if ipaddress.ip_address(neighbor.address).version == 4 else "ipv6"
    n = neighbor
    port = f" port {n.port}" if n.port is not None else ""
    lines = [f"protocol bgp {_name(n, index)} {{",
             f"    local {n.source_address + ' ' if n.source_address else ''}as "
             f"{n.local_as or settings.local_as};",
             f"    neighbor {n.address}{port} as {n.asn};",
             f"    hold time {n.hold_time or settings.hold_time};",
             f"    keepalive time {n.keepalive or settings.keepalive};",
             "    connect retry time 1;",
             "    error wait time 1, 5;"]
    if n.multihop is not None:
        lines.append(f"    multihop {n.multihop};")
    if n.bfd is not None:
        b = n.bfd
        lines.append(f"    bfd {{ min rx interval {b.receive_ms} ms; min tx interval "
                     f"{b.transmit_ms} ms; multiplier {b.multiplier}; passive "
                     f"{'yes' if b.passive else 'no'}; }};")
    elif settings.bfd:
        lines.append("    bfd on;")
    password = n.password if n.password is not None else settings.password
    if password is not None:
        lines.append(f'    password "{password}";')
    if n.exports is not None:
        export = _exports(n.exports, family)
    lines += [f"    {family} {{", f"        import {imports};", f"        export {export};",
              "    };", "}"]
    return lines


def _exports(exports: Sequence[Export], family: str) -> str:
    """A session's own export filter: each group of prefixes with its attributes."""
    version = 4 if family == "ipv4" else 6
    clauses = []
    for export in exports:
        nets = [p for p in export.prefixes if ipaddress.ip_network(p).version == version]
        if not nets:
            continue
        sets = _attributes(export.communities, export.local_pref)
        clauses.append(f"if net ~ [ {', '.join(nets)} ] then {{ {' '.join(sets)} accept; }}")
    body = " ".join(clauses)
    return (f'filter {{ if proto = "vips4" || proto = "vips6" then {{ {body} }} reject; }}'
            if body else "none")


def _bfd(settings: BgpSettings) -> list[str]:
    """The BFD protocol: the host's timers (a session's ``bfd { … }`` overrides them)."""
    if not settings.bfd and not any(n.bfd is not None for n in settings.neighbors):
        return []
    ms = settings.bfd_interval_ms
    return ["protocol bfd {", '    interface "*" {', f"        min rx interval {ms} ms;",
            f"        min tx interval {ms} ms;", "        multiplier 3;", "    };", "}", ""]


def engine_config(settings: BgpSettings, vips: Sequence[str]) -> str:
    """The engine host's ``bird.conf``: announce ``vips`` (none: withdraw all) to every
    neighbour."""
    check_settings(settings)
    v4, v6 = host_routes(vips)
    v4, v6 = host_routes(aggregated([*v4, *v6], settings.aggregation_length,
                                    settings.aggregation_length_v6))
    lines = ["# Written by podway (podway vip bird-config): the VIPs this engine host serves.",
             f"router id {settings.router_id};", "",
             "protocol device { scan time 10; }", ""]
    lines += _bfd(settings)
    lines += ["protocol static vips4 {", "    ipv4;"]
    lines += [f"    route {r} blackhole;" for r in v4]
    lines += ["}", "", "protocol static vips6 {", "    ipv6;"]
    lines += [f"    route {r} blackhole;" for r in v6]
    lines += ["}", ""]
    export = _export(settings)
    for i, neighbor in enumerate(settings.neighbors):
        lines += _session(neighbor, i, settings, export=export, imports="none")
        lines.append("")
    return "\n".join(lines)


def _attributes(communities: Iterable[str], local_pref: int | None) -> list[str]:
    """Filter statements setting an announcement's attributes."""
    sets = []
    for text in communities:
        kind = "bgp_large_community" if text.count(":") == 2 else "bgp_community"
        sets.append(f"{kind}.add({_community(text)});")
    if local_pref is not None:
        sets.append(f"bgp_local_pref = {local_pref};")
    return sets


def _export(settings: BgpSettings) -> str:
    """The VIP routes only, with the announcements' attributes."""
    body = " ".join([*_attributes(settings.communities, settings.local_pref), "accept;"])
    return f'filter {{ if proto = "vips4" || proto = "vips6" then {{ {body} }} reject; }}'


def router_config(settings: BgpSettings) -> str:
    """An upstream router that learns VIPs from ``settings.neighbors`` (the engine hosts) and
    installs them in its kernel table, merged into ECMP routes."""
    check_settings(settings)
    lines = ["# Upstream router (lab / template): VIPs from engine hosts, ECMP in the kernel.",
             f"router id {settings.router_id};", "",
             "protocol device { scan time 10; }", ""]
    lines += _bfd(settings)
    lines += ["protocol kernel kernel4 {", "    ipv4 { export all; };", "    merge paths on;",
              "}", "", "protocol kernel kernel6 {", "    ipv6 { export all; };",
              "    merge paths on;", "}", ""]
    host_only = ("filter { if (net.type = NET_IP4 && net.len >= 24) || "
                 "(net.type = NET_IP6 && net.len >= 64) then accept; reject; }")
    for i, neighbor in enumerate(settings.neighbors):
        lines += _session(neighbor, i, settings, export="none", imports=host_only)
        lines.append("")
    return "\n".join(lines)
