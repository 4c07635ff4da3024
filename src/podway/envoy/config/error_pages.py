"""ingress-nginx ``custom-http-errors`` + ``default-backend`` (``ErrorPages``) as nginx serves
them: the listed answer is replaced, status included, by the default backend's.

Envoy's ``custom_response`` filter redirects to another route but keeps the original status
and cannot send ``X-Original-URI``; so a Lua filter (``envoy.filters.http.lua``): on the request
it notes what the error backend is told (URI, Host, method, Accept, request id, in the
stream's dynamic metadata); on a listed response status it asks the default backend's pool
(``httpCall``, ``GET /`` with ingress-nginx's ``X-*`` headers) and replaces the status, the
headers and the body with its answer (an error backend without members: Envoy's own 503
in its place); no answer at all keeps the original one — error pages restrict nothing.

The filter sits on every manager switched off, as the other optional filters.
"""

from __future__ import annotations

from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from google.protobuf import any_pb2

from podway.envoy.config import lua
from podway.envoy.config.lua import lua_string
from podway.ir import ErrorPages

ERROR_PAGES_FILTER = "podway.lua.error_pages"


def manager_filter() -> hcm.HttpFilter:
    return lua.manager_filter(ERROR_PAGES_FILTER)


def per_route(f: ErrorPages) -> any_pb2.Any:
    return lua.per_route(script(f))


def script(f: ErrorPages) -> str:
    codes = "{" + ", ".join(f'["{c}"] = true' for c in f.codes) + "}"
    return f"""-- podway: custom-http-errors {",".join(str(c) for c in f.codes)}
local CLUSTER = {lua_string(f.pool)}
local CODES = {codes}
local FIXED = {{["x-namespace"] = {lua_string(f.namespace)},
  ["x-ingress-name"] = {lua_string(f.ingress)}, ["x-service-name"] = {lua_string(f.service)},
  ["x-service-port"] = {lua_string(f.port)}}}
local TIMEOUT_MS = {f.timeout_ms}
{_BODY}"""


_BODY = """local KEY = "podway.error_pages"

function envoy_on_request(handle)
  local h = handle:headers()
  local meta = handle:streamInfo():dynamicMetadata()
  meta:set(KEY, "uri", h:get(":path") or "/")
  meta:set(KEY, "host", h:get(":authority") or "")
  meta:set(KEY, "method", h:get(":method") or "GET")
  meta:set(KEY, "accept", h:get("accept") or "")
  meta:set(KEY, "id", h:get("x-request-id") or "")
end

local function replace(handle, status)
  local had_body = handle:body() ~= nil  -- held whole (else it streams on during the call)
  local saved = handle:streamInfo():dynamicMetadata():get(KEY) or {}
  local uri = saved["uri"] or "/"
  local query = string.match(uri, "%?.*$") or ""  -- nginx's rewrite to / keeps the query
  local ask = {[":method"] = saved["method"] or "GET", [":path"] = "/" .. query,
               [":authority"] = saved["host"] or "", ["x-code"] = status,
               ["x-format"] = saved["accept"] or "", ["x-original-uri"] = saved["uri"] or "/",
               ["x-request-id"] = saved["id"] or ""}
  for name, value in pairs(FIXED) do
    ask[name] = value
  end
  for name, value in pairs(ask) do
    if value == "" and string.sub(name, 1, 1) ~= ":" then
      ask[name] = nil  -- as nginx: a header set to an empty value is not sent
    end
  end
  local answer, body = handle:httpCall(CLUSTER, ask, "", TIMEOUT_MS)
  local code = answer and answer[":status"]
  if code == nil then
    return  -- no answer at all: the original stays
  end
  local h = handle:headers()
  local names = {}
  for name, _ in pairs(h) do
    if string.sub(name, 1, 1) ~= ":" then
      names[#names + 1] = name
    end
  end
  for _, name in ipairs(names) do
    h:remove(name)
  end
  h:replace(":status", code)
  for name, value in pairs(answer) do
    if string.sub(name, 1, 1) ~= ":" and name ~= "content-length"
        and name ~= "transfer-encoding" and name ~= "x-envoy-upstream-service-time" then
      h:add(name, value)
    end
  end
  body = body or ""
  if not had_body then
    body = ""  -- the original had no body (HEAD): none can be put in its place
  else
    handle:body():setBytes(body)  -- (the buffer of before the call does not outlive it)
  end
  h:replace("content-length", tostring(string.len(body)))
end

function envoy_on_response(handle)
  local status = handle:headers():get(":status")
  if status == nil or not CODES[status] then
    return
  end
  local ok, err = pcall(replace, handle, status)
  if not ok then
    handle:logErr("podway custom-http-errors: " .. tostring(err))
  end
end
"""
