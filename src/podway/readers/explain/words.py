"""Words for ``explain``: how hosts, filters, members and modes read in a report. Pure."""

from __future__ import annotations

from podway.ir import (
    CORS,
    AccessRule,
    Authorization,
    AuthRequest,
    BasicAuth,
    BodyLimit,
    ClientAccess,
    ErrorPages,
    ExtAuth,
    Filter,
    HeaderModifier,
    Jwt,
    L4Route,
    Listener,
    Mirror,
    Oidc,
    Pool,
    RateLimit,
    URLRewrite,
    VirtualHost,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol
from podway.readers.explain.model import MemberView


def backend_mode(pool: Pool, mode: str) -> str:
    """How the pool's members reach pods, in words (``nodeport`` when members are nodes)."""
    if any(m.origin is not None and m.origin.kind == "Node" for m in pool.members):
        return "nodeport (node, then kube-proxy: one more hop)"
    return {"clusterip": "clusterip (pod IP)",
            "nodeportlocal": "nodeportlocal (node IP, DNAT to the pod)",
            "nodeport": "nodeport (node, then kube-proxy: one more hop)"}.get(mode, mode or "")


def host_kind(vhost: VirtualHost, host: str) -> str:
    if vhost.hostname == "*":
        return f"the catch-all (*): no exact or wildcard host covers {host!r}"
    if vhost.hostname.startswith("*."):
        reach = "any number of labels" if vhost.wildcard is WildcardMode.SUFFIX else "one label"
        return f"wildcard {vhost.hostname} ({reach}) covers {host!r}"
    return f"exact host {vhost.hostname}"


def filter_text(f: Filter) -> str:
    if isinstance(f, HeaderModifier):
        side = "response" if f.response else "request"
        edits = ([f"set {k}: {v}" for k, v in f.set] + [f"add {k}: {v}" for k, v in f.add]
                 + [f"remove {k}" for k in f.remove])
        return f"{side} headers: {'; '.join(edits) or 'no change'}"
    if isinstance(f, URLRewrite):
        edits = []
        if f.hostname is not None:
            edits.append(f"host → {f.hostname}")
        if f.path is not None:
            edits.append(f"path → {f.path}")
        if f.prefix is not None:
            edits.append(f"matched prefix → {f.prefix or '/'}")
        if f.pattern is not None:
            edits.append(f"path matching {f.pattern} → {f.substitution}")
        return f"rewrite: {', '.join(edits) or 'no change'}"
    if isinstance(f, CORS):
        return (f"CORS: origins {', '.join(f.allow_origins) or 'none'} (preflights answered by "
                "the engine)")
    if isinstance(f, ClientAccess):
        allow = ", ".join(f.allow) or "any address"
        deny = f" except {', '.join(f.deny)}" if f.deny else ""
        return f"clients allowed: {allow}{deny} (others get 403)"
    if isinstance(f, RateLimit):
        who = "per client address" if f.per_client else "for all clients"
        return (f"rate limit {who}: {f.requests} per {f.interval_ms} ms, bursts of {f.burst} "
                f"(then {f.status})")
    if isinstance(f, BodyLimit):
        return f"request bodies up to {f.max_bytes} bytes (larger: 413)"
    if isinstance(f, Mirror):
        return f"mirror {f.percent:g} % to {f.pool} (answers ignored)"
    return _guard_text(f)


def _guard_text(f: Filter) -> str:
    """Who may pass, and what answers the others get (authentication, authorization)."""
    if isinstance(f, Authorization):
        rules = "; ".join(_rule_text(r) for r in f.rules) or "no rules"
        default = "allowed" if f.default_allow else "refused (403)"
        return (f"authorization by {f.source or 'the route'}: first match decides ({rules}); "
                f"otherwise {default}")
    if isinstance(f, ExtAuth):
        how = "gRPC ext_authz" if f.grpc else f"HTTP, path prefix {f.path_prefix or '(none)'}"
        return (f"external authorization by {f.pool} ({how}): its refusal is the answer, an "
                "error or timeout 403")
    if isinstance(f, BasicAuth):
        return (f"basic authentication: {len(f.users)} users of {f.source or 'the route'}, "
                f"realm {f.realm!r} (others get 401)")
    if isinstance(f, AuthRequest):
        signin = f"; a 401 redirects to {f.signin}" if f.signin else ""
        method = f.method or "GET"
        return (f"external authentication ({f.source or f.pool}): {method}"
                f" http://{f.authority}{f.path} is asked first; 2xx lets it through, 401/403 are "
                f"the answer{signin}, anything else 500")
    if isinstance(f, ErrorPages):
        codes = ", ".join(str(c) for c in f.codes)
        return (f"error pages: an answer {codes} is replaced by {f.pool}'s answer to GET / "
                "(X-Code, X-Original-URI, …), its status included")
    if isinstance(f, Jwt):
        who = ", ".join(p.issuer or p.name for p in f.providers)
        missing = "a request without one passes" if f.optional else "none: 401"
        return (f"JWT authentication by {f.source or 'the route'}: a valid token of {who} "
                f"(a bad one: 401, another audience: 403; {missing})")
    assert isinstance(f, Oidc), f
    return (f"OIDC login by {f.source or 'the route'}: a browser without a session is sent "
            f"to {f.authorization_endpoint} (302; client {f.client_id}), back to "
            f"{f.redirect_path}; {f.logout_path} logs out")



def _rule_text(rule: AccessRule) -> str:
    what = [f"client in {', '.join(rule.cidrs)}"] if rule.cidrs else []
    what += [f"{name} is {' or '.join(values)}" for name, values in rule.headers]
    what += [f"method {' or '.join(rule.methods)}"] if rule.methods else []
    what += [f"the {c.provider} token's {'.'.join(c.claim)} {'holds' if c.array else 'is'} "
             f"{' or '.join(c.values)}" for c in rule.claims]
    return f"{'allow' if rule.allow else 'deny'} {' and '.join(what) or 'any request'}"


def state_counts(members: tuple[MemberView, ...]) -> str:
    if not members:
        return "it has no members: no endpoints, or none could be resolved"
    counts: dict[str, int] = {}
    for m in members:
        key = {"not_ready": "not ready", "draining": "draining"}.get(m.state, m.why)
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def no_sni(sni: str | None) -> str:
    if not sni:
        return "the client sent no SNI"
    if sni.endswith("."):  # RFC 6066 forbids it; the engine compares the name as sent
        return (f"SNI {sni} matches no certificate name (the engine keeps an SNI's trailing "
                "dot, which clients must not send)")
    return f"SNI {sni} matches no certificate name"


def listing(items: list[str], limit: int = 6) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def protocol_mismatch(scheme: str, protocol: Protocol) -> str:
    """Why a ``scheme`` request does not fit a listener of ``protocol``; empty when it does."""
    fits = {"http": (Protocol.HTTP,), "https": (Protocol.HTTPS, Protocol.TLS),
            "tls": (Protocol.TLS, Protocol.HTTPS), "tcp": (Protocol.TCP, Protocol.TLS),
            "udp": (Protocol.UDP,)}[scheme]
    if protocol in fits:
        return ""
    hint = {Protocol.HTTP: "http://", Protocol.HTTPS: "https://", Protocol.TLS: "https:// or "
            "tls://", Protocol.TCP: "tcp://", Protocol.UDP: "udp://"}[protocol]
    return f"the listener on that port speaks {protocol}, not {scheme}: use {hint}"


def kernel_dnat(listener: Listener, route: L4Route, transport: str) -> str:
    """How the kernel engine serves ``listener`` (``Listener.engine`` KERNEL), in one line."""
    how = ("by a hash of the client's address (sessionAffinity ClientIP)"
           if route.client_ip_affinity else "at random, by weight")
    source = ("the client's own address" if listener.transparent
              else "the engine host's address (SNAT)")
    return (f"the kernel engine serves this port: nftables DNATs each new {transport} flow to "
            f"one member {how}; the member sees {source}; no proxy touches the bytes")
