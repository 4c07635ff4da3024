"""The dashboard web app: one page, its assets, its JSON, its live updates, its explain links.

``make_app`` takes a *state provider* (anything with ``state`` and ``states()``: the pipeline
of ``run`` or of the controller) and, optionally, where the engine's admin answers and an
explain function; it returns an aiohttp application that either process mounts on its own port.

Routes: ``/`` (the page), ``/static/<asset>`` (a fixed set of package files: no CDN, no build
step), ``/api/state`` (the view document, ``podway.readers.dashboard.view``), ``/api/events``
(server-sent events: one ``data:`` line of the document per change), ``/explain?url=…``.

Invariants:

* One ``Hub`` per app builds the document while someone watches (an event stream is open, or
  ``/api/state`` was asked recently): at each new state, and every ``refresh_s``, when it also
  samples the engine (two admin requests, bounded by ``scrape_limit_s``). Nobody watching: no
  engine traffic and no document built; the next viewer gets one built for them.
* A stream gets the newest document, never a backlog; identical documents are not re-sent.
* Shutting the app down ends every open stream at once (no handler waits for a timeout).
* Only requests for this server are answered (DNS rebinding): the ``Host`` header must be a
  loopback name (``localhost``, ``*.localhost``), an IP literal, or one of
  ``DashboardOptions.hosts`` (the address it binds); anything else is 421 with no document. A
  request that changes something (any method but GET/HEAD/OPTIONS) must also come from this
  origin: an ``Origin`` naming another host, or ``Sec-Fetch-Site: cross-site``, is 403.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from importlib import resources
from types import MappingProxyType
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from podway.base.tasks import cancel_and_wait
from podway.pipeline import Rejection, State
from podway.readers.dashboard import engine_view, view
from podway.readers.engine_health import EngineViews, member_texts

log = logging.getLogger(__name__)

AdminAddress = Callable[[], str | None]  # the engine's admin address now; None: not running
# An engine's traffic figures at a monotonic time (None: it did not answer).
EngineSample = Callable[[float], Awaitable[engine_view.Sample | None]]
# (state, URL, live member health: pool → "address:port" → "healthy" or why not; None: not
# known) → the explain report as text
Explainer = Callable[[State, str, Mapping[str, Mapping[str, str]] | None], str]

_ASSETS = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
_MAX_URL = 2048


class StateProvider(Protocol):
    @property
    def state(self) -> State | None: ...

    def states(self) -> AsyncIterator[State]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class DashboardOptions:
    view: view.ViewOptions = field(default_factory=view.ViewOptions)
    scrape_limit_s: float = 2.0  # one admin request's limit
    nack_history: int = 50  # refusals remembered after they clear
    # Host names (besides loopback names and IP literals) the page may be asked for: the
    # address the dashboard binds, and names an operator reaches it by.
    hosts: tuple[str, ...] = ()


class Hub:
    """Builds the view document and wakes the streams that wait for a newer one."""

    def __init__(self, provider: StateProvider, *, options: DashboardOptions,
                 engine_admin: AdminAddress | None,
                 engine_views: EngineViews | None = None,
                 engine_sample: EngineSample | None = None) -> None:
        self.provider = provider
        self.options = options
        self.engine_admin = engine_admin
        # The traffic figures of an engine with no Envoy admin (HAProxy's counters).
        self.engine_sample = engine_sample
        self.engine_views = engine_views  # every engine's member health (engine_health)
        self.reporting = False  # some engine reported its view at the last sample
        self.live: dict[str, dict[str, str]] | None = None  # the last sample, as explain reads it
        self.document: dict[str, Any] = view.build(None, options=options.view)
        self.encoded = json.dumps(self.document).encode()  # once per document, not per stream
        self.seq = 1
        self.watchers = 0
        self._asked_at = -1e9  # monotonic time of the last /api/state
        self._changed = asyncio.Event()
        self._closed = False
        self._samples: tuple[engine_view.Sample | None, engine_view.Sample | None] = (None, None)
        self._nacks: deque[view.SeenRejection] = deque(maxlen=options.nack_history)
        self._known: set[Rejection] = set()
        self._stale = False  # a state came while nobody watched: build before showing

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow(), name="dashboard-states")
            group.create_task(self._tick(), name="dashboard-engine")

    async def _follow(self) -> None:
        async for state in self.provider.states():
            self._note_rejections(state)
            if self.watched():
                self._rebuild()
            else:
                self._stale = True

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.options.view.refresh_s)
            if self.watched():
                await self._sample()
                self._rebuild()

    def watched(self) -> bool:
        recent = time.monotonic() - self._asked_at < 2 * self.options.view.refresh_s
        return self.watchers > 0 or recent

    def asked(self) -> None:
        self._asked_at = time.monotonic()

    async def look(self) -> None:
        """Sample the engine and rebuild now (a first look when nobody was watching)."""
        await self._sample()
        self._rebuild()

    async def _sample(self) -> None:
        address = self.engine_admin() if self.engine_admin else None
        state = self.provider.state
        checked = state is not None and any(
            p.settings.health_check is not None for p in state.ir.pools.values())
        now = None
        if address:
            try:
                now = await engine_view.sample(address, now=time.monotonic(), health=checked,
                                               limit_s=self.options.scrape_limit_s)
            except (OSError, TimeoutError) as exc:
                log.debug("dashboard: engine admin did not answer: %s", exc)
        elif self.engine_sample is not None:
            now = await self.engine_sample(time.monotonic())
        if self.engine_views is not None:
            views = await self.engine_views()
            self.reporting = bool(views)
            if views:
                now = with_views(now, views, at=time.monotonic())
        self.live = None if now is None else live_health(now)
        self._samples = (self._samples[1], now)

    def _note_rejections(self, state: State) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        for rejection in state.rejections:
            if rejection not in self._known:
                self._nacks.appendleft(view.SeenRejection(at=stamp, rejection=rejection))
        self._known = set(state.rejections)

    def fresh(self) -> None:
        """Build the document now if a state came while nobody watched."""
        if self._stale:
            self._rebuild()

    def _rebuild(self) -> None:
        self._stale = False
        before, now = self._samples
        options = self.options.view
        if self.reporting and not options.engine_known:
            options = dataclasses.replace(options, engine_known=True)
        document = view.build(self.provider.state, options=options, now=now,
                              before=before, nacks=tuple(self._nacks))
        if document != self.document:
            self.document = document
            self.encoded = json.dumps(document).encode()
            self.seq += 1
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def newer(self, seq: int, *, wait_s: float) -> tuple[int, bytes] | None:
        """The document (JSON) once it is newer than ``seq``; None after ``wait_s`` or on
        close."""
        if self.seq > seq:
            return self.seq, self.encoded
        if self._closed:
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._changed.wait()
        return (self.seq, self.encoded) if self.seq > seq and not self._closed else None

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    @property
    def closed(self) -> bool:
        return self._closed


def with_views(sample: engine_view.Sample | None, views: Mapping[str, Any], *,
               at: float) -> engine_view.Sample:
    """``sample`` (a local Envoy's, or none) with every engine's reported member health: a
    member one engine finds unhealthy is unhealthy, the reason naming that engine."""
    hosts = dict(sample.hosts) if sample is not None else {}
    for key, text in member_texts(views).items():
        before = hosts.get(key)
        if text != "healthy":
            reason = text if before is None or before.healthy else f"{before.reason}; {text}"
            hosts[key] = engine_view.HostHealth(healthy=False, reason=reason)
        elif before is None:
            hosts[key] = engine_view.HostHealth(healthy=True)
    if sample is None:
        return engine_view.Sample(taken_at=at, hosts=MappingProxyType(hosts))
    return dataclasses.replace(sample, hosts=MappingProxyType(hosts))


def live_health(sample: engine_view.Sample) -> dict[str, dict[str, str]]:
    """A sample's member health as explain reads it (``healthy``, or why not)."""
    out: dict[str, dict[str, str]] = {}
    for (pool, hostport), seen in sample.hosts.items():
        out.setdefault(pool, {})[hostport] = "healthy" if seen.healthy else seen.reason
    return out


def make_app(provider: StateProvider, *, options: DashboardOptions | None = None,
             engine_admin: AdminAddress | None = None,
             explainer: Explainer | None = None,
             engine_views: EngineViews | None = None,
             engine_sample: EngineSample | None = None) -> web.Application:
    """The dashboard, ready to mount (``web.AppRunner``) or add as a sub-app."""
    opts = options or DashboardOptions()
    hub = Hub(provider, options=opts, engine_admin=engine_admin, engine_views=engine_views,
              engine_sample=engine_sample)
    views = _Views(hub, opts, explainer)
    app = web.Application(middlewares=[_only_this_server(opts.hosts)])

    async def hub_context(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(hub.run(), name="dashboard-hub")
        task.add_done_callback(_log_failure)
        try:
            yield
        finally:
            hub.close()
            await cancel_and_wait(task)

    async def on_shutdown(_: web.Application) -> None:
        hub.close()  # open streams end now, not after the server's shutdown timeout

    app.cleanup_ctx.append(hub_context)
    app.on_shutdown.append(on_shutdown)
    app.router.add_get("/", views.page)
    app.router.add_get("/static/{name}", views.asset)
    app.router.add_get("/api/state", views.state)
    app.router.add_get("/api/events", views.events)
    app.router.add_get("/explain", views.explain)
    return app


class _Views:
    def __init__(self, hub: Hub, options: DashboardOptions, explainer: Explainer | None
                 ) -> None:
        self.hub, self.options, self.explainer = hub, options, explainer

    async def page(self, _: web.Request) -> web.Response:
        return web.Response(text=_asset("index.html"), content_type="text/html",
                            charset="utf-8")

    async def asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _ASSETS:
            raise web.HTTPNotFound(text=f"no asset {name!r}\n")
        return web.Response(text=_asset(name), content_type=_ASSETS[name], charset="utf-8")

    async def state(self, _: web.Request) -> web.Response:
        if not self.hub.watched():
            await self.hub.look()
        self.hub.asked()
        return web.Response(body=self.hub.encoded, content_type="application/json")

    async def events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        hub = self.hub
        hub.watchers += 1
        hub.fresh()
        seq = 0
        try:
            while not hub.closed:
                got = await hub.newer(seq, wait_s=15.0)
                if got is None:
                    if not hub.closed:
                        await response.write(b": keep-alive\n\n")
                    continue
                seq, encoded = got
                await response.write(b"data: " + encoded + b"\n\n")
        except ConnectionResetError:
            pass  # the browser went away
        finally:
            hub.watchers -= 1
        return response

    async def explain(self, request: web.Request) -> web.Response:
        url = request.query.get("url", "")
        if not url or len(url) > _MAX_URL or url.split("://", 1)[0] not in (
                "http", "https", "tcp", "udp"):
            raise web.HTTPBadRequest(text="explain needs ?url=http(s)://host[:port]/path "
                                          f"(at most {_MAX_URL} characters)\n")
        current = self.hub.provider.state
        report = None
        if self.explainer is not None and current is not None:
            if self.hub.live is None and self.hub.engine_views is not None:
                await self.hub.look()  # nobody watched: no sample yet
            report = self.explainer(current, url, self.hub.live)
        return web.Response(text=_explain_page(url, report, self.options),
                            content_type="text/html", charset="utf-8")


_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_allowed(host: str, names: tuple[str, ...]) -> bool:
    """Whether a ``Host`` header (``name[:port]``, ``[v6]:port``) names this server: a loopback
    name, an IP literal (a rebinding page's origin is a DNS name, never the literal) or one
    of ``names``."""
    name = _host_name(host)
    if name is None:
        return False
    if name in ("localhost", "localhost.") or name.endswith((".localhost", ".localhost.")):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name in {n.strip("[]").lower().rstrip(".") for n in names}
    return True


def _host_name(host: str) -> str | None:
    """The name of a Host header without port, lower case; None when it does not read."""
    try:
        parts = urlsplit(f"//{host.strip()}")
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        return None
    name = parts.hostname
    if not name or parts.username is not None or parts.path:
        return None
    return name.lower()


def _only_this_server(names: tuple[str, ...]) -> Any:
    @web.middleware
    async def guard(request: web.Request, handler: _Handler) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        if not host_allowed(host, names):
            log.warning("dashboard: refused a request for host %r (DNS rebinding?); allowed: "
                        "loopback names, IP literals, %s", host[:100], ", ".join(names) or "-")
            raise web.HTTPMisdirectedRequest(text="this dashboard is not served under that "
                                                  "host name\n")
        if request.method not in _SAFE_METHODS:
            origin = request.headers.get("Origin")
            cross = request.headers.get("Sec-Fetch-Site") == "cross-site"
            if cross or (origin is not None
                         and urlsplit(origin).netloc.lower() != host.strip().lower()):
                raise web.HTTPForbidden(text="cross-origin request refused\n")
        return await handler(request)

    return guard


def _log_failure(task: asyncio.Task[None]) -> None:
    """A hub that failed stops updating the page: say so at once, not at shutdown."""
    if not task.cancelled() and task.exception() is not None:
        log.error("dashboard: updates stopped", exc_info=task.exception())


def _asset(name: str) -> str:
    return resources.files("podway.readers.dashboard").joinpath("static", name).read_text("utf-8")


def _explain_page(url: str, report: str | None, options: DashboardOptions) -> str:
    import shlex

    command = shlex.join(["podway", "explain", *options.view.explain_args, url])
    body = (f"<pre id='report'>{escape(report)}</pre>" if report is not None else
            "<p>This Podway has no explain built in. Run this where Podway runs:</p>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>explain</title>"
        "<link rel='stylesheet' href='/static/dashboard.css'></head><body>"
        f"<h1>Explain {escape(url)}</h1>{body}"
        f"<pre class='command' id='command'>{escape(command)}</pre>"
        "<p><a href='/'>back to the dashboard</a></p></body></html>")
