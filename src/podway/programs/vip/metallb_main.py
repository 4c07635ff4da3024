"""``podway vip announce-metallb``: the process around ``MetalLBSpeaker`` — the API connection,
the session reports (metrics on ``/metrics``, MetalLB's ``BGPSessionState`` objects) and a stop
that withdraws first, waits, then stops BIRD (as ``podway vip announce``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from podway.kube.client import connect
from podway.programs.vip.metallb_live import MetalLBSpeaker
from podway.programs.vip.metallb_sessions import SessionMetrics, SessionStates, follow_sessions
from podway.programs.vip.podway_bgp_status import PeerStatus
from podway.readers.metrics import exposition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    node: str
    router_id: str
    namespace: str = "metallb-system"
    vips: tuple[str, ...] | None = None  # None: each advertised pool's own addresses
    workdir: Path = Path("/run/podway-bird")
    kubeconfig: str | None = None
    context: str | None = None
    withdraw_wait: float = 2.0
    metrics_address: str = "127.0.0.1"
    metrics_port: int = 0  # 0: no metrics endpoint
    session_states: bool = True  # write BGPSessionState objects and VIPPeer statuses
    metallb: bool = True  # read MetalLB's kinds too (False: only Podway's VIPPeer & co.)
    report_s: float = 2.0


async def main(opts: Options, healthy: Callable[[], Awaitable[bool]] | None = None) -> None:
    """Run until cancelled (a signal); withdraw, wait and stop on the way out."""
    api = await connect(kubeconfig=opts.kubeconfig, context=opts.context)
    speaker = MetalLBSpeaker(api, namespace=opts.namespace, node=opts.node,
                             router_id=opts.router_id, workdir=opts.workdir, vips=opts.vips,
                             healthy=healthy, metallb=opts.metallb)
    metrics = SessionMetrics()
    states = SessionStates(api, namespace=opts.namespace, node=opts.node) \
        if opts.session_states and opts.metallb else None
    runner = None
    try:
        if opts.metrics_port:
            runner = web.AppRunner(exposition.make_app(registries=[metrics.registry]),
                                   access_log=None)
            await runner.setup()
            await web.TCPSite(runner, opts.metrics_address, opts.metrics_port).start()
            log.info("metrics on %s:%d", opts.metrics_address, opts.metrics_port)
        async with asyncio.TaskGroup() as group:
            group.create_task(speaker.run(), name="announce-metallb")
            group.create_task(follow_sessions(speaker, metrics, states,
                                              interval=opts.report_s,
                                              peers=PeerStatus(api, node=opts.node)
                                              if opts.session_states else None),
                              name="announce-sessions")
    finally:
        with contextlib.suppress(Exception):
            await speaker.stop(opts.withdraw_wait)
        if runner is not None:
            await runner.cleanup()
        await api.close()
