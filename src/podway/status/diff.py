"""What changed from one pipeline state to the next, for the readers that follow states: the
keys of snapshot kinds (``KindChanges``), the problems (``problem_changes``), the pools
(``pool_hint``: the translator's word) and a listener's virtual hosts (``host_changes``). All
by identity, built on ``podway.base.mapdiff``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from podway.base.mapdiff import MapDiff, id_changes
from podway.ir.listener import Listener, VirtualHost
from podway.ir.pool import Pool
from podway.model import Snapshot
from podway.model.snapshot import Key
from podway.translate import Problem, Result

NONE: Mapping[Key, Any] = MappingProxyType({})  # the empty map every status reader shares


class KindChanges:
    """The keys of some snapshot kinds added, replaced (by identity) or removed from one
    snapshot to the next a reader sees: the source's change list (``SourceUpdate.changed``)
    when the snapshot's generation directly follows the last one seen, else a ``MapDiff`` per
    kind (C speed). Either way no Python loop runs over a kind's whole map."""

    def __init__(self, kinds: Iterable[str]) -> None:
        self._diffs: dict[str, MapDiff[Key]] = {kind: MapDiff() for kind in kinds}
        self._generation: int | None = None

    def update(self, snapshot: Snapshot, *, generation: int | None,
               changed: Iterable[tuple[str, Key]] | None) -> set[tuple[str, Key]]:
        """(kind, key) of the watched kinds that differ from the last snapshot seen."""
        kinds = snapshot.objects
        last, self._generation = self._generation, generation
        if changed is not None and generation is not None and last is not None \
                and generation == last + 1:
            for kind, diff in self._diffs.items():
                diff.rebase(kinds.get(kind, NONE))
            return {(kind, key) for kind, key in changed if kind in self._diffs}
        return {(kind, key) for kind, diff in self._diffs.items()
                for key in diff.update(kinds.get(kind, NONE))}


def problem_changes(old: tuple[Problem, ...], new: tuple[Problem, ...]
                    ) -> tuple[dict[int, int], list[Problem], list[Problem]] | None:
    """(position of each problem of ``new`` by id, problems only in ``new``, problems only in
    ``old``), by identity and at C speed (the translator keeps unchanged problems as the same
    objects); None when that does not tell the change — a problem listed twice, or the kept
    ones in another order — and the caller must look at every problem."""
    ids = list(map(id, new))
    position = dict(zip(ids, range(1, len(ids) + 1), strict=True))
    if len(position) != len(new):
        return None
    old_index = dict(zip(map(id, old), old, strict=True))
    if len(old_index) != len(old):
        return None
    kept = list(filter(None, map(position.get, old_index)))  # positions from 1: never 0
    if kept != sorted(kept):
        return None
    added, removed = id_changes(old_index, position)
    return position, [new[position[i] - 1] for i in added], [old_index[i] for i in removed]


def pool_hint(result: Result) -> tuple[Mapping[str, Pool], Iterable[str]] | None:
    """``MapDiff.update``'s ``known`` for the pools of ``result.ir``: the translator's word
    (``IRChange``) on which pools differ from the IR before, if it gave one."""
    change = result.change
    return None if change is None else (change.base.pools, change.pools)


def host_changes(before: dict[int, VirtualHost], listener: Listener,
                 pairs: Iterable[tuple[VirtualHost | None, VirtualHost | None]] | None
                 ) -> tuple[dict[int, VirtualHost], list[VirtualHost], list[VirtualHost]]:
    """(``listener``'s virtual hosts by id, those added, those removed) since ``before`` (the
    previous listener's, by id; given up by the caller: it may be reused). ``pairs``: the
    translator's (old, new) virtual hosts of this listener (``IRChange.vhosts``), taken when
    they account for the difference — O(change) — else an id diff (C speed)."""
    if pairs is not None:
        pairs = tuple(pairs)
        removed = [old for old, _ in pairs if old is not None]
        added = [new for _, new in pairs if new is not None]
        if all(id(v) in before and before[id(v)] is v for v in removed) \
                and len(before) - len(removed) + len(added) == len(listener.virtual_hosts) \
                and not any(id(v) in before for v in added):
            for v in removed:
                del before[id(v)]
            before.update(zip(map(id, added), added, strict=True))
            if len(before) == len(listener.virtual_hosts):
                return before, added, removed
            for v in added:  # not what the hint said (a host listed twice): undo, diff
                before.pop(id(v), None)
            before.update(zip(map(id, removed), removed, strict=True))
    hosts = dict(zip(map(id, listener.virtual_hosts), listener.virtual_hosts, strict=True))
    new_ids, old_ids = id_changes(before, hosts)
    return hosts, [hosts[i] for i in new_ids], [before[i] for i in old_ids]
