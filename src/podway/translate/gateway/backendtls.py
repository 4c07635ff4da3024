"""BackendTLSPolicy → TLS from the engine to a Service's pods (re-encrypt).

A policy targets Services (optionally one port, by ``sectionName``) in its own namespace and
says how to verify them: a CA bundle from ConfigMaps (key ``ca.crt``; Secrets are accepted too)
or the system trust store (``wellKnownCACertificates: System``), and the ``hostname`` used as
SNI and for verification. Two policies on the same target: the oldest wins (then the name),
the other is ``Accepted=False/Conflicted``. A policy with an invalid CA reference has
``ResolvedRefs=False`` (``InvalidCACertificateRef``, ``InvalidKind``) and makes its backends
fail closed (HTTP 500) rather than send traffic unverified; when no reference is valid it is
also ``Accepted=False/NoValidCACertificate``.

``claims`` keeps every policy naming a Service — winners and losers, valid or not — so status
can name the Gateways whose routes point at that Service whatever became of the policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from podway.ir import TLSCertificate, UpstreamTLS
from podway.model import ObjectRef
from podway.model.gateway import BackendTLSPolicy
from podway.model.snapshot import Snapshot
from podway.translate.core.hosts import valid_hostname
from podway.translate.core.problems import Reason, Verdict, quote
from podway.translate.core.tls import ca_bundle
from podway.translate.gateway.httproute import Resolve
from podway.translate.gateway.refs import RefIssue
from podway.translate.pools.backends import PoolSpec

_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:[^\s]+$")  # scheme:rest, no whitespace
POLICY_ACCEPTED = Verdict(True, Reason.ACCEPTED, "policy accepted")
RESOLVED = Verdict(True, Reason.RESOLVED_REFS, "all references resolved")
Target = tuple[str, str, str]  # (namespace, service, port name or "" for every port)


@dataclass(slots=True)
class PolicyOutcome:
    policy: BackendTLSPolicy
    accepted: Verdict = POLICY_ACCEPTED
    resolved: Verdict = RESOLVED
    used_by: set[ObjectRef] = field(default_factory=set)  # Gateways whose routes use it


@dataclass(slots=True)
class BackendTLS:
    targets: dict[Target, UpstreamTLS | RefIssue] = field(default_factory=dict)
    owners: dict[Target, ObjectRef] = field(default_factory=dict)
    outcomes: dict[ObjectRef, PolicyOutcome] = field(default_factory=dict)
    # (namespace, service) → (port name or "" for every port, policy) of every policy naming it
    claims: dict[tuple[str, str], list[tuple[str, ObjectRef]]] = field(default_factory=dict)

    def policies_for(self, namespace: str, service: str, port_name: str) -> list[ObjectRef]:
        """Every policy (winning or not) that names this Service port."""
        return [ref for section, ref in self.claims.get((namespace, service), ())
                if section in ("", port_name)]


def index_policies(snapshot: Snapshot) -> BackendTLS:
    out = BackendTLS()
    for policy in sorted(snapshot.kind(BackendTLSPolicy).values(), key=BackendTLSPolicy.age_key):
        outcome = PolicyOutcome(policy)
        out.outcomes[policy.ref] = outcome
        value = _upstream(policy, snapshot, outcome)
        ns = policy.metadata.namespace
        for target in policy.spec.target_refs:
            if target.group != "" or target.kind != "Service":
                outcome.accepted = Verdict(False, Reason.INVALID,
                                           f"targetRef kind {quote(target.kind)} is not "
                                           "supported (Service)")
                continue
            key = (ns, target.name, target.section_name or "")
            out.claims.setdefault((ns, target.name), []).append((key[2], policy.ref))
            held = out.owners.get(key)
            if held is not None:
                outcome.accepted = Verdict(False, Reason.CONFLICTED,
                                           f"Service {ns}/{target.name} is already targeted by "
                                           f"{held}, which takes precedence (older, or as old "
                                           "and first by name)")
                continue
            out.owners[key] = policy.ref
            out.targets[key] = value
    return out


def _upstream(policy: BackendTLSPolicy, snapshot: Snapshot,
              outcome: PolicyOutcome) -> UpstreamTLS | RefIssue:
    ns = policy.metadata.namespace
    validation = policy.spec.validation
    if not valid_hostname(validation.hostname) or validation.hostname.startswith("*."):
        outcome.accepted = Verdict(False, Reason.INVALID,
                                   f"validation.hostname {quote(validation.hostname)} is not a "
                                   "DNS name")
        return RefIssue(Reason.UNSUPPORTED_VALUE, f"{policy.ref} has no usable hostname")
    pems: list[str] = []
    invalid: list[RefIssue] = []
    for ref in validation.ca_certificate_refs:
        pem = ca_bundle(snapshot, ns, ref.group, ref.kind, ref.name)
        if isinstance(pem, Verdict):
            invalid.append(RefIssue(pem.reason, pem.message))
        else:
            pems.append(pem)
    if invalid:
        first = invalid[0]
        more = f" (and {len(invalid) - 1} more)" if len(invalid) > 1 else ""
        outcome.resolved = Verdict(False, first.reason, first.message + more)
        if not pems:
            outcome.accepted = Verdict(False, Reason.NO_VALID_CA_CERTIFICATE,
                                       "no caCertificateRef is valid: " + first.message + more)
        # Connections using an invalid reference must fail: fail closed even if others load.
        return RefIssue(first.reason, f"{policy.ref}: {first.message}")
    if not pems and validation.well_known_ca_certificates != "System":
        outcome.accepted = Verdict(False, Reason.INVALID, "neither caCertificateRefs nor "
                                   "wellKnownCACertificates: System is set")
        return RefIssue(Reason.UNSUPPORTED_VALUE, f"{policy.ref} has no CA to verify with")
    sans = _subject_alt_names(validation.subject_alt_names)
    if isinstance(sans, str):
        outcome.accepted = Verdict(False, Reason.INVALID, sans)
        return RefIssue(Reason.UNSUPPORTED_VALUE, f"{policy.ref}: {sans}")
    # ca_pem "" means the engine's system trust store.
    return UpstreamTLS(sni=validation.hostname, ca_pem="".join(pems), origin=policy.ref,
                       subject_alt_names=sans)


def _subject_alt_names(items: tuple[dict[str, Any], ...]
                       ) -> tuple[tuple[str, str], ...] | str:
    """``validation.subjectAltNames`` as (kind, value) pairs, or why one is unusable.

    With SANs the member's certificate must carry one of them (``hostname`` is then the SNI
    only), as the specification says; without, it must carry ``hostname``."""
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind == "Hostname":
            value = str(item.get("hostname") or "")
            if not valid_hostname(value) or value.startswith("*."):
                return f"subjectAltNames[{i}].hostname {quote(value)} is not a DNS name"
            out.append(("dns", value))
        elif kind == "URI":
            value = str(item.get("uri") or "")
            if not _URI.match(value):
                return f"subjectAltNames[{i}].uri {quote(value)} is not an absolute URI"
            out.append(("uri", value))
        else:
            return f"subjectAltNames[{i}].type {quote(str(kind))} is not Hostname or URI"
    return tuple(out)


def with_client_certificate(resolve: Resolve, cert: TLSCertificate,
                            gateway: tuple[str, str]) -> Resolve:
    """``resolve`` for the routes of a Gateway with a backend client certificate
    (``spec.tls.backend.clientCertificateRef``): a pool speaking TLS to its members (a
    BackendTLSPolicy) gets the certificate, under a name of its own (``<pool>@<ns>/<gateway>``),
    so the same Service reached through another Gateway keeps its own pool."""
    ns, name = gateway

    def resolved(ref: Any) -> PoolSpec | RefIssue:
        found = resolve(ref)
        if isinstance(found, RefIssue) or found.settings.upstream_tls is None:
            return found
        tls = replace(found.settings.upstream_tls, client_certificate=cert)
        return replace(found, name=f"{found.name}@{ns}/{name}",
                       settings=replace(found.settings, upstream_tls=tls))

    return resolved
