"""Hostname validation for Ingress and Gateway API; matching lives in ``podway.ir.hosts``."""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")


def valid_hostname(host: str) -> bool:
    """A lowercase DNS name, optionally with one leading ``*.`` label; no IP addresses."""
    if len(host) > 253 or not _HOST.match(host):
        return False
    last = host.rsplit(".", 1)[-1]
    return not last.isdigit()
