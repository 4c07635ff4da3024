"""What ``to_gateway`` does not carry over from an Ingress's ingress-nginx annotations, and why:
the families Gateway API cannot express (``NOT_CARRIED``), the annotations Podway does not serve,
the reader's issues, and any family the reader knows that the conversion does not yet
(``CARRIED`` is the list of those it does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

from podway.translate.ingress.nginx import basic_auth, error_pages, ext_auth
from podway.translate.ingress.nginx.annotations import (
    PREFIX,
    NginxAnnotations,
    VerifyClient,
    advice,
)

# Families the conversion carries; the rest of a family that is set becomes a Note.
NOT_CARRIED: dict[str, tuple[str, str]] = {
    "body_size": ("proxy-body-size", "Gateway API has no body limit; keep the Ingress (Podway "
                  "serves it) or limit in the backend"),
    "timeouts": ("proxy-*-timeout", "nginx's are idle gaps between reads/writes; Gateway API "
                 "timeouts bound the whole request: set HTTPRoute timeouts if that is meant"),
    "backend_protocol": ("backend-protocol", "set appProtocol on the Service port "
                         "(kubernetes.io/h2c, grpc) or add a BackendTLSPolicy for HTTPS"),
    "affinity": ("affinity", "use the rule's sessionPersistence (experimental) or keep the "
                 "Ingress"),
    "source_ranges": ("*-source-range", "Gateway API has no client allowlist; keep the Ingress "
                      "(Podway serves it) or filter in front"),
    "limits": ("limit-*", "Gateway API has no rate limits; keep the Ingress (Podway serves "
               "them)"),
    "auth_tls": ("auth-tls-*", "client certificates are a Gateway listener setting "
                 "(frontendValidation); keep the Ingress (Podway serves it)"),
}


# Families the conversion carries (the rest are NOT_CARRIED, or caught by the guard below).
CARRIED = frozenset({"rewrite", "ssl", "redirect", "cors", "canary", "app_root",
                     "upstream_vhost", "x_forwarded_prefix", "ssl_passthrough",
                     "server_alias", "from_to_www"})


def not_carried(notes: NginxAnnotations, annotations: Mapping[str, str] | None = None
                ) -> list[tuple[str, str]]:
    """(annotation key, why) for each setting of one Ingress that the conversion leaves out."""
    out: list[tuple[str, str]] = []
    raw = {k.removeprefix(PREFIX): v for k, v in (annotations or {}).items()}
    if error_pages.served_keys(raw):
        out.append((PREFIX + "custom-http-errors", "not carried over: Gateway API has no error "
                    "pages; keep the Ingress (Podway serves them)"))
    default = NginxAnnotations()
    for each in fields(NginxAnnotations):
        name = each.name
        if name in CARRIED or name in NOT_CARRIED or name in ("unserved", "closed", "issues"):
            continue
        if getattr(notes, name) != getattr(default, name):  # a family added to the reader later
            out.append((f"{PREFIX}({name.replace('_', '-')})",
                        "not carried over: to-gateway does not convert this yet"))
    for issue in notes.issues:
        out.append((issue.key, issue.message))
    for key in notes.unserved:
        out.append((key, f"not carried over: {advice(key)}"))
    for family, (key, why) in NOT_CARRIED.items():
        if getattr(notes, family) is not None:
            out.append((PREFIX + key, f"not carried over: {why}"))
    return out


def restrictions(notes: NginxAnnotations, annotations: Mapping[str, str]) -> list[str]:
    """The keys of an Ingress that restrict who may reach it and that the converted routes do
    not carry: Podway's unserved ones (``closed``), and basic auth, auth-url, source ranges
    and client certificates, which Podway serves on Ingresses but to-gateway does not
    convert."""
    out = list(notes.closed)
    raw = {k.removeprefix(PREFIX): v for k, v in annotations.items()}
    if basic_auth.asks_basic(raw):
        out.append(PREFIX + "auth-type")
    if ext_auth.asks(raw):
        out.append(PREFIX + "auth-url")
    if notes.source_ranges is not None:
        out.append(PREFIX + "whitelist-source-range")
    if notes.auth_tls is not None and notes.auth_tls.verify in (VerifyClient.ON,
                                                                 VerifyClient.OPTIONAL):
        out.append(PREFIX + "auth-tls-secret")
    return out
