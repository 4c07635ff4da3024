"""``/metrics`` and ``/healthz`` for ``run`` and ``engine``: Podway's registries, then Envoy's.

One scrape of ``/metrics`` answers with every registry given (the process-wide one holds the
xDS server's and the engine supervisor's series), then, when an engine is supervised here, the
text of Envoy's own ``/stats/prometheus`` (names start ``envoy_``, Podway's ``podway_``: the
two never clash). Which Envoy stats exist is decided in the bootstrap (bounded by default,
``podway.envoy.engine.bootstrap.EnvoyStats``), so the scrape's size does not grow with the config
unless detailed stats were asked for.

``podway_engine_stats_up`` says whether Envoy answered this scrape (0: its series are missing
from this answer, not zero). The server binds where it is told; the commands allow loopback only.
"""

from __future__ import annotations

import errno
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Gauge
from prometheus_client.exposition import generate_latest

from podway.base.errors import PodwayError
from podway.base.netaddr import format_host_port
from podway.envoy.engine import admin

AdminAddress = Callable[[], str | None]  # the supervised Envoy's admin address, None if down


def make_app(*, registries: Sequence[CollectorRegistry] = (),
             engine_admin: AdminAddress | None = None,
             healthy: Callable[[], bool] = lambda: True,
             scrape_limit_s: float = 2.0,
             extra: Callable[[], Awaitable[bytes]] | None = None) -> web.Application:
    """The metrics app; ``registries`` come after the process-wide registry, ``extra``'s text
    (e.g. the kernel engine's counters) after everything."""
    own = CollectorRegistry()
    envoy_up = Gauge("podway_engine_stats_up",
                     "1 when the supervised Envoy answered this scrape's stats request.",
                     registry=own)

    async def metrics_view(_: web.Request) -> web.Response:
        envoy_text = b""
        if engine_admin is not None:
            envoy_text = await _envoy_stats(engine_admin(), scrape_limit_s)
            envoy_up.set(1 if envoy_text else 0)
        body = b"".join(generate_latest(r) for r in (REGISTRY, *registries))
        if engine_admin is not None:
            body += generate_latest(own) + envoy_text
        if extra is not None:
            body += await extra()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def health_view(_: web.Request) -> web.Response:
        ok = healthy()
        return web.Response(text="ok\n" if ok else "starting\n", status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_view)
    app.router.add_get("/healthz", health_view)
    return app


async def _envoy_stats(address: str | None, limit_s: float) -> bytes:
    """Envoy's Prometheus text, newline-terminated; empty when it did not answer."""
    if not address:
        return b""
    try:
        status, body = await admin.request(address, "/stats/prometheus", limit_s=limit_s)
    except (OSError, TimeoutError):
        return b""
    if status != 200:
        return b""
    text = body if body.endswith("\n") or not body else body + "\n"
    return text.encode()


async def serve(app: web.Application, *, host: str, port: int, what: str = "metrics"
                ) -> web.AppRunner:
    """Start serving ``app``; the caller cleans the runner up. A port in use (or any bind
    failure) is one ``PodwayError`` naming ``what`` and where."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        reason = ("address already in use" if exc.errno == errno.EADDRINUSE
                  else exc.strerror or str(exc))
        raise PodwayError(f"cannot serve the {what} on "
                          f"{format_host_port(host, port)}: {reason}") from exc
    return runner


async def serve_while(main: Coroutine[Any, Any, None], *, host: str, port: int,
                      engine_admin: AdminAddress | None = None,
                      extra: Callable[[], Awaitable[bytes]] | None = None) -> None:
    """Run ``main`` with ``/metrics`` served at ``host:port`` (0: not served) until it ends
    (``extra``: more text after the rest, as ``make_app``'s)."""
    if not port:
        await main
        return
    try:
        runner = await serve(make_app(engine_admin=engine_admin, extra=extra), host=host,
                             port=port)
    except BaseException:
        main.close()  # never started
        raise
    try:
        await main
    finally:
        await runner.cleanup()
