"""A stream whose engine leaves (or whose server stops) while an answer is being written ends
quietly: no exception out of the servicer, which gRPC would log as an error traceback beside
a command's one error line (CI: ``podway run`` with its dashboard port taken, 1 of 1 run)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from envoy.service.discovery.v3 import discovery_pb2 as d
from grpc._cython.cygrpc import ExecuteBatchError

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache
from podway.envoy.xds.server import AdsServicer
from podway.ir import IR


class GoneWhileWriting:
    """gRPC's servicer context of an RPC whose engine left: a write fails with gRPC's failed
    batch error (an ``InternalError``) before the context says it is done (as in CI)."""

    def peer(self) -> str:
        return "unix:test"

    def done(self) -> bool:
        return False

    async def write(self, response: d.DeltaDiscoveryResponse) -> None:
        raise ExecuteBatchError('Failed "execute_batch"')


class DoneWhileWriting(GoneWhileWriting):
    """An RPC already done (the server stops): any failed write ends the stream."""

    def done(self) -> bool:
        return True

    async def write(self, response: d.DeltaDiscoveryResponse) -> None:
        raise RuntimeError("the call is over")


class WriteFails(GoneWhileWriting):
    """A live RPC whose write fails otherwise: a real error, which must not be hidden."""

    async def write(self, response: d.DeltaDiscoveryResponse) -> None:
        raise RuntimeError("cannot encode")


async def _requests() -> AsyncIterator[d.DeltaDiscoveryRequest]:
    yield d.DeltaDiscoveryRequest(type_url=types.CLUSTER, node={"id": "edge"})
    await asyncio.Event().wait()  # the engine says nothing more


@pytest.mark.parametrize("context", [GoneWhileWriting, DoneWhileWriting])
async def test_an_answer_to_an_engine_that_left_ends_the_stream_quietly(
        caplog: pytest.LogCaptureFixture, context: type[GoneWhileWriting]) -> None:
    cache = Cache()
    cache.set(Builder().build(IR()))
    servicer = AdsServicer(cache)
    with caplog.at_level(logging.WARNING):
        await asyncio.wait_for(servicer.DeltaAggregatedResources(_requests(), context()), 5)
    assert servicer.streams == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_write_that_fails_on_a_live_stream_is_still_an_error() -> None:
    cache = Cache()
    cache.set(Builder().build(IR()))
    with pytest.raises(ExceptionGroup):
        await asyncio.wait_for(AdsServicer(cache).DeltaAggregatedResources(
            _requests(), WriteFails()), 5)
