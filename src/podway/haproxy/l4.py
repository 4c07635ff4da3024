"""TCP and TLS listeners as ``mode tcp`` frontends.

TCP: the listener's one L4 route (several: the first, as the IR orders them), split by weight.
TLS: passthrough routed by the ClientHello's SNI (exact names before wildcards, as
``podway.ir.hosts``), or, when every route carries a certificate, terminated with a crt-list and
forwarded as plain bytes.
"""

from __future__ import annotations

from podway.haproxy.backends import backend_name
from podway.haproxy.frontend import Frontend, bind_address, origin_of
from podway.haproxy.names import regex_literal, route_key, word
from podway.haproxy.report import Unsupported
from podway.haproxy.tls import crt_list
from podway.ir import L4Route, Listener, ListenerProtocol, WeightedPool
from podway.ir.hosts import host_order


def render_l4(listener: Listener, fe: str, folder: str) -> Frontend:
    origin = origin_of(listener)
    report: list[Unsupported] = []
    files: list[tuple[str, str]] = []
    lines = [f"frontend {fe}", "  mode tcp"]
    routes = listener.l4_routes
    if listener.transparent:
        report.append(Unsupported(subject=listener.name, origin=origin,
                                  feature="transparent client addresses (original source)"))
    if listener.protocol is ListenerProtocol.TCP:
        lines.append(f"  bind {bind_address(listener)}")
        if routes:
            lines += _split(routes[0], "")
        return Frontend(lines=tuple(lines), unsupported=tuple(report))
    terminating = [r for r in routes if r.certificate is not None]
    if terminating and len(terminating) != len(routes):
        report.append(Unsupported(subject=listener.name, origin=origin, closed=True,
                                  feature="TLS passthrough and termination on one listener"))
        lines.append(f"  bind {bind_address(listener)}")
        return Frontend(lines=(*lines, "  tcp-request connection reject"),
                        unsupported=tuple(report))
    if terminating:
        certs = tuple(r.certificate for r in terminating if r.certificate is not None)
        crt = crt_list(listener, fe, folder, certs)
        files += crt.files
        report += crt.unsupported
        lines.append(f"  bind {bind_address(listener)} ssl crt-list {crt.path}")
        sni = "ssl_fc_sni"
    else:
        lines.append(f"  bind {bind_address(listener)}")
        # Wait for the ClientHello (a rule whose sample may still change waits, up to the
        # inspect delay); "accept" would end the rules before the SNI is looked at.
        lines += ["  tcp-request inspect-delay 5s",
                  "  tcp-request content reject unless { req_ssl_hello_type 1 }"]
        sni = "req_ssl_sni"
    lines.append(f"  tcp-request content set-var(sess.sni) {sni},lower")
    chosen: list[tuple[tuple[int, int, str], L4Route, str]] = []
    for route in routes:
        for host in route.hostnames or ("*",):
            chosen.append((host_order(host), route, host))
    for _, route, host in sorted(chosen, key=lambda c: c[0]):
        r = route_key(route.name)
        if host == "*":
            cond = ""
        elif host.startswith("*."):
            cond = f" {{ var(sess.sni) -m reg {word('^.+' + regex_literal(host[1:]) + '$')} }}"
        else:
            cond = f" {{ var(sess.sni) -m str {word(host)} }}"
        lines.append(f"  tcp-request content set-var(sess.r) str({r})"
                     f" if !{{ var(sess.r) -m found }}{cond}")
    lines.append("  tcp-request content reject unless { var(sess.r) -m found }")
    for route in routes:
        lines += _split(route, f" {{ var(sess.r) -m str {route_key(route.name)} }}")
    return Frontend(lines=tuple(lines), files=tuple(files), unsupported=tuple(report))


def _split(route: L4Route, when: str) -> list[str]:
    """The route's shares: a share whose backend cannot be used keeps its weight and its
    connections are refused (as the Gateway API asks), never moved onto the others. With
    client-IP affinity the draw is a hash of the client address, so a client stays on its
    share."""
    shares: list[WeightedPool] = [b for b in route.backends if b.weight > 0]
    if not shares:
        return [f"  tcp-request content reject if TRUE{when}"]
    if len(shares) == 1:
        if shares[0].pool is None:
            return [f"  tcp-request content reject if TRUE{when}"]
        return [f"  use_backend {backend_name(shares[0].pool)} if TRUE{when}"]
    total = sum(b.weight for b in shares)
    draw = f"src,crc32(1),mod({total})" if route.client_ip_affinity else f"rand({total})"
    out = [f"  tcp-request content set-var(sess.w) {draw} if TRUE{when}"]
    low = 0
    for b in shares:
        share = f"{when} {{ var(sess.w) -m int {low}:{low + b.weight - 1} }}"
        low += b.weight
        if b.pool is None:
            out.append(f"  tcp-request content reject if TRUE{share}")
        else:
            out.append(f"  use_backend {backend_name(b.pool)} if TRUE{share}")
    return out
