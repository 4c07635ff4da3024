"""HTTP and HTTPS listeners as HAProxy frontends (see ``podway.haproxy.render`` for the plan).

Request variables: ``txn.host`` (the Host as virtual hosts are matched), ``txn.path``
(normalised path), ``txn.vh`` (the virtual host's key), ``txn.r`` (the chosen route's key),
``txn.be`` (the backend), ``txn.w`` (a weighted split's draw).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podway.haproxy import auth
from podway.haproxy.backends import backend_name
from podway.haproxy.frontend import Frontend, bind_address, origin_of
from podway.haproxy.names import (
    Unquotable,
    logformat_literal,
    regex_literal,
    route_key,
    vhost_key,
    word,
)
from podway.haproxy.report import Unsupported
from podway.haproxy.sni import sni_rules
from podway.haproxy.tls import crt_list
from podway.ir import (
    CORS,
    Authorization,
    AuthRequest,
    BasicAuth,
    BodyLimit,
    ClientAccess,
    DirectResponse,
    ErrorPages,
    ExtAuth,
    Forward,
    HeaderModifier,
    Jwt,
    Listener,
    ListenerProtocol,
    Mirror,
    Oidc,
    PathKind,
    PathMatch,
    RateLimit,
    Redirect,
    Route,
    StringMatchKind,
    URLRewrite,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir.hosts import host_order


class _Closed(Exception):
    """The route needs something HAProxy cannot do safely: it is answered 500."""


def path_regex(path: PathMatch) -> str | None:
    """An anchored PCRE for the path match (None: any path). Prefixes are element-wise."""
    if path.kind is PathKind.EXACT:
        return f"^{regex_literal(path.value)}$"
    if path.kind is PathKind.PREFIX:
        prefix = path.value.rstrip("/")
        return None if not prefix else f"^{regex_literal(prefix)}(/|$)"
    return f"^(?:{path.value})$"


def host_regex(vhost: VirtualHost) -> str:
    if vhost.hostname == "*":
        return "^"
    suffix = regex_literal(vhost.hostname[1:])  # "[.]foo[.]com"
    label = "[^.]+" if vhost.wildcard is WildcardMode.ONE_LABEL else ".+"
    return f"^{label}{suffix}$"


def _path_only(route: Route) -> bool:
    m = route.match
    return not (m.headers or m.query or m.method or m.upto is not None) \
        and m.path.kind is not PathKind.REGEX \
        and not any(c.isspace() for c in m.path.value)


def tree_safe(routes: tuple[Route, ...]) -> bool:
    """Does "exact key first, then the longest prefix" pick what first-match in IR order
    picks, for every path? Yes unless a prefix comes before a route with a longer path under
    it (or an exact route with its own path): the translator never orders routes so (Ingress:
    longest first, Exact first on a tie; Gateway API: exact, then longest prefix), and such a
    virtual host is served by ordered rules instead."""
    for i, a in enumerate(routes):
        if a.match.path.kind is not PathKind.PREFIX:
            continue
        p = a.match.path.value.rstrip("/")
        for b in routes[i + 1:]:
            q = b.match.path.value
            q = q if b.match.path.kind is PathKind.EXACT else q.rstrip("/")
            covered = not p or q == p or q.startswith(p + "/")
            if covered and (len(q) > len(p) or (q == p and b.match.path.kind is PathKind.EXACT)):
                return False
    return True


def path_keys(route: Route) -> tuple[str, str | None]:
    """(exact-map key, prefix-map key) of a path-only route: its own path, and for a prefix
    the path with a final ``/`` (``/foo`` → ``/foo/``: whole segments only)."""
    path = route.match.path
    if path.kind is PathKind.EXACT:
        return path.value, None
    own = path.value.rstrip("/")
    return own or "/", own + "/"


@dataclass(slots=True)
class _Tables:
    """What the routes of one listener add up to: map rows, choosing rules, action rules."""

    exact: list[tuple[str, str]] = field(default_factory=list)
    wild: list[tuple[str, str]] = field(default_factory=list)
    exact_paths: list[tuple[str, str]] = field(default_factory=list)
    prefix_paths: list[tuple[str, str]] = field(default_factory=list)
    routes: list[tuple[str, str]] = field(default_factory=list)
    choose: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    report: list[Unsupported] = field(default_factory=list)


def render_http(listener: Listener, fe: str, folder: str) -> Frontend:
    maps = {kind: f"maps/{fe}.{kind}.map"
            for kind in ("hosts", "wild", "exact", "prefix", "routes")}
    t = _Tables()
    lines, files = _bind(listener, fe, folder, t.report)
    lines += _prelude(listener, {k: f"{folder}/{v}" for k, v in maps.items()})
    sni_maps: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    if listener.protocol is ListenerProtocol.HTTPS and listener.sni_host_check \
            and listener.certificates:
        sni_lines, sni_maps = sni_rules(listener, fe, folder)
        lines += sni_lines
    for vhost in sorted(listener.virtual_hosts, key=lambda v: host_order(v.hostname)):
        _virtual_host(vhost, listener, t)
    lines += t.choose
    lines += [
        # No route: 404 with an empty body, as Envoy answers it.
        "  http-request return status 404 unless { var(txn.r) -m found }",
        f"  http-request set-var(txn.be) var(txn.r),map_str({folder}/{maps['routes']})",
        *t.actions,
        # The client address, last: neither the client nor a route's header filter sets it
        # (as Envoy's route tables do; trusted hops are not served, see _bind). Only where the
        # listener asks (``--x-real-ip``, taken-over ingress-nginx); elsewhere a client's own
        # is dropped, so no pod is handed a forged one.
        ("  http-request set-header x-real-ip %[src]" if listener.real_ip
         else "  http-request del-header x-real-ip"),
        "  use_backend %[var(txn.be)] if { var(txn.be) -m found }",
    ]
    return Frontend(lines=tuple(lines), files=tuple(files), unsupported=tuple(t.report),
                    maps=((maps["hosts"], tuple(t.exact)), (maps["wild"], tuple(t.wild)),
                          (maps["exact"], tuple(_first(t.exact_paths))),
                          (maps["prefix"], tuple(_first(t.prefix_paths))),
                          (maps["routes"], tuple(t.routes)),
                          *sni_maps))


def _bind(listener: Listener, fe: str, folder: str, report: list[Unsupported]
          ) -> tuple[list[str], list[tuple[str, str]]]:
    """The section's head and bind line (with its crt-list files), and listener-wide reports."""
    origin = origin_of(listener)
    lines = [f"frontend {fe}", "  mode http"]
    files: list[tuple[str, str]] = []
    if listener.protocol is ListenerProtocol.HTTPS and not listener.certificates:
        # No certificate to present: every handshake is refused, as a listener with no
        # certificate refuses it.
        report.append(Unsupported(subject=listener.name, origin=origin, closed=True,
                                  feature="an HTTPS listener without a certificate"))
        lines += [f"  bind {bind_address(listener)}", "  tcp-request connection reject"]
    elif listener.protocol is ListenerProtocol.HTTPS:
        crt = crt_list(listener, fe, folder)
        files += crt.files
        report += crt.unsupported
        lines.append(f"  bind {bind_address(listener)} ssl crt-list {crt.path}"
                     " alpn h2,http/1.1")
    else:
        lines.append(f"  bind {bind_address(listener)}")
    if listener.l4_routes:
        report.append(Unsupported(subject=listener.name, origin=origin, closed=True,
                                  feature="TLS passthrough beside terminated HTTPS on one port"))
    if listener.xff_trusted_hops:
        report.append(Unsupported(subject=listener.name, origin=origin,
                                  feature="trusted X-Forwarded-For hops (the peer is the client)"))
    return lines, files


def _prelude(listener: Listener, maps: dict[str, str]) -> list[str]:
    """Every request: client headers, normalised path and Host, virtual host, path-map route."""
    https = listener.protocol is ListenerProtocol.HTTPS
    # One draw per request for routes that take a share of the requests (``RouteMatch.upto``).
    draw = ["  http-request set-var(txn.draw) rand(1000000)"] if any(
        r.match.upto is not None for v in listener.virtual_hosts for r in v.routes) else []
    return [*draw,
        "  option forwardfor",
        f"  http-request set-header x-forwarded-proto {'https' if https else 'http'}",
        "  http-request normalize-uri path-strip-dotdot",
        "  http-request normalize-uri path-merge-slashes",
        # The Host as virtual hosts are matched: lower case, port and one trailing dot dropped
        # (a cheap field() unless it is an IPv6 literal; the dot only when there is one).
        "  http-request set-var(txn.host) req.hdr(host),lower,field(1,:)"
        " unless { req.hdr(host) -m beg [ }",
        "  http-request set-var(txn.host) req.hdr(host),lower,regsub(':[0-9]+$','')"
        " if { req.hdr(host) -m beg [ }",
        "  http-request set-var(txn.host) var(txn.host),regsub('[.]$','')"
        " if { var(txn.host) -m end . }",
        "  http-request set-var(txn.path) path",
        f"  http-request set-var(txn.vh) var(txn.host),map_str({maps['hosts']})",
        f"  http-request set-var(txn.vh) var(txn.host),map_reg({maps['wild']})"
        " unless { var(txn.vh) -m found }",
        f"  http-request set-var(txn.vh) str(-),map_reg({maps['wild']})"
        " unless { var(txn.vh) -m found }",
        "  http-request set-var(txn.k) var(txn.vh),concat(@,txn.path)",
        # Plain routes: the exact path (a route's own path), else the longest prefix (a tree
        # lookup: O(log n) in the routes of every virtual host of the listener).
        f"  http-request set-var(txn.r) var(txn.k),map_str({maps['exact']})",
        f"  http-request set-var(txn.r) var(txn.k),map_beg({maps['prefix']})"
        " unless { var(txn.r) -m found }",
    ]


def _virtual_host(vhost: VirtualHost, listener: Listener, t: _Tables) -> None:
    """One virtual host's rows and rules, its routes in IR order."""
    vh = vhost_key(vhost.name)
    if vhost.hostname == "*" or vhost.hostname.startswith("*."):
        t.wild.append((host_regex(vhost), vh))
    else:
        t.exact.append((vhost.hostname, vh))
    in_map = all(_path_only(r) for r in vhost.routes) and tree_safe(vhost.routes)
    for route in vhost.routes:
        r = route_key(route.name)
        try:
            cond = _conditions(route)
        except Unquotable:
            t.report.append(Unsupported(subject=route.name, origin=route.origin, closed=True,
                                        feature="a match value that cannot be quoted"))
            continue
        if in_map:
            exact, prefix = path_keys(route)
            t.exact_paths.append((f"{vh}@{exact}", r))
            if prefix is not None:
                t.prefix_paths.append((f"{vh}@{prefix}", r))
        else:
            t.choose.append(f"  http-request set-var(txn.r) str({r})"
                            f" if !{{ var(txn.r) -m found }} {{ var(txn.vh) -m str {vh} }}{cond}")
        try:
            simple = _simple_backend(route)
            if simple is not None:
                t.routes.append((r, simple))
            else:
                t.actions += _actions(route, r, listener)
        except (_Closed, Unquotable) as why:
            feature = str(why) if isinstance(why, _Closed) else "a value that cannot be quoted"
            t.report.append(Unsupported(subject=route.name, feature=feature,
                                        origin=route.origin, closed=True))
            t.actions.append(f"  http-request return status 500 if {{ var(txn.r) -m str {r} }}")
        t.report += _reported(route, listener)


def _first(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each key once, its first row kept (the earlier route in IR order wins)."""
    seen: set[str] = set()
    out = []
    for key, value in rows:
        if key not in seen:
            seen.add(key)
            out.append((key, value))
    return out


def _conditions(route: Route) -> str:
    m = route.match
    out = ""
    regex = path_regex(m.path)
    if regex is not None:
        out += f" {{ var(txn.path) -m reg {word(regex)} }}"
    for h in m.headers:
        if h.kind is StringMatchKind.EXACT:
            out += f" {{ req.fhdr({word(h.name)}) -m str {word(h.value)} }}"
        else:
            out += f" {{ req.fhdr({word(h.name)}) -m reg {word(f'^(?:{h.value})$')} }}"
    for q in m.query:
        if q.kind is StringMatchKind.EXACT:
            out += f" {{ url_param({word(q.name)}) -m str {word(q.value)} }}"
        else:
            out += f" {{ url_param({word(q.name)}) -m reg {word(f'^(?:{q.value})$')} }}"
    if m.method:
        out += f" {{ method {word(m.method)} }}"
    if m.upto is not None:  # one draw per request (txn.draw), compared by every share
        out += f" {{ var(txn.draw) -m int lt {m.upto} }}"
    return out


def _simple_backend(route: Route) -> str | None:
    """The backend of a plain forward (one pool, no filters, no timeouts): a map row."""
    a = route.action
    if route.filters or not isinstance(a, Forward) or a.retry is not None:
        return None
    if a.timeout_ms is not None or a.backend_timeout_ms is not None \
            or a.idle_timeout_ms is not None:
        return None
    shares = [b for b in a.backends if b.weight > 0]
    if len(shares) != 1 or shares[0].pool is None or shares[0].filters:
        return None
    return backend_name(shares[0].pool)


def _reported(route: Route, listener: Listener) -> list[Unsupported]:
    """Features served differently (not fail-closed), reported."""
    out: list[str] = []
    for f in route.filters:
        if isinstance(f, Mirror):
            out.append("request mirroring (requests are not mirrored)")
        elif isinstance(f, CORS):
            out.append("CORS (no Access-Control headers, no preflight answers)")
        elif isinstance(f, ErrorPages):
            out.append("custom-http-errors (the backend's own error answers are sent)")
    a = route.action
    if isinstance(a, Forward):
        if a.retry is not None:
            out.append("retry policies (only connection failures are retried)")
        if any(t for t in (a.timeout_ms, a.backend_timeout_ms, a.idle_timeout_ms)):
            out.append("route timeouts (served as the server inactivity timeout)")
    return [Unsupported(subject=route.name, feature=f, origin=route.origin) for f in out]


def _actions(route: Route, r: str, listener: Listener) -> list[str]:
    when = f"{{ var(txn.r) -m str {r} }}"
    out: list[str] = []
    for f in route.filters:
        if isinstance(f, ClientAccess):
            if listener.xff_trusted_hops:
                raise _Closed("client address rules behind trusted X-Forwarded-For hops")
            if f.allow:
                out.append(f"  http-request deny deny_status 403 if {when}"
                           f" !{{ src {' '.join(word(c) for c in f.allow)} }}")
            if f.deny:
                out.append(f"  http-request deny deny_status 403 if {when}"
                           f" {{ src {' '.join(word(c) for c in f.deny)} }}")
        elif isinstance(f, RateLimit):
            raise _Closed("rate limits")
        elif isinstance(f, BodyLimit):
            raise _Closed("request body limits")
        elif isinstance(f, BasicAuth):
            out += auth.basic_auth(f, when)
        elif isinstance(f, ExtAuth):
            raise _Closed("external authorization")
        elif isinstance(f, Jwt):
            raise _Closed("JWT authentication")
        elif isinstance(f, Oidc):
            raise _Closed("OIDC login")
        elif isinstance(f, AuthRequest):
            raise _Closed("external authentication (auth-url)")
        elif isinstance(f, Authorization):
            if any(r.claims for r in f.rules):
                raise _Closed("authorization by JWT claim")
            if listener.xff_trusted_hops and any(r.cidrs for r in f.rules):
                raise _Closed("authorization by client address behind trusted X-Forwarded-For "
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
