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
        """Events as they come; the events already waiting go out in one write (a burst of
        writes is one send, not one per event, here and in the client that reads them)."""
        loop = asyncio.get_running_loop()
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
            lines: list[bytes] = []
            while True:
                if event.type == "BREAK":  # drop the connection mid-stream, no clean end
                    await _send(response, lines)
                    if request.transport is not None:
                        request.transport.close()
                    return
                if event.type == "GONE":
                    lines.append(_line("ERROR", json.dumps(status_body(
                        410, "Expired", "too old resource version")).encode()))
                    await _send(response, lines)
                    return
                line = self._event_line(request, target, event, selected=selected,
                                        bookmarks=bookmarks, table=table)
                if line:
                    lines.append(line)
                if watcher.queue.empty() or len(lines) >= BATCH:
                    break
                event = watcher.queue.get_nowait()
            await _send(response, lines)

    @staticmethod
    def _event_line(request: web.Request, target: Target, event: Event, *,
                    selected: Callable[[Obj], bool], bookmarks: bool, table: bool) -> bytes:
        """One event's line for this watch (empty: not for it)."""
        rtype = target.rtype
        if event.type == "BOOKMARK":
            return _line("BOOKMARK", json.dumps({
                "kind": rtype.kind, "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(event.version)}}).encode()) \
                if bookmarks else b""
        obj = event.obj
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        if target.namespace is not None and namespace != target.namespace:
            return b""
        if not selected(obj):
            return b""
        if table:
            return _line(event.type, json.dumps(tables.table(
                rtype, [obj], version=str(event.version),
                include=request.query.get("includeObject", "Metadata"))).encode())
        return _line(event.type, event.json_for(rtype.api_version))

    @staticmethod
    async def _write(response: web.StreamResponse, kind: str, obj: Obj) -> None:
        await response.write(_line(kind, json.dumps(obj).encode()))


BATCH = 256  # events in one write at most


def _line(kind: str, encoded: bytes) -> bytes:
    """A watch event's line: ``{"type": ..., "object": ...}`` as ``json.dumps`` writes it."""
    return b'{"type": "' + kind.encode() + b'", "object": ' + encoded + b"}\n"


async def _send(response: web.StreamResponse, lines: list[bytes]) -> None:
    if lines:
        await response.write(b"".join(lines))
