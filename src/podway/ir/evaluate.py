"""A reference evaluator of the IR: which route answers a request, and why.

The engine (Envoy) is configured to behave exactly like this; tests use it to check translation
semantics without a data plane, and ``podway explain`` can walk a request with it. Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from podway.ir.hosts import covers, host_order, request_host
from podway.ir.listener import Listener, VirtualHost
from podway.ir.route import PathKind, PathMatch, Route, RouteMatch, StringMatchKind


@dataclass(frozen=True, slots=True)
class Request:
    host: str
    path: str  # may carry a query string
    method: str = "GET"
    headers: Mapping[str, str] | None = None


def select_virtual_host(listener: Listener, host: str) -> VirtualHost | None:
    """Exact host, else the longest matching wildcard, else the catch-all ``*``; ``host`` as the
    client sent it (``request_host`` brings it to the engine's form)."""
    host = request_host(host)
    covering = [v for v in listener.virtual_hosts if covers(v.hostname, host, v.wildcard)]
    return min(covering, key=lambda v: host_order(v.hostname)) if covering else None


def select_route(listener: Listener, request: Request) -> Route | None:
    """The first route of the selected virtual host that matches, or None (a 404)."""
    vhost = select_virtual_host(listener, request.host)
    if vhost is None:
        return None
    for route in vhost.routes:
        if matches(route.match, request):
            return route
    return None


def matches(match: RouteMatch, request: Request) -> bool:
    return mismatch(match, request) is None


def mismatch(match: RouteMatch, request: Request) -> str | None:
    """The first condition of ``match`` that ``request`` fails, in words; None when it matches.

    Conditions are tested in the engine's order: path, method, headers, query parameters.
    """
    path, _, query = request.path.partition("?")
    if not path_matches(match.path, path):
        return f"path {path!r} is not {describe_path(match.path)}"
    if match.method is not None and match.method != request.method:
        return f"method {request.method} is not {match.method}"
    headers = {k.lower(): v for k, v in (request.headers or {}).items()}
    for h in match.headers:
        value = headers.get(h.name.lower())
        if value is None:
            return f"header {h.name} is missing (wanted {_describe(h.kind, h.value)})"
        if not _string_matches(h.kind, h.value, value):
            return f"header {h.name}: {value!r} is not {_describe(h.kind, h.value)}"
    params = dict(parse_qsl(query, keep_blank_values=True))
    for q in match.query:
        value = params.get(q.name)
        if value is None:
            return f"query parameter {q.name} is missing (wanted {_describe(q.kind, q.value)})"
        if not _string_matches(q.kind, q.value, value):
            return f"query parameter {q.name}: {value!r} is not {_describe(q.kind, q.value)}"
    return None


def describe_path(match: PathMatch) -> str:
    """``prefix /api`` (element-wise), ``exact /x`` or ``regex …``."""
    return f"{match.kind} {match.value}"


def describe_match(match: RouteMatch) -> str:
    """Every condition of ``match`` in one line, for tables."""
    parts = [describe_path(match.path)]
    if match.method is not None:
        parts.append(f"method {match.method}")
    parts += [f"header {h.name} {_describe(h.kind, h.value)}" for h in match.headers]
    parts += [f"query {q.name} {_describe(q.kind, q.value)}" for q in match.query]
    return ", ".join(parts)


def _describe(kind: StringMatchKind, value: str) -> str:
    return repr(value) if kind is StringMatchKind.EXACT else f"~ {value!r}"


def path_matches(match: PathMatch, path: str) -> bool:
    if match.kind is PathKind.EXACT:
        return path == match.value
    if match.kind is PathKind.REGEX:
        return _fullmatch(match.value, path)
    prefix = match.value
    if prefix == "/":
        return True
    return path == prefix or path.startswith(prefix + "/")


def _string_matches(kind: StringMatchKind, pattern: str, value: str) -> bool:
    if kind is StringMatchKind.EXACT:
        return value == pattern
    return _fullmatch(pattern, value)


@functools.cache
def _options() -> Any:
    """RE2, imported at the first regex to match (a process serving none never loads it)."""
    import re2

    out = re2.Options()
    out.log_errors = False
    return out


def _fullmatch(pattern: str, value: str) -> bool:
    """RE2 semantics, as the engine matches (an invalid pattern matches nothing)."""
    import re2

    try:
        return re2.compile(pattern, _options()).fullmatch(value) is not None
    except re2.error:
        return False
