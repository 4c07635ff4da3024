"""Core (v1) and discovery.k8s.io/v1 kinds Podway reads: Service, EndpointSlice, Pod, Node,
Secret, ConfigMap, Namespace."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import ClassVar, Literal

from pydantic import Field, StrictBool, field_validator

from podway.model.base import Int, K8sModel, K8sObject, NodePort, Port

TransportProtocol = Literal["TCP", "UDP", "SCTP"]

LB_READY = "podway.io/lb-ready"
"""The readiness gate Podway sets: True once every engine reports the pod's members healthy."""


class ServicePort(K8sModel):
    name: str = ""
    protocol: TransportProtocol = "TCP"
    port: Port
    target_port: Int | str | None = None  # a number (1-65535) or a container port's name
    node_port: NodePort | None = None
    app_protocol: str | None = None

    @field_validator("target_port")
    @classmethod
    def _target_port(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and not 1 <= value <= 65535:
            raise ValueError("targetPort must be between 1 and 65535")
        if isinstance(value, str) and not value:
            raise ValueError("targetPort must not be empty")
        return value


class ClientIPConfig(K8sModel):
    timeout_seconds: Int | None = None


class SessionAffinityConfig(K8sModel):
    client_ip: ClientIPConfig | None = Field(default=None, alias="clientIP")


class ServiceSpec(K8sModel):
    type: Literal["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"] = "ClusterIP"
    ports: tuple[ServicePort, ...] = ()
    selector: dict[str, str] = Field(default_factory=dict)
    cluster_ip: str | None = Field(default=None, alias="clusterIP")
    load_balancer_ip: str | None = Field(default=None, alias="loadBalancerIP")
    load_balancer_class: str | None = None
    external_traffic_policy: str | None = None
    session_affinity: str | None = None
    session_affinity_config: SessionAffinityConfig | None = None
    load_balancer_source_ranges: tuple[str, ...] = ()
    ip_families: tuple[str, ...] = ()  # "IPv4", "IPv6"; the VIP families too (podway.programs.ipam)
    ip_family_policy: str | None = None  # SingleStack, PreferDualStack, RequireDualStack


class LoadBalancerIngress(K8sModel):
    ip: str | None = None
    hostname: str | None = None


class LoadBalancerStatus(K8sModel):
    ingress: tuple[LoadBalancerIngress, ...] = ()


class ServiceStatus(K8sModel):
    load_balancer: LoadBalancerStatus = Field(default_factory=LoadBalancerStatus)


class Service(K8sObject):
    KIND: ClassVar[str] = "Service"
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("v1",)
    spec: ServiceSpec = Field(default_factory=ServiceSpec)
    status: ServiceStatus = Field(default_factory=ServiceStatus)


class EndpointConditions(K8sModel):
    ready: StrictBool | None = None
    serving: StrictBool | None = None
    terminating: StrictBool | None = None


class ObjectReference(K8sModel):
    kind: str = ""
    namespace: str = ""
    name: str = ""


class Endpoint(K8sModel):
    addresses: tuple[str, ...] = Field(min_length=1)
    conditions: EndpointConditions = Field(default_factory=EndpointConditions)
    node_name: str | None = None
    zone: str | None = None
    target_ref: ObjectReference | None = None


class EndpointPort(K8sModel):
    name: str | None = None
    protocol: TransportProtocol = "TCP"
    port: Port | None = None
    app_protocol: str | None = None


class EndpointSlice(K8sObject):
    KIND: ClassVar[str] = "EndpointSlice"
    API_GROUPS: ClassVar[tuple[str, ...]] = ("discovery.k8s.io",)
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("discovery.k8s.io/v1",)
    SERVICE_NAME_LABEL: ClassVar[str] = "kubernetes.io/service-name"

    address_type: Literal["IPv4", "IPv6", "FQDN"] = "IPv4"
    endpoints: tuple[Endpoint, ...] = ()
    ports: tuple[EndpointPort, ...] = ()

    @property
    def service_name(self) -> str | None:
        return self.metadata.labels.get(self.SERVICE_NAME_LABEL)


class ContainerPort(K8sModel):
    name: str | None = None
    container_port: Port
    host_port: NodePort | None = None
    protocol: TransportProtocol = "TCP"


class Container(K8sModel):
    name: str = ""
    ports: tuple[ContainerPort, ...] = ()


class PodReadinessGate(K8sModel):
    condition_type: str


class PodSpec(K8sModel):
    node_name: str | None = None
    containers: tuple[Container, ...] = ()
    readiness_gates: tuple[PodReadinessGate, ...] = ()

    @field_validator("readiness_gates", mode="before")
    @classmethod
    def _readable_gates(cls, value: object) -> tuple[object, ...]:
        """Gates Podway can read; a malformed one is another controller's business and never
        makes the pod invalid."""
        if not isinstance(value, list | tuple):
            return ()
        return tuple(g for g in value
                     if isinstance(g, dict) and isinstance(g.get("conditionType"), str))


class PodCondition(K8sModel):
    """Podway's own pod condition (``LB_READY``); values read as the API writes them (strings),
    whatever YAML made of them in a manifest (a bare ``True``, an unquoted timestamp)."""

    type: str
    status: str = "Unknown"
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None

    @field_validator("status", "reason", "message", "last_transition_time", mode="before")
    @classmethod
    def _as_text(cls, value: object) -> object:
        if isinstance(value, datetime):
            return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value.tzinfo \
                else value.strftime("%Y-%m-%dT%H:%M:%SZ")
        if isinstance(value, bool):
            return "True" if value else "False"
        return value if value is None or isinstance(value, str) else str(value)


class PodIP(K8sModel):
    ip: str


class PodStatus(K8sModel):
    phase: str | None = None
    pod_ip: str | None = Field(default=None, alias="podIP")
    pod_ips: tuple[PodIP, ...] = Field(default=(), alias="podIPs")
    host_ip: str | None = Field(default=None, alias="hostIP")  # its node's, set by the kubelet
    conditions: tuple[PodCondition, ...] = ()  # Podway's own only (``LB_READY``)

    @field_validator("conditions", mode="before")
    @classmethod
    def _ours(cls, value: object) -> tuple[object, ...]:
        """Only Podway's condition is read: the others may have any shape a manifest gives."""
        if not isinstance(value, list | tuple):
            return ()
        return tuple(c for c in value if isinstance(c, dict) and c.get("type") == LB_READY)


class Pod(K8sObject):
    KIND: ClassVar[str] = "Pod"
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("v1",)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)

    def gated(self, condition_type: str) -> bool:
        """Whether the pod waits for ``condition_type`` (a readiness gate) to be True."""
        return any(g.condition_type == condition_type for g in self.spec.readiness_gates)

    def condition(self, condition_type: str) -> PodCondition | None:
        return next((c for c in self.status.conditions if c.type == condition_type), None)


class NodeAddress(K8sModel):
    type: str
    address: str


class NodeCondition(K8sModel):
    type: str
    status: str = "Unknown"


class NodeStatus(K8sModel):
    addresses: tuple[NodeAddress, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()


class Node(K8sObject):
    KIND: ClassVar[str] = "Node"
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("v1",)
    NAMESPACED: ClassVar[bool] = False
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def ready(self) -> bool:
        """Ready unless the Ready condition says otherwise (no conditions: assume ready)."""
        cond = next((c for c in self.status.conditions if c.type == "Ready"), None)
        return cond is None or cond.status == "True"

    def address(self, *order: str) -> str | None:
        """The first address of the given types, in that order of preference."""
        for wanted in order or ("ExternalIP", "InternalIP"):
            for addr in self.status.addresses:
                if addr.type == wanted:
                    return addr.address
        return None


class Secret(K8sObject):
    KIND: ClassVar[str] = "Secret"
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("v1",)
    TLS_TYPE: ClassVar[str] = "kubernetes.io/tls"

    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict)

    @field_validator("data")
    @classmethod
    def _base64(cls, value: dict[str, str]) -> dict[str, str]:
        for key, item in value.items():
            try:
                base64.b64decode(item, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"data.{key} is not valid base64") from exc
        return value

    def get(self, key: str) -> bytes | None:
        """The decoded value of ``key`` (stringData wins, as the API server merges it)."""
        if key in self.string_data:
            return self.string_data[key].encode()
        if key in self.data:
            return base64.b64decode(self.data[key])
        return None


class ConfigMap(K8sObject):
    """Read for CA bundles (BackendTLSPolicy ``caCertificateRefs``)."""

    KIND: ClassVar[str] = "ConfigMap"
    data: dict[str, str] = Field(default_factory=dict)


class Namespace(K8sObject):
    """Read for its labels (Gateway ``allowedRoutes.namespaces.selector``)."""

    KIND: ClassVar[str] = "Namespace"
    NAMESPACED: ClassVar[bool] = False
