"""The emulator's subresources beyond get/update: ``scale`` (kubectl scale), ``pods/log`` (the
pod process's output), and the self-access reviews kubectl auth asks for."""

from __future__ import annotations

import asyncio

from aiohttp import web

from podway.kube.emulator import rbac
from podway.kube.emulator.jsondata import clone
from podway.kube.emulator.resources import ResourceType
from podway.kube.emulator.server_types import PATCHERS, REVIEWS, TRUE, PodLogs, Target
from podway.kube.emulator.store import ApiError, Obj, Store


class ExtrasMixin:
    """A part of ``podway.kube.emulator.server.Api`` (its other methods: the stubs below)."""

    store: Store
    pod_logs: PodLogs | None

    def _allowed(self, user: rbac.User, attrs: rbac.Attributes) -> bool:
        raise NotImplementedError

    async def _patch(self, request: web.Request, target: Target, *,
                     dry: bool = False) -> web.Response:
        raise NotImplementedError

    def _review(self, body: Obj, rtype: ResourceType, user: rbac.User | None) -> Obj:
        """A SelfSubjectAccessReview (``kubectl auth can-i``) or SelfSubjectReview
        (``kubectl auth whoami``), answered for the caller."""
        body = dict(body)
        if rtype.plural == "selfsubjectreviews":
            who = user or rbac.User("lab-admin", ("system:masters", "system:authenticated"))
            body["status"] = {"userInfo": {"username": who.name, "groups": list(who.groups)}}
            return body
        spec = body.get("spec") or {}
        asked = spec.get("resourceAttributes")
        if user is None:
            allowed, reason = True, "the lab's administrator (no credentials)"
        elif asked is None:  # nonResourceAttributes: discovery-like paths are open
            allowed, reason = True, "non-resource paths are open to authenticated users"
        else:
            attrs = rbac.Attributes(
                verb=str(asked.get("verb", "")), group=str(asked.get("group", "")),
                resource=str(asked.get("resource", "")),
                subresource=str(asked.get("subresource", "")),
                namespace=str(asked.get("namespace", "")), name=str(asked.get("name", "")))
            allowed = self._allowed(user, attrs)
            reason = "allowed by RBAC" if allowed else ""
        body["status"] = {"allowed": allowed, **({"reason": reason} if reason else {})}
        return body

    async def _log(self, request: web.Request, target: Target) -> web.StreamResponse:
        """``pods/{name}/log``: the pod process's output (``follow=true`` streams it)."""
        assert target.name is not None
        ns, name = target.namespace or "", target.name
        pod = self.store.get(target.rtype, ns, name)
        container = request.query.get("container")
        if self.pod_logs is None:
            raise ApiError(400, "BadRequest", f'pod "{name}" has no log here')
        text = self.pod_logs(ns, name, container) or ""
        tail = request.query.get("tailLines")
        if tail and tail.isdigit():
            text = "".join(text.splitlines(keepends=True)[-int(tail):]) if int(tail) else ""
        if request.query.get("follow") not in TRUE:
            return web.Response(text=text, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = len(self.pod_logs(ns, name, container) or "")
        await response.write(text.encode())
        uid = pod["metadata"].get("uid")
        try:
            while True:
                await asyncio.sleep(0.2)
                current = self.store.objects[target.rtype.group_resource].get((ns, name))
                if current is None or current["metadata"].get("uid") != uid:
                    break
                now = self.pod_logs(ns, name, container) or ""
                if len(now) > sent:
                    await response.write(now[sent:].encode())
                    sent = len(now)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return response

    @staticmethod
    def _scale_of(obj: Obj) -> Obj:
        meta = obj["metadata"]
        labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid",
                                                  "resourceVersion") if k in meta},
                "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
                "status": {"replicas": int((obj.get("status") or {}).get("replicas", 0)),
                           "selector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}}

    async def _scale(self, request: web.Request, target: Target) -> web.Response:
        """``deployments/{name}/scale``: read or set ``spec.replicas`` (kubectl scale)."""
        assert target.name is not None
        rtype, ns = target.rtype, target.namespace or ""
        obj = self.store.get(rtype, ns, target.name)
        if request.method in ("PUT", "PATCH"):
            body = await request.json()
            if request.method == "PATCH":
                patcher = PATCHERS.get(request.content_type)
                if patcher is None:
                    raise ApiError(415, "UnsupportedMediaType", "unknown patch type")
                body = patcher(self._scale_of(obj), body)
            try:
                replicas = int(body["spec"]["replicas"])
            except (KeyError, TypeError, ValueError):
                raise ApiError(422, "Invalid", "spec.replicas: Required value") from None
            if replicas < 0:
                raise ApiError(422, "Invalid", "spec.replicas: must be >= 0")
            updated = clone(obj)
            updated.setdefault("spec", {})["replicas"] = replicas
            obj = self.store.replace(rtype, ns, target.name, updated)
        elif request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")
        return web.json_response(self._scale_of(obj))

    async def _subresource(self, request: web.Request, target: Target,
                           user: rbac.User | None) -> web.StreamResponse | None:
        """The answer for ``scale``, ``log``, ``token`` and the reviews; None: a plain verb."""
        store, rtype = self.store, target.rtype
        ns = target.namespace or ""
        if target.subresource == "scale":
            return await self._scale(request, target)
        if target.subresource == "log" and request.method == "GET":
            return await self._log(request, target)
        if target.subresource == "token" and request.method == "POST":
            assert target.name is not None
            store.get(rtype, ns, target.name)  # 404 for an unknown ServiceAccount
            body = await request.json()
            token = store.issue_token(ns, target.name)
            return web.json_response({**body, "apiVersion": "authentication.k8s.io/v1",
                                      "kind": "TokenRequest",
                                      "status": {"token": token,
                                                 "expirationTimestamp": "2099-01-01T00:00:00Z"}},
                                     status=201)
        if target.subresource in ("log", "token"):
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")
        if rtype.group_resource in REVIEWS:
            if request.method != "POST":
                raise ApiError(405, "MethodNotAllowed", "only create is supported")
            body = await request.json()
            return web.json_response({**self._review(body, rtype, user),
                                      "apiVersion": rtype.api_version, "kind": rtype.kind},
                                     status=201)
        return None
