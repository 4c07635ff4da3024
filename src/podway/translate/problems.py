"""Translation problems as data: one per thing wrong with one object.

A problem never stops translation. The object (or the part of it) is left out or answered with
an error status, everything else keeps serving, and the problem is rendered as a condition, an
event or a CLI line. ``reason`` is a stable CamelCase word (Gateway API style) to match on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podway.model.base import ObjectRef


class Severity(StrEnum):
    ERROR = "error"  # part of the object is not served as written
    WARNING = "warning"  # served, but probably not what was meant


class Reason(StrEnum):
    BACKEND_NOT_FOUND = "BackendNotFound"
    UNSUPPORTED_BACKEND = "UnsupportedBackend"
    SECRET_NOT_FOUND = "SecretNotFound"
    INVALID_SECRET = "InvalidSecret"
    CLASS_NOT_FOUND = "IngressClassNotFound"
    HOST_CONFLICT = "HostConflict"
    CERTIFICATE_CONFLICT = "CertificateConflict"
    PORT_CONFLICT = "PortConflict"
    INVALID_HOST = "InvalidHost"
    INVALID_PATH = "InvalidPath"
    UNSUPPORTED_PROTOCOL = "UnsupportedProtocol"
    NO_RULES = "NoRules"
    NPL_NOT_ENABLED = "NodePortLocalNotEnabled"
    INVALID_BACKEND_MODE = "InvalidBackendMode"


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    ref: ObjectRef
    reason: str
    message: str
    severity: Severity = Severity.ERROR
    field: str = ""  # dotted path within the object, e.g. spec.rules[0].http.paths[1].backend

    def __str__(self) -> str:
        at = f" ({self.field})" if self.field else ""
        return f"{self.severity} {self.ref} {self.reason}: {self.message}{at}"
