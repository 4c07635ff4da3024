"""Whether an engine holds everything its cache has: each type with resources asked for,
compared with the cache's current version, sent and answered (nothing in flight, past the
bound or held back). A controller holds its first status pass until every engine connected is
served, so the status writes do not compete with the engines' first apply (issue 24, cold
start; ``podway.programs.controller.first_pass``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from podway.envoy import types
from podway.envoy.xds.cache import Cache


def served(cache: Cache, states: Mapping[str, Any], busy: Callable[[Any, str], bool]) -> bool:
    """``states``: a stream's per-type states; ``busy(state, cache version)``: that type still
    has something to send or an answer to wait for."""
    if not cache.ready:
        return False
    for type_url in types.PUSH_ORDER:
        state = states.get(type_url)
        if state is None:
            if cache.get(type_url).resources:
                return False  # not asked for yet (listeners: until clusters are warm)
        elif busy(state, cache.get(type_url).version):
            return False
    return True


def delta_busy(state: Any, version: str) -> bool:
    """A delta stream's type (``delta_state.DeltaType``)."""
    return bool(state.nonces or state.backlog or state.asked or state.first or state.dirty
                or state.held or state.groups or state.seen != version)


def sotw_busy(state: Any, version: str) -> bool:
    """A state-of-the-world stream's type (``sotw._SotwType``): its newest response not
    answered, or a full answer owed."""
    return bool(not state.answered or state.pending or state.dirty or state.deferred)
