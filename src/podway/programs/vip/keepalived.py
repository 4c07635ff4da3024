"""keepalived (VRRP) configuration for a pair or group of engine hosts on one L2 segment.

One VRRP instance holds every VIP of the group; the host with the highest priority owns them and
answers ARP/ND for them; when it stops advertising (host dead: after three advertisement
intervals; keepalived stopped: at once, it sends priority 0) the next one takes over and sends
gratuitous ARP so clients and routers move. VRRP v3 allows advertisement intervals below a
second (``advert_s: 0.1`` gives a takeover in about 0.4 s).

Envoy binds the VIPs on every host of the group before they move, which needs
``net.ipv4.ip_nonlocal_bind=1`` (and ``net.ipv6.ip_nonlocal_bind=1``) on the engine hosts; the
generated file says so, ``docs/vips.md`` shows how. ``nopreempt`` keeps the VIPs where they are
when a recovered host comes back (one move per failure, not two). An optional check command
(for example ``podway vip check --url http://127.0.0.1:19001/ready``) lowers the host out of
the election while its Envoy is unhealthy.

A graceful stop that fails nothing (``podway.programs.vip.secondchance``) also needs the VIPs to
stay local on a host that hands them over: on ``lo`` on every host, with ``arp_ignore=1`` and
``arp_announce=2`` on the interface so only the VRRP owner answers ARP for them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from podway.base.errors import ConfigError
from podway.programs.vip.bird import host_routes

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # a Linux interface name


@dataclass(frozen=True, slots=True, kw_only=True)
class VrrpSettings:
    interface: str
    """The interface on the shared L2 segment."""
    router_id: int
    """VRRP virtual router id, 1..255, the same on every host of the group, unique on the LAN."""
    priority: int = 100
    """1..254; the highest alive host owns the VIPs."""
    advert_s: float = 0.1
    """Advertisement interval in seconds (VRRP v3: 0.01 steps); takeover after ~3 of them."""
    peers: tuple[str, ...] = ()
    """Unicast peers (other hosts' addresses) for networks that drop multicast; empty:
    multicast."""
    check: str = ""
    """A command whose failure takes this host out of the election (keepalived runs it)."""
    check_interval_s: int = 1
    name: str = "podway"


def check_settings(s: VrrpSettings) -> None:
    if not _NAME.match(s.interface):
        raise ConfigError(f"interface {s.interface!r} is not an interface name")
    if not 1 <= s.router_id <= 255:
        raise ConfigError(f"VRRP router id {s.router_id} must be 1..255")
    if not 1 <= s.priority <= 254:
        raise ConfigError(f"VRRP priority {s.priority} must be 1..254")
    if not 0.01 <= s.advert_s <= 40.95 or round(s.advert_s * 100) != s.advert_s * 100:
        raise ConfigError(f"advertisement interval {s.advert_s}s must be 0.01..40.95 in 0.01 s "
                          "steps")
    for p in s.peers:
        try:
            ipaddress.ip_address(p)
        except ValueError:
            raise ConfigError(f"VRRP peer {p!r} is not an IP address") from None
    if not re.match(r"^[A-Za-z0-9_]{1,32}$", s.name):
        raise ConfigError(f"instance name {s.name!r}: letters, digits and _ only")
    if '"' in s.check or "\n" in s.check:
        raise ConfigError("the check command may not contain quotes or newlines")


def _addresses(vips: Sequence[str]) -> list[str]:
    """Each VIP; a CIDR (a small pool) stands for its addresses, since VRRP moves addresses,
    not prefixes."""
    out: list[str] = []
    for text in vips:
        try:
            net = ipaddress.ip_network(text, strict=True)
        except ValueError:
            raise ConfigError(f"VIP {text!r} is not an IP address or a CIDR") from None
        if net.num_addresses > 256:
            raise ConfigError(f"VIP pool {text} has {net.num_addresses} addresses; VRRP moves "
                              "each one: list at most 256")
        out += [str(a) for a in net] if net.num_addresses > 1 else [str(net.network_address)]
    return out


def config(s: VrrpSettings, vips: Sequence[str]) -> str:
    """The host's ``keepalived.conf`` owning ``vips`` (IPv4 and IPv6 VIPs: one instance per
    family, as VRRP v3 requires)."""
    check_settings(s)
    v4, v6 = host_routes(_addresses(vips))
    if not v4 and not v6:
        raise ConfigError("at least one VIP is needed (--vip)")
    lines = ["# Written by podway (podway vip keepalived-config). The engine hosts need",
             "# net.ipv4.ip_nonlocal_bind=1 (and net.ipv6.ip_nonlocal_bind=1) so Envoy can bind",
             "# the VIPs before they move here. For graceful stops with second chance, keep the",
             "# VIPs on lo too, with arp_ignore=1 and arp_announce=2 on this interface.",
             "global_defs {", f"    router_id {s.name}", "    vrrp_version 3",
             "    vrrp_garp_master_refresh 5", "    enable_script_security",
             "    script_user root", "}", ""]
    track: list[str] = []
    if s.check:
        lines += [f"vrrp_script {s.name}_check {{", f'    script "{s.check}"',
                  f"    interval {s.check_interval_s}", "    fall 2", "    rise 2", "}", ""]
        track = ["    track_script {", f"        {s.name}_check", "    }"]
    for family, routes in (("4", v4), ("6", v6)):
        if not routes:
            continue
        lines += [f"vrrp_instance {s.name}_v{family} {{", "    state BACKUP", "    nopreempt",
                  f"    interface {s.interface}", f"    virtual_router_id {s.router_id}",
                  f"    priority {s.priority}", f"    advert_int {s.advert_s:g}"]
        peers = [p for p in s.peers if str(ipaddress.ip_address(p).version) == family]
        if peers:  # unicast peers of the instance's own family
            lines += ["    unicast_peer {", *[f"        {p}" for p in peers], "    }"]
        lines += ["    virtual_ipaddress {",
                  *[f"        {r} dev {s.interface}" for r in routes], "    }", *track, "}", ""]
    return "\n".join(lines)
