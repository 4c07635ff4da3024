"""Readable, deterministic dumps of built resources (golden files, ``--dump``, debugging).

Private keys are replaced by ``<redacted>``: dumps end up in files, logs and bug reports.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from podway.envoy import types
from podway.envoy.config import Resources

REDACTED = "<redacted>"


def to_data(resources: Resources, type_url: str) -> list[dict[str, Any]]:
    """One type's resources as JSON-ready dicts, sorted by name, keys redacted."""
    out = []
    for name in sorted(resources.get(type_url, {})):
        message = resources[type_url][name].message
        data = json_format.MessageToDict(message, preserving_proto_field_name=True)
        out.append(_redact(data))
    return out


def to_json(resources: Resources, type_url: str) -> str:
    return json.dumps(to_data(resources, type_url), indent=2, sort_keys=True) + "\n"


def files(resources: Resources) -> dict[str, str]:
    """``{"listeners.json": ..., "routes.json": ...}``: one file per xDS type; scopes only
    when there are any (a scoped route table is for large listeners only), filter configs
    only when a route uses one (otherwise the JWT filter's holds no provider)."""
    out = {f"{types.SHORT_NAMES[t]}.json": to_json(resources, t) for t in types.PUSH_ORDER
           if t not in (types.SCOPE, types.EXTENSION) or resources.get(t)}
    extensions = resources.get(types.EXTENSION, {})
    if '"providers"' not in out.get("extensions.json", '"providers"') and len(extensions) < 2:
        del out["extensions.json"]
    return out


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        # private keys, key sets (a JWKS may hold symmetric keys), OIDC client and session
        # secrets
        return {k: (REDACTED if k in ("private_key", "local_jwks", "generic_secret")
                    else _redact(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value
