"""Who an engine is: the identity its client certificate proves, and what it may claim.

An engine names itself in every xDS stream and member health report (its node id, and its
engine group in the node metadata). A name is only a claim; the certificate the server verified
is the proof. So a stream authenticated by a client certificate is served only when the
certificate names what the engine claims (issue 23.10), on the pattern of Kubernetes client
certificates (CN = user, O = groups):

* the node id must be the certificate's subject common name or one of its DNS subject
  alternative names;
* the engine group must be one the subject's organization (O) values name as
  ``podway.io/engine-group=<group>`` (O values of any other form, such as a company name, are
  not groups). A certificate naming no group is not restricted: it may claim any group, or
  none (the whole configuration), as before engine groups existed. One naming groups may
  claim only those, never the whole configuration.

Streams over the private unix socket (the co-located engine, same user) carry no certificate
and are not checked here; unauthenticated streams get no Secrets and no health hearing
anyway. ``refusal`` says in one line why a claim is refused (None: allowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_MAX_SHOWN = 5
GROUP_PREFIX = "podway.io/engine-group="  # an O value naming an engine group


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineIdentity:
    """What a verified client certificate names."""

    names: frozenset[str]  # CN and DNS subject alternative names: node ids it may claim
    groups: frozenset[str]  # groups its O values name: groups it may claim (empty: any)

    def refusal(self, *, node: str, group: str | None) -> str | None:
        """Why an engine with this certificate may not claim ``node`` / ``group`` (None: the
        node only); None: it may."""
        if node not in self.names:
            return (f"node id {node!r} is not named by its client certificate (CN/DNS names: "
                    f"{_listed(self.names)})")
        if group is not None and self.groups and group not in self.groups:
            claimed = repr(group) if group else "no engine group (the whole configuration)"
            return (f"{claimed} is not among the engine groups its client certificate names "
                    f"({_listed(self.groups)})")
        return None


def from_pem(pem: bytes) -> EngineIdentity:
    """The identity a PEM certificate names (the first certificate of a chain)."""
    # Loaded at the first certificate, not with the module: a controller whose engines use
    # the unix socket never needs X.509 (tests/unit/packaging/test_import_weight.py).
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_pem_x509_certificate(pem)
    names = {str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names.update(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        pass
    groups = {str(a.value).removeprefix(GROUP_PREFIX)
              for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
              if str(a.value).startswith(GROUP_PREFIX)}
    return EngineIdentity(names=frozenset(names), groups=frozenset(groups))


def of_stream(context: Any) -> EngineIdentity | None:
    """The identity of a gRPC stream's verified client certificate; None when the stream has
    none (a unix socket, or no client certificate)."""
    if str(context.peer()).startswith("unix"):
        return None
    auth = context.auth_context()
    if auth.get("transport_security_type") != [b"ssl"] or context.peer_identities() is None:
        return None
    pems = auth.get("x509_pem_cert")
    if not pems:  # verified, but not readable here: it names nothing (fail closed)
        return EngineIdentity(names=frozenset(), groups=frozenset())
    return from_pem(pems[0])


def _listed(values: frozenset[str]) -> str:
    shown = sorted(values)[:_MAX_SHOWN]
    more = len(values) - len(shown)
    return ", ".join(repr(v[:100]) for v in shown) + (f" and {more} more" if more > 0 else "") \
        if shown else "none"
