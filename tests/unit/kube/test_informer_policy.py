"""Informer retry policy: backoff that resets only after a healthy watch, honours Retry-After."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from podway.base.backoff import Backoff
from podway.kube.informer import Informer

POLICY = Backoff(base=0.2, cap=30.0, jitter=0)
BACKOFF_CAP = POLICY.cap


def backoff_delay(failures: int) -> float:
    return POLICY.delay(failures)

POD = {"metadata": {"namespace": "default", "name": "p1", "resourceVersion": "7"}}


class FakeContent:
    def __init__(self, lines: list[bytes | Exception]) -> None:
        self.lines = lines

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Each line as one chunk (an exception: raised there), as a stream delivers them."""
        while self.lines:
            item = self.lines.pop(0)
            if isinstance(item, Exception):
                raise item
            yield item


class FakeResponse:
    """Just what the informer's list and kubernetes-asyncio's watch read from a response."""

    def __init__(self, *, body: dict[str, Any] | None = None,
                 lines: list[bytes | Exception] | None = None, status: int = 200,
                 headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = headers or {}
        self.body = body or {}
        self.content = FakeContent(lines or [])

    async def json(self, content_type: str | None = None) -> dict[str, Any]:
        return self.body

    async def text(self) -> str:
        return ""

    def release(self) -> None:
        """Nothing to release."""

    def close(self) -> None:
        """Nothing to close."""


Watch = Callable[[int], FakeResponse]


def lister(watch: Watch, *, stop_after: int = 12,
           lists: Callable[[int], FakeResponse] | None = None) -> Callable[..., Any]:
    """Lists succeed (or answer ``lists(n)``); the n-th watch call returns ``watch(n)``; then
    the test ends."""
    calls = {"watch": 0, "list": 0}

    async def call(**kwargs: Any) -> FakeResponse:
        if not kwargs.get("watch"):
            calls["list"] += 1
            if lists is not None:
                return lists(calls["list"])
            return FakeResponse(body={"items": [], "metadata": {"resourceVersion": "5"}})
        calls["watch"] += 1
        if calls["watch"] > stop_after:
            raise asyncio.CancelledError
        return watch(calls["watch"])

    return call


async def run_informer(watch: Watch, *, stop_after: int = 12,
                       lists: Callable[[int], FakeResponse] | None = None) -> list[float]:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    informer = Informer(name="pods", lister=lister(watch, stop_after=stop_after, lists=lists),
                        params={}, handler=lambda kind, raw: None, watch_timeout=300,
                        sleep=sleep, backoff=POLICY)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(informer.run(), 10)
    return delays


def failing(n: int) -> FakeResponse:
    raise ApiException(status=500, reason="watch refused")


def event_then_error(n: int) -> FakeResponse:
    line = json.dumps({"type": "MODIFIED", "object": POD}).encode() + b"\n"
    return FakeResponse(lines=[line, aiohttp.ClientPayloadError("cut")])


async def test_watch_that_always_fails_backs_off_despite_successful_relists() -> None:
    """A successful re-list does not reset the backoff: a failing watch waits longer each time."""
    delays = await run_informer(failing)
    assert delays == [backoff_delay(n) for n in range(1, 13)]
    assert delays[-1] == BACKOFF_CAP


async def test_watch_that_delivered_an_event_resets_the_backoff() -> None:
    """After a watch delivered an event, its failure starts the backoff from the base again."""
    delays = await run_informer(lambda n: event_then_error(n) if n == 3 else failing(n),
                                stop_after=4)
    assert delays == [0.2, 0.4, 0.2, 0.4]


async def test_watch_that_ends_at_once_does_not_spin() -> None:
    """A watch closed immediately without events (say by a proxy) waits before the next one."""
    delays = await run_informer(lambda n: FakeResponse(lines=[b""]), stop_after=4)
    assert delays == [0.2, 0.4, 0.8, 1.6]


async def test_list_refused_with_retry_after_waits_at_least_that_long() -> None:
    """A 429 on the list with Retry-After: 7 waits 7 s, not the 0.2 s first step."""
    def lists(n: int) -> FakeResponse:
        if n == 1:
            return FakeResponse(status=429, headers={"Retry-After": "7"})
        return FakeResponse(body={"items": [], "metadata": {"resourceVersion": "5"}})
    delays = await run_informer(failing, stop_after=1, lists=lists)
    assert delays[:2] == [7.0, 0.4]  # the next failure continues the doubling


async def test_gone_inside_the_stream_relists_at_once() -> None:
    """An ERROR event carrying 410 (history compacted mid-watch) re-lists without waiting;
    a malformed line or another ERROR code is a failure that backs off."""
    gone = json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                   "reason": "Expired"}}).encode() + b"\n"
    lists: list[int] = []

    def counting(n: int) -> FakeResponse:
        lists.append(n)
        return FakeResponse(body={"items": [], "metadata": {"resourceVersion": "5"}})

    delays = await run_informer(lambda n: FakeResponse(lines=[gone]), stop_after=3,
                                lists=counting)
    assert delays == []
    assert len(lists) == 4  # the first list and one per 410
    refused = json.dumps({"type": "ERROR", "object": {"code": 500}}).encode() + b"\n"
    assert await run_informer(lambda n: FakeResponse(lines=[refused]), stop_after=2) == [
        0.2, 0.4]
    assert await run_informer(lambda n: FakeResponse(lines=[b'{"type": "ADDED"}\n']),
                              stop_after=2) == [0.2, 0.4]


@pytest.mark.parametrize(("status", "settles"), [(403, True), (404, True), (401, True),
                                                 (500, False), (429, False)])
async def test_a_refused_list_settles_the_informer_and_clears_once_it_lists(
        status: int, settles: bool) -> None:
    """403/404/401 on the list (RBAC, no such API): ``settled`` and ``refused`` say so at once,
    while it keeps retrying; a transient failure (500, 429) does not settle it. The next good
    list clears ``refused`` and makes it ready."""
    seen: list[tuple[bool, bool, int | None]] = []
    informer: Informer

    def lists(n: int) -> FakeResponse:
        if n <= 2:
            return FakeResponse(status=status)
        return FakeResponse(body={"items": [], "metadata": {"resourceVersion": "5"}})

    async def sleep(delay: float) -> None:
        seen.append((informer.settled.is_set(), informer.ready.is_set(),
                     None if informer.refused is None else informer.refused.status))

    informer = Informer(name="gateways", lister=lister(failing, stop_after=1, lists=lists),
                        params={}, handler=lambda kind, raw: None, watch_timeout=300,
                        sleep=sleep, backoff=POLICY)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(informer.run(), 10)
    refused = (True, False, status) if settles else (False, False, None)
    assert seen[:2] == [refused, refused]
    assert (informer.settled.is_set(), informer.ready.is_set(), informer.refused) == (
        True, True, None)
