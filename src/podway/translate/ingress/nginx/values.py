"""The values ``podway.translate.ingress.nginx.annotations.read`` returns: one frozen dataclass per
annotation family of ingress-nginx, the issues it finds, and the enums they use. Re-exported by
``podway.translate.ingress.nginx.annotations`` (import them from there)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

PREFIX = "nginx.ingress.kubernetes.io/"
_QUOTE_LIMIT = 200


class Reason(StrEnum):
    """An issue's kind; the values are ``podway.translate.core.problems.Reason``'s (same words)."""

    INVALID_ANNOTATION = "InvalidAnnotation"  # the value cannot be used
    UNSUPPORTED_ANNOTATION = "UnsupportedAnnotation"  # read, but Podway cannot serve it


def quote(text: str) -> str:
    """User text for a message, cut to a bounded length."""
    return repr(text) if len(text) <= _QUOTE_LIMIT else f"{text[:_QUOTE_LIMIT]!r}…"


class BackendProtocol(StrEnum):
    HTTP = "HTTP"
    HTTPS = "HTTPS"
    GRPC = "GRPC"
    GRPCS = "GRPCS"


class VerifyClient(StrEnum):
    ON = "on"  # a client certificate is required and verified
    OFF = "off"  # none is asked for
    OPTIONAL = "optional"  # asked for; when sent it must verify
    OPTIONAL_NO_CA = "optional_no_ca"  # asked for, not verified (the backend decides)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnnotationIssue:
    """One problem with one annotation: ``key`` is the full annotation name."""

    key: str
    reason: Reason  # INVALID_ANNOTATION or UNSUPPORTED_ANNOTATION
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rewrite:
    """``rewrite-target`` / ``use-regex``. With either, ingress-nginx makes this Ingress's
    paths case-insensitive regular expressions anchored at the start only (``/foo`` also
    matches ``/foobar``), and a rewrite replaces the *whole* path by ``target`` with ``$n``
    replaced by the n-th capture group of the path (the query string is kept)."""

    target: str | None = None
    use_regex: bool = False

    @property
    def regex_paths(self) -> bool:
        return self.use_regex or self.target is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class SSLRedirect:
    """``ssl-redirect``: plain HTTP for a host with a TLS entry answers a redirect to HTTPS.
    ``force``: redirect even when the Ingress has no TLS entry for the host."""

    redirect: bool = True
    force: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Redirect:
    """Every request is answered with a redirect to ``url`` (nothing is forwarded)."""

    url: str
    code: int
    permanent: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BodySize:
    """Largest request body accepted; larger ones are answered 413. 0: no limit."""

    limit_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    """Milliseconds; None: not set (ingress-nginx's defaults are 5 s connect, 60 s read/send).
    ``read_ms``/``send_ms`` are nginx's gaps between two reads/writes, not whole-request
    deadlines."""

    connect_ms: int | None = None
    read_ms: int | None = None
    send_ms: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Affinity:
    """Sticky sessions by a cookie the proxy sets. ``max_age_s`` None: a session cookie."""

    cookie_name: str = "INGRESSCOOKIE"
    max_age_s: int | None = None
    path: str | None = None  # None: the Ingress path (ingress-nginx's default)
    persistent: bool = False  # affinity-mode: persistent (no rebalancing when pods scale)


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRanges:
    """Client addresses allowed (empty: any) and denied, as normalised CIDRs.

    ``complete`` is False when an entry of the allowlist could not be read: a server must then
    refuse every client rather than serve a shorter (or empty, i.e. open) allowlist."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    complete: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Cors:
    allow_origins: tuple[str, ...] = ("*",)
    allow_methods: tuple[str, ...] = ("GET", "PUT", "POST", "DELETE", "PATCH", "OPTIONS")
    allow_headers: tuple[str, ...] = ("DNT", "Keep-Alive", "User-Agent", "X-Requested-With",
                                      "If-Modified-Since", "Cache-Control", "Content-Type",
                                      "Range", "Authorization")
    expose_headers: tuple[str, ...] = ()
    allow_credentials: bool = True
    max_age_s: int = 1_728_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Canary:
    """This Ingress is the canary of the Ingress serving the same host and path.

    Precedence (ingress-nginx's): header, then cookie, then weight. By header without a value:
    ``always`` → canary, ``never`` → main, anything else falls through; with ``header_value``
    (or ``header_pattern``, a regex) only that value goes to the canary. By cookie: ``always``
    / ``never`` likewise. Otherwise ``weight`` of ``weight_total`` requests go to the canary.
    """

    by_header: str | None = None
    header_value: str | None = None
    header_pattern: str | None = None
    by_cookie: str | None = None
    weight: int = 0
    weight_total: int = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Per client address (nginx ``$binary_remote_addr``): ``rps``/``rpm`` requests, bursts of
    ``burst_multiplier`` times that; ``connections`` concurrent connections. ``allowlist``:
    client CIDRs the limits do not apply to."""

    rps: int | None = None
    rpm: int | None = None
    connections: int | None = None
    burst_multiplier: int = 5
    allowlist: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthTLS:
    """Client certificates verified against ``ca.crt`` of Secret ``namespace/name``.

    ``name`` "" : the secret reference was unreadable — a server must refuse every client of
    the Ingress's TLS hosts (fail closed), not serve them without client certificates.
    ``match_cn``: a regex (RE2; ``CN=`` prefix allowed) the subject's CN must match, checked
    where it is served (the engine's regex limits are its business)."""

    namespace: str
    name: str
    verify: VerifyClient = VerifyClient.ON
    depth: int = 1
    pass_certificate: bool = False
    match_cn: str | None = None
    error_page: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NginxAnnotations:
    """Everything one Ingress's ``nginx.ingress.kubernetes.io/*`` annotations ask for."""

    rewrite: Rewrite | None = None
    ssl: SSLRedirect | None = None
    redirect: Redirect | None = None
    body_size: BodySize | None = None
    timeouts: Timeouts | None = None
    backend_protocol: BackendProtocol | None = None
    affinity: Affinity | None = None
    source_ranges: SourceRanges | None = None
    cors: Cors | None = None
    canary: Canary | None = None
    app_root: str | None = None
    upstream_vhost: str | None = None
    x_forwarded_prefix: str | None = None
    limits: Limits | None = None
    auth_tls: AuthTLS | None = None
    ssl_passthrough: bool = False  # TLS to the pods by SNI, undecrypted (first path's backend)
    # server-alias: more names of the Ingress's hosts (ingress-nginx's server_name); an alias
    # that another Ingress names as a host is not used (that host wins)
    server_alias: tuple[str, ...] = ()
    # from-to-www-redirect: www.H answers a 308 to H (or H to www.H when the rule host is
    # www.H), keeping scheme and request URI; not where another Ingress names that host
    from_to_www: bool = False
    unserved: tuple[str, ...] = ()  # full keys under PREFIX that Podway does not act on
    # Of ``unserved``: the keys that restrict who may reach the Ingress (authentication, a WAF,
    # access directives in a snippet). A server must refuse every request of the Ingress while
    # any is set (fail closed), never serve it open.
    closed: tuple[str, ...] = ()
    issues: tuple[AnnotationIssue, ...] = ()

    @property
    def empty(self) -> bool:
        return self == NginxAnnotations()
