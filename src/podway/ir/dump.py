"""Deterministic plain-data and YAML form of the IR (golden files, ``podway validate --ir``).

Defaults and empty fields are left out so the dump reads like the config it describes; private
keys are replaced by a fingerprint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from typing import Any

import yaml

from podway.ir import IR
from podway.ir.listener import TLSCertificate, TLSOptions
from podway.ir.route import JwtProvider, Oidc, WeightedPool
from podway.model.base import ObjectRef


def to_data(value: Any, *, secrets: bool = False) -> Any:
    """Any IR node → dicts, lists and scalars, in field order, without defaults. ``secrets``:
    keep certificates, private keys and CAs (the form an engine is sent, ``to_wire``)."""
    if isinstance(value, ObjectRef):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, TLSCertificate) and not secrets:
        out = _fields(value, skip={"key_pem", "cert_pem"}, secrets=secrets)
        out["fingerprint"] = value.fingerprint
        return out
    if isinstance(value, TLSOptions) and not secrets:
        return _fields(value, skip={"client_ca_pem"}, secrets=secrets)  # ``client_ca`` names it
    if isinstance(value, JwtProvider) and value.jwks and not secrets:
        # A key set may hold symmetric (HS256) keys: named by size only.
        out = {"type": "JwtProvider", **_fields(value, skip={"jwks"}, secrets=secrets)}
        out["jwks"] = f"<{len(value.jwks)} bytes>"
        return out
    if isinstance(value, Oidc):
        # The client and session secrets: never shown, and never sent to an engine that takes
        # the IR (``to_wire``): none of them serves OIDC (they refuse such a route).
        return {"type": "Oidc", **_fields(value, skip={"client_secret", "hmac_secret"})}
    if isinstance(value, WeightedPool) and value.pool is None:
        # A share answered with a status: the status is the whole meaning, never elide it.
        share: dict[str, Any] = {"status": value.status}
        if value.weight != 1:
            share["weight"] = value.weight
        return share
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = _fields(value, skip=set(), secrets=secrets)
        kind = _action_kind(value)
        return {"type": kind, **out} if kind else out
    if isinstance(value, Mapping):
        return {str(k): to_data(v, secrets=secrets) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [to_data(v, secrets=secrets) for v in value]
    return value


def to_wire(ir: IR) -> dict[str, Any]:
    """The whole IR, secrets included, as ``podway.ir.load.from_data`` reads it back (what the
    controller sends an engine that takes the IR itself: ``podway.engines.config_feed``)."""
    return {"listeners": to_data(ir.listeners, secrets=True),
            "pools": [to_data(ir.pools[name], secrets=True) for name in sorted(ir.pools)]}


_TAGGED = {"Forward", "Redirect", "DirectResponse", "HeaderModifier", "URLRewrite", "Mirror",
           "CORS", "ClientAccess", "RateLimit", "BodyLimit",
           "BasicAuth", "ExtAuth", "Jwt", "JwtProvider", "AuthRequest", "ErrorPages",
           "Authorization", "AccessRule", "ClaimRule", "Oidc"}


def _action_kind(value: object) -> str | None:
    name = type(value).__name__
    return name if name in _TAGGED else None


# Fields shown even at their default, because leaving them out hides the meaning (match: {}).
_ALWAYS = frozenset({"path"})


def _fields(value: Any, *, skip: set[str], secrets: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(value):
        if f.name in skip:
            continue
        item = getattr(value, f.name)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if (f.name in _ALWAYS and item is not None) or (secrets and required):
            out[f.name] = to_data(item, secrets=secrets)
            continue
        if f.default is not dataclasses.MISSING and item == f.default:
            continue
        if f.default_factory is not dataclasses.MISSING and item == f.default_factory():
            continue
        if item is None or item == () or (isinstance(item, Mapping) and not item):
            continue
        out[f.name] = to_data(item, secrets=secrets)
    return out


def to_yaml(ir: IR) -> str:
    data = {"listeners": to_data(ir.listeners),
            "pools": [to_data(ir.pools[name]) for name in sorted(ir.pools)]}
    return dump_yaml(data)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100,
                          allow_unicode=True)
