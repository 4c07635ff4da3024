"""The ADS pusher: a cache change made while a push is being sent is pushed too."""

from __future__ import annotations

import asyncio
import contextlib
from types import MappingProxyType
from typing import Any

from podway.envoy import types
from podway.envoy.config import Builder
from podway.envoy.xds.cache import Cache, Change
from podway.envoy.xds.server import push_changes

from .helpers import http_listener, ir, pool, route, vhost


def _config(port: int):  # type: ignore[no-untyped-def]
    return ir((http_listener(vhost("a.com", route("r", "/", "p"))),), pool("p", port))


async def test_a_change_during_a_send_is_not_missed() -> None:
    """The second of two changes, made while the first is being sent, is pushed without a
    third change."""
    cache, builder = Cache(), Builder()
    cache.set(builder.build(_config(9000)))
    seen: list[str] = []
    second_pushed = asyncio.Event()

    def on_change() -> list[str]:
        return [cache.get(types.ENDPOINT).version]

    async def send(responses: list[str]) -> None:
        seen.extend(responses)
        if len(seen) == 1:
            await asyncio.sleep(0)
            cache.set(builder.build(_config(9001)))  # while this send is still in progress
            await asyncio.sleep(0)
        else:
            second_pushed.set()

    pusher = asyncio.create_task(push_changes(cache, on_change, send))
    try:
        await asyncio.sleep(0)
        cache.set(builder.build(_config(9002)))
        await asyncio.wait_for(second_pushed.wait(), 2)
        assert len(set(seen)) == 2  # the two pushes saw two different versions
    finally:
        pusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pusher


async def test_a_due_retry_wakes_the_pusher_without_a_change() -> None:
    """When a refused resource is due again, the pusher looks at the streams with no cache
    change (a listener whose port was busy comes back by itself)."""
    cache = Cache()
    woken = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def send(responses: list[str]) -> None:
        woken.set()

    pusher = asyncio.create_task(push_changes(cache, list, send,
                                              wake_at=lambda: loop.time() + 0.01,
                                              clock=loop.time))
    try:
        await asyncio.wait_for(woken.wait(), 5)
    finally:
        pusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pusher


def test_a_hint_limits_what_the_cache_compares() -> None:
    """Given the builder's hint (the mapping it derived from, the names that may differ), the
    cache compares only those names: a resource changed under another name goes unseen (the
    hint is trusted), one named is seen; a hint about a mapping the cache does not hold is
    ignored."""
    first = Builder().build(ir((http_listener(vhost("a", route("r", "/", "p"))),), pool("p", 1)))
    base = first[types.ENDPOINT]
    other = Builder().build(ir((), pool("p", 2)))[types.ENDPOINT]["p"]
    moved = {**first, types.ENDPOINT: {**base, "p": other}}

    def after(hint: dict[str, tuple[Any, frozenset[str]]]) -> dict[str, Change]:
        cache = Cache()
        cache.set(first)
        return cache.set(moved, hint=hint)

    assert after({types.ENDPOINT: (base, frozenset())}) == {}
    changes = after({types.ENDPOINT: (base, frozenset({"p"}))})
    assert set(changes) == {types.ENDPOINT}
    assert changes[types.ENDPOINT].updated == {"p"}
    assert set(after({types.ENDPOINT: ({}, frozenset())})) == {types.ENDPOINT}


def test_the_cache_takes_an_equal_mapping_so_the_next_hint_applies() -> None:
    """A set that changes nothing still leaves the cache holding the new (equal) mapping: the
    builder's next hint names that mapping as its base (after the cache served another one,
    e.g. an interim assignment), and the cache trusts it again."""
    first = Builder().build(ir((http_listener(vhost("a", route("r", "/", "p"))),), pool("p", 1)))
    cache = Cache()
    cache.set(first)
    equal = MappingProxyType(dict(first[types.ENDPOINT]))  # what a builder hands over
    assert cache.set({**first, types.ENDPOINT: equal}) == {}
    other = Builder().build(ir((), pool("p", 2)))[types.ENDPOINT]["p"]
    moved = {**first, types.ENDPOINT: {**equal, "p": other}}
    assert cache.set(moved, hint={types.ENDPOINT: (equal, frozenset())}) == {}
