"""The optional fields of a member health report and how they are read (the wire is
described in ``podway.engines.member_health``): listeners refused, objects not served exactly,
the engine's configuration. Every reader raises ``ReportError`` with one line on bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from podway.base.errors import PodwayError

MAX_TEXT = 1024  # characters in a node, group, pool or address
MAX_REASON = 200  # characters of a reason kept (it is shown in Pod conditions and logs)
MAX_REFUSED = 1000  # refused listeners in one report
MAX_FINDINGS = 1000  # objects not served exactly, in one report
MAX_CONFIG_CHARS = 2 << 20  # an engine's configuration in a report (file names and texts)


class ReportError(PodwayError):
    """A report that cannot be read."""



class Refusal(NamedTuple):
    listener: str
    seq: int  # unique per failure (the engine's clock, ns): a repeated failure is a new one
    reason: str


class Finding(NamedTuple):
    """An object the engine serves, but not exactly as asked (or not at all: ``closed``)."""

    kind: str
    namespace: str
    name: str
    message: str  # what it cannot do, in words ("the haproxy engine cannot serve ...")
    closed: bool = False


class Refused(NamedTuple):
    """A listener the engine cannot serve now, and why (``refusing``: state, not an event)."""

    listener: str
    reason: str


def config_of(raw: dict[str, Any]) -> Mapping[str, str] | None:
    value = raw.get("config")
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ReportError("'config' must map file names to texts")
    if sum(len(k) + len(v) for k, v in value.items()) > MAX_CONFIG_CHARS:
        raise ReportError(f"a configuration over {MAX_CONFIG_CHARS} characters")
    return MappingProxyType(value)


def refused_of(raw: dict[str, Any]) -> tuple[Refusal, ...]:
    out = []
    for entry in list_of(raw, "refused")[:MAX_REFUSED + 1]:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and isinstance(entry[1], int) and isinstance(entry[2], str)
                and 0 < len(entry[0]) <= MAX_TEXT):
            raise ReportError(f"bad refused entry {str(entry)[:80]}")
        out.append(Refusal(entry[0], entry[1], entry[2][:MAX_REASON]))
    if len(out) > MAX_REFUSED:
        raise ReportError(f"more than {MAX_REFUSED} refused listeners in one report")
    return tuple(out)


def findings_of(raw: dict[str, Any]) -> tuple[Finding, ...]:
    out = []
    for entry in list_of(raw, "unsupported")[:MAX_FINDINGS + 1]:
        if not (isinstance(entry, list) and len(entry) == 5
                and all(isinstance(x, str) and len(x) <= MAX_TEXT for x in entry[:4])
                and entry[0] and entry[2] and isinstance(entry[4], bool)):
            raise ReportError(f"bad unsupported entry {str(entry)[:80]}")
        out.append(Finding(entry[0], entry[1], entry[2], entry[3], entry[4]))
    if len(out) > MAX_FINDINGS:
        raise ReportError(f"more than {MAX_FINDINGS} unsupported entries in one report")
    return tuple(out)


def list_of(raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise ReportError(f"'{key}' must be a list")
    return value



def refusing_of(raw: dict[str, Any]) -> tuple[Refused, ...]:
    out = []
    for entry in list_of(raw, "refusing")[:MAX_REFUSED + 1]:
        if not (isinstance(entry, list) and len(entry) == 2
                and all(isinstance(x, str) for x in entry) and 0 < len(entry[0]) <= MAX_TEXT):
            raise ReportError(f"bad refusing entry {str(entry)[:80]}")
        out.append(Refused(entry[0], entry[1][:MAX_REASON]))
    if len(out) > MAX_REFUSED:
        raise ReportError(f"more than {MAX_REFUSED} refusing listeners in one report")
    return tuple(sorted(out))
