"""What each engine kind can serve, judged on the IR alone (pure: the translator uses it to
refuse a choice with a condition, the kernel engine to pick its listeners).

The kernel engine (``podway.kernel``) is DNAT on the engine host: a TCP or UDP listener on an
IPv4 address whose every pool is plain TCP/UDP. Anything that needs bytes touched or a
connection of its own — TLS (terminated, or chosen by SNI), HTTP, a PROXY protocol header, TLS
to the members — needs a proxy.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from podway.ir.listener import Listener, ListenerProtocol
from podway.ir.pool import PoolProtocol, PoolSettings

KERNEL_PROTOCOLS = (ListenerProtocol.TCP, ListenerProtocol.UDP)


def kernel_unsupported(listener: Listener, pools: Iterable[tuple[str, PoolSettings]]
                       ) -> str | None:
    """Why the kernel engine cannot serve ``listener`` forwarding to ``pools`` (name,
    settings); None when it can."""
    if listener.protocol not in KERNEL_PROTOCOLS:
        return f"protocol {listener.protocol} needs a proxy (the kernel engine does TCP and UDP)"
    try:
        if ipaddress.ip_address(listener.address).version != 4:
            return "IPv6 addresses are not served by the kernel engine yet"
    except ValueError:
        return f"address {listener.address!r} is not an IP address"
    if not listener.l4_routes:
        return "no route"
    if len(listener.l4_routes) > 1:
        return "more than one route on one port (chosen by SNI) needs a proxy"
    route = listener.l4_routes[0]
    if route.certificate is not None or route.hostnames:
        return "TLS needs a proxy"
    for name, settings in pools:
        if settings.proxy_protocol:
            return f"PROXY protocol ({name}) needs a proxy"
        if settings.upstream_tls is not None:
            return f"TLS to the members ({name}) needs a proxy"
        if settings.protocol not in (PoolProtocol.TCP, PoolProtocol.UDP):
            return f"pool protocol {settings.protocol} ({name}) needs a proxy"
    return None
