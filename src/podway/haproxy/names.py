"""Stable HAProxy identifiers and config-file quoting for IR names.

Identifiers come from IR names (stable, hierarchical), never from positions, so adding a
route or a virtual host renames nothing else and a runtime map edit stays valid. Proxy names
allow ``[A-Za-z0-9_.:-]``: a pool name is kept readable (``/`` becomes ``:``) when that is
lossless, else it is a digest.
"""

from __future__ import annotations

import hashlib
import re

_PROXY_SAFE = re.compile(r"[A-Za-z0-9_.-]+")
_WORD_SAFE = re.compile(r"[A-Za-z0-9_.:/@%+=,~^$*?()\[\]|\\{}-]+")


def digest(name: str, size: int = 10) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:size]


def proxy_name(prefix: str, name: str) -> str:
    """A frontend/backend name for an IR name: readable when lossless, a digest otherwise."""
    parts = name.split("/")
    if all(_PROXY_SAFE.fullmatch(p) for p in parts):
        return f"{prefix}:{':'.join(parts)}"
    return f"{prefix}:{digest(name, 16)}"


def no_route_backend(listener: str) -> str:
    """The backend answering 404 for an HTTP listener's requests no route matched (its
    request count is the listener's no-route count)."""
    return proxy_name("nr", listener)


def vhost_key(name: str) -> str:
    return "v" + digest(name)


def route_key(name: str) -> str:
    return "r" + digest(name)


class Unquotable(ValueError):
    """A value that cannot be written as one word of haproxy.cfg."""


def word(value: str) -> str:
    """``value`` as one haproxy.cfg word, taken literally (no escape, no variable expansion)."""
    if value and _WORD_SAFE.fullmatch(value) and "\\" not in value and "$" not in value:
        return value
    if "'" in value or "\n" in value or "\r" in value:
        raise Unquotable(value)
    return f"'{value}'"


def logformat_literal(value: str) -> str:
    """``value`` as literal text inside a log-format string (``%`` doubled)."""
    return value.replace("%", "%%")


def regex_literal(value: str) -> str:
    """``value`` escaped for a PCRE pattern, without backslashes where a class does."""
    out = []
    for ch in value:
        if ch.isalnum() or ch in "/-_~!&',;=:@ %":
            out.append(ch)
        elif ch in "^\\]":
            out.append("\\" + ch)
        else:
            out.append(f"[{ch}]")
    return "".join(out)
