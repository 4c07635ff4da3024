"""gateway.networking.k8s.io: GatewayClass, Gateway, ListenerSet, ReferenceGrant and
BackendTLSPolicy.

The route kinds live in ``gateway_routes``. Every served version is accepted (the loader matches
on the API group only); v1 field names are the model, and the few older shapes that differ
(BackendTLSPolicy v1alpha2 ``targetRef``/``tls``) are mapped onto it on load.

Open enums of the specification (listener ``protocol``, TLS ``mode``, address ``type``,
``allowedRoutes.namespaces.from``) stay plain strings, so an unsupported value reaches the
translator and is reported as a condition instead of failing the load.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from podway.model.base import ENGINE_GROUP, K8sModel, K8sObject, Port, SectionName

GROUP = "gateway.networking.k8s.io"
CONTROLLER_NAME = "podway.io/gateway-controller"


class LabelSelectorRequirement(K8sModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class LabelSelector(K8sModel):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        """Kubernetes label-selector semantics; the empty selector matches everything."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
        return True


class ParametersReference(K8sModel):
    """``GatewayClass.spec.parametersRef``: the object holding the class's parameters."""

    group: str = ""
    kind: str = ""
    name: str = ""
    namespace: str | None = None


class GatewayClassSpec(K8sModel):
    controller_name: str = ""
    description: str | None = None
    parameters_ref: ParametersReference | None = None


class GatewayClass(K8sObject):
    KIND: ClassVar[str] = "GatewayClass"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    NAMESPACED: ClassVar[bool] = False
    spec: GatewayClassSpec = Field(default_factory=GatewayClassSpec)


class SecretObjectReference(K8sModel):
    """A reference that may cross namespaces (certificateRefs, CA refs)."""

    group: str = ""
    kind: str = "Secret"
    name: str = Field(min_length=1)
    namespace: str | None = None


class GatewayTLSConfig(K8sModel):
    mode: str = "Terminate"
    certificate_refs: tuple[SecretObjectReference, ...] = ()
    options: dict[str, str] = Field(default_factory=dict)


class RouteNamespaces(K8sModel):
    from_: str = Field(default="Same", alias="from")
    selector: LabelSelector | None = None


class RouteGroupKind(K8sModel):
    group: str = GROUP
    kind: str


class AllowedRoutes(K8sModel):
    namespaces: RouteNamespaces = Field(default_factory=RouteNamespaces)
    kinds: tuple[RouteGroupKind, ...] = ()


class GatewayListener(K8sModel):
    name: SectionName
    hostname: str | None = None
    port: Port
    protocol: str
    tls: GatewayTLSConfig | None = None
    allowed_routes: AllowedRoutes = Field(default_factory=AllowedRoutes)


class GatewayAddress(K8sModel):
    type: str = "IPAddress"
    value: str = ""  # empty: "assign me one" (the IPAM's, with --vip-pools; else the bind address)


class GatewayInfrastructure(K8sModel):
    """``spec.infrastructure``: labels for what implements the Gateway (Podway reads its
    ``podway.io/engine-group`` label)."""

    labels: dict[str, str] = Field(default_factory=dict)


class FrontendTLSValidation(K8sModel):
    """Client certificates asked for and verified against ``caCertificateRefs``."""

    ca_certificate_refs: tuple[SecretObjectReference, ...] = ()
    mode: str = "AllowValidOnly"  # or AllowInsecureFallback


class FrontendTLSSettings(K8sModel):
    validation: FrontendTLSValidation | None = None


class FrontendTLSPort(K8sModel):
    port: int
    tls: FrontendTLSSettings = Field(default_factory=FrontendTLSSettings)


class FrontendTLSConfig(K8sModel):
    default: FrontendTLSSettings = Field(default_factory=FrontendTLSSettings)
    per_port: tuple[FrontendTLSPort, ...] = ()


class GatewayBackendTLS(K8sModel):
    """``spec.tls.backend``: the certificate the Gateway shows backends it speaks TLS to."""

    client_certificate_ref: SecretObjectReference | None = None


class GatewaySpecTLS(K8sModel):
    """``spec.tls`` (v1.4+): ``frontend`` client-certificate validation of HTTPS listeners,
    ``backend`` the Gateway's client certificate towards backends."""

    frontend: FrontendTLSConfig | None = None
    backend: GatewayBackendTLS | None = None


class ListenerNamespaces(K8sModel):
    """``spec.allowedListeners.namespaces``: where ListenerSets may attach from (default none)."""

    from_: str = Field(default="None", alias="from")
    selector: LabelSelector | None = None


class AllowedListeners(K8sModel):
    namespaces: ListenerNamespaces = Field(default_factory=ListenerNamespaces)


class GatewaySpec(K8sModel):
    gateway_class_name: str = Field(min_length=1)
    listeners: tuple[GatewayListener, ...] = Field(min_length=1)
    allowed_listeners: AllowedListeners | None = None
    addresses: tuple[GatewayAddress, ...] = ()
    infrastructure: GatewayInfrastructure | None = None
    tls: GatewaySpecTLS | None = None


class GatewayStatus(K8sModel):
    """Only the addresses: what the IPAM granted, read back after a restart."""

    addresses: tuple[GatewayAddress, ...] = ()


class Gateway(K8sObject):
    KIND: ClassVar[str] = "Gateway"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: GatewaySpec
    status: GatewayStatus = Field(default_factory=GatewayStatus)

    def engine_group(self) -> str | None:
        """The annotation, else the label of ``spec.infrastructure`` (Gateway API's place for
        what implements the Gateway)."""
        infrastructure = self.spec.infrastructure
        label = infrastructure.labels.get(ENGINE_GROUP, "").strip() if infrastructure else ""
        return super().engine_group() or label or None


class ListenerSetParentReference(K8sModel):
    """``ListenerSet.spec.parentRef``: the Gateway its listeners join."""

    group: str = GROUP
    kind: str = "Gateway"
    name: str = Field(min_length=1)
    namespace: str | None = None


class ListenerSetSpec(K8sModel):
    parent_ref: ListenerSetParentReference
    listeners: tuple[GatewayListener, ...] = Field(min_length=1)


class ListenerSet(K8sObject):
    """Listeners attached to a Gateway that allows it (``spec.allowedListeners``), GEP-1713."""

    KIND: ClassVar[str] = "ListenerSet"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: ListenerSetSpec


class ReferenceGrantFrom(K8sModel):
    group: str = ""
    kind: str
    namespace: str


class ReferenceGrantTo(K8sModel):
    group: str = ""
    kind: str
    name: str | None = None


class ReferenceGrantSpec(K8sModel):
    from_: tuple[ReferenceGrantFrom, ...] = Field(default=(), alias="from")
    to: tuple[ReferenceGrantTo, ...] = ()


class ReferenceGrant(K8sObject):
    KIND: ClassVar[str] = "ReferenceGrant"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: ReferenceGrantSpec = Field(default_factory=ReferenceGrantSpec)


class LocalPolicyTargetReference(K8sModel):
    group: str = ""
    kind: str = "Service"
    name: str = Field(min_length=1)
    section_name: str | None = None


class LocalObjectReference(K8sModel):
    group: str = ""
    kind: str = "ConfigMap"
    name: str = Field(min_length=1)


class BackendTLSValidation(K8sModel):
    ca_certificate_refs: tuple[LocalObjectReference, ...] = ()
    well_known_ca_certificates: str | None = Field(default=None,
                                                   alias="wellKnownCACertificates")
    hostname: str = ""
    subject_alt_names: tuple[dict[str, Any], ...] = ()


class BackendTLSPolicySpec(K8sModel):
    target_refs: tuple[LocalPolicyTargetReference, ...] = ()
    validation: BackendTLSValidation = Field(default_factory=BackendTLSValidation)

    @model_validator(mode="before")
    @classmethod
    def _older_versions(cls, data: Any) -> Any:
        """v1alpha2: one ``targetRef`` and ``tls`` {caCertRefs, wellKnownCACerts, hostname}."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "targetRef" in data and "targetRefs" not in data:
            data["targetRefs"] = [data.pop("targetRef")]
        old = data.pop("tls", None)
        if isinstance(old, dict) and "validation" not in data:
            data["validation"] = {
                "caCertificateRefs": old.get("caCertRefs", old.get("caCertificateRefs", [])),
                "wellKnownCACertificates": old.get("wellKnownCACerts",
                                                   old.get("wellKnownCACertificates")),
                "hostname": old.get("hostname", ""),
            }
        return data


class BackendTLSPolicy(K8sObject):
    KIND: ClassVar[str] = "BackendTLSPolicy"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: BackendTLSPolicySpec = Field(default_factory=BackendTLSPolicySpec)
