"""Shared pieces of the typed Kubernetes model: the pydantic base, metadata and object refs.

Only the fields Podway reads are modelled; everything else is ignored on load. Models are frozen:
a snapshot of them is shared between the translator and its caches without copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator
from pydantic.alias_generators import to_camel

# Integers are strict everywhere: YAML ``true`` or ``"80"`` is refused on load instead of
# becoming port 1 or 80 (pydantic's lax mode turns a bool into an int).
Int = StrictInt
Port = Annotated[StrictInt, Field(ge=1, le=65535)]
NodePort = Annotated[StrictInt, Field(ge=0, le=65535)]  # 0: none allocated


class K8sModel(BaseModel):
    """Base for every modelled Kubernetes structure: camelCase on the wire, frozen in memory."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
    )


# Kubernetes names: an RFC 1123 subdomain (most kinds) and an RFC 1123 label (namespaces). They
# become parts of engine resource names and of messages, so nothing else may get through.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
SectionName = ObjectName  # Gateway listener names, parentRef sectionName


class ObjectMeta(K8sModel):
    name: ObjectName
    namespace: Annotated[str, Field(max_length=63, pattern=DNS_LABEL)] = "default"
    uid: str = ""
    generation: Int = 0
    resource_version: str = ""
    creation_timestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("creation_timestamp")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """The API server writes UTC; a timestamp without a zone is read as UTC too, so "the
        oldest wins" never depends on the host's time zone."""
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """Names one Kubernetes object; every IR node and every problem points back to one."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        if not self.namespace:
            return f"{self.kind}/{self.name}"
        return f"{self.kind}/{self.namespace}/{self.name}"


ENGINE_GROUP = "podway.io/engine-group"


class K8sObject(K8sModel):
    """A top-level object: apiVersion/kind/metadata. Subclasses set ``KIND`` and ``API_GROUPS``."""

    KIND: ClassVar[str] = ""
    # API groups (the part of apiVersion before "/"; "" is the core group) accepted for the kind.
    API_GROUPS: ClassVar[tuple[str, ...]] = ("",)
    # apiVersions accepted within those groups; empty: any version of the group.
    API_VERSIONS: ClassVar[tuple[str, ...]] = ()
    # Groups that once served the kind with another schema: reported, not silently skipped.
    LEGACY_GROUPS: ClassVar[tuple[str, ...]] = ()
    # Cluster-scoped kinds keep an empty namespace.
    NAMESPACED: ClassVar[bool] = True

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.KIND, self.metadata.namespace if self.NAMESPACED else "",
                         self.metadata.name)

    @property
    def key(self) -> tuple[str, str]:
        return (self.metadata.namespace if self.NAMESPACED else "", self.metadata.name)

    def engine_group(self) -> str | None:
        """The engine group the object chose (annotation ``podway.io/engine-group``; None: none):
        which engines serve it (docs/controller.md) and which VIP pools it draws from."""
        return self.metadata.annotations.get(ENGINE_GROUP, "").strip() or None

    def age_key(self) -> tuple[float, str]:
        """Sort key for "the oldest wins": creationTimestamp, then "{namespace}/{name}".

        The string, not a (namespace, name) pair: Gateway API (and Ingress conflict handling)
        break ties alphabetically by "{namespace}/{name}". The two differ when one namespace
        is a prefix of another: "-" and "." sort before "/", so "team-b/a" comes before
        "team/z", while pairs would put namespace "team" first.
        """
        ts = self.metadata.creation_timestamp
        return (ts.timestamp() if ts is not None else float("inf"),
                f"{self.metadata.namespace}/{self.metadata.name}")
