"""List-then-watch of one resource kind through kubernetes-asyncio, feeding a handler.

The protocol is the API server's: list (remember its resourceVersion), watch from that version
with bookmarks allowed and a server-side timeout, resume each new watch from the last version
seen (events and bookmarks both move it). ``410 Gone`` (history compacted) re-lists at once;
any other failure re-lists after a backoff (``podway.base.backoff``: exponential, jittered, at
least the server's Retry-After) that only resets once a watch proved healthy (delivered
something or stayed up a while), so a watch that always fails cannot make us re-list in a loop.

A re-list reports what changed while we were not watching: objects whose resourceVersion moved
as MODIFIED, new ones as ADDED, vanished ones as DELETED (with a stub carrying only the key).
Memory stays lean: the informer keeps only key → resourceVersion, and ``transform`` (default:
drop ``managedFields`` and kubectl's last-applied annotation) trims every object before the
handler sees it, so a consumer that keeps objects keeps only what it needs. The handler must be
cheap and synchronous (enqueue keys, update a cache).

A list the API *refuses* (401, 403, 404: no permission, or no such resource) is retried like any
failure, forever, but it also *settles* the informer (``settled``, ``refused``): a consumer that
can serve without this kind (a CRD the ClusterRole may not read) goes on instead of waiting for
a list that may never come, and says what is missing. ``refused`` clears at the next good list.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from podway.base.backoff import Backoff
from podway.kube.errors import ApiError, Forbidden, Gone, NotFound, Unauthorized, api_error

log = logging.getLogger("podway.kube.informer")

Raw = dict[str, Any]
Handler = Callable[[str, Raw], None]
Transform = Callable[[Raw], Raw]

HEALTHY_AFTER = 10.0  # seconds a watch must stay up (without events) to count as healthy
RELIST = Backoff(base=0.2, cap=30.0)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
#: A list answered with one of these will not work by retrying alone (RBAC or an API change).
REFUSED = (Unauthorized, Forbidden, NotFound)


def raw_key(raw: Raw) -> tuple[str, str]:
    meta = raw.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def lean(raw: Raw) -> Raw:
    """Drop the parts of an object no Podway consumer reads and that cost the most memory."""
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        return raw
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
    return raw


class Informer:
    def __init__(self, *, name: str, lister: Callable[..., Awaitable[Any]],
                 params: dict[str, Any], handler: Handler, watch_timeout: int = 300,
                 healthy_after: float = HEALTHY_AFTER, backoff: Backoff = RELIST,
                 transform: Transform = lean,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self._lister = lister
        self._params = params
        self._handler = handler
        self._timeout = watch_timeout
        # A quiet watch that lives until its server-side timeout is healthy too.
        self._healthy_after = min(healthy_after, watch_timeout / 2)
        self._backoff = backoff
        self._transform = transform
        self._sleep = sleep
        self._known: dict[tuple[str, str], str] = {}  # key -> resourceVersion
        self._progress = False  # the current watch delivered something (bookmarks count)
        self.ready = asyncio.Event()  # set after the first complete list
        self.settled = asyncio.Event()  # set after the first complete or refused list
        self.refused: ApiError | None = None  # why the last list was refused, until one works
        self.relists = 0  # lists after the first (410s, failures): a metric for callers
        self.bookmarks = 0  # BOOKMARK events seen: a metric for callers
        self._report_all = False
        self.listing = False
        """True while a list's objects go to the handler: a list reports only where an object
        is now, not each change that took it there (a watch event does)."""

    def report_all_on_next_list(self) -> None:
        """Make the next (re-)list hand every object to the handler, changed or not (for a
        consumer whose filter widened: say a namespace now selected). The caller restarts
        ``run`` to list now."""
        self._report_all = True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        while True:
            began: float | None = None
            error: ApiError | None = None
            try:
                version = await self._relist()
                self.refused = None
                self.ready.set()
                self.settled.set()
                while True:
                    began, self._progress = loop.time(), False
                    version = await self._watch(version)
                    if self._progress or loop.time() - began >= self._healthy_after:
                        failures = 0
                        continue
                    # Ended at once with nothing (a proxy closing watches): do not spin.
                    failures += 1
                    delay = self._backoff.delay(failures)
                    log.warning("informer=%s event=watch-ended-early retry_in=%.1fs",
                                self.name, delay)
                    await self._sleep(delay)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                error = api_error(exc)
            except ApiError as exc:
                error = exc
            except Exception as exc:
                log.warning("informer=%s error=%r", self.name, exc)
            if began is not None and (self._progress
                                      or loop.time() - began >= self._healthy_after):
                failures = 0
            if isinstance(error, Gone) and failures == 0:
                log.info("informer=%s event=gone action=relist", self.name)
                continue
            if error is not None and not isinstance(error, Gone):
                log.warning("informer=%s error=%s", self.name, error)
            if began is None and isinstance(error, REFUSED):  # the list itself was refused
                self.refused = error
                self.settled.set()
            failures += 1
            await self._sleep(self._backoff.delay(
                failures, retry_after=None if error is None else error.retry_after))

    async def _relist(self) -> str:
        resp = await self._lister(**self._params, _preload_content=False,
                                  _request_timeout=aiohttp.ClientTimeout(total=120, connect=10))
        try:
            if resp.status != 200:
                raise api_error(_Failed(resp.status, await resp.text(),
                                        dict(getattr(resp, "headers", None) or {})))
            body = await resp.json(content_type=None)
        finally:
            resp.release()
        if self.ready.is_set():
            self.relists += 1
        self.listing = True
        try:
            return self._listed(body)
        finally:
            self.listing = False

    def _listed(self, body: Raw) -> str:
        seen: dict[tuple[str, str], str] = {}
        for item in body.get("items") or []:
            key = raw_key(item)
            version = str((item.get("metadata") or {}).get("resourceVersion", ""))
            seen[key] = version
            before = self._known.get(key)
            if before is None:
                self._handler("ADDED", self._transform(item))
            elif before != version or self._report_all:
                self._handler("MODIFIED", self._transform(item))
        for key, version in self._known.items():
            if key not in seen:
                stub = {"metadata": {"namespace": key[0], "name": key[1],
                                     "resourceVersion": version}}
                self._handler("DELETED", stub)
        self._known = seen
        self._report_all = False
        return str((body.get("metadata") or {}).get("resourceVersion", ""))

    async def _watch(self, version: str) -> str:
        """One watch from ``version`` until the server ends it; returns the last version seen.

        The stream is read here, line by line, rather than through kubernetes-asyncio's
        ``Watch``: that helper builds a throwaway ``ApiClient`` (its own session and a TLS
        context with the default CA bundle, ~0.75 MiB) for every watch and decodes each event
        twice, which cost the controller ~15 MiB for its ~20 open watches."""
        resp = await self._lister(**self._params, watch=True, resource_version=version,
                                  timeout_seconds=self._timeout, allow_watch_bookmarks=True,
                                  _preload_content=False,
                                  # a dead connection must not hang us forever
                                  _request_timeout=aiohttp.ClientTimeout(
                                      connect=10, sock_read=self._timeout + 30))
        try:
            if resp.status != 200:
                raise api_error(_Failed(resp.status, await resp.text(),
                                        dict(getattr(resp, "headers", None) or {})))
            async for line in watch_lines(resp.content):
                version = self._event(json.loads(line), version)
        finally:
            resp.release()
        return version

    def _event(self, event: Raw, version: str) -> str:
        """Hand one watch event to the handler; returns the resume version after it."""
        kind = str(event.get("type", ""))
        raw = event.get("object")
        if not isinstance(raw, dict):
            raise ApiError(f"malformed watch event (no object): {kind or '?'}")
        if kind == "ERROR":  # a Status: 410 Gone (compacted) or another failure
            raise api_error(_Failed(int(raw.get("code") or 0),
                                    f"{raw.get('reason', '')}: {raw.get('message', '')}", {}))
        version = str((raw.get("metadata") or {}).get("resourceVersion", version))
        self._progress = True
        if kind == "BOOKMARK":
            self.bookmarks += 1
            return version
        key = raw_key(raw)
        if kind == "DELETED":
            self._known.pop(key, None)
        else:
            self._known[key] = version
        self._handler(kind, self._transform(raw))
        return version


# One watch event's line at most (an object is at most ~1.5 MiB in etcd; its JSON with
# managed fields can be larger): past it the watch fails and the informer relists.
MAX_EVENT_BYTES = 32 * 1024 * 1024


async def watch_lines(content: aiohttp.StreamReader, *, limit: int = MAX_EVENT_BYTES
                      ) -> AsyncIterator[bytes]:
    """The lines of a watch stream, each whatever its length up to ``limit``; blank ones
    skipped. Not ``StreamReader.readline``: it refuses lines past its buffer's high-water mark
    ("Line is too long": 4 MiB with kubernetes-asyncio's 2 MiB read buffer, 128 KiB with
    aiohttp's default), so one large event (a CRD object, a Service with big annotations)
    broke every watch, and the informer relisted forever."""
    pending = bytearray()
    async for chunk in content.iter_any():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if pending:
                pending += chunk[start:end]
                line = bytes(pending)
                pending.clear()
            else:
                line = chunk[start:end]
            if line.strip():
                yield line
            start = end + 1
        pending += chunk[start:]
        if len(pending) > limit:
            raise ApiError(f"a watch event longer than {limit} bytes")
    if bytes(pending).strip():
        yield bytes(pending)


class _Failed:
    """A failed response (list, watch) or a watch ERROR event, in the shape ``api_error``
    reads."""

    def __init__(self, status: int, reason: str, headers: dict[str, str]) -> None:
        self.status, self.reason, self.headers = status, reason, headers
