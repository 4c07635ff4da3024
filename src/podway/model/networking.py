"""networking.k8s.io/v1 kinds Podway reads: Ingress and IngressClass."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from podway.model.base import K8sModel, K8sObject, Port

PathType = Literal["Exact", "Prefix", "ImplementationSpecific"]


class ServiceBackendPort(K8sModel):
    name: str | None = None
    number: Port | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ServiceBackendPort:
        if (self.name is None) == (self.number is None):
            raise ValueError("exactly one of port.name and port.number must be set")
        return self


class IngressServiceBackend(K8sModel):
    name: str = Field(min_length=1)
    port: ServiceBackendPort


class TypedLocalObjectReference(K8sModel):
    api_group: str | None = None
    kind: str
    name: str


class IngressBackend(K8sModel):
    service: IngressServiceBackend | None = None
    resource: TypedLocalObjectReference | None = None

    @model_validator(mode="after")
    def _one_of(self) -> IngressBackend:
        if (self.service is None) == (self.resource is None):
            raise ValueError("exactly one of service and resource must be set")
        return self


class HTTPIngressPath(K8sModel):
    path: str = "/"
    path_type: PathType
    backend: IngressBackend


class HTTPIngressRuleValue(K8sModel):
    paths: tuple[HTTPIngressPath, ...] = Field(min_length=1)


class IngressRule(K8sModel):
    host: str | None = None
    http: HTTPIngressRuleValue | None = None


class IngressTLS(K8sModel):
    hosts: tuple[str, ...] = ()
    secret_name: str | None = None


class IngressSpec(K8sModel):
    ingress_class_name: str | None = None
    default_backend: IngressBackend | None = None
    rules: tuple[IngressRule, ...] = ()
    tls: tuple[IngressTLS, ...] = ()


class Ingress(K8sObject):
    KIND: ClassVar[str] = "Ingress"
    API_GROUPS: ClassVar[tuple[str, ...]] = ("networking.k8s.io",)
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("networking.k8s.io/v1",)
    LEGACY_GROUPS: ClassVar[tuple[str, ...]] = ("extensions",)
    spec: IngressSpec = Field(default_factory=IngressSpec)


class IngressClassSpec(K8sModel):
    controller: str = ""


class IngressClass(K8sObject):
    KIND: ClassVar[str] = "IngressClass"
    API_GROUPS: ClassVar[tuple[str, ...]] = ("networking.k8s.io",)
    API_VERSIONS: ClassVar[tuple[str, ...]] = ("networking.k8s.io/v1",)
    NAMESPACED: ClassVar[bool] = False
    DEFAULT_ANNOTATION: ClassVar[str] = "ingressclass.kubernetes.io/is-default-class"

    spec: IngressClassSpec = Field(default_factory=IngressClassSpec)

    @property
    def is_default(self) -> bool:
        return self.metadata.annotations.get(self.DEFAULT_ANNOTATION) == "true"
