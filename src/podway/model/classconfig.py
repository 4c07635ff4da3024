"""``podway.io/v1alpha1`` GatewayClassConfig: Podway's parameters of a GatewayClass, named by
its ``spec.parametersRef`` (cluster-scoped, as the class). Values stay plain strings: the
translator judges them (``translate.gateway.parameters``), so a bad one is a condition on the
class, not a load error."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from podway.model.base import K8sModel, K8sObject
from podway.model.policy import TrafficDefaults

PODWAY_GROUP = "podway.io"


class GatewayClassConfigSpec(K8sModel):
    engine_group: str | None = None  # the engine group of the class's Gateways naming none
    engine_kind: str | None = None  # envoy or haproxy (unset: any); Gateways warn on a mismatch
    defaults: TrafficDefaults | None = None  # traffic settings of the class's Gateways


class GatewayClassConfig(K8sObject):
    KIND: ClassVar[str] = "GatewayClassConfig"
    API_GROUPS: ClassVar[tuple[str, ...]] = (PODWAY_GROUP,)
    NAMESPACED: ClassVar[bool] = False
    spec: GatewayClassConfigSpec = Field(default_factory=GatewayClassConfigSpec)
