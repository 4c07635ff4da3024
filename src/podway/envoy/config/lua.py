"""The Lua filter wiring the per-route Lua scripts share (``auth_request``, ``error_pages``):
the filter on every manager, switched off, and a route's script switching it on; and Lua
string literals for the values a script is written with."""

from __future__ import annotations

from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.lua.v3 import lua_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from google.protobuf import any_pb2

from podway.envoy.config.common import pack


def manager_filter(name: str) -> hcm.HttpFilter:
    """The Lua filter ``name`` on a manager, switched off until a route gives it a script."""
    return hcm.HttpFilter(name=name, disabled=True, typed_config=pack(lua_pb2.Lua()))


def per_route(source: str) -> any_pb2.Any:
    """A route's config of a Lua filter: ``source`` as its inline script (switches it on)."""
    code = lua_pb2.LuaPerRoute(source_code={"inline_string": source})
    return pack(rc.FilterConfig(config=pack(code)))


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal: printable ASCII as is, every other byte (and the
    quote and backslash) as a decimal escape."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        out.append(char if 32 <= byte < 127 and char not in '"\\' else f"\\{byte:03d}")
    return '"' + "".join(out) + '"'
