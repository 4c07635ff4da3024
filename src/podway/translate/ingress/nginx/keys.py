"""Reading one ingress-nginx annotation value (without ``PREFIX``) as ingress-nginx does: text,
a flag, a bounded whole number, a list, a duration, CIDRs. A value that cannot be used becomes an
``AnnotationIssue`` and the caller's default applies; nothing raises. ``annotations`` reads each
family of keys with these.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from podway.translate.ingress.nginx.values import PREFIX, AnnotationIssue, Reason, quote

_TRUE = ("1", "t", "true")
_FALSE = ("0", "f", "false")
_TIME = re.compile(r"^(\d{1,9})(ms|s|m|h)?$")
_TIME_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


@dataclass(slots=True)
class KeyReader:
    raw: dict[str, str]  # key without PREFIX → value
    issues: list[AnnotationIssue] = field(default_factory=list)

    def bad(self, key: str, message: str, reason: Reason = Reason.INVALID_ANNOTATION) -> None:
        self.issues.append(AnnotationIssue(key=PREFIX + key, reason=reason, message=message))

    def has(self, *keys: str) -> bool:
        return any(k in self.raw for k in keys)

    def text(self, key: str) -> str | None:
        value = self.raw.get(key)
        return None if value is None else value.strip()

    def flag(self, key: str, default: bool) -> bool:
        value = self.text(key)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        self.bad(key, f"{quote(value)} is not true or false; {str(default).lower()} (the "
                      "default) applies")
        return default

    def integer(self, key: str, *, low: int, high: int) -> int | None:
        value = self.text(key)
        if value is None:
            return None
        if value.isascii() and value.isdigit() and low <= int(value) <= high:
            return int(value)
        self.bad(key, f"{quote(value)} is not a whole number from {low} to {high}; not used")
        return None

    def listed(self, key: str, ok: Callable[[str], bool], what: str) -> tuple[str, ...] | None:
        """A comma-separated list; None (and an issue) when an item is not ``what``."""
        value = self.text(key)
        if value is None:
            return None
        items = tuple(dict.fromkeys(i.strip() for i in value.split(",") if i.strip()))
        wrong = [i for i in items if not ok(i)]
        if wrong:
            self.bad(key, f"{quote(wrong[0])} is not {what}; not used")
            return None
        return items

    def duration(self, key: str) -> int | None:
        value = self.text(key)
        if value is None:
            return None
        found = _TIME.match(value)
        if found is None or int(found.group(1)) == 0:
            self.bad(key, f"{quote(value)} is not a positive number of seconds; not used")
            return None
        ms = int(found.group(1)) * _TIME_MS[found.group(2)]
        if ms > 86_400_000:
            self.bad(key, f"{quote(value)} is over a day; not used")
            return None
        return ms

    def cidrs(self, key: str) -> tuple[tuple[str, ...], bool]:
        """(normalised CIDRs, whether every entry was read)."""
        value = self.text(key)
        if value is None:
            return (), True
        out: list[str] = []
        for item in (i.strip() for i in value.split(",")):
            if not item:
                continue
            try:
                out.append(str(ipaddress.ip_network(item, strict=False)))
            except ValueError:
                self.bad(key, f"{quote(item)} is not an address or CIDR")
                return tuple(dict.fromkeys(out)), False
        return tuple(dict.fromkeys(out)), True
