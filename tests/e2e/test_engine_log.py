"""Envoy's own log at the default level carries only what a user can act on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from types import MappingProxyType

import pytest

from podway.engine.bootstrap import BootstrapOptions, bootstrap
from podway.engine.process import Engine, EngineOptions, find_envoy
from podway.envoy_config import Builder
from podway.ir import IR, L4Route, Listener, Member, ObjectRef, Pool, PoolProtocol
from podway.ir import ListenerProtocol as Protocol
from podway.ir import PoolSettings as Settings
from podway.ir import WeightedPool as Share
from podway.xds.cache import Cache
from podway.xds.server import XdsServer

from .harness import echo_backend, free_port_both

pytestmark = pytest.mark.e2e


async def _udp_round_trip(port: int) -> bool:
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        s.connect(("127.0.0.1", port))
        for _ in range(100):
            s.send(b"ping")
            try:
                async with asyncio.timeout(0.2):
                    return bool(await loop.sock_recv(s, 2048))
            except TimeoutError:
                continue
    return False


async def test_udp_listener_logs_no_work_in_progress_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """A UDP listener that serves leaves no "work-in-progress" warning in the log (it came
    twice per UDP listener, at the default level)."""
    caplog.set_level(logging.WARNING, logger="podway.envoy")
    backend, task = await echo_backend("u", udp=True)
    port = free_port_both()
    listener = Listener(name="listener/udp", address="127.0.0.1", port=port,
                        protocol=Protocol.UDP, l4_routes=(L4Route(
                            name="udp", origin=ObjectRef("Service", "default", "u"),
                            backends=(Share(pool="pool/u"),)),))
    pool = Pool(name="pool/u", settings=Settings(protocol=PoolProtocol.UDP),
                members=(Member(address="127.0.0.1", port=backend),))
    cache = Cache()
    cache.set(Builder().build(IR(listeners=(listener,),
                                 pools=MappingProxyType({"pool/u": pool}))))
    server = XdsServer(cache, "127.0.0.1:0")
    await server.start()
    engine = Engine(EngineOptions(envoy_path=find_envoy(), drain_s=0, bootstrap=bootstrap(
        BootstrapOptions(node_id="udp-log", xds=server.target))))
    run = asyncio.create_task(engine.run())
    try:
        await engine.wait_ready()
        assert await _udp_round_trip(port)  # the listener took its config and serves
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        await server.stop(0)
        task.cancel()
    assert [r.getMessage() for r in caplog.records if "work-in-progress" in r.getMessage()] == []
