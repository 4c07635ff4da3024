"""HTTP and HTTPS listeners as HAProxy frontends (see ``podway.haproxy.render`` for the plan).

Request variables: ``txn.vh`` (the virtual host's key), ``txn.k`` (the path-map key),
``txn.r`` (the chosen route: a backend's name or a route key; only where some route has
rules), ``txn.be`` (the backend a route's rules chose), ``txn.host`` (the Host, for redirects
that keep it), ``txn.w`` (a weighted split's draw).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from podway.haproxy.actions import Closed, actions
from podway.haproxy.backends import backend_name
from podway.haproxy.frontend import Frontend, bind_address, origin_of
from podway.haproxy.names import (
    Unquotable,
    no_route_backend,
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
    ErrorPages,
    Forward,
    Listener,
    ListenerProtocol,
    Mirror,
    PathKind,
    PathMatch,
    Route,
    StringMatchKind,
    VirtualHost,
    WildcardMode,
)
from podway.ir.hosts import host_order


def path_regex(path: PathMatch) -> str | None:
    """An anchored PCRE for the path match (None: any path). Prefixes are element-wise."""
    if path.kind is PathKind.EXACT:
        return f"^{regex_literal(path.value)}$"
    if path.kind is PathKind.PREFIX:
        prefix = path.value.rstrip("/")
        return None if not prefix else f"^{regex_literal(prefix)}(/|$)"
    return f"^(?:{path.value})$"


def client_address(listener: Listener) -> str:
    """The client address as text, for headers: on an IPv4 listener (every peer is IPv4) its
    four bytes in decimal (``be2dec``, HAProxy's own integer printing: ~500 instructions a
    request less than ``src`` as text or "option forwardfor", which go through printf)."""
    try:
        v4 = ipaddress.ip_address(listener.address).version == 4
    except ValueError:
        v4 = False
    return "src,be2dec(.,1)" if v4 else "src"


def host_regex(vhost: VirtualHost) -> str:
    """A wildcard virtual host's names (one trailing dot allowed, as the Host may have)."""
    suffix = regex_literal(vhost.hostname[1:])  # "[.]foo[.]com"
    label = "[^.]+" if vhost.wildcard is WildcardMode.ONE_LABEL else ".+"
    return f"^{label}{suffix}[.]?$"


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
    catch_all: str | None = None  # the ``*`` virtual host's key
    paths: list[tuple[str, str]] = field(default_factory=list)
    choose: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    report: list[Unsupported] = field(default_factory=list)
    keyed: bool = False  # some path-map row or choosing rule names a route key, not a backend
    sets_backend: bool = False  # some action rule sets ``txn.be``
    host_var: bool = False  # some rule reads ``txn.host`` (a redirect keeping the host)
    key_only: bool = False  # nothing but the path-map key reads the virtual host
    direct: bool = False  # that, and exact hosts only: the base map
    path_only: bool = False  # that, and the ``*`` host alone: the base map, by path only


def render_http(listener: Listener, fe: str, folder: str) -> Frontend:
    maps = {kind: f"maps/{fe}.{kind}.map" for kind in ("hosts", "wild", "paths", "base")}
    t = _Tables()
    lines, files = _bind(listener, fe, folder, t.report)
    for vhost in sorted(listener.virtual_hosts, key=lambda v: host_order(v.hostname)):
        _virtual_host(vhost, listener, t)
    sni = listener.protocol is ListenerProtocol.HTTPS and listener.sni_host_check \
        and bool(listener.certificates)
    t.key_only = not (t.wild or sni or t.keyed)
    t.direct = t.key_only and t.catch_all is None
    t.path_only = t.key_only and t.catch_all is not None and not t.exact
    lines += _prelude(listener, {k: f"{folder}/{v}" for k, v in maps.items()}, t)
    sni_maps: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    if sni:
        sni_lines, sni_maps = sni_rules(listener, fe, folder)
        lines += sni_lines
    no_route = no_route_backend(listener.name)
    base = _base_rows(t) if t.direct or t.path_only else None
    lines += [
        *t.choose,
        *t.actions,
        # The client address, last: neither the client nor a route's header filter sets it
        # (as Envoy's route tables do; trusted hops are not served, see _bind). Only where the
        # listener asks (``--x-real-ip``, taken-over ingress-nginx); elsewhere a client's own
        # is dropped, so no pod is handed a forged one.
        (f"  http-request set-header x-real-ip %[{client_address(listener)}]"
         if listener.real_ip
         else "  http-request del-header x-real-ip"),
        *_choice(t, f"{folder}/{maps['paths']}", f"{folder}/{maps['base']}", base),
        # No route (no backend by that name): 404 with an empty body, as Envoy answers it.
        f"  default_backend {no_route}",
    ]
    return Frontend(lines=tuple(lines), files=tuple(files), unsupported=tuple(t.report),
                    maps=((maps["hosts"], tuple(t.exact)), (maps["wild"], tuple(t.wild)),
                          # Only maps a rule names: a row change is a runtime map swap.
                          *([] if t.path_only else [(maps["paths"], tuple(_first(t.paths)))]),
                          *([(maps["base"], base.rows)] if base and base.named else []),
                          *sni_maps),
                    sections=((f"backend {no_route}", "  mode http",
                               "  http-request return status 404"),))


def _choice(t: _Tables, paths: str, base_map: str, base: _Base | None) -> list[str]:
    """The backend: straight from the path map when every route is a map row to a backend
    (one lookup); else from ``txn.r`` (a backend's name, or a route key whose rules set
    ``txn.be``). A name no backend has (no route) falls to the default backend.

    With exact hosts only (``t.direct``), a Host written as a virtual host's name (the usual
    case) is looked up with its path in one step: ``base`` (the first Host, then the path)
    in the base map (each host name followed by each of its path-map keys), with "?" added
    only where some row needs it (``_Base``). No variable is set and no key is formatted on
    that path; any other Host (upper case, a port, unknown) set ``txn.k`` in the prelude and
    is looked up as before.

    With the ``*`` host alone (``t.path_only``), the Host does not matter: the path is looked
    up in the base map (the catch-all's path-map keys without its virtual host); when its only
    row is "/" (every path to one backend) that is a ``path_beg /`` condition naming the
    backend, no lookup. A first exact or wildcard host, a row needing "?" where none did, or a
    second row where "/" was alone changes these rules: a reload (still hitless)."""
    end = ",concat(,,?)" if base is not None and base.ended else ""
    if t.path_only:
        assert base is not None
        if not base.named:
            return [f"  use_backend {base.rows[0][1]} if {{ path_beg / }}"]
        return [f"  use_backend %[path{end},map_beg({base_map})]"]
    if not t.keyed:
        fast = [f"  use_backend %[base{end},map_beg({base_map})]"
                " unless { var(txn.k) -m found }"] if t.direct else []
        return [*fast, f"  use_backend %[var(txn.k),map_beg({paths})]"]
    return [*(["  use_backend %[var(txn.be)] if { var(txn.be) -m found }"]
              if t.sets_backend else []),
            "  use_backend %[var(txn.r)]"]


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


def _prelude(listener: Listener, maps: dict[str, str], t: _Tables) -> list[str]:
    """Every request: client headers, normalised path, virtual host, path-map key (and route).

    Each rule costs every request of the frontend (bench/haproxy_engine.py --instructions: a
    ``set-var`` about 1,000 instructions, a condition a few hundred), so a rule is here only
    where the listener's routes need it: the wildcard lookups only with wildcard virtual
    hosts, the Host kept in ``txn.host`` only for redirects that keep it. Map rows stay
    editable at runtime either way (a new exact host or plain route is a map swap)."""
    https = listener.protocol is ListenerProtocol.HTTPS
    # One draw per request for routes that take a share of the requests (``RouteMatch.upto``).
    draw = ["  http-request set-var(txn.draw) rand(1000000)"] if any(
        r.match.upto is not None for v in listener.virtual_hosts for r in v.routes) else []
    # The Host as virtual hosts are matched: lower case, port dropped (one trailing dot: the
    # host maps hold each name with and without it). An IPv6 literal gives "[", which no
    # virtual host but "*" matches, as its address would not.
    host = "req.hdr(host),lower,field(1,:)"
    lines = [*draw, *_request_headers(listener, https=https),
             *(_HOST_VAR if t.host_var else [])]
    # The path-map key: "<virtual host>@<path>?" ("?" ends it: no path holds one). Exact keys
    # end with "?", prefix keys with "/": the longest key that begins the request's is the
    # route's own path if it has one, else its longest prefix (a tree lookup: O(log n)).
    if t.path_only:
        return lines  # the ``*`` host alone: the path picks the route (_choice)
    if t.direct:
        # Exact hosts only and nothing else reads the virtual host: looked up inside the key
        # (a Host no row names gives "-", which no key begins with: no route), and only for
        # a Host not written exactly as a name of the host map (see _choice: the others take
        # the base map). "req.fhdr(host,1)" is the Host "base" reads (the first, whole); a
        # request with two Host headers is refused (400) before these rules. The check reads
        # the host map's keys as an ACL's patterns ("-M": the same file, so the same rows a
        # runtime swap changes; ~120 instructions less than the map converter and "found").
        lines.append(f"  http-request set-var-fmt(txn.k) %[{host},map_str({maps['hosts']})]"
                     f"@%[path]? unless {{ req.fhdr(host,1) -m str -M -f {maps['hosts']} }}")
        return lines
    if t.key_only:
        # A catch-all virtual host and no wildcard: the host map's default is its key (one
        # rule; exact hosts added later are rows of the same map).
        lines.append(f"  http-request set-var-fmt(txn.k) %[{host},map_str({maps['hosts']},"
                     f"{t.catch_all})]@%[path]?")
        return lines
    lines.append(f"  http-request set-var(txn.vh) {host},map_str({maps['hosts']})")
    if t.wild:
        lines.append(f"  http-request set-var(txn.vh) {host},map_reg({maps['wild']})"
                     " unless { var(txn.vh) -m found }")
    if t.catch_all is not None:
        lines.append(f"  http-request set-var(txn.vh) str({t.catch_all})"
                     " unless { var(txn.vh) -m found }")
    lines.append("  http-request set-var-fmt(txn.k) %[var(txn.vh)]@%[path]?")
    if t.keyed:
        lines.append(f"  http-request set-var(txn.r) var(txn.k),map_beg({maps['paths']})")
    return lines


def _request_headers(listener: Listener, *, https: bool) -> list[str]:
    """What every request of the listener gets first: the client headers and the path
    normalised as Envoy normalises it."""
    return [
        # The peer appended to X-Forwarded-For first, as Envoy appends it before any route's
        # header filter (a route that sets or removes the header has the last word; "option
        # forwardfor" would add it after every rule). ``client_address``: no printf.
        f"  http-request add-header x-forwarded-for %[{client_address(listener)}]",
        f"  http-request set-header x-forwarded-proto {'https' if https else 'http'}",
        # Envoy's normalize_path and merge_slashes (no "/a/../b" reaches a route it does not
        # match), only for paths that have something to normalise. HAProxy 2.6 applies a
        # conditional path-strip-dotdot only with "full" (which also drops a leading "..",
        # as RFC 3986 and Envoy do). Single-dot segments first ("/a/./../b" is "/b"). The
        # dot checks read the raw target (``url``: no path parsed, ~60 instructions less
        # each); a "/." in the query or an absolute form's authority only runs a normaliser
        # that finds nothing to do. Not for "//", which every absolute form (HTTP/2) has.
        "  http-request normalize-uri path-strip-dot if { url_sub /. }",
        "  http-request normalize-uri path-strip-dotdot full if { url_sub /. }",
        "  http-request normalize-uri path-merge-slashes if { path_sub // }",
    ]


# The Host for redirects that keep it: lower case, port and one trailing dot dropped, IPv6
# literals kept whole.
_HOST_VAR = [
    "  http-request set-var(txn.host) req.hdr(host),lower,field(1,:)"
    " unless { req.hdr(host) -m beg [ }",
    "  http-request set-var(txn.host) req.hdr(host),lower,regsub(':[0-9]+$','')"
    " if { req.hdr(host) -m beg [ }",
    "  http-request set-var(txn.host) var(txn.host),regsub('[.]$','')"
    " if { var(txn.host) -m end . }",
]


def _virtual_host(vhost: VirtualHost, listener: Listener, t: _Tables) -> None:
    """One virtual host's rows and rules, its routes in IR order."""
    vh = vhost_key(vhost.name)
    if vhost.hostname == "*":
        t.catch_all = vh
    elif vhost.hostname.startswith("*."):
        t.wild.append((host_regex(vhost), vh))
    else:
        t.exact += [(vhost.hostname, vh), (vhost.hostname + ".", vh)]
    in_map = all(_path_only(r) for r in vhost.routes) and tree_safe(vhost.routes)
    for route in vhost.routes:
        r = route_key(route.name)
        try:
            cond = _conditions(route)
        except Unquotable:
            t.report.append(Unsupported(subject=route.name, origin=route.origin, closed=True,
                                        feature="a match value that cannot be quoted"))
            continue
        target = _target(route, r, listener, t)
        t.keyed = t.keyed or target == r or not in_map
        if in_map:
            exact, prefix = path_keys(route)
            t.paths.append((f"{vh}@{exact}?", target))
            if prefix is not None:
                t.paths.append((f"{vh}@{prefix}", target))
        else:
            t.choose.append(f"  http-request set-var(txn.r) str({target})"
                            f" if !{{ var(txn.r) -m found }} {{ var(txn.vh) -m str {vh} }}{cond}")
        t.report += _reported(route, listener)


def _target(route: Route, r: str, listener: Listener, t: _Tables) -> str:
    """What choosing ``route`` names: its backend (a plain forward), else its key ``r``, the
    condition of its action rules (added to ``t``)."""
    try:
        simple = _simple_backend(route)
        if simple is not None:
            return simple
        rules = actions(route, r, listener)
    except (Closed, Unquotable) as why:
        feature = str(why) if isinstance(why, Closed) else "a value that cannot be quoted"
        t.report.append(Unsupported(subject=route.name, feature=feature,
                                    origin=route.origin, closed=True))
        rules = [f"  http-request return status 500 if {{ var(txn.r) -m str {r} }}"]
    t.actions += rules
    t.sets_backend = t.sets_backend or any("set-var(txn.be)" in a for a in rules)
    t.host_var = t.host_var or any("var(txn.host)" in a for a in rules)
    return r


@dataclass(frozen=True, slots=True)
class _Base:
    """The base map's rows, and how it is looked up.

    ``ended``: the key is looked up with "?" added (``concat``, ~300 instructions a request),
    only where a row ends with "?" that a row without it does not stand for: an exact path,
    or a prefix's own path without its final "/" ("/api?" beside "/api/"). A prefix "/" gives
    "/?" and "/" to the same backend, and every key ending with "/" begins the request's
    with "?" or without, so those rows are dropped and the key is the plain one.
    ``named``: a rule looks the map up (False: the ``*`` host's only row is "/")."""

    rows: tuple[tuple[str, str], ...]
    ended: bool
    named: bool


def _base_rows(t: _Tables) -> _Base:
    """The base map: each exact host name (as the host map holds it, with and without the
    trailing dot) followed by each path-map key of its virtual host ("shop.test/api/"). The
    name is one the host map knows, so it holds no "/" and no key of one host begins another's
    (the name ends where the key's "/" begins). With the ``*`` host alone: its path-map keys
    without the virtual host ("/api/")."""
    by_vh: dict[str, list[tuple[str, str]]] = {}  # in O(rows), not O(hosts x rows)
    for key, target in _first(t.paths):
        vh, _, path = key.partition("@")
        by_vh.setdefault(vh, []).append((path, target))
    if t.path_only:
        rows = tuple(by_vh.get(t.catch_all or "", ()))
    else:
        rows = tuple((name + path, target)
                     for name, vh in t.exact for path, target in by_vh.get(vh, ()))
    found = dict(rows)
    ended = any(k.endswith("?") and not (k.endswith("/?") and found.get(k[:-1]) == v)
                for k, v in rows)
    if not ended:
        rows = tuple((k, v) for k, v in rows if not k.endswith("?"))
    return _Base(rows=rows, ended=ended,
                 named=not (t.path_only and len(rows) == 1 and rows[0][0] == "/"))


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
        out += f" {{ path -m reg {word(regex)} }}"
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
