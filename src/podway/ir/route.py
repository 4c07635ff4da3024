"""Routes: a match, an action and filters, ordered by the owning API's precedence rules.

The translator orders routes; the engine evaluates them first-match. Everything Kubernetes-specific
about precedence is decided here, not left to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podway.model.base import ObjectRef


class PathKind(StrEnum):
    EXACT = "exact"
    PREFIX = "prefix"  # element-wise: /foo matches /foo and /foo/bar, never /foobar
    REGEX = "regex"


class StringMatchKind(StrEnum):
    EXACT = "exact"
    REGEX = "regex"


@dataclass(frozen=True, slots=True, kw_only=True)
class PathMatch:
    kind: PathKind
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderMatch:
    name: str
    value: str
    kind: StringMatchKind = StringMatchKind.EXACT


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryMatch:
    name: str
    value: str
    kind: StringMatchKind = StringMatchKind.EXACT


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteMatch:
    path: PathMatch = PathMatch(kind=PathKind.PREFIX, value="/")
    headers: tuple[HeaderMatch, ...] = ()
    query: tuple[QueryMatch, ...] = ()
    method: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderModifier:
    """Request or response header edits, applied in the order set → add → remove."""

    response: bool = False
    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightedPool:
    """One share of a forward; ``pool`` None means the share is answered with ``status``.

    ``filters``: header edits for requests sent to (and responses from) this share only
    (Gateway API backendRef filters), after the route's own."""

    pool: str | None = None
    weight: int = 1
    status: int = 500  # answer for an unresolvable backend's share
    filters: tuple[HeaderModifier, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    backends: tuple[WeightedPool, ...]
    timeout_ms: int | None = None  # None: the engine's default; 0: no timeout
    backend_timeout_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Redirect:
    scheme: str | None = None
    hostname: str | None = None
    port: int | None = None
    path: str | None = None  # full replacement
    prefix: str | None = None  # replaces the matched PREFIX path; see URLRewrite.prefix
    status_code: int = 302


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectResponse:
    status: int
    body: str = ""


Action = Forward | Redirect | DirectResponse


@dataclass(frozen=True, slots=True, kw_only=True)
class URLRewrite:
    """Host and path rewrite before forwarding.

    ``prefix`` (also ``Redirect.prefix``) replaces the part of the path matched by the route's
    ``PathKind.PREFIX`` match, element-wise as Gateway API's ReplacePrefixMatch: trailing
    slashes of the match and of ``prefix`` do not count; ``""`` or ``"/"`` removes the matched
    prefix and keeps the rest (``/foo/bar`` → ``/bar``, ``/foo`` → ``/``); any other value
    takes its place (``/foo`` → ``/xyz``: ``/foo/bar`` → ``/xyz/bar``, ``/foo`` → ``/xyz``;
    match ``/`` → ``/xyz``: ``/bar`` → ``/xyz/bar``). The query string is kept. Used only
    with a PREFIX match (the translator rejects anything else).
    """

    hostname: str | None = None
    path: str | None = None  # full replacement
    prefix: str | None = None  # replaces the matched prefix (see above)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mirror:
    pool: str
    percent: float = 100.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CORS:
    """Cross-origin resource sharing: the engine answers preflights and adds the
    ``Access-Control-*`` response headers for allowed origins.

    ``allow_origins``: ``*`` (any), or ``scheme://host[:port]`` where the host may start with
    ``*.`` (any subdomain)."""

    allow_origins: tuple[str, ...]
    allow_credentials: bool = False
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age_s: int = 5


Filter = HeaderModifier | URLRewrite | Mirror | CORS


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    name: str  # stable, hierarchical: ingress/<ns>/<name>/rule/<i>/path/<j>
    match: RouteMatch
    action: Action
    filters: tuple[Filter, ...] = ()
    origin: ObjectRef
