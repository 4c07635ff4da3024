"""Object status as data: what the translator would write to each object's ``status``.

The translator computes statuses in the same pass as the IR; the status document
(``podway.status``) applies what engines refused and writers (the controller, ``--status-file``,
``podway validate``) turn them into API payloads with ``to_api``. No timestamps here:
``lastTransitionTime`` belongs to the writer, which knows the previous status; keeping it out
makes results comparable and golden files stable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podway.model.kinds import POLICY_KINDS


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """A ``metav1.Condition`` without its timestamp."""

    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str = ""
    observed_generation: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ListenerStatus:
    name: str
    supported_kinds: tuple[tuple[str, str], ...] = ()  # (group, kind)
    attached_routes: int = 0
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentRef:
    """A route's ``parentRefs[]`` entry as written back in ``status.parents[].parentRef``."""

    group: str
    kind: str
    namespace: str
    name: str
    section_name: str | None = None
    port: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentStatus:
    parent_ref: ParentRef
    controller_name: str
    conditions: tuple[Condition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectStatus:
    """Status of one object; each kind fills the parts it has."""

    conditions: tuple[Condition, ...] = ()
    addresses: tuple[tuple[str, str], ...] = ()  # Gateway: (type, value)
    listeners: tuple[ListenerStatus, ...] = ()  # Gateway
    parents: tuple[ParentStatus, ...] = ()  # routes (and policies, as ancestors)
    supported_features: tuple[str, ...] = ()  # GatewayClass: sorted feature names
    attached_listener_sets: int | None = None  # Gateway: None when it takes no ListenerSets


def _condition(c: Condition) -> dict[str, Any]:
    status = "Unknown" if c.status is None else ("True" if c.status else "False")
    return {"type": c.type, "status": status, "reason": c.reason, "message": c.message,
            "observedGeneration": c.observed_generation}


def to_api(status: ObjectStatus, *, kind: str = "") -> dict[str, Any]:
    """The ``status`` stanza in Kubernetes form (camelCase, "True"/"False"), minus timestamps.

    ``kind`` picks the shape: Gateways always carry ``listeners``, routes ``parents``, and
    policies (``POLICY_KINDS``) call their parents ``ancestors``.
    """
    out: dict[str, Any] = {}
    if status.addresses:
        out["addresses"] = [{"type": t, "value": v} for t, v in status.addresses]
    if status.conditions or kind in ("Gateway", "GatewayClass"):
        out["conditions"] = [_condition(c) for c in status.conditions]
    if status.listeners or kind == "Gateway":
        out["listeners"] = [{
            "name": ls.name,
            "supportedKinds": [{"group": g, "kind": k} for g, k in ls.supported_kinds],
            "attachedRoutes": ls.attached_routes,
            "conditions": [_condition(c) for c in ls.conditions],
        } for ls in status.listeners]
    if status.attached_listener_sets is not None:
        out["attachedListenerSets"] = status.attached_listener_sets
    if status.supported_features:
        out["supportedFeatures"] = [{"name": n} for n in status.supported_features]
    if status.parents:
        key = "ancestors" if kind in POLICY_KINDS else "parents"
        out[key] = [{
            ("ancestorRef" if key == "ancestors" else "parentRef"): _parent_ref(p.parent_ref),
            "controllerName": p.controller_name,
            "conditions": [_condition(c) for c in p.conditions],
        } for p in status.parents]
    return out


def _parent_ref(ref: ParentRef) -> dict[str, Any]:
    out: dict[str, Any] = {"group": ref.group, "kind": ref.kind, "namespace": ref.namespace,
                           "name": ref.name}
    if ref.section_name is not None:
        out["sectionName"] = ref.section_name
    if ref.port is not None:
        out["port"] = ref.port
    return out

