"""A typed reader of ingress-nginx's ``nginx.ingress.kubernetes.io/*`` Ingress annotations.

``read(annotations, namespace=...)`` returns one ``NginxAnnotations``: a frozen value per
annotation family (None when the Ingress sets none of its keys), the keys it saw but Podway does
not serve, and every problem as an ``AnnotationIssue`` (key, ``Reason``, message). It never
raises and does no I/O; the same input always gives an equal value. The semantics (defaults,
units, precedence) are ingress-nginx's, so a value here means what it meant there.

Stable interface (``podway migrate to-gateway`` builds on it; add fields, never rename):

=====================  =========================================================================
field                  keys (``nginx.ingress.kubernetes.io/`` omitted)
=====================  =========================================================================
``rewrite``            ``rewrite-target`` (``$1``-``$9`` captures), ``use-regex``
``ssl``                ``ssl-redirect`` (default true), ``force-ssl-redirect`` (default false)
``redirect``           ``permanent-redirect`` (+ ``-code``, 301), ``temporal-redirect``
                       (+ ``-code``, 302); permanent wins when both are set
``body_size``          ``proxy-body-size`` (nginx size: ``8m``, ``512k``; ``0`` = no limit)
``timeouts``           ``proxy-connect-timeout``, ``proxy-read-timeout``, ``proxy-send-timeout``
``backend_protocol``   ``backend-protocol``: HTTP, HTTPS, GRPC, GRPCS (AUTO_HTTP reads as HTTP)
``affinity``           ``affinity: cookie``, ``session-cookie-name`` (INGRESSCOOKIE),
                       ``session-cookie-max-age`` / ``-expires`` (seconds), ``-path``,
                       ``affinity-mode``
``source_ranges``      ``whitelist-source-range`` / ``allowlist-source-range``,
                       ``denylist-source-range`` (comma-separated CIDRs or addresses)
``cors``               ``enable-cors`` and ``cors-allow-origin``, ``-methods``, ``-headers``,
                       ``cors-expose-headers``, ``cors-allow-credentials``, ``cors-max-age``
``canary``             ``canary: "true"`` and ``canary-by-header``, ``-header-value``,
                       ``-header-pattern``, ``canary-by-cookie``, ``canary-weight``,
                       ``canary-weight-total`` (100)
``app_root``           ``app-root``
``upstream_vhost``     ``upstream-vhost``
``x_forwarded_prefix`` ``x-forwarded-prefix``
``limits``             ``limit-rps``, ``limit-rpm``, ``limit-connections``,
                       ``limit-burst-multiplier`` (5), ``limit-whitelist`` / ``limit-allowlist``
``auth_tls``           ``auth-tls-secret`` (``namespace/name``), ``auth-tls-verify-client``
                       (on), ``auth-tls-verify-depth`` (1), ``-pass-certificate-to-upstream``,
                       ``auth-tls-match-cn``, ``auth-tls-error-page``
``ssl_passthrough``    ``ssl-passthrough`` (default false)
``server_alias``       ``server-alias``: more host names served as the Ingress's hosts
``from_to_www``        ``from-to-www-redirect`` (default false): ``www.H`` ↔ ``H`` answers 308
=====================  =========================================================================

``unserved``: every other key under the prefix, sorted — ``advice(key)`` says what to do
instead. ``closed``: the unserved keys that restrict access (``auth-*`` other than the served
``auth-tls-*``, ``satisfy``, ``enable-modsecurity``/``enable-owasp-core-rules`` unless false,
a snippet with an access directive): the Ingress must then refuse every request (fail closed),
never be served open. ``issues``: ``INVALID_ANNOTATION`` when a value cannot be used (the
family falls back to ingress-nginx's default for that key, or is None when nothing usable is
left — never to something less safe: a bad source range drops the whole allowlist family
*and* says so, and the server must then refuse rather than allow; see
``SourceRanges.complete``), and ``UNSUPPORTED_ANNOTATION`` for a value Podway reads but cannot
serve (``backend-protocol: FCGI``). A served key whose value is fine gives no issue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from podway.translate import annotations as ann
from podway.translate.core.hosts import valid_hostname
from podway.translate.ingress.nginx.access import closed_keys, restricts_access, unserved_keys
from podway.translate.ingress.nginx.keys import KeyReader
from podway.translate.ingress.nginx.values import (
    PREFIX,
    Affinity,
    AnnotationIssue,
    AuthTLS,
    BackendProtocol,
    BodySize,
    Canary,
    Cors,
    Limits,
    NginxAnnotations,
    Reason,
    Redirect,
    Rewrite,
    SourceRanges,
    SSLRedirect,
    Timeouts,
    VerifyClient,
    quote,
)

__all__ = [
    "PREFIX",
    "SERVED",
    "SERVED_KEYS",
    "Affinity",
    "AnnotationIssue",
    "AuthTLS",
    "BackendProtocol",
    "BodySize",
    "Canary",
    "Cors",
    "Limits",
    "NginxAnnotations",
    "Reason",
    "Redirect",
    "Rewrite",
    "SSLRedirect",
    "SourceRanges",
    "Timeouts",
    "VerifyClient",
    "advice",
    "read",
    "restricts_access",
]

_EMPTY = NginxAnnotations()

# Keys each family reads (without PREFIX): everything else under PREFIX is ``unserved``.
SERVED: dict[str, tuple[str, ...]] = {
    "rewrite": ("rewrite-target", "use-regex"),
    "ssl": ("ssl-redirect", "force-ssl-redirect"),
    "redirect": ("permanent-redirect", "permanent-redirect-code", "temporal-redirect",
                 "temporal-redirect-code"),
    "body_size": ("proxy-body-size",),
    "timeouts": ("proxy-connect-timeout", "proxy-read-timeout", "proxy-send-timeout"),
    "backend_protocol": ("backend-protocol",),
    "affinity": ("affinity", "affinity-mode", "session-cookie-name", "session-cookie-max-age",
                 "session-cookie-expires", "session-cookie-path"),
    "source_ranges": ("whitelist-source-range", "allowlist-source-range",
                      "denylist-source-range"),
    "cors": ("enable-cors", "cors-allow-origin", "cors-allow-methods", "cors-allow-headers",
             "cors-expose-headers", "cors-allow-credentials", "cors-max-age"),
    "canary": ("canary", "canary-by-header", "canary-by-header-value", "canary-by-header-pattern",
               "canary-by-cookie", "canary-weight", "canary-weight-total"),
    "app_root": ("app-root",),
    "upstream_vhost": ("upstream-vhost",),
    "x_forwarded_prefix": ("x-forwarded-prefix",),
    "limits": ("limit-rps", "limit-rpm", "limit-connections", "limit-burst-multiplier",
               "limit-whitelist", "limit-allowlist"),
    "auth_tls": ("auth-tls-secret", "auth-tls-verify-client", "auth-tls-verify-depth",
                 "auth-tls-pass-certificate-to-upstream", "auth-tls-match-cn",
                 "auth-tls-error-page"),
    "ssl_passthrough": ("ssl-passthrough",),
    "server_alias": ("server-alias",),
    "from_to_www": ("from-to-www-redirect",),
}
SERVED_KEYS = frozenset(PREFIX + k for keys in SERVED.values() for k in keys)

# What to do instead, for keys users often set that Podway does not serve (by key without
# PREFIX, or by a prefix of it ending in "-").
_ADVICE: tuple[tuple[str, str], ...] = (
    ("configuration-snippet", "raw nginx configuration cannot apply to Envoy; express it with "
     "the served annotations or an HTTPRoute filter"),
    ("server-snippet", "raw nginx configuration cannot apply to Envoy; express it with the "
     "served annotations or an HTTPRoute filter"),
    ("stream-snippet", "raw nginx configuration cannot apply to Envoy"),
    ("auth-snippet", "raw nginx configuration cannot apply to Envoy"),
    ("modsecurity-", "put a WAF in front of Podway or in the backend"),
    ("enable-modsecurity", "put a WAF in front of Podway or in the backend"),
    ("enable-owasp-core-rules", "put a WAF in front of Podway or in the backend"),
    ("auth-signin", "auth-signin needs auth-url"),
    ("auth-", "of ingress-nginx authentication auth-type: basic (with auth-secret) and "
     "auth-url (with auth-signin, auth-response-headers, auth-method) are served"),
    ("proxy-buffer", "Envoy streams; there are no proxy buffers to size"),
    ("proxy-request-buffering", "Envoy streams request bodies (proxy-body-size buffers them)"),
    ("client-body-buffer-size", "Envoy streams; there is no body buffer to size"),
    ("ssl-ciphers", f"set {ann.TLS_CIPHERS.name}"),
    ("ssl-prefer-server-ciphers", f"Envoy's TLS stack chooses; set {ann.TLS_CIPHERS.name}"),
    ("proxy-ssl-", f"use backend-protocol: HTTPS with {ann.BACKEND_CA_SECRET.name} / "
     f"{ann.BACKEND_SNI.name}"),
    ("custom-http-errors", "served only with default-backend (the Service that answers)"),
    ("default-backend", "served only with custom-http-errors; for unmatched paths add a "
     "defaultBackend to the Ingress"),
    ("enable-access-log", "access logs are the engine's (podway run --access-log)"),
    ("mirror-", "use an HTTPRoute RequestMirror filter"),
    ("load-balance", f"set {ann.LB_ALGORITHM.name} on the Service"),
    ("upstream-hash-by", f"set {ann.LB_ALGORITHM.name}: ring-hash with {ann.HASH_ON.name}"),
    ("service-upstream", f"choose the backend mode with {ann.BACKEND_MODE.name} on the Service"),
    ("proxy-next-upstream", f"set {ann.RETRY_ON.name} / {ann.RETRIES.name}"),
    ("limit-rate", "bandwidth limits are not built"),
    ("limit-rate-after", "bandwidth limits are not built"),
    ("denylist-", "only denylist-source-range is served"),
    ("session-cookie-", "only session-cookie-name, -max-age, -expires and -path are served"),
    ("affinity-canary-behavior", "canary and main share the session cookie"),
    ("proxy-redirect-", "Location headers are passed unchanged"),
    ("enable-opentelemetry", "tracing is not built"),
    ("opentelemetry-", "tracing is not built"),
    ("satisfy", "authentication is not built"),
    ("global-rate-limit", "only local limits (limit-rps, limit-rpm) are served"),
    ("canary-", "this canary key is not served"),
)


def advice(key: str) -> str:
    """What to do instead of an unserved key (full name or without PREFIX)."""
    short = key.removeprefix(PREFIX)
    for name, text in _ADVICE:
        if short == name or (name.endswith("-") and short.startswith(name)):
            return text
    return "Podway does not serve it"


def read(annotations: Mapping[str, str], *, namespace: str) -> NginxAnnotations:
    """The annotations of one Ingress (of namespace ``namespace``) under ``PREFIX``."""
    r = _Reader({k.removeprefix(PREFIX): v for k, v in annotations.items()
                 if k.startswith(PREFIX)})
    if not r.raw:
        return _EMPTY
    return NginxAnnotations(
        rewrite=r.rewrite(), ssl=r.ssl(), redirect=r.redirect(), body_size=r.body_size(),
        timeouts=r.timeouts(), backend_protocol=r.backend_protocol(), affinity=r.affinity(),
        source_ranges=r.source_ranges(), cors=r.cors(), canary=r.canary(),
        app_root=r.app_root(), upstream_vhost=r.upstream_vhost(),
        x_forwarded_prefix=r.x_forwarded_prefix(), limits=r.limits(),
        auth_tls=r.auth_tls(namespace), ssl_passthrough=r.flag("ssl-passthrough", False),
        server_alias=r.listed("server-alias", valid_hostname, "a host name") or (),
        from_to_www=r.flag("from-to-www-redirect", False),
        unserved=unserved_keys(r.raw, SERVED_KEYS), closed=closed_keys(r.raw, SERVED_KEYS),
        issues=tuple(r.issues))


_SIZE = re.compile(r"^(\d{1,15})([kKmMgG]?)$")
_SIZE_UNIT = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
_TOKEN = re.compile(r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,256}$")  # header and cookie names
_PATH = re.compile(r"^/[\x21-\x7e]{0,1023}$")
_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$")
_ORIGIN = re.compile(r"^(\*|https?://(\*\.)?[A-Za-z0-9.-]{1,253}(:\d{1,5})?)$")
_METHOD = re.compile(r"^[A-Z]{1,20}$")
_CAPTURE = re.compile(r"\$(\d)")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _url_parses(url: str) -> bool:
    """Whether a redirect URL's authority reads (a port from 1 to 65535, a host when one is
    named): what the servers of the value (``podway.translate.ingress.nginx.serve``, ``migrate``)
    split it by."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return port != 0 and (bool(parts.hostname) or not parts.netloc)


@dataclass(slots=True)
class _Reader(KeyReader):
    """The families: each reads its keys with ``KeyReader``'s value readers."""

    def rewrite(self) -> Rewrite | None:
        if not self.has("rewrite-target", "use-regex"):
            return None
        target = self.text("rewrite-target")
        if target is not None:
            wrong = next((m.group(0) for m in _CAPTURE.finditer(target) if m.group(1) == "0"),
                         None)
            if not target or any(c.isspace() or ord(c) < 0x21 for c in target) or wrong:
                self.bad("rewrite-target", f"{quote(target)} is not a path with $1-$9 captures; "
                         "the path is forwarded unchanged")
                target = None
        use_regex = self.flag("use-regex", False)
        if target is None and not use_regex:
            return None
        return Rewrite(target=target, use_regex=use_regex)

    def ssl(self) -> SSLRedirect | None:
        if not self.has("ssl-redirect", "force-ssl-redirect"):
            return None
        return SSLRedirect(redirect=self.flag("ssl-redirect", True),
                           force=self.flag("force-ssl-redirect", False))

    def redirect(self) -> Redirect | None:
        for kind, default in (("permanent", 301), ("temporal", 302)):
            url = self.text(f"{kind}-redirect")
            if url is None:
                continue
            if not url.startswith(("http://", "https://", "/")) or any(
                    c.isspace() for c in url) or len(url) > 2048 or not _url_parses(url):
                self.bad(f"{kind}-redirect", f"{quote(url)} is not an absolute URL or path; "
                         "requests are forwarded instead")
                continue
            code = self.integer(f"{kind}-redirect-code", low=300, high=308)
            if code is not None and code in (300, 304, 305, 306):
                self.bad(f"{kind}-redirect-code", f"{code} is not a redirect status; {default} "
                         "applies")
                code = None
            return Redirect(url=url, code=code or default, permanent=kind == "permanent")
        return None

    def body_size(self) -> BodySize | None:
        value = self.text("proxy-body-size")
        if value is None:
            return None
        found = _SIZE.match(value)
        if found is None:
            self.bad("proxy-body-size", f"{quote(value)} is not an nginx size (8m, 512k, 0); "
                     "no limit applies")
            return None
        size = int(found.group(1)) * _SIZE_UNIT[found.group(2).lower()]
        if size > 2 ** 32 - 1:
            self.bad("proxy-body-size", f"{quote(value)} is over 4 GiB; no limit applies")
            return None
        return BodySize(limit_bytes=size)

    def timeouts(self) -> Timeouts | None:
        keys = SERVED["timeouts"]
        if not self.has(*keys):
            return None
        found = Timeouts(connect_ms=self.duration(keys[0]), read_ms=self.duration(keys[1]),
                         send_ms=self.duration(keys[2]))
        return found if found != Timeouts() else None

    def backend_protocol(self) -> BackendProtocol | None:
        value = self.text("backend-protocol")
        if value is None:
            return None
        name = value.upper()
        if name == "AUTO_HTTP":
            return BackendProtocol.HTTP
        if name in BackendProtocol.__members__:
            return BackendProtocol(name)
        if name == "FCGI":
            self.bad("backend-protocol", "FastCGI is not served (requests reach the pods as "
                     "HTTP and fail); put an HTTP server "
                     "(php-fpm behind nginx, or similar) in the pod", Reason.UNSUPPORTED_ANNOTATION)
        else:
            self.bad("backend-protocol", f"{quote(value)} is not HTTP, HTTPS, GRPC or GRPCS; "
                     "HTTP applies")
        return None

    def affinity(self) -> Affinity | None:
        value = self.text("affinity")
        if value is None:
            if self.has(*SERVED["affinity"][1:]):
                self.bad("affinity", "session-cookie-* settings need affinity: cookie; not used")
            return None
        if value != "cookie":
            self.bad("affinity", f"{quote(value)} is not \"cookie\"; no session affinity")
            return None
        name = self.text("session-cookie-name") or "INGRESSCOOKIE"
        if not _TOKEN.match(name):
            self.bad("session-cookie-name", f"{quote(name)} is not a cookie name; INGRESSCOOKIE "
                     "applies")
            name = "INGRESSCOOKIE"
        age = self.integer("session-cookie-max-age", low=1, high=2 ** 31 - 1)
        if age is None:
            age = self.integer("session-cookie-expires", low=1, high=2 ** 31 - 1)
        path = self.text("session-cookie-path")
        if path is not None and not _PATH.match(path):
            self.bad("session-cookie-path", f"{quote(path)} is not a path; the Ingress path "
                     "applies")
            path = None
        mode = self.text("affinity-mode")
        if mode is not None and mode not in ("balanced", "persistent"):
            self.bad("affinity-mode", f"{quote(mode)} is not balanced or persistent; balanced "
                     "applies")
        return Affinity(cookie_name=name, max_age_s=age, path=path,
                        persistent=mode == "persistent")

    def source_ranges(self) -> SourceRanges | None:
        if not self.has(*SERVED["source_ranges"]):
            return None
        key = "allowlist-source-range" if "allowlist-source-range" in self.raw else (
            "whitelist-source-range")
        allow, complete = self.cidrs(key)
        if not complete:
            self.issues[-1] = AnnotationIssue(
                key=self.issues[-1].key, reason=Reason.INVALID_ANNOTATION,
                message=f"{self.issues[-1].message}; every client is refused until it is fixed")
        deny, deny_ok = self.cidrs("denylist-source-range")
        if not deny_ok:
            self.issues[-1] = AnnotationIssue(
                key=self.issues[-1].key, reason=Reason.INVALID_ANNOTATION,
                message=f"{self.issues[-1].message}; every client is refused until it is fixed")
        if self.text(key) and not allow and complete:
            self.bad(key, "lists no address; every client is refused until it is fixed")
            complete = False
        return SourceRanges(allow=allow, deny=deny, complete=complete and deny_ok)

    def cors(self) -> Cors | None:
        if not self.flag("enable-cors", False):
            if self.has(*SERVED["cors"][1:]):
                self.bad("enable-cors", "cors-* settings need enable-cors: \"true\"; not used")
            return None
        base = Cors()
        origins = self.listed("cors-allow-origin", lambda o: bool(_ORIGIN.match(o)),
                              "* or scheme://host[:port] (host may start with *.)")
        methods = self.listed("cors-allow-methods", lambda m: bool(_METHOD.match(m.upper())),
                              "an HTTP method")
        headers = self.listed("cors-allow-headers", lambda h: bool(_TOKEN.match(h)),
                              "a header name")
        expose = self.listed("cors-expose-headers", lambda h: bool(_TOKEN.match(h)),
                             "a header name")
        age = self.integer("cors-max-age", low=0, high=2 ** 31 - 1)
        return Cors(allow_origins=origins or base.allow_origins,
                    allow_methods=tuple(m.upper() for m in methods) if methods
                    else base.allow_methods,
                    allow_headers=headers or base.allow_headers,
                    expose_headers=expose or (),
                    allow_credentials=self.flag("cors-allow-credentials", True),
                    max_age_s=base.max_age_s if age is None else age)

    def canary(self) -> Canary | None:
        if not self.flag("canary", False):
            if self.has(*SERVED["canary"][1:]):
                self.bad("canary", "canary-* settings need canary: \"true\"; this Ingress is "
                         "served as a main Ingress")
            return None
        header = self.text("canary-by-header")
        if header is not None and not _TOKEN.match(header):
            self.bad("canary-by-header", f"{quote(header)} is not a header name; not used")
            header = None
        value = self.text("canary-by-header-value")
        pattern = self.text("canary-by-header-pattern")
        if (value is not None or pattern is not None) and header is None:
            self.bad("canary-by-header-value" if value is not None else "canary-by-header-pattern",
                     "needs canary-by-header; not used")
            value = pattern = None
        if value is not None and pattern is not None:
            self.bad("canary-by-header-pattern", "canary-by-header-value is set and wins; "
                     "not used")
            pattern = None
        cookie = self.text("canary-by-cookie")
        if cookie is not None and not _TOKEN.match(cookie):
            self.bad("canary-by-cookie", f"{quote(cookie)} is not a cookie name; not used")
            cookie = None
        total = self.integer("canary-weight-total", low=1, high=1_000_000) or 100
        weight = self.integer("canary-weight", low=0, high=total) or 0
        return Canary(by_header=header, header_value=value, header_pattern=pattern,
                      by_cookie=cookie, weight=weight, weight_total=total)

    def app_root(self) -> str | None:
        value = self.text("app-root")
        if value is None:
            return None
        if not _PATH.match(value) or value == "/":
            self.bad("app-root", f"{quote(value)} is not a path other than /; not used")
            return None
        return value

    def upstream_vhost(self) -> str | None:
        value = self.text("upstream-vhost")
        if value is None:
            return None
        if not _HOST.match(value):
            self.bad("upstream-vhost", f"{quote(value)} is not a host name; the client's Host "
                     "is sent")
            return None
        return value

    def x_forwarded_prefix(self) -> str | None:
        value = self.text("x-forwarded-prefix")
        if value is None:
            return None
        if not value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value) or len(value) > 1024:
            self.bad("x-forwarded-prefix", f"{quote(value)} is not a header value; not sent")
            return None
        return value

    def limits(self) -> Limits | None:
        if not self.has(*SERVED["limits"]):
            return None
        big = 1_000_000
        rps = self.integer("limit-rps", low=1, high=big)
        rpm = self.integer("limit-rpm", low=1, high=big)
        conns = self.integer("limit-connections", low=1, high=big)
        burst = self.integer("limit-burst-multiplier", low=1, high=1000) or 5
        key = "limit-allowlist" if "limit-allowlist" in self.raw else "limit-whitelist"
        allow, _ = self.cidrs(key)
        if rps is None and rpm is None and conns is None:
            return None
        return Limits(rps=rps, rpm=rpm, connections=conns, burst_multiplier=burst,
                      allowlist=allow)

    def auth_tls(self, namespace: str) -> AuthTLS | None:
        value = self.text("auth-tls-secret")
        if value is None:
            if self.has(*SERVED["auth_tls"][1:]):
                self.bad("auth-tls-secret", "auth-tls-* settings need auth-tls-secret; client "
                         "certificates are not asked for")
            return None
        ns, _, name = value.rpartition("/")
        ns = ns or namespace
        if not _NAME.match(ns) or not _NAME.match(name):
            self.bad("auth-tls-secret", f"{quote(value)} is not namespace/name of a Secret; "
                     "the Ingress's TLS hosts refuse every client until it is fixed")
            return AuthTLS(namespace=namespace, name="")
        verify = VerifyClient.ON
        raw = self.text("auth-tls-verify-client")
        if raw is not None:
            if raw.lower() in {v.value for v in VerifyClient}:
                verify = VerifyClient(raw.lower())
            else:
                self.bad("auth-tls-verify-client", f"{quote(raw)} is not on, off, optional or "
                         "optional_no_ca; on applies")
        depth = self.integer("auth-tls-verify-depth", low=0, high=100)
        return AuthTLS(namespace=ns, name=name, verify=verify,
                       depth=1 if depth is None else depth,
                       pass_certificate=self.flag("auth-tls-pass-certificate-to-upstream", False),
                       match_cn=self.text("auth-tls-match-cn"),
                       error_page=self.text("auth-tls-error-page"))
