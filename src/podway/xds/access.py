"""What an unauthenticated engine may see of the cache: everything but Secrets.

``SecretFree`` is a read-only view of a ``Cache`` for the ADS streams (which only read it): the
Secret type is always empty, so no private key ever crosses an unauthenticated stream, whatever
that engine asks for. Every other type passes through unchanged.
"""

from __future__ import annotations

import asyncio

from podway.envoy_config import Resources
from podway.xds import types
from podway.xds.cache import Cache, Change, Hint, TypeSnapshot

_NO_SECRETS = TypeSnapshot(version="withheld")


class SecretFree(Cache):
    """``cache`` without Secrets (reads only; ``set`` is refused)."""

    def __init__(self, cache: Cache) -> None:  # no super().__init__: nothing of its own
        self._inner = cache

    @property
    def ready(self) -> bool:
        return self._inner.ready

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
