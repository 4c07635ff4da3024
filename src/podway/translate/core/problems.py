"""Translation problems as data: one per thing wrong with one object.

A problem never stops translation. The object (or the part of it) is left out or answered with
an error status, everything else keeps serving, and the problem is rendered as a condition, an
event or a CLI line. ``reason`` is a ``Reason``: one stable CamelCase word (Gateway API style) to
match on; code decides by reason, never by the English of a message. A ``Verdict`` is one
condition's outcome (ok, reason, message) before it becomes a condition or a problem.
Messages that quote user text go through ``quote`` so a megabyte regex never becomes a
megabyte message.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podway.model.base import ObjectRef

QUOTE_LIMIT = 200  # characters of user text a message may carry


class Severity(StrEnum):
    ERROR = "error"  # part of the object is not served as written
    WARNING = "warning"  # served, but probably not what was meant
    INFO = "info"  # nothing wrong, worth knowing: e.g. an object Podway does not take (NotOwned)


class Reason(StrEnum):
    """Every reason Podway reports: its own (Ingress, Service, validation) and Gateway API's."""

    # Ownership
    NOT_OWNED = "NotOwned"  # another controller's object, or no class says it is ours
    CLASS_NOT_FOUND = "IngressClassNotFound"
    # Backends
    BACKEND_NOT_FOUND = "BackendNotFound"
    UNSUPPORTED_BACKEND = "UnsupportedBackend"
    UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
    NPL_NOT_ENABLED = "NodePortLocalNotEnabled"
    INVALID_BACKEND_MODE = "InvalidBackendMode"  # podway.io/backend-mode names no mode
    # TLS material
    SECRET_NOT_FOUND = "SecretNotFound"
    INVALID_SECRET = "InvalidSecret"
    CERTIFICATE_NOT_CURRENT = "CertificateNotCurrent"  # expired or not yet valid
    CERTIFICATE_CONFLICT = "CertificateConflict"
    # Hosts, paths and ports
    HOST_CONFLICT = "HostConflict"
    HOST_SHARED = "HostShared"  # another object adds paths or a certificate to an owned host
    INVALID_HOST = "InvalidHost"
    INVALID_PATH = "InvalidPath"
    NO_RULES = "NoRules"
    PORT_CONFLICT = "PortConflict"
    SHADOWED = "Shadowed"
    CANARY_WITHOUT_MAIN = "CanaryWithoutMain"  # nginx canary Ingress: no main Ingress to join
    # Values the engine would refuse, settings Podway does not serve
    INVALID_ADDRESS = "InvalidAddress"
    ADDRESS_NOT_ALLOWED = "AddressNotAllowed"
    # VIP allocation (podway.programs.ipam): the object stays pending, the rest keeps serving
    ADDRESS_NOT_ASSIGNED = "AddressNotAssigned"  # also the Gateway API reason
    POOL_EXHAUSTED = "PoolExhausted"
    ADDRESS_IN_USE = "AddressInUse"
    ADDRESS_NOT_IN_POOL = "AddressNotInPool"
    UNKNOWN_POOL = "UnknownPool"
    INVALID_POOL = "InvalidPool"  # a VIPPool/IPAddressPool object the IPAM cannot use
    POOL_CONFLICT = "PoolConflict"  # its name or addresses are another pool's: not used
    INVALID_ANNOTATION = "InvalidAnnotation"
    # A NodePortLocal mapping its node's agent does not vouch for (issue 23.9): not served
    UNTRUSTED_MAPPING = "UntrustedNodePortLocalMapping"
    UNSUPPORTED_ANNOTATION = "UnsupportedAnnotation"
    UNSUPPORTED_FIELD = "UnsupportedField"
    # Client address (podway.translate.pools.client_ip): asked for, served differently
    TRANSPARENT_NOT_APPLIED = "TransparentNotApplied"
    AFFINITY_TIMEOUT_NOT_APPLIED = "AffinityTimeoutNotApplied"
    # Gateway API condition reasons (gateway.networking.k8s.io)
    ACCEPTED = "Accepted"
    PROGRAMMED = "Programmed"
    RESOLVED_REFS = "ResolvedRefs"
    NO_CONFLICTS = "NoConflicts"
    INVALID = "Invalid"
    CONFLICTED = "Conflicted"
    LISTENERS_NOT_VALID = "ListenersNotValid"
    UNSUPPORTED_ADDRESS = "UnsupportedAddress"
    ADDRESS_NOT_USABLE = "AddressNotUsable"
    PORT_UNAVAILABLE = "PortUnavailable"
    PROTOCOL_CONFLICT = "ProtocolConflict"
    HOSTNAME_CONFLICT = "HostnameConflict"
    UNSUPPORTED_VALUE = "UnsupportedValue"
    INVALID_CERTIFICATE_REF = "InvalidCertificateRef"
    INVALID_CA_CERTIFICATE_REF = "InvalidCACertificateRef"
    INVALID_CA_CERTIFICATE_KIND = "InvalidCACertificateKind"
    INVALID_CLIENT_CERTIFICATE_REF = "InvalidClientCertificateRef"  # Gateway spec.tls.backend
    NO_VALID_CA_CERTIFICATE = "NoValidCACertificate"
    REF_NOT_PERMITTED = "RefNotPermitted"
    INVALID_KIND = "InvalidKind"
    INVALID_ROUTE_KINDS = "InvalidRouteKinds"
    NO_MATCHING_PARENT = "NoMatchingParent"
    NOT_ALLOWED_BY_LISTENERS = "NotAllowedByListeners"
    NO_MATCHING_LISTENER_HOSTNAME = "NoMatchingListenerHostname"
    INCOMPATIBLE_FILTERS = "IncompatibleFilters"
    INVALID_PARAMETERS = "InvalidParameters"  # GatewayClass parametersRef
    CONFIGURATION_CHANGED = "ConfigurationChanged"  # InsecureFrontendValidationMode
    TARGET_NOT_FOUND = "TargetNotFound"  # a policy's targetRef names no object
    # ListenerSet (GEP-1713)
    NOT_ALLOWED = "NotAllowed"
    PARENT_NOT_ACCEPTED = "ParentNotAccepted"
    PARENT_NOT_PROGRAMMED = "ParentNotProgrammed"
    # GatewayClass SupportedVersion (the cluster's Gateway API CRD bundle versions)
    SUPPORTED_VERSION = "SupportedVersion"
    UNSUPPORTED_VERSION = "UnsupportedVersion"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One condition's outcome: ``ok`` (the condition's status), its reason and message."""

    ok: bool
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    ref: ObjectRef
    reason: Reason
    message: str
    severity: Severity = Severity.ERROR
    field: str = ""  # dotted path within the object, e.g. spec.rules[0].http.paths[1].backend

    def __str__(self) -> str:
        at = f" ({self.field})" if self.field else ""
        return f"{self.severity} {self.ref} {self.reason}: {self.message}{at}"


def listing(items: list[str] | tuple[str, ...], limit: int = 5) -> str:
    """``a, b, c`` — at most ``limit`` items, then how many more."""
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """User text for a message: ``repr`` when short, else its first ``limit`` characters and
    the full size, so a message never copies a whole input."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text.encode(errors='replace'))} bytes)"
