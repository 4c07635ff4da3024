"""The emulator's HTTP face: Kubernetes API paths, verbs, discovery and watch streams (aiohttp).

Routing follows the real URL layout (``/api/v1/...``, ``/apis/{group}/{version}/...``,
``namespaces/{ns}/{plural}/{name}/{subresource}``); every answer is what kubernetes-asyncio and
kubectl expect on the wire: typed lists with ``metadata.resourceVersion``, ``Status`` objects
for errors, watch streams as JSON lines with ``ERROR`` events carrying ``410`` for expired
versions, ``BOOKMARK`` events only for watches that allowed them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from aiohttp import web

from podway.kube import selectors
from podway.kube.emulator import defaults, openapi, patching, protobuf, rbac, tables
from podway.kube.emulator.jsondata import clone
from podway.kube.emulator.resources import ResourceType
from podway.kube.emulator.server_discovery import DiscoveryMixin
from podway.kube.emulator.server_extras import ExtrasMixin
from podway.kube.emulator.server_types import (
    ANONYMOUS,
    APPLY,
    CSR,
    EXTRA_SUBRESOURCES,
    NAMESPACE_FINALIZE_S,
    PATCHERS,
    REVIEWS,
    SCALABLE,
    TRUE,
    Fault,
    Patch,
    PodLogs,
    Target,
    User,
    Write,
    _dry_run,
    status_body,
)
from podway.kube.emulator.server_watch import WatchMixin
from podway.kube.emulator.store import ApiError, Obj, Store
from podway.kube.npl_keys import NODE_EXTRA as NODE_NAME_EXTRA


class Api(WatchMixin, DiscoveryMixin, ExtrasMixin):
    """The request handlers over one ``Store``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.users: dict[str, User] = {}  # bearer token → identity (unknown: anonymous)
        self.requests: list[str] = []
        self.patches: list[Patch] = []
        self.writes: list[Write] = []
        self.faults: list[Fault] = []
        self.bookmark_interval: float | None = None  # periodic bookmarks; None: on demand only
        self.pod_logs: PodLogs | None = None  # what serves pods/{name}/log (the lab's kubelet)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(f"{request.method} {request.path_qs}")
        try:
            return await self._dispatch(request)
        except ApiError as exc:
            headers = None if exc.retry_after is None else {"Retry-After": str(exc.retry_after)}
            return web.json_response(status_body(exc.code, exc.reason, exc.message),
                                     status=exc.code, headers=headers)
        except json.JSONDecodeError as exc:  # a malformed body is the client's error
            return web.json_response(status_body(400, "BadRequest",
                                                 f"the request body is not JSON: {exc}"),
                                     status=400)
        except (patching.PatchError, selectors.SelectorError) as exc:
            code = 422 if isinstance(exc, patching.PatchError) else 400
            return web.json_response(status_body(code, "Invalid", str(exc)), status=code)

    # ---- routing ----------------------------------------------------------------------
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["version"],):
            return web.json_response({
                "major": "1", "minor": "31", "gitVersion": "v1.31.0-podway-emulator",
                "gitCommit": "0" * 40, "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none",
                "compiler": "none", "platform": "linux/amd64"})
        if parts and parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if parts[:2] == ["openapi", "v3"]:
            if len(parts) == 2:
                return web.json_response(openapi.index(self.store.types()))
            group, version = (parts[3], parts[4]) if parts[2] == "apis" and len(parts) == 5 \
                else ("", parts[3]) if parts[2:4] == ["api", "v1"] else ("", "")
            if not version or not any(t.group == group and t.version == version
                                      for t in self.store.types()):
                raise ApiError(404, "NotFound", f"no OpenAPI document for {request.path}")
            return web.json_response(openapi.document(self.store.types(), group, version))
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"],
                                      "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return web.json_response(self._group_list())
        if len(parts) == 2 and parts[0] == "apis":
            return web.json_response(self._group(parts[1]))
        if parts == ["api", "v1"]:
            return web.json_response(self._resource_list("", "v1"))
        if len(parts) == 3 and parts[0] == "apis":
            return web.json_response(self._resource_list(parts[1], parts[2]))
        if len(parts) >= 3 and parts[:2] == ["api", "v1"]:
            target = self._target("", "v1", parts[2:])
        elif len(parts) >= 4 and parts[0] == "apis":
            target = self._target(parts[1], parts[2], parts[3:])
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        self._count_and_fault(request, target)
        user = self._user(request)
        if user is not None and target.rtype.group_resource not in REVIEWS:
            attrs = self._attributes(request, target)
            if not self._allowed(user, attrs):
                raise ApiError(403, "Forbidden", rbac.forbidden_message(user, attrs))
        return await self._verb(request, target, user)

    # ---- authentication and authorization (rbac) ----------------------------------------
    def _user(self, request: web.Request) -> rbac.User | None:
        """The ServiceAccount a token the emulator issued names; None (admin) without
        credentials, with the administrator's token (``KubeEmulator.admin_token``), or with any
        other credential unless unknown tokens are refused (TLS mode: 401). An administrator
        may act as someone else (``kubectl --as``, ``--as-group``): the
        ``Impersonate-User``/``Impersonate-Group`` headers, then RBAC applies to that user."""
        header = request.headers.get("Authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            token = token.strip() if scheme.lower() == "bearer" else ""
            if token and (token == self.store.admin_token or token in self.users):
                pass  # the administrator, or a user of add_user (not RBAC-checked)
            elif (account := self.store.token_account(token) if token else None) is not None:
                user = rbac.User.service_account(*account)
                if request.headers.get("Impersonate-User"):  # no impersonate rule here
                    raise ApiError(403, "Forbidden", rbac.forbidden_message(user, rbac.Attributes(
                        verb="impersonate", group="", resource="users",
                        name=request.headers["Impersonate-User"])))
                return user
            elif self.store.reject_unknown_tokens:
                raise ApiError(401, "Unauthorized", "Unauthorized")
        return rbac.impersonated(request.headers.get("Impersonate-User", ""),
                                 tuple(request.headers.getall("Impersonate-Group", ())))

    @staticmethod
    def _verb_of(request: web.Request, target: Target) -> str:
        verb = {"GET": "get" if target.name else "list", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}.get(request.method, request.method)
        if verb == "list" and request.query.get("watch") in TRUE:
            verb = "watch"
        return verb

    def _attributes(self, request: web.Request, target: Target) -> rbac.Attributes:
        return rbac.Attributes(verb=self._verb_of(request, target), group=target.rtype.group,
                               resource=target.rtype.plural, subresource=target.subresource,
                               namespace=target.namespace or "", name=target.name or "")

    def _allowed(self, user: rbac.User, attrs: rbac.Attributes) -> bool:
        def objects(plural: str) -> list[Obj]:
            return list(self.store.objects.get((rbac.RBAC, plural), {}).values())
        return rbac.allowed(user, attrs, roles=objects("roles"),
                            cluster_roles=objects("clusterroles"),
                            bindings=objects("rolebindings"),
                            cluster_bindings=objects("clusterrolebindings"))

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        rtype = self.store.resolve(group, version, rest[0])
        if namespace is not None and not rtype.namespaced:
            raise ApiError(404, "NotFound", f"{rtype.plural} is not namespaced")
        if len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and not (sub == "status" and rtype.status) and \
                not (sub == "scale" and rtype.group_resource in SCALABLE) and \
                (rtype.group_resource, sub) not in EXTRA_SUBRESOURCES and \
                not (sub == "approval" and rtype.group_resource == CSR):
            raise ApiError(404, "NotFound", f"{rtype.plural}/{sub} is not served")
        return Target(rtype, namespace, name, sub)

    def _count_and_fault(self, request: web.Request, target: Target) -> None:
        verb = self._verb_of(request, target)
        self.store.counts[(verb, target.rtype.plural, target.namespace or "",
                           target.name or "", target.subresource)] += 1
        if verb in ("create", "update", "patch", "delete"):
            self.writes.append(Write(request.headers.get("User-Agent", ""), verb,
                                     target.rtype.plural, target.namespace or "",
                                     target.name or "", target.subresource))
        for fault in self.faults:
            if fault.times > 0 and fault.method in (None, request.method) \
                    and fault.plural in (None, target.rtype.plural):
                fault.times -= 1
                raise ApiError(fault.status, "Injected", f"injected failure {fault.status}",
                               retry_after=fault.retry_after)

    async def _verb(self, request: web.Request, target: Target,
                    user: rbac.User | None = None) -> web.StreamResponse:
        store, rtype = self.store, target.rtype
        ns = target.namespace or ""
        special = await self._subresource(request, target, user)
        if special is not None:
            return special
        dry = _dry_run(request)
        table = tables.wants_table(request.headers.get("Accept", ""))
        include = request.query.get("includeObject", "Metadata")
        if request.method == "GET" and target.name is None:
            if request.query.get("watch") in TRUE:
                return await self._watch(request, target, table=table)
            if table:
                listed = self._list(request, target)
                return web.json_response(tables.table(
                    rtype, listed["items"], version=listed["metadata"]["resourceVersion"],
                    include=include))
            return web.json_response(self._list(request, target))
        if request.method == "GET" and target.name is not None:
            found = store.get(rtype, ns, target.name)
            if table:
                return web.json_response(tables.table(rtype, [found], include=include))
            return self._json(found, rtype)
        if request.method == "POST" and target.name is None:
            if rtype.namespaced and target.namespace is None:
                raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
            body = await _body(request)
            warnings = self._validate(request, rtype, body)
            if rtype.group_resource == CSR and isinstance(body, dict):
                self._stamp_requester(request, body)
            if isinstance(body, dict):
                defaults.apply(rtype.group_resource, body)
            created = store.create(rtype, ns, body, dry_run=dry)
            return self._json(created, rtype, status=201, warnings=warnings)
        if request.method == "PUT" and target.name is not None:
            body = await _body(request)
            warnings = self._validate(request, rtype, body)
            if isinstance(body, dict) and not target.subresource:
                defaults.apply(rtype.group_resource, body)
            return self._json(store.replace(rtype, ns, target.name, body,
                                            subresource=target.subresource, dry_run=dry),
                              rtype, warnings=warnings)
        if request.method == "PATCH" and target.name is not None:
            return await self._patch(request, target, dry=dry)
        if request.method == "DELETE" and target.name is not None:
            options = await request.json() if request.can_read_body else {}
            # kubectl sends DeleteOptions in the body: {"dryRun": ["All"], ...}
            dry = dry or "All" in ((options or {}).get("dryRun") or [])
            if store.require_namespaces and rtype.group_resource == ("", "namespaces") \
                    and not dry:
                return self._json(self._delete_namespace(target.name), rtype)
            if store.graceful_pods and rtype.group_resource == ("", "pods") and not dry:
                leaving = self._graceful_delete(request, target, options or {})
                if leaving is not None:
                    return self._json(leaving, rtype)
            return self._json(store.delete(rtype, ns, target.name, dry_run=dry), rtype)
        raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported here")

    def _delete_namespace(self, name: str) -> Obj:
        """As the API server and the namespace controller: the namespace turns
        ``Terminating`` (no new content; deleting what is in it still works), and a moment
        later everything in it is deleted, then the namespace."""
        store, rtype = self.store, self.store.by_plural("namespaces", "")
        current = store.get(rtype, "", name)
        if current["metadata"].get("deletionTimestamp"):
            return current
        leaving = clone(current)
        leaving["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        leaving["metadata"].pop("resourceVersion", None)
        leaving["status"] = {"phase": "Terminating"}
        result = store.replace(rtype, "", name, leaving, subresource="*", check_version=False)
        uid = result["metadata"].get("uid")

        def finish() -> None:
            found = store.objects[("", "namespaces")].get(("", name))
            if found is None or found["metadata"].get("uid") != uid:
                return
            store.empty_namespace(name)
            store.delete(rtype, "", name)

        asyncio.get_running_loop().call_later(NAMESPACE_FINALIZE_S, finish)
        return result

    def _graceful_delete(self, request: web.Request, target: Target,
                         options: Obj) -> Obj | None:
        """Deleting a running pod, as the API server does it: the pod is marked terminating
        (``deletionTimestamp`` = now + the grace period, from ``gracePeriodSeconds`` or the
        pod's ``terminationGracePeriodSeconds``, default 30) and its kubelet stops it and
        deletes it. None: delete at once (grace 0, an unscheduled or finished pod)."""
        assert target.name is not None
        ns, rtype = target.namespace or "", target.rtype
        pod = self.store.get(rtype, ns, target.name)
        asked = options.get("gracePeriodSeconds", request.query.get("gracePeriodSeconds"))
        spec = pod.get("spec") or {}
        grace = int(asked) if asked is not None else \
            int(spec.get("terminationGracePeriodSeconds", 30))
        phase = (pod.get("status") or {}).get("phase")
        if grace <= 0 or not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return None
        if pod["metadata"].get("deletionTimestamp"):
            return pod  # already terminating
        leaving = clone(pod)
        when = datetime.now(UTC) + timedelta(seconds=grace)
        leaving["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        leaving["metadata"]["deletionGracePeriodSeconds"] = grace
        leaving["metadata"].pop("resourceVersion", None)
        return self.store.replace(rtype, ns, target.name, leaving, subresource="*",
                                  check_version=False)

    def _stamp_requester(self, request: web.Request, body: Obj) -> None:
        """As the API server does on create: the requester's identity, never the client's —
        a user of ``add_user``, or the ServiceAccount of a token the emulator signed (a pod's
        token also names its node in ``extra``, as a bound token does)."""
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else ""
        user = self.users.get(token, ANONYMOUS)
        claims = self.store.token_claims(token) if token and user is ANONYMOUS else None
        if claims is not None:
            account = rbac.User.service_account(claims["ns"], claims["sa"])
            user = User(account.name, account.groups[:-1], (
                (NODE_NAME_EXTRA, (claims["node"],)),) if claims.get("node") else ())
        spec = body.setdefault("spec", {})
        if not isinstance(spec, dict):
            raise ApiError(422, "Invalid", "spec: must be an object")
        spec["username"] = user.username
        spec["groups"] = [*user.groups, "system:authenticated"] if user is not ANONYMOUS \
            else list(user.groups)
        spec["extra"] = {k: list(v) for k, v in user.extra}
        spec.pop("uid", None)

    @staticmethod
    def _validate(request: web.Request, rtype: ResourceType, obj: Any) -> list[str]:
        """Field validation as the API server does it: ``Strict`` refuses unknown fields
        (400, kubectl's default), ``Warn`` (the server's default) answers them as warnings,
        ``Ignore`` says nothing. Unknown fields are kept (not pruned) either way."""
        mode = request.query.get("fieldValidation", "Warn")
        if mode not in ("Strict", "Warn", "Ignore"):
            raise ApiError(400, "BadRequest", f"fieldValidation: invalid value {mode!r}: "
                                              "must be one of Ignore, Warn, Strict")
        if mode == "Ignore" or not isinstance(obj, dict):
            return []
        unknown = [f'unknown field "{f}"' for f in openapi.unknown_fields(obj, rtype)]
        if unknown and mode == "Strict":
            raise ApiError(400, "BadRequest",
                           f'{rtype.kind} in version "{rtype.version}" cannot be handled as a '
                           f"{rtype.kind}: strict decoding error: {', '.join(unknown)}")
        return unknown

    def _json(self, obj: Obj, rtype: ResourceType, status: int = 200,
              warnings: list[str] | None = None) -> web.Response:
        """``obj`` as the answer; the object a write just stored is encoded once, for the
        answer and every watch of its event."""
        event = self.store.event_of(obj)
        data = event.json_for(rtype.api_version) if event is not None else \
            json.dumps({**obj, "apiVersion": rtype.api_version}).encode()
        response = web.Response(body=data, status=status, content_type="application/json",
                                charset="utf-8")
        for text in warnings or []:
            response.headers.add("Warning", f'299 - "{text.replace(chr(34), chr(92) + chr(34))}"')
        return response

    # ---- verbs ------------------------------------------------------------------------
    def _selected(self, request: web.Request) -> Callable[[Obj], bool]:
        labels = selectors.label_selector(request.query.get("labelSelector", ""))
        fields = selectors.field_selector(request.query.get("fieldSelector", ""))
        return lambda obj: labels(obj) and fields(obj)

    def _list(self, request: web.Request, target: Target) -> Obj:
        rtype, selected = target.rtype, self._selected(request)
        items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")}
                 for o in self.store.items(rtype, target.namespace) if selected(o)]
        return {"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(self.store.version)}, "items": items}

    async def _patch(self, request: web.Request, target: Target, *,
                     dry: bool = False) -> web.Response:
        assert target.name is not None
        ctype = request.content_type
        rtype, ns = target.rtype, target.namespace or ""
        if ctype == APPLY:
            return await self._apply(request, target, dry=dry)
        body = await request.json()
        self.patches.append(Patch(rtype.plural, ns, target.name, target.subresource, ctype,
                                  body))
        patcher = PATCHERS.get(ctype)
        # Strategic merge needs the Go types' merge keys: built-in kinds only (CRDs: 415).
        if patcher is None or (ctype.startswith("application/strategic") and
                               rtype.crd is not None):
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted "
                           f"media types include: {', '.join(PATCHERS)}")
        current = self.store.get(rtype, ns, target.name)
        updated = patcher(current, body)
        if not isinstance(updated, dict):
            raise patching.PatchError("a patch must leave an object")
        wanted = (body.get("metadata") or {}).get("resourceVersion") \
            if isinstance(body, dict) else None
        if not wanted:  # only a version the patch itself names is a precondition
            # (a new metadata: the patched object shares the parts it left with the stored one)
            updated["metadata"] = {**(updated.get("metadata") or {}),
                                   "resourceVersion": current["metadata"]["resourceVersion"]}
        # A status write takes only the status: only it is validated (as a write through the
        # main resource takes all but the status, and validates all).
        warnings = self._validate(request, rtype, {"status": updated["status"]}
                                  if target.subresource == "status" and "status" in updated
                                  else {} if target.subresource == "status" else updated)
        if not target.subresource:
            updated = _defaulted(rtype, updated)
        result = self.store.replace(rtype, ns, target.name, updated,
                                    subresource=target.subresource, dry_run=dry)
        return self._json(result, rtype, warnings=warnings)

    async def _apply(self, request: web.Request, target: Target, *,
                     dry: bool = False) -> web.Response:
        """Server-side apply, simplified: the applied configuration creates the object or is
        merged into it (strategic merge for built-in kinds, JSON merge for CRD kinds). Field
        ownership is not tracked: no conflicts, and a field dropped from the configuration is
        not removed."""
        assert target.name is not None
        rtype, ns = target.rtype, target.namespace or ""
        try:
            body = yaml.safe_load(await request.text())
        except yaml.YAMLError as exc:
            raise ApiError(400, "BadRequest", f"the applied configuration is not YAML: {exc}")\
                from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the applied configuration must be an object")
        if not request.query.get("fieldManager"):
            raise ApiError(422, "Invalid", "fieldManager: Required value: is required for "
                                           "apply patch")
        self.patches.append(Patch(rtype.plural, ns, target.name, target.subresource, APPLY,
                                  body))
        current = self.store.objects[rtype.group_resource].get(
            (ns if rtype.namespaced else "", target.name))
        warnings = self._validate(request, rtype, body)
        if current is None:
            if target.subresource:
                raise ApiError(404, "NotFound", f'{rtype.plural} "{target.name}" not found')
            body.setdefault("metadata", {})["name"] = target.name
            defaults.apply(rtype.group_resource, body)
            created = self.store.create(rtype, ns, body, dry_run=dry)
            return self._json(created, rtype, status=201, warnings=warnings)
        merge = patching.merge_patch if rtype.crd is not None else \
            patching.strategic_merge_patch
        updated = merge(current, {k: v for k, v in body.items() if k != "status"}
                        if not target.subresource else body)
        updated["metadata"] = {**(updated.get("metadata") or {}),
                               "resourceVersion": current["metadata"]["resourceVersion"]}
        if not target.subresource:
            updated = _defaulted(rtype, updated)
        result = self.store.replace(rtype, ns, target.name, updated,
                                    subresource=target.subresource, dry_run=dry)
        return self._json(result, rtype, warnings=warnings)

    # ---- discovery --------------------------------------------------------------------


def _defaulted(rtype: ResourceType, obj: Obj) -> Obj:
    """``obj`` with the server's defaults (``defaults.apply``), on a copy where they may apply:
    a patched object shares the parts the patch left with the stored one, never changed in
    place."""
    if rtype.group != "apps":
        return obj
    copied = clone(obj)
    defaults.apply(rtype.group_resource, copied)
    return copied


async def _body(request: web.Request) -> Any:
    """A create or update body: JSON, or Kubernetes protobuf for the kinds ``protobuf``
    decodes (client-go's typed clients send it; Helm stores its releases that way)."""
    if request.content_type == protobuf.CONTENT_TYPE:
        try:
            return protobuf.decode(await request.read())
        except (protobuf.ProtobufError, UnicodeDecodeError) as exc:
            raise ApiError(415, "UnsupportedMediaType", str(exc)) from None
    return await request.json()
