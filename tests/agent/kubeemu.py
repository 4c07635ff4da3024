"""A minimal wire-level Kubernetes API emulator for the agent's tests (aiohttp).

It speaks just enough of the real API for kubernetes-asyncio's own list, watch and patch code
paths to run unchanged: ``GET /api/v1/{pods,services,nodes}`` with ``fieldSelector``,
``watch=true``, ``resourceVersion``, ``timeoutSeconds`` (JSON lines, ``410 Gone`` for
compacted versions), ``PATCH .../pods/{name}`` (JSON merge patch) and ``POST .../events``.
Tests mutate objects directly with ``put``/``delete`` and read back patches and events.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from aiohttp import web

Obj = dict[str, Any]
RESOURCES = ("pods", "services", "nodes")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _field(obj: Obj, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)


def _matches(obj: Obj, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        path, _, wanted = term.partition("=")
        if _field(obj, path) != wanted:
            return False
    return True


class KubeEmulator:
    def __init__(self) -> None:
        self.store: dict[str, dict[tuple[str, str], Obj]] = {r: {} for r in RESOURCES}
        self.history: list[tuple[int, str, str, Obj]] = []
        self.version = 100
        self.compacted = 0  # watches from versions below this get 410 Gone
        self.patches: list[tuple[str, str, str, Obj]] = []  # (ns, name, content-type, body)
        self.events: list[Obj] = []
        self.requests: list[str] = []
        self._watchers: set[asyncio.Queue[tuple[int, str, str, Obj]]] = set()
        self._runner: web.AppRunner | None = None
        self.url = ""

    # ---- test side --------------------------------------------------------------------
    def put(self, resource: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if resource != "nodes":
            meta.setdefault("namespace", "default")
        key = (meta.get("namespace", ""), meta["name"])
        kind = "MODIFIED" if key in self.store[resource] else "ADDED"
        meta.setdefault("uid", f"uid-{resource}-{key[0]}-{key[1]}")
        self._emit(resource, kind, key, obj)
        return obj

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self.store[resource].get((namespace, name))

    def delete(self, resource: str, namespace: str, name: str) -> None:
        obj = self.store[resource].get((namespace, name))
        if obj is not None:
            self._emit(resource, "DELETED", (namespace, name), copy.deepcopy(obj))

    def annotation(self, namespace: str, name: str, key: str) -> str | None:
        obj = self.get("pods", namespace, name)
        if obj is None:
            return None
        value = obj.get("metadata", {}).get("annotations", {}).get(key)
        return None if value is None else str(value)

    def compact(self) -> None:
        """Forget all history: every open or resumed watch gets 410 Gone."""
        self.compacted = self.version + 1
        for queue in self._watchers:
            queue.put_nowait((self.compacted, "", "GONE", {}))

    def _emit(self, resource: str, kind: str, key: tuple[str, str], obj: Obj) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        if kind == "DELETED":
            self.store[resource].pop(key, None)
        else:
            self.store[resource][key] = obj
        event = (self.version, resource, kind, copy.deepcopy(obj))
        self.history.append(event)
        for queue in self._watchers:
            queue.put_nowait(event)

    # ---- server side ------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application()
        for resource in RESOURCES:
            app.router.add_get(f"/api/v1/{resource}", self._list_or_watch)
        app.router.add_patch("/api/v1/namespaces/{ns}/pods/{name}", self._patch)
        app.router.add_post("/api/v1/namespaces/{ns}/events", self._event)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        for queue in self._watchers:
            queue.put_nowait((0, "", "STOP", {}))
        if self._runner is not None:
            await self._runner.cleanup()

    async def _list_or_watch(self, request: web.Request) -> web.StreamResponse:
        resource = request.path.rsplit("/", 1)[-1]
        selector = request.query.get("fieldSelector", "")
        self.requests.append(f"{request.method} {request.path_qs}")
        if request.query.get("watch") not in ("true", "1", "True"):
            items = [o for o in self.store[resource].values() if _matches(o, selector)]
            return web.json_response({"kind": "List", "apiVersion": "v1", "items": items,
                                      "metadata": {"resourceVersion": str(self.version)}})
        since = int(request.query.get("resourceVersion") or self.version)
        timeout = float(request.query.get("timeoutSeconds") or 60)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        queue: asyncio.Queue[tuple[int, str, str, Obj]] = asyncio.Queue()
        self._watchers.add(queue)
        try:
            if since < self.compacted:
                await self._gone(response)
                return response
            for event in list(self.history):
                queue.put_nowait(event)
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                try:
                    version, res, kind, obj = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    break
                if kind == "STOP":
                    break
                if kind == "GONE":
                    await self._gone(response)
                    break
                if res != resource or version <= since or not _matches(obj, selector):
                    continue
                line = json.dumps({"type": kind, "object": obj}) + "\n"
                await response.write(line.encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.discard(queue)
        return response

    @staticmethod
    async def _gone(response: web.StreamResponse) -> None:
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
        await response.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())

    async def _patch(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        body = await request.json()
        self.patches.append((ns, name, request.content_type, body))
        current = self.store["pods"].get((ns, name))
        if current is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if request.content_type != "application/merge-patch+json":
            return web.json_response({"kind": "Status", "code": 415}, status=415)
        updated = merge_patch(current, body)
        self._emit("pods", "MODIFIED", (ns, name), updated)
        return web.json_response(updated)

    async def _event(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.events.append(body)
        return web.json_response(body, status=201)
