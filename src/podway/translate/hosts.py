"""Hostname rules shared by Ingress and Gateway API translation."""

from __future__ import annotations

import re

from podway.ir import WildcardMode

_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")


def valid_hostname(host: str) -> bool:
    """A lowercase DNS name, optionally with one leading ``*.`` label; no IP addresses."""
    if len(host) > 253 or not _HOST.match(host):
        return False
    last = host.rsplit(".", 1)[-1]
    return not last.isdigit()


def covers(pattern: str, host: str, mode: WildcardMode = WildcardMode.ONE_LABEL) -> bool:
    """Does ``pattern`` (exact, ``*.suffix`` or ``*``) match ``host``?"""
    if pattern in ("*", host):
        return True
    if not pattern.startswith("*."):
        return False
    suffix = pattern[1:]  # ".foo.com"
    if not host.endswith(suffix) or len(host) == len(suffix):
        return False
    head = host[: -len(suffix)]
    return mode is WildcardMode.SUFFIX or "." not in head


def host_order(host: str) -> tuple[int, int, str]:
    """Precedence of virtual hosts: exact names, then wildcards (longest first), then ``*``."""
    if host == "*":
        return (2, 0, "")
    if host.startswith("*."):
        return (1, -len(host), host)
    return (0, 0, host)
