"""Envoy's own log at the default level carries only what a user can act on."""

from __future__ import annotations

import asyncio
import logging
import socket
from types import MappingProxyType

import pytest

from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.ir import IR, L4Route, Listener, Member, ObjectRef, Pool, PoolProtocol
from podway.ir import ListenerProtocol as Protocol
from podway.ir import PoolSettings as Settings
from podway.ir import WeightedPool as Share

from .harness import echo_backend, free_port_both, private_engine

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
    try:
        async with private_engine(cache, node_id="udp-log") as engine:
            await engine.wait_ready()
            assert await _udp_round_trip(port)  # the listener took its config and serves
            assert engine.opts.state is not None
            envoy_log = engine.opts.state.log.read_text(encoding="utf-8", errors="replace")
    finally:
        task.cancel()
    assert [line for line in envoy_log.splitlines() if "work-in-progress" in line] == []
    assert [r.getMessage() for r in caplog.records if "work-in-progress" in r.getMessage()] == []
