"""``GatewayClass.spec.parametersRef``: Podway's parameters of a class, read and checked.

The referent is Podway's kind ``GatewayClassConfig`` (group ``podway.io``, cluster-scoped: no
namespace) whose ``spec`` holds Podway's class settings, or — the older form, still read — a
ConfigMap (group "", kind ConfigMap, with a namespace) whose ``data`` holds them. Each is
optional:

- ``engineGroup``: the engine group serving the class's Gateways (docs/controller.md) when a
  Gateway names none itself (annotation ``podway.io/engine-group`` or its
  ``spec.infrastructure`` label win);
- ``engineKind``: the engine kind the class is meant for, ``envoy`` or ``haproxy`` (unset: any):
  the engines' own ``--engine`` decides what serves; the controller warns on each Gateway of
  the class that engines of another kind serve (``programs.controller.kind_mismatch``);
- ``defaults`` (GatewayClassConfig only): TrafficPolicy sections (health check, outlier
  detection, load balancer, persistence, timeouts, retry, retry budget) applied to every Gateway
  of the class below every TrafficPolicy (``podway.translate.traffic``). ``security`` is not
  taken: its references would have no namespace, and access rules are never partly applied.

A reference to another kind, a missing ConfigMap, an unknown key or a malformed value (a bad
default among them, named by its field) makes the
class ``Accepted=False`` with the API's ``InvalidParameters`` reason; its Gateways are then not
served (they say why): parameters that restrict or place traffic are never ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from podway.model.classconfig import PODWAY_GROUP, GatewayClassConfig
from podway.model.core import ConfigMap
from podway.model.gateway import GatewayClass
from podway.model.policy import TrafficDefaults, TrafficPolicySpec
from podway.model.snapshot import Snapshot
from podway.translate.core.problems import Reason, Verdict, quote
from podway.translate.pools.traffic_validate import validate

ENGINE_KINDS = ("envoy", "haproxy")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
KEYS = ("engineGroup", "engineKind")


@dataclass(frozen=True, slots=True)
class ClassParameters:
    engine_group: str | None = None
    engine_kind: str | None = None  # envoy or haproxy; None: not said (any kind)
    defaults: TrafficPolicySpec | None = None  # sections for every Gateway of the class


NONE = ClassParameters()


def class_parameters(cls: GatewayClass, snapshot: Snapshot) -> ClassParameters | Verdict:
    """The class's parameters (``NONE`` without a parametersRef), or why they are invalid
    (a ``Verdict`` with ``InvalidParameters``)."""
    ref = cls.spec.parameters_ref
    if ref is None:
        return NONE

    def invalid(message: str) -> Verdict:
        return Verdict(False, Reason.INVALID_PARAMETERS, f"parametersRef: {message}")

    if ref.group == PODWAY_GROUP and ref.kind == GatewayClassConfig.KIND:
        if ref.namespace:
            return invalid("a GatewayClassConfig is cluster-scoped: namespace must not be set")
        config = snapshot.get(GatewayClassConfig, "", ref.name)
        if config is None:
            return invalid(f"GatewayClassConfig {ref.name} not found")
        checked = _checked(config.spec.engine_group, config.spec.engine_kind, invalid)
        if isinstance(checked, Verdict) or config.spec.defaults is None:
            return checked
        defaults = _defaults(config.spec.defaults, invalid)
        if isinstance(defaults, Verdict):
            return defaults
        return ClassParameters(checked.engine_group, checked.engine_kind, defaults)
    if ref.group != "" or ref.kind != "ConfigMap":
        return invalid(f"kind {quote(ref.kind)} of group {quote(ref.group)} is not supported "
                       f"(a GatewayClassConfig: group {PODWAY_GROUP}, kind "
                       "GatewayClassConfig; or a ConfigMap: group \"\", kind ConfigMap)")
    if not ref.namespace:
        return invalid("a ConfigMap is namespaced: namespace is required")
    found = snapshot.get(ConfigMap, ref.namespace, ref.name)
    if found is None:
        return invalid(f"ConfigMap {ref.namespace}/{ref.name} not found")
    unknown = sorted(set(found.data) - set(KEYS))
    if unknown:
        return invalid(f"ConfigMap {ref.namespace}/{ref.name}: unknown key {quote(unknown[0])} "
                       f"(known: {', '.join(KEYS)})")
    return _checked(found.data.get("engineGroup"), found.data.get("engineKind"), invalid)


def _checked(group_value: str | None, kind_value: str | None,
             invalid: Callable[[str], Verdict]) -> ClassParameters | Verdict:
    group = (group_value or "").strip() or None
    if group is not None and not _LABEL_VALUE.match(group):
        return invalid(f"engineGroup {quote(group)} is not a label value (63 characters, "
                       "alphanumerics, '-', '_', '.')")
    kind = (kind_value or "").strip() or None
    if kind is not None and kind not in ENGINE_KINDS:
        return invalid(f"engineKind {quote(kind)} is not one of {', '.join(ENGINE_KINDS)}")
    return ClassParameters(engine_group=group, engine_kind=kind)


def _defaults(given: TrafficDefaults, invalid: Callable[[str], Verdict]
              ) -> TrafficPolicySpec | Verdict:
    """``spec.defaults`` as a TrafficPolicy spec, or why it is refused: a key it does not take
    (``security``, ``targetRefs``, a misspelt section) or a bad value, named by its field."""
    for key in sorted(given.model_extra or {}):
        why = {"security": "access rules are not class defaults (their Secret and Service "
                           "references need a namespace): attach a TrafficPolicy to the Gateway",
               "targetRefs": "class defaults apply to every Gateway of the class; they take "
                             "no targets"}.get(key, "not a traffic section (healthCheck, "
                                                    "outlierDetection, loadBalancer, persistence, "
                                                    "timeouts, retry, retryBudget)")
        return invalid(f"spec.defaults.{key} is not supported: {why}")
    spec = given.as_policy_spec()
    issues = validate(spec)
    if issues:
        first = issues[0]
        return invalid(f"spec.defaults.{first.field}: {first.message}")
    return spec


def gateway_engine_group(gateway_class: str, snapshot: Snapshot) -> str | None:
    """The engine group the parameters of class ``gateway_class`` name, if valid (else None)."""
    cls = snapshot.get(GatewayClass, "", gateway_class)
    if cls is None or cls.spec.parameters_ref is None:
        return None
    params = class_parameters(cls, snapshot)
    return params.engine_group if isinstance(params, ClassParameters) else None
