"""HTTPRoute and GRPCRoute matches → IR matches, and GRPCRoute's precedence key.

Validation here stands in for the API server's schema in standalone mode: a path must start with
``/`` and hold no ``//``; regular expressions must compile; methods are the HTTP methods the
spec lists; gRPC service and method names are identifiers. A failure is a ``ValueError`` whose
message names the value; the caller drops that match and reports it.
"""

from __future__ import annotations

import re

from podway.ir import HeaderMatch, PathKind, PathMatch, QueryMatch, RouteMatch, StringMatchKind
from podway.model.gateway_routes import GRPCRouteMatch, HTTPHeaderMatch, HTTPRouteMatch
from podway.translate.core.problems import quote
from podway.translate.core.regex import re2_problem

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE",
                     "PATCH"})
PATH_RANK = {PathKind.EXACT: 0, PathKind.REGEX: 1, PathKind.PREFIX: 2}
# The API schema's patterns: a service is dot-separated identifiers, a method one identifier.
_GRPC_SERVICE = re.compile(r"^\.?[A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*$")
_GRPC_METHOD = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")


def grpc_key(given: GRPCRouteMatch, m: RouteMatch) -> tuple[int, int, int, int, int]:
    """GRPCRoute precedence: longest service, then longest method, then most headers.

    Shaped like the HTTP key (exact first; lengths negated) so both kinds sort together.
    """
    method = given.method
    service = (method.service or "") if method else ""
    name = (method.method or "") if method else ""
    rank = PATH_RANK[PathKind.EXACT] if m.path.kind is PathKind.EXACT else PATH_RANK[
        PathKind.PREFIX]
    return (rank, -len(service), -len(name), -len(m.headers), 0)


def _strings(matches: tuple[HTTPHeaderMatch, ...], *, lower: bool, what: str
             ) -> list[tuple[str, str, StringMatchKind]]:
    out: dict[str, tuple[str, str, StringMatchKind]] = {}
    for h in matches:
        key = h.name.lower() if lower else h.name
        kind = StringMatchKind.REGEX if h.type == "RegularExpression" else StringMatchKind.EXACT
        if kind is StringMatchKind.REGEX:
            _check_regex(h.value, what)
        out.setdefault(key, (key, h.value, kind))  # the first of equal names wins
    return list(out.values())


def _check_regex(value: str, what: str) -> None:
    """Refuse what the engine's RE2 would refuse (it would NACK the whole route table)."""
    problem = re2_problem(value)
    if problem is not None:
        raise ValueError(f"{what} regular expression {quote(value)} is {problem}")


def http_match(m: HTTPRouteMatch) -> RouteMatch:
    path = m.path
    if path.type == "RegularExpression":
        _check_regex(path.value, "path")
        pm = PathMatch(kind=PathKind.REGEX, value=path.value)
    else:
        if not path.value.startswith("/") or "//" in path.value:
            raise ValueError(f"path {quote(path.value)} must start with '/' and not contain '//'")
        if path.type == "Exact":
            pm = PathMatch(kind=PathKind.EXACT, value=path.value)
        else:
            pm = PathMatch(kind=PathKind.PREFIX, value=path.value.rstrip("/") or "/")
    if m.method is not None and m.method not in METHODS:
        raise ValueError(f"method {quote(m.method)} is not an HTTP method")
    headers = tuple(HeaderMatch(name=n, value=v, kind=k)
                    for n, v, k in _strings(m.headers, lower=True, what="header")
                    ) if m.headers else ()
    query = tuple(QueryMatch(name=n, value=v, kind=k)
                  for n, v, k in _strings(m.query_params, lower=False, what="query")
                  ) if m.query_params else ()
    return RouteMatch(path=pm, headers=headers, query=query, method=m.method)


def grpc_match(m: GRPCRouteMatch) -> RouteMatch:
    headers = tuple(HeaderMatch(name=n, value=v, kind=k)
                    for n, v, k in _strings(m.headers, lower=True, what="header"))
    method = m.method
    if method is None:
        return RouteMatch(path=PathMatch(kind=PathKind.PREFIX, value="/"), headers=headers)
    if not method.service and not method.method:
        # The schema's rule for both types: "one or both of service or method".
        raise ValueError("a gRPC method match needs a service or a method")
    if method.type == "Exact":
        for part, pattern in ((method.service, _GRPC_SERVICE), (method.method, _GRPC_METHOD)):
            if part and not pattern.match(part):
                raise ValueError(f"gRPC name {quote(part)} is not a valid identifier")
        if method.service and method.method:
            path = PathMatch(kind=PathKind.EXACT, value=f"/{method.service}/{method.method}")
        elif method.service:
            path = PathMatch(kind=PathKind.PREFIX, value=f"/{method.service}")
        else:
            path = PathMatch(kind=PathKind.REGEX,
                             value=f"/[^/]+/{re.escape(method.method or '')}")
    else:
        for part in (method.service, method.method):
            if part is not None:
                _check_regex(part, "gRPC method")
        # Each part is a whole regex: group it, so an alternation ("a|b") stays in its part.
        service = f"(?:{method.service})" if method.service else "[^/]+"
        name = f"(?:{method.method})" if method.method else "[^/]+"
        path = PathMatch(kind=PathKind.REGEX, value=f"/{service}/{name}")
        _check_regex(path.value, "gRPC method")  # the combined program must fit too
    return RouteMatch(path=path, headers=headers)
