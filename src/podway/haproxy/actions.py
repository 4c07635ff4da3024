"""A route's action rules (filters, redirects, direct answers, weighted shares), keyed by the
route's id in ``txn.r`` (see ``podway.haproxy.http``)."""

from __future__ import annotations

from podway.haproxy import auth
from podway.haproxy.backends import backend_name
from podway.haproxy.names import logformat_literal, regex_literal, word
from podway.ir import (
    Authorization,
    AuthRequest,
    BasicAuth,
    BodyLimit,
    ClientAccess,
    DirectResponse,
    ExtAuth,
    HeaderModifier,
    Jwt,
    Listener,
    ListenerProtocol,
    Oidc,
    PathKind,
    RateLimit,
    Redirect,
    Route,
    URLRewrite,
    WeightedPool,
)


class Closed(Exception):
    """The route needs something HAProxy cannot do safely: it is answered 500."""


def actions(route: Route, r: str, listener: Listener) -> list[str]:
    when = f"{{ var(txn.r) -m str {r} }}"
    out: list[str] = []
    for f in route.filters:
        if isinstance(f, ClientAccess):
            if listener.xff_trusted_hops:
                raise Closed("client address rules behind trusted X-Forwarded-For hops")
            if f.allow:
                out.append(f"  http-request deny deny_status 403 if {when}"
                           f" !{{ src {' '.join(word(c) for c in f.allow)} }}")
            if f.deny:
                out.append(f"  http-request deny deny_status 403 if {when}"
                           f" {{ src {' '.join(word(c) for c in f.deny)} }}")
        elif isinstance(f, RateLimit):
            raise Closed("rate limits")
        elif isinstance(f, BodyLimit):
            raise Closed("request body limits")
        elif isinstance(f, BasicAuth):
            out += auth.basic_auth(f, when)
        elif isinstance(f, ExtAuth):
            raise Closed("external authorization")
        elif isinstance(f, Jwt):
            raise Closed("JWT authentication")
        elif isinstance(f, Oidc):
            raise Closed("OIDC login")
        elif isinstance(f, AuthRequest):
            raise Closed("external authentication (auth-url)")
        elif isinstance(f, Authorization):
            if any(r.claims for r in f.rules):
                raise Closed("authorization by JWT claim")
            if listener.xff_trusted_hops and any(r.cidrs for r in f.rules):
                raise Closed("authorization by client address behind trusted X-Forwarded-For "
                              "hops")
            out += auth.authorization(f, when)
    a = route.action
    if isinstance(a, Redirect):
        return out + _redirect(a, route, when, listener)
    if isinstance(a, DirectResponse):
        body = f" content-type text/plain string {word(a.body)}" if a.body else ""
        return [*out, f"  http-request return status {a.status}{body} if {when}"]
    for f in route.filters:
        if isinstance(f, HeaderModifier):
            out += _headers(f, when)
        elif isinstance(f, URLRewrite):
            out += _rewrite(f, route, when)
    t = [v for v in (a.timeout_ms, a.backend_timeout_ms, a.idle_timeout_ms) if v]
    if t:
        # The backend applies it (set-timeout needs a backend; see podway.haproxy.backends).
        out.append(f"  http-request set-var(txn.to) int({min(t)}) if {when}")
    return out + _shares(a.backends, when)


def _shares(backends: tuple[WeightedPool, ...], when: str) -> list[str]:
    shares = [b for b in backends if b.weight > 0]
    if not shares:
        return [f"  http-request return status 500 if {when}"]
    total = sum(b.weight for b in shares)
    out = []
    if len(shares) > 1:
        out.append(f"  http-request set-var(txn.w) rand({total}) if {when}")
    low = 0
    for b in shares:
        cond = when if len(shares) == 1 else \
            f"{when} {{ var(txn.w) -m int {low}:{low + b.weight - 1} }}"
        low += b.weight
        for f in b.filters:
            out += _headers(f, cond)
        if b.pool is None:
            out.append(f"  http-request return status {b.status} if {cond}")
        else:
            out.append(f"  http-request set-var(txn.be) str({backend_name(b.pool)}) if {cond}")
    return out


def _value(v: str) -> str:
    return word(logformat_literal(v))


def _headers(f: HeaderModifier, when: str) -> list[str]:
    side = "http-response" if f.response else "http-request"
    out = [f"  {side} set-header {word(n)} {_value(v)} if {when}" for n, v in f.set]
    out += [f"  {side} add-header {word(n)} {_value(v)} if {when}" for n, v in f.add]
    out += [f"  {side} del-header {word(n)} if {when}" for n in f.remove]
    return out


def _rewrite(f: URLRewrite, route: Route, when: str) -> list[str]:
    out = []
    if f.hostname:
        out.append(f"  http-request set-header host {_value(f.hostname)} if {when}")
    if f.path is not None:
        out.append(f"  http-request set-path {_value(f.path)} if {when}")
    elif f.prefix is not None and route.match.path.kind is PathKind.PREFIX:
        pattern, subst = _prefix_rewrite(route.match.path.value, f.prefix)
        out.append(f"  http-request replace-path {word(pattern)} {word(subst)} if {when}")
    elif f.pattern is not None:
        out.append(f"  http-request replace-path {word(f.pattern)}"
                   f" {word(logformat_literal(f.substitution))} if {when}")
    return out


def _prefix_rewrite(prefix: str, replacement: str) -> tuple[str, str]:
    """Gateway API's ReplacePrefixMatch, element-wise (as ``URLRewrite.prefix`` says)."""
    p = regex_literal(prefix.rstrip("/"))
    r = replacement.rstrip("/")
    if not r:
        return f"^{p}/*(.*)$", "/\\1"
    return f"^{p}(/.*)?$", logformat_literal(r) + "\\1"


def _redirect(a: Redirect, route: Route, when: str, listener: Listener) -> list[str]:
    """The Location as Envoy builds it: the port named, else none when the scheme changes,
    else the port the request's Host carried (none: none)."""
    own = "https" if listener.protocol is ListenerProtocol.HTTPS else "http"
    scheme = a.scheme or own
    well_known = {"http": 80, "https": 443}
    pre: list[str] = []
    if a.port:
        port_part = "" if a.port == well_known.get(scheme) else f":{a.port}"
    elif a.scheme:
        port_part = ""
    else:
        port_part = "%[var(txn.hp)]"
        pre += [f"  http-request set-var(txn.hp) req.hdr(host),regsub('^[^:]*','') if {when}"
                " !{ req.hdr(host) -m beg [ }",
                f"  http-request set-var(txn.hp) req.hdr(host),regsub('^[[][^]]*[]]','')"
                f" if {when} {{ req.hdr(host) -m beg [ }}"]
    host = logformat_literal(a.hostname) if a.hostname else "%[var(txn.host)]"
    path = "%[path]"
    if a.path is not None:
        path = logformat_literal(a.path)
    elif a.prefix is not None and route.match.path.kind is PathKind.PREFIX:
        pattern, subst = _prefix_rewrite(route.match.path.value, a.prefix)
        # The rewritten path is computed with replace-path (regsub cannot take this pattern
        # inside a log-format expression), kept, and the request's path put back.
        pre += [f"  http-request set-var(txn.rp) path if {when}",
                f"  http-request replace-path {word(pattern)} {word(subst)} if {when}",
                f"  http-request set-var(txn.rp2) path if {when}",
                f"  http-request set-path %[var(txn.rp)] if {when}"]
        path = "%[var(txn.rp2)]"
    return pre + _redirect_rules(f"{scheme}://{host}{port_part}{path}", a, when)


def _redirect_rules(loc: str, a: Redirect, when: str) -> list[str]:
    code = a.status_code if a.status_code in (301, 302, 303, 307, 308) else 302
    if a.strip_query:
        return [f"  http-request redirect location {word(loc)} code {code} if {when}"]
    return [f"  http-request redirect location {word(loc + '?%[query]')} code {code}"
            f" if {when} {{ query -m found }}",
            f"  http-request redirect location {word(loc)} code {code} if {when}"]
