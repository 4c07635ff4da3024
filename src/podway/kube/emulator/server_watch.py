"""The emulator's watch streams: JSON lines of events from a resource version on, ``ERROR``
with 410 for expired versions, ``BOOKMARK`` events only for watches that allowed them, Table
rows on request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from aiohttp import web

from podway.kube.emulator import tables
from podway.kube.emulator.server_types import TRUE, Target, status_body
from podway.kube.emulator.store import ApiError, Event, Obj, Store, Watcher


class WatchMixin:
    """A part of ``podway.kube.emulator.server.Api`` (its other methods: the stubs below)."""

    store: Store
    bookmark_interval: float | None

    def _selected(self, request: web.Request) -> Callable[[Obj], bool]:
        raise NotImplementedError

    async def _watch(self, request: web.Request, target: Target, *,
                     table: bool = False) -> web.StreamResponse:
        store, rtype = self.store, target.rtype
        selected = self._selected(request)
        bookmarks = request.query.get("allowWatchBookmarks") in TRUE
        timeout = float(request.query.get("timeoutSeconds") or 1800)
        since = request.query.get("resourceVersion", "")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        watcher = Watcher(rtype.group_resource)
        store.watchers.add(watcher)  # before reading the backlog: nothing falls in between
        try:
            if since in ("", "0"):
                backlog = [Event(store.version, "ADDED", rtype.group_resource, o)
                           for o in store.items(rtype, target.namespace)]
            else:
                try:
                    backlog = store.since(rtype.group_resource, int(since))
                except ApiError as exc:
                    await self._write(response, "ERROR",
                                      status_body(exc.code, exc.reason, exc.message))
                    return response
            for event in backlog:
                watcher.queue.put_nowait(event)
            deadline = asyncio.get_running_loop().time() + timeout
            await self._stream(request, response, watcher=watcher, target=target,
                               selected=selected, bookmarks=bookmarks, deadline=deadline,
                               table=table)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            store.watchers.discard(watcher)
        return response

    async def _stream(self, request: web.Request, response: web.StreamResponse, *,
                      watcher: Watcher, target: Target, selected: Callable[[Obj], bool],
                      bookmarks: bool, deadline: float, table: bool = False) -> None:
        loop = asyncio.get_running_loop()
        rtype = target.rtype
        while (left := deadline - loop.time()) > 0:
            wait = left if self.bookmark_interval is None else min(left,
                                                                    self.bookmark_interval)
            try:  # not wait_for: on 3.11 it loses a cancel that meets an event (podway.base.tasks)
                async with asyncio.timeout(wait):
                    event = await watcher.queue.get()
            except TimeoutError:
                if self.bookmark_interval is not None and bookmarks and loop.time() < deadline:
                    event = Event(self.store.version, "BOOKMARK", watcher.resource, {})
                else:
                    return
            if event.type == "BREAK":  # drop the connection mid-stream, no clean end
                if request.transport is not None:
                    request.transport.close()
                return
            if event.type == "GONE":
                body = status_body(410, "Expired", "too old resource version")
                await self._write(response, "ERROR", body)
                return
            if event.type == "BOOKMARK":
                if bookmarks:
                    await self._write(response, "BOOKMARK", {
                        "kind": rtype.kind, "apiVersion": rtype.api_version,
                        "metadata": {"resourceVersion": str(event.version)}})
                continue
            obj = event.obj
            namespace = (obj.get("metadata") or {}).get("namespace", "")
            if target.namespace is not None and namespace != target.namespace:
                continue
            if not selected(obj):
                continue
            if table:
                await self._write(response, event.type, tables.table(
                    rtype, [obj], version=str(event.version),
                    include=request.query.get("includeObject", "Metadata")))
                continue
            await self._write(response, event.type, {**obj, "apiVersion": rtype.api_version})

    @staticmethod
    async def _write(response: web.StreamResponse, kind: str, obj: Obj) -> None:
        await response.write((json.dumps({"type": kind, "object": obj}) + "\n").encode())
