"""What an engine may see of the cache: read-only views for the ADS streams (which only read).

``SecretFree``: everything but Secrets, for an unauthenticated engine. The Secret type is always
empty, so no private key ever crosses an unauthenticated stream, whatever that engine asks for.
Every other type passes through unchanged.

``TableForm``: for a state-of-the-world engine, listeners served as scopes come in their
one-table form and there are no scopes (``podway.envoy.config.scoped``).
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType

from envoy.config.listener.v3 import listener_pb2

from podway.envoy import types
from podway.envoy.config import Resource, Resources
from podway.envoy.config.scoped import rds_form
from podway.envoy.xds.cache import Cache, Change, Hint, TypeSnapshot

_NO_SECRETS = TypeSnapshot(version="withheld")
_NO_SCOPES = TypeSnapshot(version="one-table-form")


class SecretFree(Cache):
    """``cache`` without Secrets (reads only; ``set`` is refused)."""

    def __init__(self, cache: Cache) -> None:  # no super().__init__: nothing of its own
        self._inner = cache

    @property
    def ready(self) -> bool:
        return self._inner.ready

    def is_set(self, type_url: str) -> bool:
        return self._inner.is_set(type_url)

    def get(self, type_url: str) -> TypeSnapshot:
        return _NO_SECRETS if type_url == types.SECRET else self._inner.get(type_url)

    def names_changed(self, type_url: str, since: str) -> frozenset[str] | None:
        if type_url == types.SECRET:
            return frozenset()
        return self._inner.names_changed(type_url, since)

    def changed(self) -> asyncio.Event:
        return self._inner.changed()

    def set(self, resources: Resources, *, hint: Hint | None = None) -> dict[str, Change]:
        raise TypeError("SecretFree is a read-only view")


class TableForm(Cache):
    """``cache`` as a state-of-the-world engine is served it: a listener whose routes come
    from scopes (``podway.envoy.config.scoped``) in its one-table form, and no scopes. Every
    SotW scope or listener response carries all of them, which at the sizes scopes are for is
    slower than the one table (built alongside); reads only."""

    def __init__(self, cache: Cache) -> None:  # no super().__init__: nothing of its own
        self._inner = cache
        self._listeners: tuple[str, TypeSnapshot] | None = None  # (inner version, converted)
        self._converted: dict[str, tuple[str, Resource]] = {}  # name → (digest, one-table form)

    @property
    def ready(self) -> bool:
        return self._inner.ready

    def is_set(self, type_url: str) -> bool:
        return self._inner.is_set(type_url)

    def get(self, type_url: str) -> TypeSnapshot:
        if type_url == types.SCOPE:
            return _NO_SCOPES
        snapshot = self._inner.get(type_url)
        if type_url != types.LISTENER:
            return snapshot
        if self._listeners is None or self._listeners[0] != snapshot.version:
            self._listeners = (snapshot.version, TypeSnapshot(
                snapshot.version, MappingProxyType({
                    n: self._table_form(r) for n, r in snapshot.resources.items()})))
        return self._listeners[1]

    def names_changed(self, type_url: str, since: str) -> frozenset[str] | None:
        if type_url == types.SCOPE:
            return frozenset()
        return self._inner.names_changed(type_url, since)

    def changed(self) -> asyncio.Event:
        return self._inner.changed()

    def set(self, resources: Resources, *, hint: Hint | None = None) -> dict[str, Change]:
        raise TypeError("TableForm is a read-only view")

    def _table_form(self, resource: Resource) -> Resource:
        hit = self._converted.get(resource.name)
        if hit is None or hit[0] != resource.digest:
            message = resource.message
            converted = (rds_form(message) if isinstance(message, listener_pb2.Listener)
                         else None)
            hit = (resource.digest,
                   resource if converted is None else Resource.of(resource.name, converted))
            self._converted[resource.name] = hit
        return hit[1]
