"""Backend modes in the structure phase: each pool in its Service's mode, and the warnings of
the Services the pools use (NodePortLocal not enabled, an invalid mode annotation), each kept in
the memo while its inputs are the same objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from podway.model import Service
from podway.model.snapshot import Key
from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Problem, Reason, Severity
from podway.translate.pools.backends import PoolSpec, in_mode, invalid_mode, mode_warning

if TYPE_CHECKING:
    from podway.translate.structure import StructureMemo


def used_mode_warnings(services: Mapping[Key, Service | None], opts: TranslateOptions,
                   memo: StructureMemo | None, decided: Mapping[Key, str]) -> list[Problem]:
    """The backend-mode warnings of the Services the pools use, by Service key; each kept
    from the last run while its Service is the same object."""
    problems: list[Problem] = []
    warnings = memo.warnings if memo is not None else {}
    warnings_next: dict[Key, tuple[Service, tuple[Problem, ...]]] = {}
    for service_key in sorted(services):
        backing = services[service_key]
        if backing is None:
            continue
        kept = warnings.get(service_key)
        if kept is None or kept[0] is not backing:
            kept = (backing, mode_warnings(backing, opts, decided))
        warnings_next[service_key] = kept
        problems.extend(kept[1])
    if memo is not None:
        memo.warnings = warnings_next
    return problems


def set_modes(pools: dict[str, PoolSpec], services: Mapping[Key, Service | None],
               opts: TranslateOptions, memo: StructureMemo | None,
               decided: Mapping[Key, str]) -> None:
    """Each pool's backend mode: its Service's entry in ``decided`` (``Snapshot.backend_modes``),
    else its annotation, else the default. The same spec in the same mode stays the same object
    (later stages and the members compare by identity; a Service whose entry in ``decided``
    changed is a new object, see ``Snapshot.backend_modes``)."""
    modes = memo.modes if memo is not None else {}
    modes_next: dict[str, tuple[PoolSpec, Service, PoolSpec]] = {}
    for name, spec in pools.items():
        backing = services[spec.service]
        if backing is not None:
            kept = modes.get(name)
            if kept is None or kept[0] is not spec or kept[1] is not backing:
                kept = (spec, backing, in_mode(spec, backing, opts, decided))
            modes_next[name] = kept
            pools[name] = kept[2]
    if memo is not None:
        memo.modes = modes_next


def mode_warnings(backing: Service, opts: TranslateOptions,
                  decided: Mapping[Key, str]) -> tuple[Problem, ...]:
    """NodePortLocal not enabled, or an invalid backend-mode annotation, on a used Service."""
    return tuple(Problem(ref=backing.ref, reason=reason, message=message,
                         severity=Severity.WARNING, field="metadata.annotations")
                 for reason, message in ((Reason.NPL_NOT_ENABLED,
                                          mode_warning(backing, opts, decided)),
                                         (Reason.INVALID_BACKEND_MODE, invalid_mode(backing)))
                 if message is not None)
