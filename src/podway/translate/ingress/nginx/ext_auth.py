"""ingress-nginx external authentication (``auth-url``) → the IR's ``AuthRequest``. Pure.

Keys (without ``nginx.ingress.kubernetes.io/``), with ingress-nginx's meaning:

* ``auth-url``: the URL asked about each request, exactly as written (path and query); its
  host must name a Service of the cluster (``name``, ``name.namespace``,
  ``name.namespace.svc[.cluster.local]``; any namespace, as ingress-nginx lets a URL reach),
  its port (else 80/443 by scheme) a port of it; ``https`` is verified against the engine
  host's trust store with the host as name;
* ``auth-signin``: a 401 of the auth service becomes a 302 to this URL, with
  ``<auth-signin-redirect-param>=<scheme>://<host><escaped request URI>`` added unless the
  URL has that parameter already (ingress-nginx's ``buildAuthSignURL``); nginx variables
  ``$scheme``, ``$host``, ``$http_host``, ``$request_uri``, ``$escaped_request_uri``,
  ``$pass_access_scheme``, ``$best_http_host`` are expanded;
* ``auth-signin-redirect-param`` (default ``rd``), ``auth-response-headers`` (copied from an
  allowing answer to the request), ``auth-method`` (the subrequest's method; default GET, as
  nginx's subrequests), ``auth-request-redirect`` (the ``X-Auth-Request-Redirect`` value).

Fail closed: a URL Podway cannot serve (not http(s), a host that names no Service or port,
nginx variables in ``auth-url``, an unknown variable in ``auth-signin``) refuses every request
of the Ingress (403) with an error. Every other ``auth-*`` key (``auth-snippet``,
``auth-cache-key``, ``auth-proxy-set-headers``, …) stays unserved, and so refuses too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from ipaddress import ip_address
from urllib.parse import parse_qs, urlsplit

from podway.ir import AuthRequest, UpstreamTLS
from podway.model import Ingress, Service
from podway.translate.ingress.nginx.basic_auth import Served
from podway.translate.ingress.nginx.values import PREFIX, quote
from podway.translate.pools.backends import find_port, http_pool

KEYS = ("auth-url", "auth-signin", "auth-signin-redirect-param", "auth-response-headers",
        "auth-method", "auth-request-redirect")
SIGNIN_VARIABLES = frozenset({"scheme", "host", "http_host", "request_uri",
                              "escaped_request_uri", "pass_access_scheme", "best_http_host"})
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (methods, header names)


def asks(raw: Mapping[str, str]) -> bool:
    return bool(raw.get("auth-url", "").strip())


def served_keys(raw: Mapping[str, str]) -> frozenset[str]:
    """The full keys of this family served here (none without ``auth-url``)."""
    return frozenset(PREFIX + k for k in KEYS) if asks(raw) else frozenset()


def serve(ingress: Ingress, lookup: Callable[[str, str], Service | None]) -> Served:
    """The external authentication of one Ingress's annotations (``lookup(namespace, name)``
    finds a Service and records the dependency); its pool in ``Served.pools``."""
    annotations, namespace = ingress.metadata.annotations, ingress.metadata.namespace
    raw = {k.removeprefix(PREFIX): v for k, v in annotations.items() if k.startswith(PREFIX)}
    out = Served(ingress, key="auth-url")
    if not asks(raw):
        return out
    if raw.get("canary", "").strip().lower() in ("1", "t", "true"):
        return out.refuse("auth-url", "a canary Ingress's requests are served with the main "
                          "Ingress's settings, so its own authentication cannot apply (set it "
                          "on the main Ingress)")
    text = raw["auth-url"].strip()
    url = urlsplit(text)
    if url.scheme not in ("http", "https") or not url.hostname or "$" in text:
        return out.refuse("auth-url", f"{quote(text)} is not an http(s) URL without nginx "
                          "variables")
    found = _service(url.hostname, namespace, lookup)
    port_number = url.port or (443 if url.scheme == "https" else 80)
    port = find_port(found, number=port_number, protocol="TCP") if found else None
    if found is None or port is None:
        return out.refuse("auth-url", f"the host {quote(url.hostname)} port {port_number} "
                          "names no Service port of the cluster (Podway sends the subrequest "
                          "to a Service; it does not resolve outside names)")
    pool = http_pool(found, port)
    if url.scheme == "https":
        pool = replace(pool, name=f"{pool.name}/tls/{url.hostname}", settings=replace(
            pool.settings, upstream_tls=UpstreamTLS(sni=url.hostname, origin=ingress.ref)))
    method = raw.get("auth-method", "").strip().upper()
    headers = [h.strip() for h in raw.get("auth-response-headers", "").split(",") if h.strip()]
    bad = [h for h in (method, *headers) if h and not _TOKEN.match(h)]
    if bad:
        return out.refuse("auth-response-headers" if bad[0] != method else "auth-method",
                          f"{quote(bad[0])} is not an HTTP token")
    signin = _signin(raw)
    if signin is None:
        return out.refuse("auth-signin", "only the nginx variables "
                          f"{', '.join('$' + v for v in sorted(SIGNIN_VARIABLES))} are served")
    path = url.path or "/"
    out.filter = AuthRequest(pool=pool.name, authority=url.netloc.rpartition("@")[2],
                             path=path + (f"?{url.query}" if url.query else ""),
                             method=method, signin=signin,
                             redirect=raw.get("auth-request-redirect", "").strip(),
                             response_headers=tuple(h.lower() for h in headers),
                             source=f"auth-url {text}")
    out.pools = (pool,)
    return out


def _service(host: str, namespace: str,
             lookup: Callable[[str, str], Service | None]) -> Service | None:
    try:
        ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.lower().rstrip(".").split(".")
    if len(labels) == 1:
        return lookup(namespace, labels[0])
    if len(labels) == 2 or labels[2] == "svc":
        return lookup(labels[1], labels[0])
    return None


def _signin(raw: Mapping[str, str]) -> str | None:
    """The sign-in URL with the redirect parameter as ingress-nginx adds it ("" none); None
    when it names an nginx variable the engine does not expand."""
    signin = raw.get("auth-signin", "").strip()
    if not signin:
        return ""
    if any(v not in SIGNIN_VARIABLES for v in _VARIABLE.findall(signin)):
        return None
    param = raw.get("auth-signin-redirect-param", "").strip() or "rd"
    query = urlsplit(signin).query
    if param in parse_qs(query, keep_blank_values=True):
        return signin
    rd = f"{param}=$pass_access_scheme://$http_host$escaped_request_uri"
    return f"{signin}{'&' if query else '?'}{rd}"
