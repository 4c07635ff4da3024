"""Pools as HAProxy backends: balancing, persistence, checks, upstream TLS, server slots.

A pool whose settings HAProxy cannot honour exactly is *closed*: its slots stay disabled (every
request to it is answered 503) and the feature is reported, so no request reaches a member the
pool's rules would not have picked (an unverified upstream, an unchecked member).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from podway.engines.handover import MemberKey
from podway.haproxy import slots as slotting
from podway.haproxy.names import Unquotable, digest, proxy_name, word
from podway.haproxy.report import Unsupported
from podway.ir import (
    HASHING,
    HealthCheck,
    HealthCheckKind,
    LBPolicy,
    PersistenceKind,
    Pool,
    PoolProtocol,
    PoolSettings,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Backend:
    name: str
    lines: tuple[str, ...]  # the section without its server lines
    server_options: str  # appended to every server line
    slots: tuple[MemberKey | None, ...]
    backups: tuple[MemberKey | None, ...]  # the backup slots (fallback members)
    states: tuple[slotting.SlotState, ...]  # every slot: the active ones, then the backups
    files: tuple[tuple[str, str], ...] = ()  # (file name, content)
    unsupported: tuple[Unsupported, ...] = ()
    cookie: bool = False

    def server_lines(self, *, concrete: bool) -> list[str]:
        """The slot lines; ``concrete=False``: without what a runtime edit can change (the
        structure only, to tell a member change from a structural one)."""
        out = []
        for state in self.states:
            name = state.name
            cookie = f" cookie {name}" if self.cookie else ""
            if name.startswith("b"):
                cookie += " backup"
            if not concrete:
                out.append(f"  server {name} -{cookie}{self.server_options}")
                continue
            where = (f"[{state.address}]:{state.port}" if ":" in state.address
                     else f"{state.address}:{state.port}")
            disabled = " disabled" if state.state == "maint" else ""
            out.append(f"  server {name} {where} weight {state.weight}{disabled}{cookie}"
                       f"{self.server_options}")
        return out


def weighed_zero(config: str, unproven: Mapping[str, frozenset[str]]) -> str:
    """``config`` with the server lines of the ``unproven`` slots (backend → slot names) at
    weight 0: what a reload writes for members the running HAProxy does not count up
    (``podway.haproxy.process``). A pass over the text: a second rendering of 10,000 pools
    cost 1.6 CPU-s."""
    lines = config.split("\n")
    names: frozenset[str] = frozenset()
    for i, line in enumerate(lines):
        if line and not line[0].isspace():  # a section header
            names = unproven.get(line[8:], frozenset()) if line.startswith("backend ") \
                else frozenset()
        elif names and line.startswith("  server ") and line.split(" ", 4)[3] in names:
            head, weight = line.split(" weight ", 1)
            lines[i] = f"{head} weight 0{weight.lstrip('0123456789')}"
    return "\n".join(lines)


def backend_name(pool: str) -> str:
    return proxy_name("be", pool)


def render_backend(
        pool: Pool, previous: tuple[MemberKey | None, ...] | None, *, folder: str,
        timed: bool = False, previous_backups: tuple[MemberKey | None, ...] | None = None,
) -> Backend:
    """``timed``: some route forwarding here sets a timeout (the rule costs on every request,
    so it is only there when used). Fallback members (``fallback``) go to backup
    slots, the others to the active ones."""
    s = pool.settings
    name = backend_name(pool.name)
    report: list[str] = []
    closed: list[str] = []
    http = s.protocol in (PoolProtocol.HTTP1, PoolProtocol.HTTP2, PoolProtocol.GRPC)
    lines = [f"backend {name}", f"  mode {'http' if http else 'tcp'}"]
    if s.protocol is PoolProtocol.UDP:
        closed.append("UDP pools")
    lines.append(f"  timeout connect {s.connect_timeout_ms}ms")
    if http and timed:  # a route's timeout (podway.haproxy.http), only where a route sets one
        lines.append("  http-request set-timeout server var(txn.to) if { var(txn.to) -m found }")
    balance, cookie = _balance(s, http, closed)
    lines += balance
    options = ""
    check = s.health_check
    if check is not None:
        check_lines, check_opts, problem = _health_check(check, s.protocol, pool.name)
        if problem:
            closed.append(problem)
        lines += check_lines
        options += check_opts
    options += _observe(s, http, has_check=check is not None, report=report)
    if s.retry_budget is not None:
        report.append("a retry budget (retryBudget): HAProxy has no cap on retries in flight")
    if s.protocol in (PoolProtocol.HTTP2, PoolProtocol.GRPC):
        options += " proto h2"
    if s.proxy_protocol:
        options += " send-proxy-v2"
    tls_options, files = _upstream_tls(s, http, folder, closed)
    options += tls_options
    checked = s.protocol is not PoolProtocol.UDP and check is not None
    if checked:
        options = " check" + options
    active = tuple(m for m in pool.members if not m.fallback)
    spare = tuple(m for m in pool.members if m.fallback)
    assignment = slotting.assign(active, previous)
    backups = slotting.assign(spare, previous_backups, lazy=True)
    states = (slotting.slot_states(active, assignment, checked=checked)
              + slotting.slot_states(spare, backups, backup=True, checked=checked))
    if any(m.weight > slotting.MAX_WEIGHT for m in pool.members):
        report.append(f"member weights above {slotting.MAX_WEIGHT} (capped)")
    if closed:
        states = tuple(slotting.SlotState(name=s.name, checked=checked) for s in states)
    unsupported = tuple(Unsupported(subject=pool.name, feature=f, origin=pool.origin,
                                    closed=f in closed) for f in (*closed, *report))
    return Backend(name=name, lines=tuple(lines), server_options=options, slots=assignment,
                   backups=backups, states=states, files=tuple(files),
                   unsupported=unsupported, cookie=cookie)


def _observe(s: PoolSettings, http: bool, *, has_check: bool, report: list[str]) -> str:
    """Outlier detection's approximation (docs/engines.md): HAProxy marks the member down after
    that many errors in a row and the active check brings it back; without a check, reported."""
    if s.outlier_detection is None:
        return ""
    if not has_check:
        report.append("passive health (outlier detection) without an active check")
        return ""
    layer = "layer7" if http else "layer4"
    return (f" observe {layer} error-limit {s.outlier_detection.consecutive_errors}"
            " on-error mark-down")


def _balance(s: PoolSettings, http: bool, closed: list[str]) -> tuple[list[str], bool]:
    """The balancing lines and whether servers carry a persistence cookie."""
    p = s.persistence
    if p is not None and p.kind is PersistenceKind.COOKIE and http:
        return _cookie(p.name or "podway", p.ttl_s, closed), False
    if p is not None and p.kind is PersistenceKind.HEADER and http:
        try:
            return [f"  balance hdr({word(p.name)})", "  hash-type consistent"], False
        except Unquotable:
            closed.append("this persistence header name")
            return [], False
    if p is not None and p.kind is not PersistenceKind.SOURCE_IP:
        closed.append(f"persistence by {p.kind} on a TCP pool")
        return [], False
    if p is not None or s.lb_policy in HASHING:
        return ["  balance source", "  hash-type consistent"], False
    return ["  balance " + {LBPolicy.ROUND_ROBIN: "roundrobin",
                            LBPolicy.LEAST_REQUEST: "leastconn",
                            LBPolicy.RANDOM: "random"}[s.lb_policy]], False


def _cookie(name: str, ttl_s: int, closed: list[str]) -> list[str]:
    """Cookie persistence as a consistent hash of the cookie's value (as Envoy's cookie hash
    policy): a request without the cookie gets a fresh random value, hashed alike, and the
    answer sets it (``Max-Age`` from the ttl, none: a session cookie)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        closed.append("this persistence cookie name")
        return []
    age = f"; Max-Age={ttl_s}" if ttl_s else ""
    return [
        f"  http-request set-var(txn.ck) req.cook({name})",
        "  http-request set-var(txn.ckn) bool(1) unless { var(txn.ck) -m found }",
        "  http-request set-var(txn.ck) uuid if { var(txn.ckn) -m found }",
        "  balance hash var(txn.ck)",
        "  hash-type consistent",
        f"  http-response add-header set-cookie '{name}=%[var(txn.ck)]; Path=/{age}; HttpOnly'"
        " if { var(txn.ckn) -m found }",
    ]


def _upstream_tls(s: PoolSettings, http: bool, folder: str, closed: list[str]
                  ) -> tuple[str, list[tuple[str, str]]]:
    """Server options and files for TLS to the members (re-encrypt), always verified."""
    tls = s.upstream_tls
    if tls is None:
        return "", []
    sans = tls.subject_alt_names or (("dns", tls.sni),)
    if len(sans) != 1 or sans[0][0] != "dns":
        closed.append("upstream TLS with several or URI subject alternative names")
        return "", []
    files: list[tuple[str, str]] = []
    ca_file = "@system-ca"  # no CA of its own: the system's trust store
    if tls.ca_pem:
        ca = f"ca-{digest(tls.ca_pem)}.pem"
        files.append((ca, tls.ca_pem))
        ca_file = f"{folder}/{ca}"
    try:
        options = (f" ssl verify required ca-file {word(ca_file)}"
                   f" sni str({word(tls.sni)}) verifyhost {word(sans[0][1])}")
        cert = tls.client_certificate
        if cert is not None:  # the Gateway's client certificate (spec.tls.backend)
            pem = f"certs/{cert.fingerprint}.pem"
            files.append((pem, cert.cert_pem.rstrip("\n") + "\n"
                          + cert.key_pem.rstrip("\n") + "\n"))
            options += f" crt {word(f'{folder}/{pem}')}"
    except Unquotable:
        closed.append("this upstream TLS name")
        return "", files
    if http:  # the protocol the pool speaks, negotiated as the member expects
        options += " alpn http/1.1" if s.protocol is PoolProtocol.HTTP1 else " alpn h2"
    return options, files


def _health_check(check: HealthCheck, protocol: PoolProtocol, pool: str
                  ) -> tuple[list[str], str, str]:
    """Lines, server options and a problem ("" when none) for one active check."""
    # ``fastinter``: after a failed check while up; ``downinter``: while down.
    quick = check.quick_interval_ms
    opts = (f" inter {check.interval_ms}ms fastinter {quick}ms downinter {quick}ms"
            f" rise {check.healthy_threshold} fall {check.unhealthy_threshold}")
    lines = [f"  timeout check {check.timeout_ms}ms"]
    if check.kind is HealthCheckKind.GRPC:
        return lines, opts, "gRPC health checks"
    if check.kind is HealthCheckKind.TCP:
        return lines, opts, ""
    if protocol in (PoolProtocol.HTTP2, PoolProtocol.GRPC):
        opts += " check-proto h2"
    try:
        send = (f"  http-check send meth {word(check.method)} uri {word(check.http_path)}"
                f" ver HTTP/1.1 hdr host {word(check.host or pool)}")
        for name, value in check.headers:
            send += f" hdr {word(name)} {word(value)}"
    except Unquotable:
        return lines, opts, "this health check's path or headers"
    lines += ["  option httpchk", send,
              f"  http-check expect rstatus {word(status_regex(check.expected))}"]
    return lines, opts, ""


def status_regex(ranges: tuple[tuple[int, int], ...]) -> str:
    """An anchored regex matching exactly the statuses in the inclusive ``ranges``."""
    hundreds: list[str] = []
    codes: list[str] = []
    for low, high in ranges:
        code = low
        while code <= high:
            if code % 100 == 0 and code + 99 <= high:
                hundreds.append(str(code // 100))
                code += 100
            else:
                codes.append(str(code))
                code += 1
    parts = ([f"[{''.join(hundreds)}][0-9][0-9]"] if hundreds else []) + codes
    return "^(" + "|".join(parts) + ")$"
