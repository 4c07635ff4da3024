"""Which keys of a map changed between versions, by identity and at C speed.

Producers keep unchanged values as the same objects (sources keep unchanged Kubernetes objects,
the translator keeps unchanged statuses, pools and virtual hosts), so a reader that follows
successive versions of a map can find what changed by comparing ids, never values: ``MapDiff``
for one map followed over time, ``id_changes`` for two id indexes. Used by the status document,
the metrics, the readiness gate and the backend-mode gate; no Podway types here, so any layer may
use it.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

_K = TypeVar("_K")


class MapDiff(Generic[_K]):
    """Successive versions of one map: which keys' values were added, replaced (by identity)
    or removed since the last version. An index of the values' ids is built at C speed and
    compared as sets, so a map of 10,000 costs no key hashing and no Python loop over it.
    Exact where each value sits under a key of its own (a snapshot kind by key, pools by
    name, statuses by object: the translator keeps a status for the object it was made
    for); a value found under several keys makes it compare key by key instead. A map given
    must never change afterwards (a state's maps are frozen): its index is kept by identity."""

    def __init__(self) -> None:
        self._map: Mapping[_K, Any] = MappingProxyType({})
        self._index: dict[int, _K] | None = {}  # None: not built yet

    def rebase(self, new: Mapping[_K, Any]) -> None:
        """Make ``new`` the last version without diffing (the caller knows what changed)."""
        if new is not self._map:
            self._map, self._index = new, None

    def update(self, new: Mapping[_K, Any], *,
               known: tuple[Mapping[_K, Any], Iterable[_K]] | None = None) -> list[_K]:
        """The keys that differ from the last version; ``new`` becomes the last version.
        ``known``: (base, keys), the producer's word that ``new`` differs from ``base`` only
        under ``keys`` (``IRChange.pools``: ``pool_hint``); taken, with no diff at all, when
        ``base`` is the last version."""
        old = self._map
        if new is old:
            return []
        if known is not None and known[0] is old:
            self.rebase(new)
            return list(known[1])
        aligned = _aligned_changes(old, new)
        if aligned is not None:
            self.rebase(new)
            return aligned
        old_index = self._index if self._index is not None else _id_index(old)
        index = _id_index(new)
        if len(index) != len(new) or len(old_index) != len(old):
            out = [key for key, value in new.items() if old.get(key) is not value]
            out += old.keys() - new.keys()
        else:
            new_ids, old_ids = id_changes(old_index, index)
            # A replaced value's key is both new and gone by id: named once (a reader that
            # counts per key, like the NPL planner's served pools, would count it twice).
            out = list(dict.fromkeys([index[i] for i in new_ids] + [old_index[i] for i in old_ids]))
        self._map, self._index = new, index
        return out


def _aligned_changes(old: Mapping[_K, Any], new: Mapping[_K, Any]) -> list[_K] | None:
    """The keys whose values differ by identity, when ``new`` holds ``old``'s key objects in
    the same order, bar keys added after them or removed from the end (a map copied and
    edited in place, as the translator's statuses): compared pairwise at C speed, nothing
    hashed or indexed. None when the keys are not so aligned."""
    n = min(len(old), len(new))
    if not all(map(operator.is_, itertools.islice(old, n), itertools.islice(new, n))):
        return None
    out = list(itertools.compress(itertools.islice(new, n), map(
        operator.is_not, itertools.islice(old.values(), n), itertools.islice(new.values(), n))))
    out += itertools.islice(new, n, None)
    out += itertools.islice(old, n, None)
    return out


def id_changes(old: Mapping[int, Any], new: Mapping[int, Any]) -> tuple[list[int], list[int]]:
    """(ids only in ``new``, ids only in ``old``) of two id indexes, at C speed; equal key
    sets (the usual case for most maps) cost one comparison."""
    if len(old) == len(new) and old.keys() == new.keys():
        return [], []
    return list(new.keys() - old.keys()), list(old.keys() - new.keys())


def _id_index(values: Mapping[_K, Any]) -> dict[int, _K]:
    """id of each value → its key. Several readers diff the same maps each state (the IR's
    pools: the status document, the metrics, the readiness gate, the NPL plan), so the last
    few indexes are kept, with their maps (a kept map's ids cannot be reused)."""
    known = _INDEXES.get(id(values))
    if known is not None and known[0] is values:
        return known[1]
    index = dict(zip(map(id, values.values()), values.keys(), strict=True))
    _INDEXES[id(values)] = (values, index)
    while len(_INDEXES) > _KEPT_INDEXES:
        del _INDEXES[next(iter(_INDEXES))]
    return index


_KEPT_INDEXES = 8  # a state's maps that readers diff: pools, statuses, Services, a kind or two
_INDEXES: dict[int, tuple[Mapping[Any, Any], dict[int, Any]]] = {}
