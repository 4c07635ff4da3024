"""Hostname matching, the one rule every layer shares: translator, IR evaluator, xDS builder.

A virtual host or SNI name is an exact name, a ``*.suffix`` wildcard or ``*`` (any host).
How far a wildcard reaches is the owning API's choice (``WildcardMode``): an Ingress ``*.foo.com``
covers exactly one label, a Gateway API one any number; neither covers the bare suffix
``foo.com``. Precedence among names is ``host_order``: exact names, then wildcards longest
first, then ``*``. Keeping both here means the engine is configured, and the evaluator answers,
by the same rule the translator ordered routes with.

Names in the IR are lower case (the translator accepts no other); a request's Host is brought to
that form by ``request_host`` exactly as the engine does before it picks a virtual host: port
dropped, one trailing dot dropped (``strip_trailing_host_dot``: ``shop.test.`` is the absolute
form of ``shop.test``), lower case (DNS names are case-insensitive).
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


def host_name(name: str) -> str:
    """A host name as the engine compares a Host: lower case, one trailing dot dropped."""
    name = name.lower()
    return name[:-1] if name.endswith(".") else name


def without_port(host: str) -> str:
    """A Host without its port: a number after the last ``:`` (not inside ``[…]``) dropped."""
    head, sep, port = host.rpartition(":")
    return head if sep and port.isascii() and port.isdigit() else host


def request_host(host: str) -> str:
    """A request's Host (or ``:authority``) as the engine matches it against virtual hosts.
    Not idempotent (``a..`` loses one dot per call): apply it once, to what the client sent."""
    return host_name(without_port(host))
