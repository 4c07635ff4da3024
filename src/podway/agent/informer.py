"""List-then-watch of one resource kind through kubernetes-asyncio, feeding a handler.

The informer keeps the raw objects it has seen so a re-list (after ``410 Gone`` or any watch
failure) can report deletions that happened while it was not watching. Watches run with a
server-side timeout and resume from the last resourceVersion (a client-side read timeout a bit
longer catches dead connections); errors re-list after a capped backoff. The handler must be
cheap and synchronous: the agent's only enqueue keys.
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


def raw_key(raw: Raw) -> tuple[str, str]:
    meta = raw.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


class Informer:
    def __init__(self, *, name: str, lister: Callable[..., Awaitable[Any]],
                 params: dict[str, Any], handler: Handler, watch_timeout: int = 300) -> None:
        self.name = name
        self._lister = lister
        self._params = params
        self._handler = handler
        self._timeout = watch_timeout
        self._known: dict[tuple[str, str], Raw] = {}
        self.ready = asyncio.Event()

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                version = await self._relist()
                self.ready.set()
                failures = 0
                while True:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    log.info("informer=%s event=gone action=relist", self.name)
                    continue
                failures += 1
                log.warning("informer=%s error=%s status=%s", self.name, exc.reason, exc.status)
            except Exception as exc:
                failures += 1
                log.warning("informer=%s error=%r", self.name, exc)
            await asyncio.sleep(min(30.0, 0.2 * 2 ** min(failures, 8)))

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
