"""ingress-nginx annotations → the IR features every Podway route has. Pure; no I/O.

The Ingress translation (``podway.translate.ingress.part``) asks this module how one path of an
Ingress is matched and rewritten, which filters its routes carry, what a redirect annotation
answers and which pool settings (timeouts, cookie affinity) the traffic pass applies; it reports
what ``notes`` returns as problems. Each mapping keeps ingress-nginx's meaning:

* paths become case-insensitive regexes anchored at the start only when ``use-regex`` or
  ``rewrite-target`` is set (``/foo`` then also matches ``/foobar``, as nginx's ``~*``);
  ``rewrite-target`` replaces the whole path, ``$n`` naming the path regex's groups;
* ``permanent-redirect`` / ``temporal-redirect`` answer every path with the URL as written (the
  request's query string is dropped, as nginx's ``return``); ``app-root`` redirects ``/`` (302);
* limits are per client address, refused with 503 (ingress-nginx's ``limit-req-status-code``),
  in a token bucket of ``rate * limit-burst-multiplier``;
* timeouts: connect → the pool's connect timeout; read/send (gaps between reads or writes in
  nginx) → the route's idle timeout, and no overall request deadline (nginx has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from podway.ir import (
    CORS,
    BodyLimit,
    ClientAccess,
    DirectResponse,
    Filter,
    HeaderModifier,
    PathKind,
    PathMatch,
    RateLimit,
    Redirect,
    URLRewrite,
)
from podway.model import Ingress
from podway.model.policy import PersistenceSpec, TimeoutsSpec, TrafficPolicySpec
from podway.translate.ingress.nginx.annotations import (
    PREFIX,
    NginxAnnotations,
    Reason,
    VerifyClient,
    advice,
    read,
)

LIMIT_STATUS = 503  # ingress-nginx's limit-req-status-code / limit-conn-status-code
_ANY = ("0.0.0.0/0", "::/0")
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    """Something to report about one annotation (``key`` is the full name)."""

    key: str
    reason: Reason
    message: str
    error: bool = False  # an unusable value (InvalidAnnotation): an error; else a warning


def notes(n: NginxAnnotations) -> list[Note]:
    """The reader's issues, every unserved key with what to do instead, and the parts of
    served families Podway cannot serve as asked."""
    out = [Note(key=i.key, reason=i.reason, message=i.message,
                error=i.reason is Reason.INVALID_ANNOTATION) for i in n.issues]
    out.extend(Note(key=k, reason=Reason.UNSUPPORTED_ANNOTATION,
                    message=f"restricts access and is not served by Podway, so every request "
                            f"of this Ingress is refused (403) until it is removed: {advice(k)}",
                    error=True) if k in n.closed else
               Note(key=k, reason=Reason.UNSUPPORTED_ANNOTATION,
                    message=f"ingress-nginx setting not served by Podway: {advice(k)}")
               for k in n.unserved)
    if n.limits is not None:
        if n.limits.rps is not None and n.limits.rpm is not None:
            out.append(Note(key=PREFIX + "limit-rpm", reason=Reason.UNSUPPORTED_ANNOTATION,
                            message="limit-rps and limit-rpm together: only limit-rps applies"))
        if n.limits.connections is not None:
            out.append(Note(key=PREFIX + "limit-connections",
                            reason=Reason.UNSUPPORTED_ANNOTATION,
                            message="concurrent connections per client are not limited (no "
                                    "such limit in the engine); use limit-rps"))
        if n.limits.allowlist:
            out.append(Note(key=PREFIX + "limit-whitelist", reason=Reason.UNSUPPORTED_ANNOTATION,
                            message="every client is limited: exempting addresses is not "
                                    "served"))
    tls = n.auth_tls
    if tls is not None:
        if tls.pass_certificate:
            out.append(Note(key=PREFIX + "auth-tls-pass-certificate-to-upstream",
                            reason=Reason.UNSUPPORTED_ANNOTATION,
                            message="the client certificate is not passed to the backend"))
        if tls.error_page:
            out.append(Note(key=PREFIX + "auth-tls-error-page",
                            reason=Reason.UNSUPPORTED_ANNOTATION,
                            message="a client without a valid certificate fails the TLS "
                                    "handshake; there is no error page"))
        if tls.verify is VerifyClient.OPTIONAL_NO_CA:
            out.append(Note(key=PREFIX + "auth-tls-verify-client",
                            reason=Reason.UNSUPPORTED_ANNOTATION,
                            message="optional_no_ca (ask, never verify) is not served: no "
                                    "client certificate is asked for"))
    if n.affinity is not None and n.affinity.path is not None:
        out.append(Note(key=PREFIX + "session-cookie-path", reason=Reason.UNSUPPORTED_ANNOTATION,
                        message="the affinity cookie's path is always /"))
    return out


def re2_escape(text: str) -> str:
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def path_match(n: NginxAnnotations, *, exact: bool, path: str) -> PathMatch | None:
    """The match of one Ingress path when ``use-regex``/``rewrite-target`` make it a regex
    (None: the usual Kubernetes match applies). Exact paths stay exact, as in ingress-nginx."""
    if n.rewrite is None or not n.rewrite.regex_paths or exact:
        return None
    return PathMatch(kind=PathKind.REGEX, value=f"(?i)(?:{path}).*")


def rewrite(n: NginxAnnotations, *, exact: bool, path: str) -> URLRewrite | None:
    """``rewrite-target`` and ``upstream-vhost`` as one URL rewrite (None: neither set)."""
    target = n.rewrite.target if n.rewrite is not None else None
    if target is None and n.upstream_vhost is None:
        return None
    if target is None:
        return URLRewrite(hostname=n.upstream_vhost)
    pattern = f"(?i)^{re2_escape(path)}$" if exact else f"(?i)^(?:{path}).*$"
    groups = _groups(pattern)
    substitution = "".join("\\\\" if c == "\\" else c for c in target)
    for digit in range(1, 10):  # a group the path does not have is empty, as in nginx
        substitution = substitution.replace(f"${digit}", f"\\{digit}" if digit <= groups else "")
    return URLRewrite(hostname=n.upstream_vhost, pattern=pattern, substitution=substitution)


def host_rewrite(n: NginxAnnotations) -> tuple[URLRewrite, ...]:
    """``upstream-vhost`` alone (the defaultBackend has no path to rewrite)."""
    return (URLRewrite(hostname=n.upstream_vhost),) if n.upstream_vhost is not None else ()


def _groups(pattern: str) -> int:
    """Capture groups of an RE2 pattern (0 when it does not compile: the caller reports it)."""
    import re2  # at the first rewrite: most clusters have none (podway.translate.core.regex)

    try:
        return int(re2.compile(pattern).groups)
    except re2.error:
        return 0


CLOSED_STATUS = 403  # what every request of an Ingress that must fail closed is answered


def refusal(n: NginxAnnotations) -> DirectResponse | None:
    """The answer of every route of an Ingress asking for an access restriction Podway does not
    serve (``NginxAnnotations.closed``): refused, never forwarded open."""
    return DirectResponse(status=CLOSED_STATUS) if n.closed else None


def redirect(n: NginxAnnotations) -> Redirect | None:
    """The answer of every path under ``permanent-redirect`` / ``temporal-redirect``."""
    if n.redirect is None:
        return None
    url = urlsplit(n.redirect.url)
    path = url.path or "/"
    if url.query:
        path = f"{path}?{url.query}"
    code = n.redirect.code if n.redirect.code in (301, 302, 303, 307, 308) else (
        301 if n.redirect.permanent else 302)
    return Redirect(scheme=url.scheme or None, hostname=url.hostname or None,
                    port=url.port, path=path, status_code=code, strip_query=True)


def app_root(n: NginxAnnotations) -> Redirect | None:
    """``app-root``: ``/`` answers 302 to it."""
    if n.app_root is None:
        return None
    return Redirect(path=n.app_root, status_code=302, strip_query=True)


def route_filters(n: NginxAnnotations) -> tuple[Filter, ...]:
    """Filters every route of the Ingress carries (besides the rewrite, which is per path)."""
    out: list[Filter] = []
    if n.x_forwarded_prefix is not None:
        out.append(HeaderModifier(set=(("X-Forwarded-Prefix", n.x_forwarded_prefix),)))
    if n.cors is not None:
        c = n.cors
        out.append(CORS(allow_origins=c.allow_origins, allow_credentials=c.allow_credentials,
                        allow_methods=c.allow_methods, allow_headers=c.allow_headers,
                        expose_headers=c.expose_headers, max_age_s=c.max_age_s))
    if n.source_ranges is not None:
        ranges = n.source_ranges
        if not ranges.complete:
            out.append(ClientAccess(deny=_ANY))  # unreadable: refuse everyone, loudly
        elif ranges.allow or ranges.deny:
            out.append(ClientAccess(allow=ranges.allow, deny=ranges.deny))
    if n.limits is not None:
        limits = n.limits
        if limits.rps is not None:
            out.append(RateLimit(requests=limits.rps, interval_ms=1000,
                                 burst=limits.rps * limits.burst_multiplier,
                                 status=LIMIT_STATUS))
        elif limits.rpm is not None:
            out.append(RateLimit(requests=limits.rpm, interval_ms=60_000,
                                 burst=limits.rpm * limits.burst_multiplier,
                                 status=LIMIT_STATUS))
    if n.body_size is not None and n.body_size.limit_bytes > 0:
        out.append(BodyLimit(max_bytes=n.body_size.limit_bytes))
    return tuple(out)


def traffic_spec(ingress: Ingress, own: TrafficPolicySpec | None) -> TrafficPolicySpec | None:
    """The Ingress's traffic settings: its ``podway.io/`` sections (``own``) over the ones
    its nginx annotations ask for (timeouts, cookie affinity)."""
    found = _nginx_spec(read(ingress.metadata.annotations,
                             namespace=ingress.metadata.namespace))
    if found is None or own is None:
        return own or found
    update = {name: value for name in ("timeouts", "persistence")
              if (value := getattr(own, name)) is not None}
    return found.model_copy(update=update) if update else found


def _nginx_spec(n: NginxAnnotations) -> TrafficPolicySpec | None:
    sections: dict[str, object] = {}
    t = n.timeouts
    if t is not None:
        idle = max((ms for ms in (t.read_ms, t.send_ms) if ms is not None), default=None)
        sections["timeouts"] = TimeoutsSpec(
            connect=f"{t.connect_ms}ms" if t.connect_ms is not None else None,
            request="0s" if idle is not None else None,
            idle=f"{idle}ms" if idle is not None else None)
    if n.affinity is not None:
        a = n.affinity
        sections["persistence"] = PersistenceSpec(
            type="Cookie", name=a.cookie_name,
            ttl=f"{a.max_age_s}s" if a.max_age_s is not None else None)
    return TrafficPolicySpec(**sections) if sections else None
