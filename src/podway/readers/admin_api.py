"""The local admin endpoint of a running Podway: its state as JSON, and ``explain`` live.

``AdminServer`` serves plain HTTP on a unix socket, never TCP: the socket is bound in a folder
only the running user can enter (0700; an existing folder with group or other access is
refused) and narrowed to 0600 before it listens, so only that user (and root) can read the IR,
statuses and xDS. A socket another live Podway answers on is refused, never taken over; one
left by a dead process is replaced. Endpoints:

* ``GET /state`` — generation, version, backend mode, the IR (``podway.ir.dump``), the status
  document (as the status file) and the engine's refusals;
* ``GET /config`` — the IR and every xDS resource as JSON (secrets by name and digest only:
  a private key never leaves the process), the kernel engine's nftables ruleset (``kernel``)
  and the HAProxy engine's ``haproxy.cfg`` with its maps (``haproxy``) when one runs here, or
  on a controller, each remote HAProxy engine's as it last reported them (``haproxy`` by node);
* ``GET /health`` — the engines' live member health per pool (a local Envoy's admin
  ``/clusters``, and what every engine reported: ``podway.readers.engine_health``);
* ``GET /explain?url=…&header=…&method=…&sni=…&source_ip=…`` — ``podway.readers.explain`` over the
  current state with live health; bad input answers 400 with ``{"error": "…"}``. Without a
  known engine (neither ``engine_admin`` nor ``engine_views``) the answer carries ``notes``
  saying that members show readiness only.

Readers only: it takes ``pipeline.state`` (an immutable value) per request and never reaches into
the pipeline. The client half (``get_json``) is what ``podway explain|status|config
--admin-socket`` use; the web dashboard can reuse the same JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import ClientError, ClientSession, UnixConnector, web
from google.protobuf.json_format import MessageToDict

from podway.base.errors import PodwayError
from podway.envoy import types
from podway.envoy.config import Resource
from podway.envoy.engine import admin
from podway.haproxy.render import Rendered
from podway.ir.dump import to_data
from podway.pipeline import Pipeline, State
from podway.readers.admin_socket import NOT_YET, bind, check_socket, close
from podway.readers.engine_health import EngineViews, explain_health
from podway.readers.explain import Context, Health, QueryError, explain, parse
from podway.readers.surfaces import SOCKET_NAME as surfaces_socket_name
from podway.status.document import of_state

log = logging.getLogger(__name__)

# (in an instance's private state folder; defined beside the surfaces, which need no aiohttp)
SOCKET_NAME = surfaces_socket_name
NO_ENGINE_NOTE = ("no engine's member health is known to this Podway (no engine has reported "
                  "it here, and no co-located engine's admin is named: `podway controller "
                  "--engine-admin unix:PATH`): members show Kubernetes readiness only, not the "
                  "engines' live health")


class AdminUnavailable(PodwayError):
    """The admin endpoint cannot be reached or answered with an error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminOptions:
    socket: Path
    mode: str = ""  # the backend mode, shown by explain
    # The engine's admin address (its health feeds explain); None: no engine is known to this
    # process (a controller's engines are remote), and explain says so in a note.
    engine_admin: Callable[[], str | None] | None = None
    # Every engine's member health by node (``podway.readers.engine_health``: what remote
    # engines reported, or the views of the engines this process supervises); None: none.
    engine_views: EngineViews | None = None
    # The kernel engine's installed nftables ruleset (``podway.kernel``); None: no kernel
    # engine here, or nothing installed yet. Shown by ``/config`` as ``kernel``.
    kernel_ruleset: Callable[[], str | None] | None = None
    # The HAProxy engine's rendering it serves now (``podway.haproxy``); None: no HAProxy
    # here, or nothing applied yet. Shown by ``/config`` as ``haproxy``.
    haproxy_rendered: Callable[[], Rendered | None] | None = None
    # What remote engines reported they serve, by node (a controller's HAProxy engines:
    # ``MemberHealthReports.configs``). Shown by ``/config`` as ``haproxy``, by node.
    engine_configs: Callable[[], Mapping[str, Mapping[str, str]]] | None = None


class AdminServer:
    """Serves one pipeline's state on a private unix socket until cancelled."""

    def __init__(self, pipeline: Pipeline, opts: AdminOptions) -> None:
        self.pipeline = pipeline
        self.opts = opts
        self._state_cache: tuple[int, dict[str, Any]] | None = None  # (version, /state JSON)

    async def run(self, sock: socket.socket | None = None) -> None:
        """Serve until cancelled: on ``sock`` (bound and listening on ``opts.socket``, as
        ``podway.readers.admin_socket.bind`` makes it; then served from here on), else on a
        socket bound here. The socket file is removed at the end."""
        path = self.opts.socket
        bound_here = sock is None
        if sock is None:
            check_socket(path)
            sock = bind(path)
        app = web.Application()
        app.router.add_get("/state", self._state)
        app.router.add_get("/config", self._config)
        app.router.add_get("/health", self._health)
        app.router.add_get("/explain", self._explain)
        runner = web.AppRunner(app, access_log=None)
        try:
            await runner.setup()
            await web.SockSite(runner, sock).start()
            if bound_here:
                log.info("admin endpoint on unix:%s", path)
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            close(sock, path)

    def _current(self) -> State:
        state = self.pipeline.state
        if state is None:
            raise web.HTTPServiceUnavailable(text=json.dumps({"error": NOT_YET}),
                                             content_type="application/json")
        return state

    async def _state(self, request: web.Request) -> web.Response:
        state = self._current()
        if self._state_cache is None or self._state_cache[0] != state.version:
            # Built once per state: pollers (status --watch, a dashboard) cost nothing more.
            self._state_cache = (state.version, state_data(state, mode=self.opts.mode))
        return web.json_response(self._state_cache[1])

    async def _config(self, request: web.Request) -> web.Response:
        state = self._current()
        data: dict[str, Any] = {"generation": state.generation, "ir": to_data(state.ir),
                                "xds": xds_data({t: self.pipeline.cache.get(t).resources
                                                 for t in types.PUSH_ORDER})}
        kernel = self.opts.kernel_ruleset() if self.opts.kernel_ruleset is not None else None
        if kernel is not None:
            data["kernel"] = kernel
        rendered = self.opts.haproxy_rendered() if self.opts.haproxy_rendered is not None \
            else None
        if rendered is not None:
            data["haproxy"] = haproxy_data(rendered)
        remote = self.opts.engine_configs() if self.opts.engine_configs is not None else {}
        if remote and rendered is None:
            data["haproxy"] = {node: {"config": files.get("haproxy.cfg", ""),
                                      "maps": {k: v for k, v in sorted(files.items())
                                               if k != "haproxy.cfg"}}
                               for node, files in sorted(remote.items())}
        return web.json_response(data)

    async def _health(self, request: web.Request) -> web.Response:
        health = await self._live_health()
        return web.json_response({"known": health is not None,
                                  "pools": {k: dict(v) for k, v in (health or {}).items()}})

    async def _explain(self, request: web.Request) -> web.Response:
        q = request.query
        try:
            query = parse(q.get("url", ""), headers=q.getall("header", []),
                          method=q.get("method", "GET"), sni=q.get("sni") or None,
                          source_ip=q.get("source_ip") or None)
        except QueryError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        state = self._current()
        health = await self._live_health()
        context = Context(problems=state.problems, mode=self.opts.mode, health=health,
                          refused={r.resource: r.message for r in state.rejections
                                   if r.resource})
        data = explain(state.ir, query, context).to_data()
        if health is None:
            data["notes"] = [NO_ENGINE_NOTE]
        return web.json_response(data)

    async def _live_health(self) -> Health | None:
        """The local Envoy's admin flags and every engine's reported view, as one; None
        when no engine is known (no admin, no engine has reported)."""
        found = await self._admin_health()
        views = await self.opts.engine_views() if self.opts.engine_views is not None else {}
        if not views:
            return found
        return explain_health(views, also=found)

    async def _admin_health(self) -> Health | None:
        address = self.opts.engine_admin() if self.opts.engine_admin is not None else None
        if address is None:
            return None
        try:
            status, body = await admin.request(address, "/clusters?format=json")
            return parse_clusters(json.loads(body)) if status == 200 else None
        except (OSError, TimeoutError, ValueError):
            return None


def haproxy_data(rendered: Rendered) -> dict[str, Any]:
    """The HAProxy engine's ``haproxy.cfg`` and its maps (``path`` → rows, one ``key value``
    a line, as the map files hold them). Certificate files are not shown: they hold private
    keys; the configuration names them."""
    return {"config": rendered.config,
            "maps": {path: "".join(f"{k} {v}\n" for k, v in rows)
                     for path, rows in sorted(rendered.maps.items())}}


def xds_data(resources: Mapping[str, Mapping[str, Resource]]) -> dict[str, Any]:
    """xDS resources by type (``Listener``, ``Cluster``, …) as JSON-ready dicts; a secret by
    name and digest only, so a private key never leaves the process."""
    out: dict[str, Any] = {}
    for type_url in types.PUSH_ORDER:
        items = resources.get(type_url, {})
        name = type_url.rsplit(".", 1)[-1]
        if name == "Secret":
            out[name] = [{"name": r.name, "digest": r.digest} for r in items.values()]
        else:
            # Through JSON: packed ``Any`` fields come back as OrderedDicts YAML cannot show.
            out[name] = [json.loads(json.dumps(MessageToDict(
                r.message, preserving_proto_field_name=True))) for r in items.values()]
    return out


def state_data(state: State, *, mode: str = "") -> dict[str, Any]:
    """The JSON of ``GET /state``."""
    return {
        "generation": state.generation,
        "version": state.version,
        "mode": mode,
        "ir": to_data(state.ir),
        "status": of_state(state).to_data(),
        "rejections": [{"node": r.node, "type": r.type_name, "resource": r.resource,
                        "version": r.version, "message": r.message}
                       for r in state.rejections],
    }


def parse_clusters(data: Any) -> dict[str, dict[str, str]]:
    """Envoy's ``/clusters?format=json`` → pool → ``address:port`` → health flags.

    Flags are ``healthy`` or Envoy's failure flags joined with ``/`` (``failed_active_hc``,
    ``failed_outlier_check``, ``failed_eds_health``, ``pending_dynamic_removal``, …).
    """
    out: dict[str, dict[str, str]] = {}
    for cluster in (data or {}).get("cluster_statuses", []):
        hosts: dict[str, str] = {}
        for host in cluster.get("host_statuses", []):
            sock = host.get("address", {}).get("socket_address", {})
            address, port = sock.get("address", ""), sock.get("port_value", 0)
            key = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
            flags = [k for k, v in host.get("health_status", {}).items()
                     if v is True and k != "eds_health_status"]
            eds = host.get("health_status", {}).get("eds_health_status", "HEALTHY")
            if eds not in ("HEALTHY", "UNKNOWN"):
                flags.append(f"eds_{eds.lower()}")
            hosts[key] = "/".join(sorted(flags)) or "healthy"
        out[cluster.get("name", "")] = hosts
    return out


async def get_json(socket: Path, path: str, params: list[tuple[str, str]] | None = None,
                   *, limit_s: float = 10.0) -> Any:
    """``GET path`` on a running Podway's admin socket; its JSON, or ``AdminUnavailable``."""
    url = "http://podway" + path + (f"?{urlencode(params)}" if params else "")
    try:
        async with asyncio.timeout(limit_s), ClientSession(
                connector=UnixConnector(path=str(socket))) as session, \
                session.get(url) as response:
            data = await response.json(content_type=None)
            if response.status != 200:
                error = data.get("error") if isinstance(data, dict) else None
                raise AdminUnavailable(error or f"admin endpoint answered {response.status}")
            return data
    except (FileNotFoundError, ConnectionRefusedError):
        raise AdminUnavailable(f"cannot reach the admin socket {socket}: no Podway runs there "
                               "(start `podway run` or `podway controller --admin-socket "
                               "PATH`, or give --manifests DIR to read a folder)") from None
    except (ClientError, OSError, TimeoutError, ValueError) as exc:
        raise AdminUnavailable(f"cannot reach the admin socket {socket}: "
                               f"{exc or type(exc).__name__}") from None
