"""Names of the Gateway API kinds Podway reads: group, plural, scope, the versions upstream
serves them at (standard and experimental channels), and which served version to prefer.

Shared by the Kubernetes source (which kinds to watch once their CRD exists) and the emulator
(which CRDs to install). Data only.
"""

from __future__ import annotations

import re

from podway.model.gateway import GROUP
from podway.model.kinds import CRDS

__all__ = ["GROUP", "KINDS", "crd_name", "preferred", "version_rank"]

# kind -> (plural, namespaced, versions upstream serves; the first is the storage version): the
# Gateway API rows of the kinds table (podway.model.kinds).
KINDS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    k.name: (k.plural, k.namespaced, k.versions) for k in CRDS if k.group == GROUP}

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_rank(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, then by number (v1 > v1beta2 > v1alpha3)."""
    match = _VERSION.match(version)
    if match is None:
        return (-1, 0, 0)
    stage = {"alpha": 0, "beta": 1, None: 2}[match[2]]
    return (stage, int(match[1]), int(match[3] or 0))


def preferred(versions: list[str]) -> str | None:
    """The most stable of the served versions."""
    return max(versions, key=version_rank) if versions else None


def crd_name(kind: str) -> str:
    return f"{KINDS[kind][0]}.{GROUP}"
