"""An immutable, typed view of every object Podway knows at one moment.

Sources build snapshots; the translator only reads them. Per-kind maps are shared between
snapshots, so a new snapshot after one change costs the copy of one kind's map, and consumers can
tell unchanged kinds by identity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar, cast

from podway.model.base import K8sObject

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds
T = TypeVar("T", bound=K8sObject)

_EMPTY: Mapping[Key, K8sObject] = MappingProxyType({})
NO_MODES: Mapping[Key, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Snapshot:
    objects: Mapping[str, Mapping[Key, K8sObject]] = field(default_factory=dict)
    backend_modes: Mapping[Key, str] = field(default_factory=lambda: NO_MODES)
    """Service → the backend mode the translator must use for it, decided outside the translator
    (the controller's mode gate, ``podway.sources.mode_gate``: make-before-break to
    ``nodeportlocal``, a new default). It wins over the Service's ``podway.io/backend-mode``
    annotation, which stays as the user wrote it. A source that changes a Service's entry hands
    that Service on as changed, as a new object, like any edit (the translator's memos go by
    object identity). Empty: every Service's own annotation, else the default, applies."""
    gateway_api_bundles: Mapping[str, str] | None = None
    """The Gateway API CRDs in the cluster: CRD name → its
    ``gateway.networking.k8s.io/bundle-version`` annotation ("" when it has none), for the
    GatewayClass ``SupportedVersion`` condition. None: no API to ask (manifests in files). A
    source that changes it hands every GatewayClass on as changed, as a new object."""

    @classmethod
    def of_objects(cls, objects: Iterable[K8sObject]) -> Snapshot:
        by_kind: dict[str, dict[Key, K8sObject]] = {}
        for obj in objects:
            by_kind.setdefault(obj.KIND, {})[obj.key] = obj
        return cls(by_kind)

    def kind(self, cls: type[T]) -> Mapping[Key, T]:
        """Every object of ``cls``'s kind, by (namespace, name)."""
        return cast(Mapping[Key, T], self.objects.get(cls.KIND, _EMPTY))

    def get(self, cls: type[T], namespace: str, name: str) -> T | None:
        return self.kind(cls).get((namespace, name))

    def replace(self, kind: str, changes: Mapping[Key, K8sObject | None]) -> Snapshot:
        """A new snapshot with ``changes`` applied to one kind (``None`` deletes)."""
        updated = dict(self.objects.get(kind, _EMPTY))
        for key, obj in changes.items():
            if obj is None:
                updated.pop(key, None)
            else:
                updated[key] = obj
        objects = dict(self.objects)
        objects[kind] = updated
        return Snapshot(objects, self.backend_modes, self.gateway_api_bundles)

    def all(self) -> Iterable[K8sObject]:
        for per_kind in self.objects.values():
            yield from per_kind.values()
