"""The emulator's state: objects, the event history, resource versions and watchers.

Pure bookkeeping with no I/O, so the HTTP layer stays thin and every rule lives in one place:

- One global, strictly increasing resourceVersion (like etcd's revision); every write bumps it
  and appends one event to the history. ``floor`` is the oldest version a watch may resume
  from; ``compact()`` raises it to "now" (older resumes get ``410 Gone``).
- ``metadata.generation`` starts at 1 and bumps when anything but metadata and status changes;
  writes through the main resource of a kind with a status subresource keep the old status,
  writes through ``/status`` change only the status (and never the generation).
- A PUT or a patch that carries ``metadata.resourceVersion`` must match the stored one (409).
- CustomResourceDefinitions are objects like any other; creating one starts serving its kinds,
  deleting one stops serving them and deletes their objects (with DELETED events).
- Deletion is immediate (finalizers are not modelled).
- No stored version is changed in place (copy-on-write): a write stores a new object, which may
  share the parts it leaves with the version before it (a status write: the spec), and the
  write's watch event carries it; what a client sent and what the emulator's own accessors
  (``KubeEmulator.get``, ``objects``) hand out share nothing with what is stored.
- A dry run (``dry_run=True``, the API's ``dryRun=All``) goes through every rule and the
  admission hook and answers what would be stored, but stores nothing, bumps no version and
  tells no watch.
- With ``require_namespaces`` (the lab), creating a namespaced object in a namespace that does
  not exist is ``404 NotFound`` (``403`` while it is terminating), as on a real API server,
  and every new namespace gets its ``default`` ServiceAccount.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from podway.kube.emulator.jsondata import clone
from podway.kube.emulator.resources import BUILTIN, ResourceType, from_crd

Obj = dict[str, Any]
# An admission hook: (type, new object, stored object or None) → may change the new object in
# place or raise ``ApiError`` (the lab assigns nodePorts and clusterIPs there, as the API server
# does). Runs before any write through the API or ``put``.
Admit = Callable[["ResourceType", "Obj", "Obj | None"], None]
GroupResource = tuple[str, str]  # (group, plural): objects are stored per group, any version
CRDS: GroupResource = ("apiextensions.k8s.io", "customresourcedefinitions")


class ApiError(Exception):
    """A failure the server answers with a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, *,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.retry_after = retry_after


@dataclass(slots=True)
class Event:
    version: int
    type: str  # ADDED | MODIFIED | DELETED, or a control token: GONE | BREAK | BOOKMARK
    resource: GroupResource
    obj: Obj
    # ``obj`` as JSON, once someone encoded it (the write's answer, or the first watch that
    # sent it): every other watch of the event, and the answer, send these bytes again.
    encoded: bytes | None = field(default=None, repr=False, compare=False)

    def json_for(self, api_version: str) -> bytes:
        """``obj`` as JSON, served as ``api_version`` (the stored object's own: encoded once)."""
        if self.obj.get("apiVersion") != api_version:
            return json.dumps({**self.obj, "apiVersion": api_version}).encode()
        if self.encoded is None:
            self.encoded = json.dumps(self.obj).encode()
        return self.encoded


@dataclass(eq=False)
class Watcher:
    """One open watch: the store pushes every event; the server filters and writes."""

    resource: GroupResource
    queue: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_CSR = ("certificates.k8s.io", "certificatesigningrequests")


def _csr_write(old: Obj, new: Obj, subresource: str) -> Obj:
    """A CertificateSigningRequest's ``/approval`` writes its conditions, ``/status`` its
    certificate too, which (as on the API server) needs an Approved condition first."""
    merged = clone(old)
    status = merged.setdefault("status", {})
    wanted = new.get("status") or {}
    if subresource == "approval":
        status["conditions"] = clone(wanted.get("conditions") or [])
        return merged
    approved = any(c.get("type") == "Approved" and c.get("status", "True") == "True"
                   for c in status.get("conditions") or [])
    if wanted.get("certificate") and not approved:
        raise ApiError(422, "Invalid", "status.certificate: Forbidden: updates may not set "
                                       "certificate content unless the Approved condition is "
                                       "present")
    merged["status"] = {**clone(wanted), "conditions": status.get("conditions", [])}
    return merged


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Store:
    def __init__(self) -> None:
        self.version = 100
        self.floor = 100
        self.objects: dict[GroupResource, dict[tuple[str, str], Obj]] = {}
        self.history: list[Event] = []
        self.watchers: set[Watcher] = set()
        self.counts: Counter[tuple[str, str, str, str, str]] = Counter()
        self._uids = itertools.count(1)
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self.admit: Admit | None = None
        self._last: tuple[Obj | None, Event | None] = (None, None)  # ``event_of``
        self.on_commit: Callable[[], None] | None = None  # after every write (persistence)
        self.require_namespaces = False  # namespaced creates need their Namespace (the lab)
        self.graceful_pods = False  # a DELETE of a running pod marks it terminating (the lab)
        # ServiceAccount tokens are signed with this key (``token_account`` checks them), so
        # they stay valid across a restart that keeps the key, as a cluster's do.
        self.token_key = secrets.token_bytes(32)
        self.admin_token = f"podway-admin.{secrets.token_urlsafe(24)}"  # not RBAC-checked
        self.reject_unknown_tokens = False  # 401 for them (TLS mode); else they are the admin
        for rtype in BUILTIN:
            self._serve(rtype)

    # ---- types ------------------------------------------------------------------------
    def _serve(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.version, rtype.plural)] = rtype
        self.objects.setdefault(rtype.group_resource, {})

    def types(self) -> list[ResourceType]:
        return list(self._types.values())

    def resolve(self, group: str, version: str, plural: str) -> ResourceType:
        rtype = self._types.get((group, version, plural))
        if rtype is None:
            gv = f"{group}/{version}" if group else version
            raise ApiError(404, "NotFound", f"the server could not find the requested "
                                            f"resource ({plural}.{gv})")
        return rtype

    def by_plural(self, plural: str, group: str | None = None) -> ResourceType:
        """The served type with this plural (core first: "events" is core/v1 unless asked)."""
        found = [t for t in self._types.values()
                 if t.plural == plural and (group is None or t.group == group)]
        if not found:
            raise KeyError(f"{plural} is not served (is its CRD installed?)")
        return sorted(found, key=lambda t: (t.group != "", t.group))[0]

    def issue_token(self, namespace: str, name: str, *, node: str = "") -> str:
        """A bearer token for the ServiceAccount (``serviceaccounts/{name}/token``), bound to
        ``node`` when given (a pod's token: the API server then stamps
        ``authentication.kubernetes.io/node-name``): ``podway-sa.<claims>.<HMAC-SHA256>``."""
        claims = {"ns": namespace, "sa": name, "nonce": secrets.token_urlsafe(9),
                  **({"node": node} if node else {})}
        body = "podway-sa." + base64.urlsafe_b64encode(
            json.dumps(claims, sort_keys=True).encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}"

    def token_claims(self, token: str) -> dict[str, str] | None:
        """What a token this store signed says (``ns``, ``sa``, maybe ``node``), else None."""
        body, _, mac = token.rpartition(".")
        if not body.startswith("podway-sa.") or not hmac.compare_digest(mac, self._sign(body)):
            return None
        raw = body.removeprefix("podway-sa.")
        claims = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        return {str(k): str(v) for k, v in claims.items()}

    def token_account(self, token: str) -> tuple[str, str] | None:
        """The ServiceAccount (namespace, name) a token this store signed names, else None."""
        claims = self.token_claims(token)
        return None if claims is None else (claims["ns"], claims["sa"])

    def _sign(self, body: str) -> str:
        digest = hmac.new(self.token_key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    # ---- reads ------------------------------------------------------------------------
    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.objects[rtype.group_resource].get((namespace, name))
        if obj is None:
            raise ApiError(404, "NotFound", f'{rtype.plural} "{name}" not found')
        return obj

    def items(self, rtype: ResourceType, namespace: str | None) -> list[Obj]:
        store = self.objects[rtype.group_resource]
        return [o for (ns, _), o in sorted(store.items())
                if namespace is None or ns == namespace]

    # ---- writes -----------------------------------------------------------------------
    def create(self, rtype: ResourceType, namespace: str, obj: Obj, *,
               keep_status: bool = False, dry_run: bool = False) -> Obj:
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uids):05x}"
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        key = (namespace if rtype.namespaced else "", str(meta["name"]))
        if key in self.objects[rtype.group_resource]:
            raise ApiError(409, "AlreadyExists", f'{rtype.plural} "{key[1]}" already exists')
        if rtype.namespaced and self.require_namespaces:
            found = self.objects[("", "namespaces")].get(("", key[0]))
            if found is None:
                raise ApiError(404, "NotFound", f'namespaces "{key[0]}" not found')
            if found["metadata"].get("deletionTimestamp"):
                raise ApiError(403, "Forbidden", f'{rtype.plural} "{key[1]}" is forbidden: '
                                                 f"unable to create new content in namespace "
                                                 f"{key[0]} because it is being terminated")
        if rtype.namespaced:
            meta["namespace"] = key[0]
        else:
            meta.pop("namespace", None)
        if rtype.status and not keep_status:
            obj.pop("status", None)
        # The server assigns the uid (a client's is ignored); its hex prefix orders creation.
        meta["uid"] = f"{next(self._uids):08x}-0000-4000-8000-000000000000"
        meta["generation"] = 1
        meta.setdefault("creationTimestamp", _now())
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        if self.admit is not None:
            self.admit(rtype, obj, None)
        if dry_run:
            return obj
        created = self._commit(rtype, key, "ADDED", obj)
        if self.require_namespaces and rtype.group_resource == ("", "namespaces"):
            self._default_service_account(key[1])
        return created

    def _default_service_account(self, namespace: str) -> None:
        """The ServiceAccount controller's work: every namespace has a ``default`` one."""
        rtype = next(t for t in self._types.values()
                     if t.group_resource == ("", "serviceaccounts"))
        if ("", "serviceaccounts") in self.objects and \
                (namespace, "default") not in self.objects[("", "serviceaccounts")]:
            self.create(rtype, namespace, {"metadata": {"name": "default"}})

    def replace(self, rtype: ResourceType, namespace: str, name: str, new: Obj, *,
                subresource: str = "", check_version: bool = True,
                dry_run: bool = False) -> Obj:
        """Write ``new`` over the stored object through the main resource or ``/status``."""
        old = self.get(rtype, namespace, name)
        wanted = str((new.get("metadata") or {}).get("resourceVersion") or "")
        if check_version and wanted and wanted != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rtype.plural} '
                                            f'"{name}": the object has been modified; please '
                                            "apply your changes to the latest version")
        if rtype.group_resource == _CSR and subresource in ("status", "approval"):
            new = _csr_write(old, clone(new), subresource)
        elif subresource == "status":  # only the status is taken from ``new``: only it copied
            # The new version shares all but its metadata and status with the old one (no
            # stored version is changed in place); an admission hook may change any part of it.
            merged = {**old, "metadata": dict(old["metadata"])} if self.admit is None \
                else clone(old)
            if "status" in new:
                merged["status"] = clone(new["status"])
            else:
                merged.pop("status", None)
            new = merged
        elif rtype.status and subresource != "*":
            new = clone(new)
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        else:
            new = clone(new)
        meta = new.setdefault("metadata", {})
        for fixed in ("name", "namespace", "uid", "creationTimestamp"):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
        generation = int(old["metadata"].get("generation", 1))
        # A status write keeps all but the status of ``old``: no spec to compare.
        meta["generation"] = generation + (subresource not in ("status", "approval")
                                           and _spec_part(new) != _spec_part(old))
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if self.admit is not None:
            self.admit(rtype, new, old)
        if new.get("status") == old.get("status") and new == old:  # the status differs most
            return old  # a no-op write does not bump the resourceVersion (like the server)
        if dry_run:
            return new
        return self._commit(rtype, (namespace if rtype.namespaced else "", name), "MODIFIED",
                            new)

    def delete(self, rtype: ResourceType, namespace: str, name: str, *,
               notify: bool = True, dry_run: bool = False) -> Obj:
        old = clone(self.get(rtype, namespace, name))
        key = (namespace if rtype.namespaced else "", name)
        if dry_run:
            return old
        if not notify:  # the write happened (the version moves) but no watch hears of it
            self.version += 1
            del self.objects[rtype.group_resource][key]
            return old
        return self._commit(rtype, key, "DELETED", old)

    def empty_namespace(self, namespace: str) -> None:
        """The namespace controller's work: every object in the namespace goes (with DELETED
        events), so nothing outlives it."""
        for rtype in {t.group_resource: t for t in self._types.values() if t.namespaced}.values():
            store = self.objects.get(rtype.group_resource, {})
            for key in [k for k in store if k[0] == namespace]:
                self._commit(rtype, key, "DELETED", clone(store[key]))

    def _commit(self, rtype: ResourceType, key: tuple[str, str], kind: str, obj: Obj) -> Obj:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        store = self.objects[rtype.group_resource]
        if kind == "DELETED":
            store.pop(key, None)
        else:
            store[key] = obj
        # The event carries the stored version itself: no version is changed in place, and the
        # watches only encode it.
        event = Event(self.version, kind, rtype.group_resource, obj)
        self._last = (obj, event) if kind != "DELETED" else (None, None)
        self._publish(event)
        if rtype.group_resource == CRDS:
            self._crd_changed(kind, obj)
        if self.on_commit is not None:
            self.on_commit()
        return obj

    def _publish(self, event: Event) -> None:
        self.history.append(event)
        for watcher in self.watchers:
            if watcher.resource == event.resource:
                watcher.queue.put_nowait(event)

    def _crd_changed(self, kind: str, crd: Obj) -> None:
        spec = crd.get("spec", {})
        group, plural = str(spec.get("group", "")), str(spec.get("names", {}).get("plural", ""))
        for served in [k for k in self._types if k[0] == group and k[2] == plural]:
            del self._types[served]
        if kind != "DELETED":
            for rtype in from_crd(crd):
                self._serve(rtype)
            return
        # Deleting a CRD deletes every object of its kind.
        store = self.objects.get((group, plural), {})
        rtype_like = ResourceType(group=group, version="", plural=plural, kind="",
                                  namespaced=True)
        for key in list(store):
            self._commit(rtype_like, key, "DELETED", clone(store[key]))

    # ---- persistence (the lab's control plane survives its restart) --------------------
    def dump(self) -> Obj:
        """Every object with its resourceVersion and uid, CRDs first, and the version."""
        order = sorted(self.objects, key=lambda gr: gr != CRDS)
        return {"version": self.version,
                "objects": [[gr[0], gr[1], clone(obj)] for gr in order
                            for _, obj in sorted(self.objects[gr].items())]}

    def load(self, dumped: Obj) -> None:
        """Restore a ``dump`` into this (empty) store. Objects keep their versions and uids;
        the history starts at the dumped version, so a client resuming from before it gets
        ``410 Gone`` and re-lists, as after an etcd compaction."""
        top = 0
        for group, plural, obj in dumped["objects"]:
            meta = obj["metadata"]
            key = (str(meta.get("namespace", "")), str(meta["name"]))
            self.objects.setdefault((group, plural), {})[key] = obj
            top = max(top, int(str(meta.get("uid", "0")).split("-")[0], 16))
            if (group, plural) == CRDS:
                self._crd_changed("ADDED", obj)
        self._uids = itertools.count(top + 1)
        self.version = self.floor = int(dumped["version"])
        self.history.clear()

    def event_of(self, obj: Obj) -> Event | None:
        """The event of the last write, when ``obj`` is the very object that write stored."""
        stored, event = self._last
        return event if stored is obj else None

    # ---- watch control ----------------------------------------------------------------
    def since(self, resource: GroupResource, version: int) -> list[Event]:
        """Events of ``resource`` after ``version``; ``410`` if the history no longer has them."""
        if version < self.floor:
            raise ApiError(410, "Expired", f"too old resource version: {version} "
                                           f"({self.floor})")
        return [e for e in self.history if e.version > version and e.resource == resource]

    def control(self, token: str, resource: GroupResource | None = None) -> None:
        for watcher in self.watchers:
            if resource is None or watcher.resource == resource:
                watcher.queue.put_nowait(Event(self.version, token, watcher.resource, {}))

    def compact(self) -> None:
        self.floor = self.version
        self.history.clear()
