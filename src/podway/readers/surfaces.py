"""The operator's surfaces of a running pipeline: the admin endpoint and the dashboard.

``podway run`` (``podway.programs.standalone``) and ``podway controller``
(``podway.programs.controller.main``) mount the same two readers of their ``Pipeline`` through
``serve``: the admin endpoint (``podway.readers.admin_api``: state, config, live ``explain``, on a
private unix socket) and the web dashboard (``podway.readers.dashboard``, on a TCP port). Both only
read published states.

Invariants: a surface whose option is None is not served. Live member health comes from a
local Envoy's admin (``engine_admin``) and from every engine's view (``engine_views``: what the
controller's remote engines reported, or the engines ``podway run`` supervises), the same way for
Envoy, HAProxy and the kernel engine; with neither, explain and the dashboard show Kubernetes
readiness only and say that the engine's live health is not known, never guess it.
``serve`` runs until cancelled and stops every server it started, also when one fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podway.base.netaddr import HostPort, format_host_port
from podway.pipeline import Pipeline, PipelineStopped
from podway.pipeline import State as PipelineState
from podway.readers.engine_health import EngineViews

if TYPE_CHECKING:
    from aiohttp import web

    from podway.haproxy.render import Rendered
    from podway.readers.dashboard.app import EngineSample

log = logging.getLogger(__name__)

AdminAddress = Callable[[], str | None]  # the engine's admin address now; None: not running
Health = Mapping[str, Mapping[str, str]]  # pool → "address:port" → "healthy" or why not


SOCKET_NAME = "podway.sock"  # the admin endpoint's, in an instance's private state folder

@dataclass(frozen=True, slots=True, kw_only=True)
class SurfaceOptions:
    mode: str = ""  # the backend mode, shown by explain and the dashboard
    admin_socket: Path | None = None  # the admin endpoint's unix socket; None: not served
    dashboard: HostPort | None = None  # the dashboard; None: not served
    dashboard_refresh_s: float = 2.0  # how often a watched dashboard samples the engine
    # The engine's admin address (its live health and stats); None: no engine known.
    engine_admin: AdminAddress | None = None
    # Every engine's member health by node (``podway.readers.engine_health``); None: none.
    engine_views: EngineViews | None = None
    # Put before the URL in the dashboard's ``podway explain`` hints (e.g. --manifests DIR).
    explain_args: tuple[str, ...] = ()
    detailed_stats: bool = False  # the engine keeps per-pool stats
    # The kernel engine's installed ruleset (``/config``'s ``kernel``); None: no kernel engine.
    kernel_ruleset: Callable[[], str | None] | None = None
    # The HAProxy engine's rendering (``/config``'s ``haproxy``); None: no HAProxy engine.
    haproxy_rendered: Callable[[], Rendered | None] | None = None
    # The traffic figures of an engine without Envoy's admin (HAProxy's counters): the
    # dashboard's per-listener and per-pool figures.
    engine_sample: EngineSample | None = None
    # Remote engines' reported configurations by node (``/config``'s ``haproxy``).
    engine_configs: Callable[[], Mapping[str, Mapping[str, str]]] | None = None


async def serve(pipeline: Pipeline, opts: SurfaceOptions) -> None:
    """Serve the admin endpoint and the dashboard that ``opts`` ask for, until cancelled."""
    async with asyncio.TaskGroup() as group:
        if opts.admin_socket is not None:
            group.create_task(_admin(pipeline, opts, opts.admin_socket), name="admin-endpoint")
        if opts.dashboard is not None:
            group.create_task(_dashboard(pipeline, opts, opts.dashboard), name="dashboard")


async def _admin(pipeline: Pipeline, opts: SurfaceOptions, path: Path) -> None:
    """The admin endpoint on ``path``, bound at once; until the first state it answers "no
    state yet" without importing the endpoint (``podway.readers.admin_socket``)."""
    from podway.readers.admin_socket import answer_for_now, bind, check_socket, close

    check_socket(path)
    sock = bind(path)
    handed = False
    try:
        if pipeline.state is None:
            log.info("admin endpoint on unix:%s (no state yet)", path)
            interim = asyncio.create_task(answer_for_now(sock), name="admin-not-yet")
            try:
                with contextlib.suppress(PipelineStopped):
                    await pipeline.wait_for(lambda _: True)
            finally:
                interim.cancel()
                await asyncio.wait([interim])
        from podway.readers.admin_api import AdminOptions, AdminServer

        server = AdminServer(pipeline, AdminOptions(
            socket=path, mode=opts.mode, engine_admin=opts.engine_admin,
            engine_views=opts.engine_views, kernel_ruleset=opts.kernel_ruleset,
            haproxy_rendered=opts.haproxy_rendered, engine_configs=opts.engine_configs))
        handed = True
        await server.run(sock)
    finally:
        if not handed:
            close(sock, path)


async def _dashboard(pipeline: Pipeline, opts: SurfaceOptions, where: HostPort) -> None:
    from podway.readers.dashboard.app import DashboardOptions, make_app
    from podway.readers.dashboard.view import ViewOptions

    def explainer(state: PipelineState, url: str, health: Health | None) -> str:
        return explain_text(state, url, mode=opts.mode, health=health)

    app = make_app(pipeline, explainer=explainer, engine_admin=opts.engine_admin,
                   engine_views=opts.engine_views, engine_sample=opts.engine_sample,
                   options=DashboardOptions(view=ViewOptions(
                       mode=opts.mode, refresh_s=opts.dashboard_refresh_s,
                       explain_args=opts.explain_args, detailed_stats=opts.detailed_stats,
                       engine_known=opts.engine_admin is not None),
                       hosts=(where.host,)))
    await serve_until_cancelled(app, where, "dashboard")


def explain_text(state: PipelineState, url: str, *, mode: str, health: Health | None) -> str:
    """The dashboard's explain page: ``podway explain URL`` over this state, as text, with the
    engines' live member health as the dashboard last sampled it (None: no engine known)."""
    from podway.readers.explain import Context, QueryError, explain, parse
    from podway.readers.explain.render import report_text

    try:
        query = parse(url)
    except QueryError as exc:
        return f"error: {exc}"
    context = Context(problems=state.problems, mode=mode, health=health,
                      refused={r.resource: r.message for r in state.rejections if r.resource})
    from podway.readers.admin_api import NO_ENGINE_NOTE

    data = explain(state.ir, query, context).to_data()
    if health is None:
        data["notes"] = [NO_ENGINE_NOTE]
    return report_text(data)


async def serve_until_cancelled(app: web.Application, where: HostPort, what: str,
                                also: Coroutine[Any, Any, None] | None = None) -> None:
    """Serve ``app`` at ``where`` (and run ``also``) until cancelled; then stop serving."""
    from podway.readers.metrics.exposition import serve as serve_http

    try:
        runner = await serve_http(app, host=where.host, port=where.port, what=what)
    except BaseException:
        if also is not None:
            also.close()  # never started
        raise
    try:
        log.info("%s on http://%s/", what, format_host_port(where.host, where.port))
        if also is not None:
            await also
        await asyncio.Event().wait()  # until cancelled
    finally:
        if also is not None:
            also.close()  # a no-op once it ran; closes it if cancelled before it started
        await runner.cleanup()
