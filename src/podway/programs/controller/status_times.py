"""Status timestamps: ``with_times`` stamps the conditions of a wanted status against what the
object carries (a condition whose status did not change keeps its ``lastTransitionTime``,
Kubernetes' rule; a new or flipped one gets ``now``), and keeps the route ``parents`` entries of
other controllers as they are. ``same`` compares two statuses as the API stores them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Status = dict[str, Any]


def with_times(kind: str, want: Status, before: Status | None, now: str,
               controller_name: str) -> Status:
    """``want`` with ``lastTransitionTime`` on every condition (kept when the condition's status
    did not change) and, for routes, other controllers' ``parents`` entries kept. A ``before``
    of a shape no controller writes (someone edited the status by hand) counts as empty."""
    try:
        return _with_times(want, before or {}, now, controller_name)
    except (AttributeError, TypeError, KeyError):
        return _with_times(want, {}, now, controller_name)


def _with_times(want: Status, before: Status, now: str, controller_name: str) -> Status:
    out = dict(want)
    if "conditions" in want:
        out["conditions"] = _stamp(want["conditions"], before.get("conditions"), now)
    if "listeners" in want:
        old = {ls.get("name"): ls for ls in before.get("listeners") or []}
        out["listeners"] = [{**ls, "conditions": _stamp(
            ls["conditions"], (old.get(ls["name"]) or {}).get("conditions"), now)}
            for ls in want["listeners"]]
    for field, ref_key in (("parents", "parentRef"), ("ancestors", "ancestorRef")):
        if field not in want and field not in before:
            continue
        old_entries = before.get(field) or []
        old = {_freeze(p.get(ref_key)): p for p in old_entries
               if p.get("controllerName") == controller_name}
        mine = [{**p, "conditions": _stamp(p["conditions"], (old.get(_freeze(p[ref_key]))
                                                             or {}).get("conditions"), now)}
                for p in want.get(field) or []]
        others = [p for p in old_entries if p.get("controllerName") != controller_name]
        if mine or others or field in want:
            out[field] = others + mine
    return out


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _stamp(conditions: list[Status], before: list[Status] | None, now: str) -> list[Status]:
    old = {c.get("type"): c for c in before or []}
    out = []
    for condition in conditions:
        previous = old.get(condition["type"])
        keep = previous is not None and previous.get("status") == condition["status"] \
            and previous.get("lastTransitionTime")
        out.append({**condition,
                    "lastTransitionTime": previous["lastTransitionTime"] if keep and previous
                    else now})
    return out


def same(a: Status | None, b: Status | None) -> bool:
    """Equal as the API would store them (missing and empty are the same)."""
    if not a or not b:  # a first write: one side has nothing (no copies made to say so)
        return _empty(a) and _empty(b)
    return a == b or bool(_clean(a) == _clean(b))


def _empty(status: Status | None) -> bool:
    """``_clean(status or {}) == {}``: every value empty."""
    return not status or all(v in (None, [], {}) for v in status.values())


def covers(current: Status | None, written: Status) -> bool:
    """``current`` (what the API holds) still says everything ``written`` said: the same
    values, lists of the same length; fields the API added (defaults such as a load-balancer
    ingress's ``ipMode``) do not count as a change."""
    return _covers(_clean(current or {}), _clean(written))


def _covers(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and _covers(have[k], v)
                                              for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(
            _covers(h, w) for h, w in zip(have, want, strict=True))
    return bool(have == want)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v not in (None, [], {})}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
