"""Gateway API objects as plain mappings (what ``to-gateway`` writes), and their YAML.

Pure builders: each returns a fresh mapping in the field order the Gateway API documentation
uses, so the output reads like a hand-written manifest and golden files stay stable.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from podway.ir.hosts import covers as host_covers
from podway.translate.core.nginx_config import HSTS_HEADER
from podway.translate.ingress.nginx.annotations import Cors

GATEWAY_API = "gateway.networking.k8s.io/v1"
REFERENCE_GRANT_API = "gateway.networking.k8s.io/v1beta1"
TLS_ROUTE_API = "gateway.networking.k8s.io/v1alpha2"
PODWAY_CONTROLLER = "podway.io/gateway-controller"
_SLUG = re.compile(r"[^a-z0-9]+")


def wildcard_of(host: str) -> str | None:
    """The one-label wildcard covering ``host`` (``a.b.test`` → ``*.b.test``), as Ingress
    wildcards cover exactly one label."""
    return f"*.{host.split('.', 1)[1]}" if "." in host else None


def covers(pattern: str, host: str) -> bool:
    """Whether a TLS entry host (``""``: every host) covers ``host`` (Ingress wildcards: one
    label, by the rule every layer shares)."""
    return not pattern or host_covers(pattern, host)


def listener_name(host: str) -> str:
    """A listener name (a DNS label, at most 63 characters) for the HTTPS listener of
    ``host``."""
    if not host:
        return "https"
    slug = _SLUG.sub("-", host.lower().replace("*", "wildcard")).strip("-")
    return f"https-{slug}"[:63].rstrip("-")


def redirect_filter(*, scheme: str | None = None, path: str | None = None,
                     port: int | None = None, code: int) -> dict[str, Any]:
    redirect: dict[str, Any] = {}
    if scheme:
        redirect["scheme"] = scheme
    if port:
        redirect["port"] = port
    if path:
        redirect["path"] = {"type": "ReplaceFullPath", "replaceFullPath": path}
    redirect["statusCode"] = code
    return {"type": "RequestRedirect", "requestRedirect": redirect}


def url_redirect(url: str, code: int) -> dict[str, Any] | None:
    """``return CODE URL``: a redirect to exactly that URL (nginx appends nothing); None when
    ``url`` does not parse."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    redirect: dict[str, Any] = {}
    if parts.scheme in ("http", "https"):
        redirect["scheme"] = parts.scheme
    if parts.hostname:
        redirect["hostname"] = parts.hostname
    if port:
        redirect["port"] = port
    redirect["path"] = {"type": "ReplaceFullPath", "replaceFullPath": parts.path or "/"}
    redirect["statusCode"] = code if code in (301, 302, 303, 307, 308) else 302
    return {"type": "RequestRedirect", "requestRedirect": redirect}


def cors_filter(cors: Cors) -> dict[str, Any]:
    """ingress-nginx's CORS settings as the HTTPRoute ``CORS`` filter (credentials only with
    listed origins: the Gateway API refuses them with ``*``)."""
    out: dict[str, Any] = {"allowOrigins": list(cors.allow_origins),
                           "allowMethods": list(cors.allow_methods),
                           "allowHeaders": list(cors.allow_headers), "maxAge": cors.max_age_s}
    if cors.expose_headers:
        out["exposeHeaders"] = list(cors.expose_headers)
    if cors.allow_credentials and "*" not in cors.allow_origins:
        out["allowCredentials"] = True
    return {"type": "CORS", "cors": out}


def nginx_regex(path: str) -> str:
    """ingress-nginx's ``location ~* "^PATH"`` as a Gateway API RegularExpression (a whole-path
    match in Podway, as in Envoy): case-insensitive, anything may follow — the form Podway
    serves the Ingress with, so both order the same."""
    return f"(?i)(?:{path}).*"


def upper_path(path: str) -> str:
    return path.upper() if path != "/" else "/X (upper case)"


def with_hsts(rules: list[dict[str, Any]], value: str) -> list[dict[str, Any]]:
    """The rules, each also setting ``Strict-Transport-Security`` on its answers."""
    header = {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
        "set": [{"name": HSTS_HEADER, "value": value}]}}
    out: list[dict[str, Any]] = []
    for rule in rules:  # filters after matches, before backendRefs (the documented order)
        head = {k: v for k, v in rule.items() if k == "matches"}
        out.append({**head, "filters": [*rule.get("filters", ()), header], **rule})
        out[-1]["filters"] = [*rule.get("filters", ()), header]
    return out


def dump(objects: Iterable[dict[str, Any]]) -> str:
    """Multi-document YAML in the given order (keys as built, not sorted)."""
    import yaml

    class _Plain(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # a manifest reads better without &anchors, and tools expect none

    return "---\n".join(yaml.dump(o, Dumper=_Plain, sort_keys=False, default_flow_style=False)
                        for o in objects)
