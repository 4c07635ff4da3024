"""IR → haproxy.cfg + map, certificate and crt-list files. Pure: no I/O, same input → same text.

One frontend per listener. HTTP(S): the request's Host (lower case, port dropped; the host maps
hold each name with and without one trailing dot, as ``podway.ir.hosts.request_host`` drops it)
picks a virtual host through ``map_str`` (exact names), then ``map_reg`` (wildcards, most
specific first), then the ``*`` host. Within the virtual host the routes are tried in IR order
(the translator already ordered them by the owning API's precedence), first match wins: a
virtual host whose routes match on exact and prefix paths only lives in one path map keyed
``<virtual host>@<path>?``, exact paths ending with ``?``, prefixes with ``/`` (``map_beg``, the
longest key that begins the request's: the route's own path, else its longest prefix), which
picks what first-match picks for the orders Ingress and the Gateway API give (``http.tree_safe``
checks it); maps are edited at runtime with ``prepare map`` / ``commit map``. Any other virtual
host (header, query, method or regex matches) is ordered ``http-request`` rules.
A forward to one pool with no filters is a path-map row naming its backend, so adding such a
route is a map edit, and a frontend whose routes are all such rows picks its backend with one
lookup (``use_backend %[...]``); anything else (splits, redirects, rewrites, header edits) is
rules keyed by the route's id. No route: the name resolves to no backend, and the frontend's
default backend answers 404. A pool with no usable member: 503. Each per-request rule is
rendered only on listeners whose routes use it (``http._prelude``).

What HAProxy cannot do exactly is reported (``podway.haproxy.report``), never served silently
different: see docs/engines.md for the table.

A listener the IR gives the kernel engine (``Listener.engine`` KERNEL: ``podway.io/engine:
kernel``) is served by the kernel engine running beside HAProxy, which DNATs the port's packets
before they reach any socket. A TCP one keeps its frontend here, bound but idle, marked with a
comment (as Envoy keeps its listener beside the kernel engine): a switch of the Service back to
HAProxy then needs no new bind and loses no connection. A UDP one is the kernel's alone (no
report: it is served), and so are the UDP pools only such listeners use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from podway.haproxy import slots as slotting
from podway.haproxy.backends import Backend, backend_name, render_backend
from podway.haproxy.frontend import Frontend, origin_of
from podway.haproxy.http import render_http
from podway.haproxy.l4 import render_l4
from podway.haproxy.names import no_route_backend, proxy_name
from podway.haproxy.report import Unsupported
from podway.haproxy.tls import TLS13_SUITES
from podway.ir import IR, EngineKind, Forward, ListenerProtocol, PoolProtocol

MAPS = "maps"  # subfolder of the config folder holding map files
CERTS = "certs"


@dataclass(frozen=True, slots=True, kw_only=True)
class RenderOptions:
    folder: str  # absolute folder the files are written to (the config names them)
    runtime_socket: str  # the worker's runtime API socket (admin level, mode 0600)
    slots: slotting.Slots = field(default_factory=lambda: MappingProxyType({}))
    backups: slotting.Slots = field(default_factory=lambda: MappingProxyType({}))
    threads: int = 1
    # Listeners bind with SO_REUSEPORT (``podway engine --listener-reuse-port``, which the chart
    # sets): a new engine's HAProxy binds beside the old one's on a host. Off: one owner per
    # address and port, as Envoy's listeners (``noreuseport``).
    reuse_port: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Rendered:
    config: str
    # The config with every runtime-changeable part blanked (server addresses, weights and
    # states, map contents): two renderings with equal skeletons differ only in what the
    # runtime API can change, so no reload is needed between them.
    skeleton: str
    files: Mapping[str, str]  # relative path → content (maps, PEMs, crt-lists)
    maps: Mapping[str, tuple[tuple[str, str], ...]]  # relative map path → rows, in order
    servers: Mapping[str, tuple[slotting.SlotState, ...]]  # backend → its slots
    slots: slotting.Slots  # pool → assignment (hand it back to the next rendering)
    backups: slotting.Slots  # pool → its backup slots' assignment (likewise)
    unsupported: tuple[Unsupported, ...]
    # HTTP(S) listener name → (its frontend, its no-route backend): what HAProxy's counters
    # are named after (the metrics read them, podway.readers.metrics.haproxy).
    http_frontends: Mapping[str, tuple[str, str]] = field(
        default_factory=lambda: MappingProxyType({}))


def render(ir: IR, opts: RenderOptions) -> Rendered:
    head = _head(opts)
    sections: list[list[str]] = []
    skeleton: list[list[str]] = []
    files: dict[str, str] = {}
    maps: dict[str, tuple[tuple[str, str], ...]] = {}
    unsupported: list[Unsupported] = []
    kernel_only = _kernel_only_pools(ir)
    http_frontends: dict[str, tuple[str, str]] = {}
    for listener in ir.listeners:
        fe_name = proxy_name("fe", listener.name)
        kernel = listener.engine is EngineKind.KERNEL
        if kernel and listener.protocol is ListenerProtocol.UDP:
            continue  # the kernel engine's alone (module docstring)
        if listener.protocol in (ListenerProtocol.HTTP, ListenerProtocol.HTTPS):
            fe: Frontend = render_http(listener, fe_name, opts.folder)
            http_frontends[listener.name] = (fe_name, no_route_backend(listener.name))
        elif listener.protocol in (ListenerProtocol.TCP, ListenerProtocol.TLS):
            fe = render_l4(listener, fe_name, opts.folder)
        else:
            unsupported.append(Unsupported(subject=listener.name, feature="UDP listeners",
                                           closed=True,
                                           origin=origin_of(listener)))
            continue
        lines = list(fe.lines)
        if kernel:
            lines.insert(0, KERNEL_NOTE)
        sections += [lines, *map(list, fe.sections)]
        skeleton += [lines, *map(list, fe.sections)]
        files.update(fe.files)
        maps.update(fe.maps)
        unsupported.extend(fe.unsupported)
    used = sorted(n for n in ir.pools
                  if not (n in kernel_only and ir.pools[n].settings.protocol is PoolProtocol.UDP))
    timed = _timed_pools(ir)
    backends: dict[str, Backend] = {}
    for name in used:
        be = render_backend(ir.pools[name], opts.slots.get(name), folder=opts.folder,
                            timed=name in timed, previous_backups=opts.backups.get(name))
        backends[name] = be
        sections.append([*be.lines, *be.server_lines(concrete=True)])
        skeleton.append([*be.lines, *be.server_lines(concrete=False)])
        files.update(be.files)
        unsupported.extend(be.unsupported)
    for name, rows in maps.items():
        files[name] = "".join(f"{k} {v}\n" for k, v in rows)
    _pattern_cache(head, sections)
    config = _join(head, sections)
    skel_files = {k: v for k, v in files.items() if k not in maps}
    return Rendered(
        config=config,
        skeleton=_join(head, skeleton) + "".join(f"#{k}\n{v}" for k, v in
                                                 sorted(skel_files.items())),
        files=MappingProxyType(files), maps=MappingProxyType(maps),
        servers=MappingProxyType({b.name: b.states for b in backends.values()}),
        slots=MappingProxyType({n: b.slots for n, b in backends.items()}),
        backups=MappingProxyType({n: b.backups for n, b in backends.items() if b.backups}),
        unsupported=tuple(sorted(set(unsupported), key=lambda u: (u.subject, u.feature))),
        http_frontends=MappingProxyType(http_frontends))


# HAProxy keeps an LRU cache of "slow" pattern lookups (regex, substring, suffix...),
# keyed by a hash of the looked-up value: worth it for regex lists (wildcard hosts, regex
# matches), a loss for the one-pattern substring checks every request runs (the path
# normalisation's): hashing and the cache cost more than the search (~320 instructions a
# request, bench/haproxy_engine.py --instructions), and it holds up to 10,000 entries per
# thread. Off unless the configuration has a regex lookup.
NO_PATTERN_CACHE = "  tune.pattern.cache-size 0"
_REGEXES = ("map_reg(", " -m reg ")

def _pattern_cache(head: list[str], sections: list[list[str]]) -> None:
    """The pattern cache off (``NO_PATTERN_CACHE``) unless a section has a regex lookup."""
    if not any(regex in line for s in sections for line in s for regex in _REGEXES):
        threads = next(i for i, line in enumerate(head) if line.startswith("  nbthread "))
        head.insert(threads + 1, NO_PATTERN_CACHE)


KERNEL_NOTE = ("# podway.io/engine: kernel: the kernel engine beside HAProxy serves this port "
               "(DNAT before any socket); this frontend stays bound, idle")


def _kernel_only_pools(ir: IR) -> set[str]:
    """Pools that only listeners of the kernel engine forward to."""
    kernel: set[str] = set()
    other: set[str] = set()
    for listener in ir.listeners:
        names = {b.pool for r in listener.l4_routes for b in r.backends if b.pool}
        names |= {b.pool for v in listener.virtual_hosts for r in v.routes
                  if isinstance(r.action, Forward) for b in r.action.backends if b.pool}
        (kernel if listener.engine is EngineKind.KERNEL else other).update(names)
    return kernel - other


def _timed_pools(ir: IR) -> set[str]:
    """Pools some HTTP route forwards to with a timeout of its own."""
    out: set[str] = set()
    for listener in ir.listeners:
        for vhost in listener.virtual_hosts:
            for route in vhost.routes:
                a = route.action
                if isinstance(a, Forward) and any(
                        (a.timeout_ms, a.backend_timeout_ms, a.idle_timeout_ms)):
                    out.update(b.pool for b in a.backends if b.pool)
    return out


def _head(opts: RenderOptions) -> list[str]:
    return [
        "# Rendered by Podway from its IR (podway.haproxy.render); edits are overwritten.",
        "global",
        f"  stats socket {opts.runtime_socket} mode 600 level admin expose-fd listeners",
        "  stats timeout 30s",
        f"  nbthread {opts.threads}",
        # HAProxy binds with SO_REUSEPORT unless told not to: two instances (another Podway, a
        # stray HAProxy of the same user) would split a port's connections between two
        # configurations. Reloads and a take-over hand the bound sockets over instead (-x).
        *([] if opts.reuse_port else ["  noreuseport"]),
        "  tune.ssl.default-dh-param 2048",
        # TLS 1.3 suites: OpenSSL's own three, AES-128-GCM preferred (as BoringSSL, so Envoy,
        # and Mozilla's guidance order them; OpenSSL's default prefers AES-256-GCM). Nothing is
        # added or removed. No session tickets: sessions resume from HAProxy's own cache
        # (tune.ssl.cachesize, 300 s), so no ticket key lives, unrotated, as long as the
        # process. Together ~10 % fewer instructions a handshake (docs/performance.md).
        f"  ssl-default-bind-ciphersuites {TLS13_SUITES}",
        "  ssl-default-bind-options no-tls-tickets",
        # normalize-uri (the path as Envoy's normalize_path + merge_slashes sees it, so no
        # "/a/../b" reaches a route it does not match) is marked experimental in 2.6.
        "  expose-experimental-directives",
        "",
        "defaults",
        "  mode http",
        "  timeout connect 5s",
        "  timeout client 60s",
        "  timeout server 60s",
        "  timeout http-request 10s",
        "  timeout http-keep-alive 60s",
        "  timeout tunnel 1h",
        "  timeout client-fin 5s",
        "  option redispatch",
        "  retries 2",
        # Idle server connections are shared by every client, as Envoy's upstream pools and
        # nginx's upstream keep-alive share them (HAProxy's default, "safe", opens one per
        # client connection for its first request: a new connection per request then cost
        # 1.6-2x the CPU, bench/haproxy_engine.py). Connections HAProxy marks private (PROXY
        # protocol to the member) are never shared.
        "  http-reuse always",
    ]


def _join(head: list[str], sections: list[list[str]]) -> str:
    return "\n".join(head + [line for s in sections for line in ["", *s]]) + "\n"


__all__ = ["RenderOptions", "Rendered", "backend_name", "render"]
