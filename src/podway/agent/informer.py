"""List-then-watch of one resource kind through kubernetes-asyncio, feeding a handler.

The informer keeps the raw objects it has seen so a re-list (after ``410 Gone`` or any watch
failure) can report deletions that happened while it was not watching. Watches run with a
server-side timeout and resume from the last resourceVersion (a client-side read timeout a bit
longer catches dead connections); errors re-list after an exponential backoff (capped at 30 s)
that only resets once a watch proved healthy (delivered an event or stayed up a while). The
handler must be cheap and synchronous: the agent's only enqueue keys.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger("podway.agent.informer")

Raw = dict[str, Any]
Handler = Callable[[str, Raw], None]


HEALTHY_AFTER = 10.0  # seconds a watch must stay up (without events) to count as healthy
BACKOFF_BASE = 0.2  # seconds before the first retry
BACKOFF_CAP = 30.0  # longest wait between retries


def backoff_delay(failures: int) -> float:
    """Seconds to wait after ``failures`` unhealthy attempts in a row: doubling, capped."""
    return float(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(max(failures - 1, 0), 16)))


def raw_key(raw: Raw) -> tuple[str, str]:
    meta = raw.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


class Informer:
    def __init__(self, *, name: str, lister: Callable[..., Awaitable[Any]],
                 params: dict[str, Any], handler: Handler, watch_timeout: int = 300,
                 healthy_after: float = HEALTHY_AFTER,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self._lister = lister
        self._params = params
        self._handler = handler
        self._timeout = watch_timeout
        # A quiet watch that lives until its server-side timeout is healthy too.
        self._healthy_after = min(healthy_after, watch_timeout / 2)
        self._sleep = sleep
        self._known: dict[tuple[str, str], Raw] = {}
        self._progress = False  # the current watch delivered something (bookmarks count)
        self.ready = asyncio.Event()

    async def run(self) -> None:
        # ``failures`` counts attempts since the last *healthy* watch (one that delivered an
        # event or stayed up ``healthy_after`` seconds): a successful re-list alone proves
        # nothing, else a watch that always fails would re-list every few hundred ms forever.
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            began: float | None = None
            gone = False
            try:
                version = await self._relist()
                self.ready.set()
                while True:
                    began, self._progress = loop.time(), False
                    version = await self._watch(version)
                    if self._progress or loop.time() - began >= self._healthy_after:
                        failures = 0
                        continue
                    # Ended at once with nothing (a proxy closing watches): do not spin.
                    failures += 1
                    delay = backoff_delay(failures)
                    log.warning("informer=%s event=watch-ended-early retry_in=%.1fs",
                                self.name, delay)
                    await self._sleep(delay)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                gone = exc.status == 410
                if not gone:
                    log.warning("informer=%s error=%s status=%s", self.name, exc.reason,
                                exc.status)
            except Exception as exc:
                log.warning("informer=%s error=%r", self.name, exc)
            if began is not None and (self._progress
                                      or loop.time() - began >= self._healthy_after):
                failures = 0
            if gone and failures == 0:
                log.info("informer=%s event=gone action=relist", self.name)
                continue
            failures += 1
            await self._sleep(backoff_delay(failures))

    async def _relist(self) -> str:
        resp = await self._lister(**self._params, _preload_content=False,
                                  _request_timeout=aiohttp.ClientTimeout(total=120, connect=10))
        try:
            if resp.status != 200:
                raise ApiException(status=resp.status, reason=await resp.text())
            body = await resp.json(content_type=None)
        finally:
            resp.release()
        seen: dict[tuple[str, str], Raw] = {}
        for item in body.get("items", []):
            key = raw_key(item)
            seen[key] = item
            self._handler("MODIFIED" if key in self._known else "ADDED", item)
        for key, old in self._known.items():
            if key not in seen:
                self._handler("DELETED", old)
        self._known = seen
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _watch(self, version: str) -> str:
        stream = watch.Watch(return_type="object")
        try:
            async for event in stream.stream(self._lister, **self._params,
                                             resource_version=version,
                                             timeout_seconds=self._timeout,
                                             allow_watch_bookmarks=True,
                                             # a dead connection must not hang us forever
                                             _request_timeout=aiohttp.ClientTimeout(
                                                 connect=10, sock_read=self._timeout + 30)):
                kind = str(event["type"])
                raw: Raw = event["raw_object"]
                version = str(raw.get("metadata", {}).get("resourceVersion", version))
                self._progress = True
                if kind == "BOOKMARK":
                    continue
                key = raw_key(raw)
                if kind == "DELETED":
                    self._known.pop(key, None)
                else:
                    self._known[key] = raw
                self._handler(kind, raw)
        finally:
            await stream.close()
        return version
