"""Hostname matching, the one rule every layer shares: translator, IR evaluator, xDS builder.

A virtual host or SNI name is an exact name, a ``*.suffix`` wildcard or ``*`` (any host).
How far a wildcard reaches is the owning API's choice (``WildcardMode``): an Ingress ``*.foo.com``
covers exactly one label, a Gateway API one any number; neither covers the bare suffix
``foo.com``. Precedence among names is ``host_order``: exact names, then wildcards longest
first, then ``*``. Keeping both here means the engine is configured, and the evaluator answers,
by the same rule the translator ordered routes with.
"""

from __future__ import annotations

from podway.ir.listener import WildcardMode


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
