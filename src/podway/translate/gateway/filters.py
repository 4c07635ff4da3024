"""HTTPRoute/GRPCRoute filters → IR filters, and the pieces of a redirect.

Redirects are actions, not filters, and their port depends on the listener a route is served
on: an explicit ``port`` wins, else the well-known port of an explicit ``scheme``, else the
listener's own port (the specification's rules). ``RedirectSpec`` keeps what the route says
and ``RedirectSpec.build`` fills in the listener's part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from podway.ir import CORS, HeaderModifier, Redirect, URLRewrite
from podway.model.gateway_routes import HeaderFilter, PathModifier, RouteFilter
from podway.translate.core.hosts import valid_hostname
from podway.translate.core.problems import Reason, quote

WELL_KNOWN_PORTS = {"http": 80, "https": 443}
#: Every redirect code the specification allows: 301 and 302 (core), 303, 307 and 308
#: (extended, from v1.1); 307/308 keep the method and body of the request.
REDIRECT_CODES = (301, 302, 303, 307, 308)
# An allowOrigins entry: "*", or scheme://host[:port] with an optional leading "*." label.
_ORIGIN = re.compile(r"^(?:\*|https?://(?:\*\.)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?(?::[0-9]{1,5})?)$")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP method or header name
_DURATION = re.compile(r"^(?:[0-9]{1,5}(?:h|ms|m|s)){1,4}$")
_DURATION_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


class FilterError(ValueError):
    """A filter the rule cannot be served with; ``reason`` is the Gateway API reason."""

    def __init__(self, reason: Reason, message: str, field: str = "filters") -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field  # relative to the rule


@dataclass(frozen=True, slots=True)
class RedirectSpec:
    scheme: str | None
    hostname: str | None
    port: int | None
    path: str | None
    prefix: str | None
    status_code: int

    def build(self, *, listener_port: int, listener_scheme: str = "http") -> Redirect:
        """The redirect served on one listener; ``port`` None means "no port in Location".

        The spec's port: explicit, else the scheme's well-known port, else the listener's; and a
        port that is well-known for the resulting scheme is left out of ``Location``.
        """
        port = self.port
        if port is None:
            port = WELL_KNOWN_PORTS[self.scheme] if self.scheme else listener_port
        if port == WELL_KNOWN_PORTS.get(self.scheme or listener_scheme):
            port = None
        return Redirect(scheme=self.scheme, hostname=self.hostname, port=port, path=self.path,
                        prefix=self.prefix, status_code=self.status_code)


# Headers the engine refuses to modify (it NACKs the whole route table over one of them).
PROTECTED_HEADERS = frozenset({"host"})


def header_modifier(spec: HeaderFilter | None, *, response: bool) -> HeaderModifier:
    if spec is None:
        raise FilterError(Reason.UNSUPPORTED_VALUE, "filter has no configuration for its type")
    names = [h.name for h in (*spec.set, *spec.add)] + list(spec.remove)
    protected = sorted({n.lower() for n in names} & PROTECTED_HEADERS)
    if protected:
        raise FilterError(Reason.UNSUPPORTED_VALUE,
                          f"header {protected[0]!r} cannot be modified (use a URLRewrite "
                          "hostname to change the Host)")
    return HeaderModifier(response=response,
                          set=tuple((h.name, h.value) for h in spec.set),
                          add=tuple((h.name, h.value) for h in spec.add),
                          remove=tuple(spec.remove))


def _path(modifier: PathModifier | None, prefix_only: bool) -> tuple[str | None, str | None]:
    """(full path, prefix replacement) of a path modifier; checks the match it applies to."""
    if modifier is None:
        return None, None
    if modifier.type == "ReplaceFullPath":
        value = modifier.replace_full_path
        if value is None or not value.startswith("/"):
            raise FilterError(Reason.UNSUPPORTED_VALUE,
                              "replaceFullPath must be a path starting with /")
        return value, None
    value = modifier.replace_prefix_match
    if value is None or (value and not value.startswith("/")):
        # "" is valid: it removes the matched prefix ("/foo/bar" → "/bar").
        raise FilterError(Reason.UNSUPPORTED_VALUE,
                          "replacePrefixMatch must be empty or a path starting with /")
    if not prefix_only:
        raise FilterError(Reason.UNSUPPORTED_VALUE,
                          "ReplacePrefixMatch needs every match of the rule to be a PathPrefix")
    return None, value


def redirect(flt: RouteFilter, *, prefix_only: bool) -> RedirectSpec:
    spec = flt.request_redirect
    if spec is None:
        raise FilterError(Reason.UNSUPPORTED_VALUE, "RequestRedirect filter has no requestRedirect")
    if spec.scheme is not None and spec.scheme not in WELL_KNOWN_PORTS:
        raise FilterError(Reason.UNSUPPORTED_VALUE,
                          f"redirect scheme {quote(spec.scheme)} (http or https)")
    if spec.status_code not in REDIRECT_CODES:
        raise FilterError(Reason.UNSUPPORTED_VALUE,
                          f"redirect statusCode {spec.status_code} (one of "
                          f"{', '.join(map(str, REDIRECT_CODES))})")
    if spec.hostname is not None and not valid_hostname(spec.hostname):
        raise FilterError(Reason.UNSUPPORTED_VALUE, f"redirect hostname {quote(spec.hostname)}")
    path, prefix = _path(spec.path, prefix_only)
    return RedirectSpec(scheme=spec.scheme, hostname=spec.hostname, port=spec.port, path=path,
                        prefix=prefix, status_code=spec.status_code)


def rewrite(flt: RouteFilter, *, prefix_only: bool) -> URLRewrite:
    spec = flt.url_rewrite
    if spec is None:
        raise FilterError(Reason.UNSUPPORTED_VALUE, "URLRewrite filter has no urlRewrite")
    if spec.hostname is not None and not valid_hostname(spec.hostname):
        raise FilterError(Reason.UNSUPPORTED_VALUE, f"rewrite hostname {quote(spec.hostname)}")
    path, prefix = _path(spec.path, prefix_only)
    return URLRewrite(hostname=spec.hostname, path=path, prefix=prefix)


def mirror_percent(flt: RouteFilter) -> float:
    spec = flt.request_mirror
    if spec is None:
        return 100.0
    if spec.fraction is not None:
        if spec.fraction.numerator > spec.fraction.denominator:
            raise FilterError(Reason.UNSUPPORTED_VALUE, "mirror fraction is above 1")
        return round(100.0 * spec.fraction.numerator / spec.fraction.denominator, 4)
    return float(spec.percent) if spec.percent is not None else 100.0


def duration_ms(text: str) -> int:
    """Gateway API duration (``1h2m3s4ms`` subset) → milliseconds; ValueError when malformed."""
    if not _DURATION.match(text):
        raise ValueError(f"duration {quote(text)} is not like 1h2m3s4ms")
    return sum(int(n) * _UNIT_MS[u] for n, u in _DURATION_PART.findall(text))


def cors(flt: RouteFilter) -> CORS:
    """The CORS filter (experimental): origins, methods and headers checked as the engine
    needs them (one bad entry would otherwise make it refuse the whole route table)."""
    spec = flt.cors
    if spec is None:
        raise FilterError(Reason.UNSUPPORTED_VALUE, "CORS filter has no cors")
    origins = tuple(o.lower() for o in spec.allow_origins)
    bad = next((o for o in origins if not _ORIGIN.match(o)), None)
    if bad is not None:
        raise FilterError(Reason.UNSUPPORTED_VALUE,
                          f"CORS allowOrigins {quote(bad)} is not '*' or scheme://host[:port]")
    if not origins:
        raise FilterError(Reason.UNSUPPORTED_VALUE, "CORS filter allows no origin")
    for what, items in (("allowMethods", spec.allow_methods),
                        ("allowHeaders", spec.allow_headers),
                        ("exposeHeaders", spec.expose_headers)):
        wrong = next((i for i in items if not _TOKEN.match(i)), None)
        if wrong is not None:
            raise FilterError(Reason.UNSUPPORTED_VALUE, f"CORS {what} {quote(wrong)} is not a "
                              "token")
    if spec.allow_credentials and "*" in origins:
        raise FilterError(Reason.UNSUPPORTED_VALUE, "CORS allowCredentials with allowOrigins "
                          "'*' would let every site send credentialed requests")
    return CORS(allow_origins=origins, allow_credentials=spec.allow_credentials,
                allow_methods=spec.allow_methods, allow_headers=spec.allow_headers,
                expose_headers=spec.expose_headers, max_age_s=spec.max_age)
