"""Plain data (as written by ``podway.ir.dump``) → IR: the inverse of ``to_data``.

Golden tests of the xDS layer start from IR YAML; this reads it back into frozen IR nodes.
Tagged unions (actions, filters) carry ``type``; pools may be a list or a name-keyed mapping;
defaults are filled in. Unlike the dump, certificates need ``cert_pem`` and ``key_pem``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import Any

import yaml

from podway import ir as ir_mod
from podway.base.errors import ConfigError
from podway.ir import IR, Pool
from podway.model.base import ObjectRef

_TAGGED: dict[str, type[Any]] = {
    name: getattr(ir_mod, name)
    for name in ("Forward", "Redirect", "DirectResponse", "HeaderModifier", "URLRewrite",
                 "Mirror", "CORS", "ClientAccess", "RateLimit", "BodyLimit",
                 "BasicAuth", "ExtAuth", "Jwt", "JwtProvider", "AuthRequest", "ErrorPages",
                 "Authorization", "AccessRule", "ClaimRule", "Oidc")
}


def from_yaml(text: str) -> IR:
    data = yaml.safe_load(text) or {}
    return from_data(data)


def from_data(data: Mapping[str, Any]) -> IR:
    listeners = tuple(_build(ir_mod.Listener, item) for item in data.get("listeners") or ())
    raw_pools = data.get("pools") or ()
    items = raw_pools.values() if isinstance(raw_pools, Mapping) else raw_pools
    pools = [_build(Pool, item) for item in items]
    return IR(listeners=listeners, pools=MappingProxyType({p.name: p for p in pools}))


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(ir_mod) | {"ObjectRef": ObjectRef})
    return _HINTS[cls]


def _build(cls: type[Any], data: Any) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{cls.__name__}: expected a mapping, got {data!r}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name])
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{cls.__name__}: {exc}") from None


def _value(hint: Any, data: Any) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return data
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if data is None:
            return None
        if isinstance(data, Mapping) and "type" in data:
            cls = _TAGGED[data["type"]]
            return _build(cls, {k: v for k, v in data.items() if k != "type"})
        return _value(options[0], data)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], item) for item in data)
        return tuple(_value(a, item) for a, item in zip(args, data, strict=True))
    if hint is ObjectRef:
        kind, _, rest = str(data).partition("/")
        namespace, _, name = rest.rpartition("/")
        return ObjectRef(kind, namespace, name)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(data)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, data)
    if hint is float:
        return float(data)
    return data
