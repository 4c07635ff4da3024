"""Podway's own Ingress annotations for TLS and protocols (``podway.io/``), parsed once per Ingress.

The Ingress API has no field for these settings, so, like every controller, Podway reads them
from annotations; docs/reference.md ("TLS and protocols") lists each with its default:

* ``podway.io/ssl-redirect`` (default ``"true"``): plain-HTTP requests for a host this Ingress
  serves over HTTPS (a TLS entry covers it and its certificate is in use) are answered with a
  308 redirect to ``https://`` — AKO's default for secure Ingresses. ``"false"`` serves them over
  HTTP as well. ACME HTTP-01 challenges (``/.well-known/acme-challenge/``) are never redirected,
  so certificate issuance keeps working.
* ``podway.io/tls-passthrough`` (default ``"false"``): ``"true"`` routes each rule's host by
  SNI, undecrypted, to the backend of its first path on the HTTPS port — the pods terminate
  TLS (end-to-end TLS); paths, TLS entries and the defaultBackend cannot apply.
* ``podway.io/tls-min-version``, ``-max-version``, ``-ciphers``: handshake settings of this
  Ingress's certificates over the ``--tls-*`` flags (parsed in
  ``podway.translate.core.tls_options``; a refused value leaves the Ingress's TLS entries out).
* ``podway.io/backend-protocol``: how the engine speaks to the Service's pods — ``HTTP``
  (HTTP/1.1; default unless the port's ``appProtocol`` says otherwise), ``H2C`` (HTTP/2 in
  clear text), ``GRPC`` (HTTP/2), ``HTTPS`` (TLS re-encryption, HTTP/1.1), ``GRPCS`` (TLS, h2).
* ``podway.io/backend-ca-secret``: a Secret of the Ingress's namespace whose ``ca.crt`` verifies
  the pods' certificates; without it the engine host's trust store does.
* ``podway.io/backend-sni``: SNI sent to the pods and the name their certificate must carry
  (default: the Service's cluster DNS name ``<name>.<namespace>.svc``).

A value Podway cannot use is one ``InvalidAnnotation`` error naming the annotation; the setting
falls back to its default — never to something less safe (a bad CA reference fails the
backend closed instead of skipping verification).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from podway.ir import PoolProtocol
from podway.translate.annotations import (
    BACKEND_CA_SECRET,
    BACKEND_PROTOCOL,
    BACKEND_SNI,
    SSL_REDIRECT,
    TLS_PASSTHROUGH,
)
from podway.translate.core.hosts import valid_hostname
from podway.translate.core.problems import Reason, Verdict, quote

ACME_CHALLENGE = "/.well-known/acme-challenge"
REDIRECT_STATUS = 308  # keeps the method and body (a POST stays a POST), unlike 301/302

# backend-protocol value → (pool protocol, TLS to the members)
_BACKEND_PROTOCOLS: dict[str, tuple[PoolProtocol, bool]] = {
    "HTTP": (PoolProtocol.HTTP1, False),
    "H2C": (PoolProtocol.HTTP2, False),
    "GRPC": (PoolProtocol.GRPC, False),
    "HTTPS": (PoolProtocol.HTTP1, True),
    "GRPCS": (PoolProtocol.GRPC, True),
}


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """What the backend annotations ask for; ``protocol`` None: the port's appProtocol decides."""

    protocol: PoolProtocol | None = None
    tls: bool = False
    ca_secret: str | None = None  # a Secret of the Ingress's namespace
    sni: str | None = None


@dataclass(frozen=True, slots=True)
class IngressTLSSettings:
    ssl_redirect: bool = True
    passthrough: bool = False
    backend: BackendSettings = BackendSettings()
    problems: tuple[tuple[str, Verdict], ...] = ()  # (annotation, why its value is not used)


def parse(annotations: Mapping[str, str]) -> IngressTLSSettings:
    """The TLS and protocol settings of one Ingress, with a problem per unusable value."""
    problems: list[tuple[str, Verdict]] = []

    def bad(name: str, message: str) -> None:
        problems.append((name, Verdict(False, Reason.INVALID_ANNOTATION, message)))

    def flag(name: str, default: bool) -> bool:
        raw = annotations.get(name)
        if raw is None:
            return default
        if raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        bad(name, f"{quote(raw)} is not \"true\" or \"false\"; "
                  f"{str(default).lower()} (the default) applies")
        return default

    redirect = flag(SSL_REDIRECT.name, True)
    passthrough = flag(TLS_PASSTHROUGH.name, False)
    protocol: PoolProtocol | None = None
    tls = False
    raw = annotations.get(BACKEND_PROTOCOL.name)
    if raw is not None:
        found = _BACKEND_PROTOCOLS.get(raw.strip().upper())
        if found is None:
            bad(BACKEND_PROTOCOL.name, f"{quote(raw)} is not one of "
                                  f"{', '.join(_BACKEND_PROTOCOLS)}; the port's appProtocol "
                                  "decides")
        else:
            protocol, tls = found
    ca: str | None = None
    raw = annotations.get(BACKEND_CA_SECRET.name)
    if raw is not None:
        ca = raw.strip()
        if not valid_hostname(ca) or "*" in ca:
            # Named but unusable: the backend fails closed (no fallback to the system store).
            bad(BACKEND_CA_SECRET.name, f"{quote(raw)} is not a Secret name (of this "
                                        "namespace); the backend answers 503")
        if not tls:
            bad(BACKEND_CA_SECRET.name, f"needs {BACKEND_PROTOCOL.name}: HTTPS or GRPCS; not used")
            ca = None
    sni: str | None = None
    raw = annotations.get(BACKEND_SNI.name)
    if raw is not None:
        if not valid_hostname(raw.strip()) or raw.strip().startswith("*"):
            bad(BACKEND_SNI.name, f"{quote(raw)} is not a DNS name; the Service's name is sent")
        elif not tls:
            bad(BACKEND_SNI.name, f"needs {BACKEND_PROTOCOL.name}: HTTPS or GRPCS; not used")
        else:
            sni = raw.strip().lower()
    return IngressTLSSettings(ssl_redirect=redirect, passthrough=passthrough,
                              backend=BackendSettings(protocol=protocol, tls=tls, ca_secret=ca,
                                                      sni=sni),
                              problems=tuple(problems))
