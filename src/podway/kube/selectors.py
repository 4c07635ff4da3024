"""Label and field selectors, parsed the way the API server reads the query parameters.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``,
comma-separated (all must hold). Field selectors: ``path=value``, ``path==value``,
``path!=value`` on dotted paths (``metadata.name``, ``spec.nodeName``, ``type``); a missing field
reads as "". A malformed selector is a ``SelectorError`` (HTTP 400).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]

_SET_TERM = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


class SelectorError(ValueError):
    """A selector the server would reject: HTTP 400."""


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t.strip() for t in terms if t.strip()]


def label_selector(text: str) -> Predicate:
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_terms(text):
        checks.append(_label_term(term))

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)
    return matches


def _label_term(term: str) -> Callable[[dict[str, str]], bool]:
    if match := _SET_TERM.match(term):
        key, op, values = match[1], match[2], {v.strip() for v in match[3].split(",")}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    for op in ("!=", "==", "="):
        if op in term:
            key, _, value = (p.strip() for p in term.partition(op))
            if not key:
                raise SelectorError(f"bad label selector term {term!r}")
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if term.startswith("!"):
        key = term[1:].strip()
        return lambda labels: key not in labels
    if not re.fullmatch(r"[\w./-]+", term):
        raise SelectorError(f"bad label selector term {term!r}")
    return lambda labels: term in labels


def field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return "" if value is None else str(value)


def field_selector(text: str) -> Predicate:
    checks: list[tuple[str, bool, str]] = []
    for term in _split_terms(text):
        for op in ("!=", "==", "="):
            if op in term:
                path, _, value = (p.strip() for p in term.partition(op))
                checks.append((path, op != "!=", value))
                break
        else:
            raise SelectorError(f"bad field selector term {term!r}")

    def matches(obj: dict[str, Any]) -> bool:
        return all((field_value(obj, path) == value) == equal for path, equal, value in checks)
    return matches
