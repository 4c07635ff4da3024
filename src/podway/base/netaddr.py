"""``host:port`` text ↔ (host, port): the one parser every flag and address goes through.

Accepts ``1.2.3.4:80``, ``[::1]:80``, ``name:80`` and, where the caller gives a default host,
``:80``. The host comes back without brackets; ``format_host_port`` puts them back for IPv6.
A bad address is a ``ConfigError`` naming the text and what was expected (one line for the CLI).
Neutral on purpose: ``translate``, ``xds``, ``engine`` and ``kube`` all import it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from podway.base.errors import ConfigError


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return format_host_port(self.host, self.port)


def parse_host_port(text: str, *, default_host: str | None = None,
                    what: str = "address") -> HostPort:
    """Parse ``host:port``; an empty host is ``default_host`` (an error when None)."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        raise ConfigError(f"{what} {text!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"{what} {text!r}: write an IPv6 host in brackets, [::1]:port")
    if not host:
        if default_host is None:
            raise ConfigError(f"{what} {text!r} has no host")
        host = default_host
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{what} {text!r}: the port must be a number from 0 to 65535")
    return HostPort(host, int(port_text))


def format_host_port(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP address literal (not a name)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
