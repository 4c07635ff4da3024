"""ingress-nginx ``auth-url`` (``AuthRequest``) as nginx's ``auth_request`` does it: a Lua
subrequest (``envoy.filters.http.lua``, ``httpCall``) to exactly the URL given.

Envoy's ext_authz HTTP client sends ``path_prefix`` + the request's path, so a URL such as
oauth2-proxy's ``/oauth2/auth`` cannot be asked as written; a Lua ``httpCall`` sends any
method, path and headers to a cluster and hands the answer back to the script. The script
(one per route, its values as Lua string literals) asks the auth pool with the request's
headers (no body) and the ones ingress-nginx adds, then: 2xx → the request goes on with the
``response_headers`` of the answer (a client's own values of those removed); 401 → 401 with
the answer's ``WWW-Authenticate``, or a 302 to the sign-in URL; 403 → 403; anything else, an
error of the script or no answer → 500 (nginx's answer when the subrequest fails). The whole
check runs under ``pcall``: a Lua error never lets the request through (Envoy would
otherwise continue the request after a script error).

The filter sits on every manager switched off, as the other optional filters
(``podway.envoy.config.access``), in the authentication slot.
"""

from __future__ import annotations

from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from google.protobuf import any_pb2

from podway.envoy.config import lua
from podway.envoy.config.lua import lua_string
from podway.ir import AuthRequest

AUTH_REQUEST_FILTER = "podway.lua.auth_request"
# Request headers not sent to the auth service: the body's framing (no body is sent) and
# the hop-by-hop ones; the pseudo-headers are set from the auth URL.
_NOT_SENT = ("content-length", "transfer-encoding", "connection", "keep-alive", "upgrade",
             "expect", "te", "host")


def manager_filter() -> hcm.HttpFilter:
    return lua.manager_filter(AUTH_REQUEST_FILTER)


def per_route(f: AuthRequest) -> any_pb2.Any:
    return lua.per_route(script(f))


def script(f: AuthRequest) -> str:
    headers = "{" + ", ".join(lua_string(h) for h in f.response_headers) + "}"
    skipped = "{" + ", ".join(f"[{lua_string(h)}] = true" for h in _NOT_SENT) + "}"
    return f"""-- podway: auth-url {f.source}
local CLUSTER = {lua_string(f.pool)}
local AUTHORITY = {lua_string(f.authority)}
local PATH = {lua_string(f.path)}
local METHOD = {lua_string(f.method)}
local SIGNIN = {lua_string(f.signin)}
local REDIRECT = {lua_string(f.redirect)}
local COPIED = {headers}
local SKIPPED = {skipped}
local TIMEOUT_MS = {f.timeout_ms}
{_BODY}"""


_BODY = """
local function escape(text)
  return (string.gsub(text, "[^%w%-%._~]", function(c)
    return string.format("%%%02X", string.byte(c))
  end))
end

local function expand(url, vars)
  return (string.gsub(url, "%$({?)([%a_][%w_]*)(}?)", function(open, name, close)
    local value = vars[name]
    if value == nil or (open == "{") ~= (close == "}") then
      return nil
    end
    return value
  end))
end

local function check(handle)
  local h = handle:headers()
  local method = h:get(":method") or "GET"
  local scheme = h:get(":scheme") or "http"
  local host = h:get(":authority") or ""
  local uri = h:get(":path") or "/"
  local ask = {}
  for name, value in pairs(h) do
    if string.sub(name, 1, 1) ~= ":" and not SKIPPED[name] then
      if ask[name] ~= nil then  -- cookies of an HTTP/2 request come one per header
        ask[name] = ask[name] .. (name == "cookie" and "; " or ", ") .. value
      else
        ask[name] = value
      end
    end
  end
  local peer = handle:streamInfo():downstreamRemoteAddress() or ""
  ask[":method"] = METHOD ~= "" and METHOD or "GET"  -- nginx's subrequests are GET
  ask[":path"] = PATH
  ask[":authority"] = AUTHORITY
  ask["x-original-url"] = scheme .. "://" .. host .. uri
  ask["x-original-method"] = method
  ask["x-auth-request-redirect"] = REDIRECT ~= "" and REDIRECT or uri
  ask["x-sent-from"] = "nginx-ingress-controller"
  ask["x-real-ip"] = string.match(peer, "^%[?([^%]]*)%]?:%d+$") or peer
  local answer = handle:httpCall(CLUSTER, ask, "", TIMEOUT_MS)
  local status = tonumber(answer and answer[":status"] or "") or 0
  if status >= 200 and status < 300 then
    local request = handle:headers()  -- (the map of before the call may not outlive it)
    for _, name in ipairs(COPIED) do
      request:remove(name)
      local value = answer[name]
      if value ~= nil and value ~= "" then
        request:add(name, value)
      end
    end
    return nil
  end
  if status == 401 and SIGNIN ~= "" then
    local bare = string.match(host, "^(%[[^%]]*%])") or string.match(host, "^([^:]*)") or host
    local vars = {scheme = scheme, pass_access_scheme = scheme, host = string.lower(bare),
                  http_host = host, best_http_host = host, request_uri = uri,
                  escaped_request_uri = escape(uri)}
    return {[":status"] = "302", ["location"] = expand(SIGNIN, vars),
            ["www-authenticate"] = answer["www-authenticate"]}  -- nginx keeps it too
  end
  if status == 401 then
    return {[":status"] = "401", ["www-authenticate"] = answer["www-authenticate"]}
  end
  if status == 403 then
    return {[":status"] = "403"}
  end
  return {[":status"] = "500"}
end

function envoy_on_request(handle)
  local ok, reply = pcall(check, handle)
  if not ok then
    handle:logErr("podway auth-url check failed: " .. tostring(reply))
    reply = {[":status"] = "500"}
  end
  if reply ~= nil then
    handle:respond(reply, "")
  end
end
"""
