"""What rendering one listener gives: its frontend section, its files and what it cannot do."""

from __future__ import annotations

from dataclasses import dataclass

from podway.haproxy.report import Unsupported
from podway.ir import Listener, ObjectRef


@dataclass(frozen=True, slots=True, kw_only=True)
class Frontend:
    lines: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()  # (relative path, content): PEMs, crt-lists
    maps: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()  # (relative path, rows)
    unsupported: tuple[Unsupported, ...] = ()
    sections: tuple[tuple[str, ...], ...] = ()  # more sections it needs (its 404 backend)


def bind_address(listener: Listener) -> str:
    """HAProxy reads the port after the last colon, so IPv6 needs no brackets."""
    return f"{listener.address}:{listener.port}"


def origin_of(listener: Listener) -> ObjectRef | None:
    """The object a listener-wide finding is reported on: the one that declared its first
    Gateway API listener (a ListenerSet's listener alone on its port: the set, not the
    Gateway), else its first origin."""
    if listener.sections:
        return listener.sections[0].origin
    return listener.origins[0] if listener.origins else None
