"""A wire-level Kubernetes API emulator: tests and the lab talk to it with real clients.

It serves the kinds Podway reads and writes and those an install needs (core Pods, Services,
ServiceAccounts, Nodes, Namespaces, Secrets, ConfigMaps, Events; events.k8s.io Events; apps
Deployments, ReplicaSets, DaemonSets; policy PodDisruptionBudgets; RBAC Roles, ClusterRoles and
their bindings; EndpointSlices; Leases; Ingress and IngressClass; CertificateSigningRequests
(the requester stamped from a bearer token, ``add_user``); CRDs, and through them every
Gateway API kind) over HTTP with the real URL layout, discovery (``/api``, ``/apis``, resource
lists with categories: ``kubectl get all``), get/list/watch with resourceVersions, bookmarks for
watches that allow them, ``410 Gone`` for versions older than the compacted history, label and
field selectors, create/update/delete, merge, JSON and strategic merge patches (built-in kinds),
the status subresource, server-side dry run (``dryRun=All``), field validation
(``fieldValidation=Strict|Warn|Ignore`` against the schema of each kind), ``/openapi/v3``
generated from the kinds served (``openapi``), and Table output with the usual printer columns
(``tables``). kubernetes-asyncio's own code paths run unchanged against it, and so does kubectl
(get, apply with validation, patch, rollout, label, delete, api-resources). Not modelled:
finalizers (deletion is immediate), pagination (``limit`` is ignored, lists are whole),
field ownership in server-side apply (it creates or merges, never conflicts), pruning of
unknown fields, ``/openapi/v2``. ServiceAccount tokens
(``kubectl create token``) are checked against the stored RBAC objects (``rbac``: a 403 worded
as a cluster's); requests without credentials, or with ``admin_token``, are an administrator,
and so is any other credential on plain HTTP (``tls=True`` serves HTTPS — kubectl sends tokens
only over TLS — and answers an unknown token 401). ``kubectl auth can-i`` and
``auth whoami`` are answered; ``pods/log`` is served by a hook (``set_pod_logs``). Admission
is one optional hook (``set_admission``: the lab allocates nodePorts there). ``dump``/``load``
and ``set_on_commit`` let the lab keep the store on disk across restarts.

Tests drive it from the inside (``put``/``delete`` write as the cluster would, without the
rules a client is held to), steer it (``compact``, ``break_watches``, ``send_bookmarks``,
``fail`` with an optional Retry-After, ``install_crd``) and read what clients did
(``count``, ``patches``, ``requests``, ``writes`` with each client's User-Agent, ``events``).
Leases are plain objects with the rules a leader election relies on: create of an existing
name is ``409 AlreadyExists``, an update carrying a stale ``metadata.resourceVersion`` is
``409 Conflict``.

Why not kmock's ``KubernetesEmulator`` (kmock 0.8, evaluated): it is a well-made in-memory
object store with a request DSL, but it serves ``resourceVersion: "..."`` on lists, streams
every existing object on each watch regardless of the version asked for, has no history, so no
``410 Gone`` and no resuming, sends no bookmarks, ignores label and field selectors, treats
every patch as a plain dict merge (no JSON patch list, no strategic merge keys, no ``null``
deletes), has no status subresource and no generation, and no CRD-gated discovery. Those are
exactly the behaviours the informers and the status writer must be tested against; adding them
would mean overriding most of its handlers while pulling in attrs, jsonpatch and its DSL. Ours
is a few hundred lines in three layers (``store`` rules, ``patching``/``selectors`` pure
functions, ``server`` HTTP) and runs in the lab without test-only dependencies.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from types import TracebackType

from aiohttp import web

from podway.kube.emulator.jsondata import clone
from podway.kube.emulator.resources import ResourceType, gateway_api_crd
from podway.kube.emulator.server import Api
from podway.kube.emulator.server_types import Fault, Patch, User, Write
from podway.kube.emulator.store import Admit, ApiError, Obj, Store
from podway.kube.emulator.tls import context_of, serving_context
from podway.kube.gateway_api import KINDS as GATEWAY_KINDS

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
__all__ = ["GATEWAY_KINDS", "Admit", "ApiError", "KubeEmulator", "Patch", "User", "Write",
           "gateway_api_crd"]


class KubeEmulator:
    """One emulated API server on a loopback port (``url`` once started)."""

    def __init__(self, *, require_namespaces: bool = False, tls: bool = False,
                 graceful_pod_deletion: bool = False,
                 certificate: tuple[bytes, bytes, bytes] | None = None) -> None:
        """``require_namespaces``: as a real API server, a namespaced create needs its
        Namespace (404 otherwise), and default, kube-system, kube-public and kube-node-lease
        exist from the start. ``tls``: serve HTTPS with a fresh self-signed certificate
        (``ca_pem``), which kubectl needs to send a ServiceAccount token at all.
        ``graceful_pod_deletion``: deleting a scheduled pod through the API marks it
        terminating (its kubelet — the lab's — stops it and deletes it), as on a cluster.
        ``certificate``: (certificate PEM, key PEM, CA PEM) to serve instead of a fresh
        self-signed one (the lab's, signed by its own CA); implies ``tls``."""
        self._tls = tls or certificate is not None
        self._certificate = certificate
        self.ca_pem = b""
        self._store = Store()
        self._store.graceful_pods = graceful_pod_deletion
        self._store.reject_unknown_tokens = self._tls
        if require_namespaces:
            self._store.require_namespaces = True
            for name in SYSTEM_NAMESPACES:
                self.put("namespaces", {"metadata": {"name": name},
                                        "status": {"phase": "Active"}})
        self._api = Api(self._store)
        self._runner: web.AppRunner | None = None
        self._context: ssl.SSLContext | None = None
        self.url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self._api.app(), access_log=None,
                                     handler_cancellation=True)
        await self._runner.setup()
        context = None
        if self._certificate is not None:
            context, self.ca_pem = context_of(*self._certificate[:2]), self._certificate[2]
        elif self._tls:
            context, self.ca_pem = serving_context(host)
        self._context = context
        site = web.TCPSite(self._runner, host, port, ssl_context=context)
        await site.start()
        bound = self._runner.addresses[0]
        self.url = f"{'https' if self._tls else 'http'}://{host}:{bound[1]}"
        return self.url

    async def serve_socket(self, sock: socket.socket) -> None:
        """Serve on one more listening socket too (once started): the lab's API address
        inside its network, a socket made in another network namespace."""
        assert self._runner is not None, "start() first"
        await web.SockSite(self._runner, sock, ssl_context=self._context).start()

    async def stop(self) -> None:
        self._store.control("BREAK")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> KubeEmulator:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    # ---- writing as the cluster (no client rules) ------------------------------------
    def _type(self, plural: str, group: str | None) -> ResourceType:
        return self._store.by_plural(plural, group)

    def put(self, plural: str, obj: Obj, *, group: str | None = None) -> Obj:
        """Create or replace ``obj`` whole (status included), bumping its resourceVersion."""
        rtype = self._type(plural, group)
        meta = obj.get("metadata", {})
        namespace = str(meta.get("namespace", "default")) if rtype.namespaced else ""
        name = str(meta["name"])
        if (namespace, name) in self._store.objects[rtype.group_resource]:
            body = clone(obj)
            body.setdefault("metadata", {}).pop("resourceVersion", None)
            result = self._store.replace(rtype, namespace, name, body, subresource="*",
                                         check_version=False)
        else:
            result = self._store.create(rtype, namespace, obj, keep_status=True)
        return clone(result)

    def get(self, plural: str, namespace: str, name: str, *,
            group: str | None = None) -> Obj | None:
        rtype = self._type(plural, group)
        try:
            return clone(self._store.get(rtype, namespace, name))
        except ApiError:
            return None

    def objects(self, plural: str, *, group: str | None = None) -> list[Obj]:
        return clone(self._store.items(self._type(plural, group), None))

    def delete(self, plural: str, namespace: str, name: str, *, group: str | None = None,
               notify: bool = True) -> None:
        """Delete an object; ``notify=False`` hides it from open watches (as if it happened
        while they were away: only a re-list, e.g. after ``compact()``, can notice)."""
        rtype = self._type(plural, group)
        try:
            self._store.delete(rtype, namespace if rtype.namespaced else "", name,
                               notify=notify)
        except ApiError:
            return

    def annotation(self, namespace: str, name: str, key: str) -> str | None:
        """One annotation of a pod, or None."""
        obj = self.get("pods", namespace, name)
        value = None if obj is None else (obj["metadata"].get("annotations") or {}).get(key)
        return None if value is None else str(value)

    def install_crd(self, kind: str) -> Obj:
        """Install the CRD of one Gateway API kind; its resources are served from now on."""
        return self.put("customresourcedefinitions", gateway_api_crd(kind))

    def install_gateway_api(self) -> None:
        for kind in GATEWAY_KINDS:
            self.install_crd(kind)

    def uninstall_crd(self, kind: str) -> None:
        plural = GATEWAY_KINDS[kind][0]
        self.delete("customresourcedefinitions", "", f"{plural}.gateway.networking.k8s.io")

    def add_user(self, token: str, username: str, *, groups: tuple[str, ...] = (),
                 extra: dict[str, list[str]] | None = None) -> None:
        """Requests with ``Authorization: Bearer <token>`` are this user (nothing is refused:
        the identity only shows where the API server records it, a CertificateSigningRequest's
        ``spec.username``/``groups``/``extra``)."""
        self._api.users[token] = User(username, groups, tuple(
            (k, tuple(v)) for k, v in sorted((extra or {}).items())))

    # ---- hooks for the lab -------------------------------------------------------------
    def set_admission(self, admit: Admit | None) -> None:
        """Run ``admit(type, new, old)`` before every write (may edit ``new`` or raise
        ``ApiError``): the lab allocates nodePorts and clusterIPs there."""
        self._store.admit = admit

    def set_pod_logs(self, logs: Callable[[str, str, str | None], str | None] | None) -> None:
        """Serve ``pods/{name}/log`` (``kubectl logs``) from ``logs(namespace, pod,
        container)``: the pod's output so far (the lab's kubelet)."""
        self._api.pod_logs = logs

    @property
    def admin_token(self) -> str:
        """A bearer token that is the administrator (kubectl over TLS needs a credential)."""
        return self._store.admin_token

    def set_credentials(self, *, admin_token: str, token_key: bytes) -> None:
        """Keep the administrator's token and the ServiceAccount token signing key across
        restarts (the lab stores both): tokens issued before stay valid, as on a cluster."""
        self._store.admin_token = admin_token
        self._store.token_key = token_key

    def issue_token(self, namespace: str, service_account: str, *, node: str = "") -> str:
        """A bearer token for a ServiceAccount: requests with it are authorized by RBAC; bound
        to ``node`` (a pod's token) it names that node in what the API server stamps."""
        return self._store.issue_token(namespace, service_account, node=node)

    def set_on_commit(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback()`` after every write (the lab schedules a save)."""
        self._store.on_commit = callback

    def dump(self) -> Obj:
        """The whole store as JSON-able data (see ``load``)."""
        return self._store.dump()

    def load(self, dumped: Obj) -> None:
        """Restore a ``dump`` before serving; clients resuming older versions get 410."""
        self._store.load(dumped)

    # ---- steering ---------------------------------------------------------------------
    def compact(self, *, expire_watches: bool = True) -> None:
        """Forget the history: resuming from any version before now is ``410 Gone``; with
        ``expire_watches`` every open watch also ends with a 410 ERROR event."""
        self._store.compact()
        if expire_watches:
            self._store.control("GONE")

    def break_watches(self, plural: str | None = None, *, group: str | None = None) -> None:
        """Drop open watch connections mid-stream (all, or of one resource)."""
        resource = None if plural is None else self._type(plural, group).group_resource
        self._store.control("BREAK", resource)

    def send_bookmarks(self, plural: str | None = None, *, group: str | None = None) -> None:
        """Send a BOOKMARK with the current resourceVersion to watches that allow them."""
        resource = None if plural is None else self._type(plural, group).group_resource
        self._store.control("BOOKMARK", resource)

    @property
    def bookmark_interval(self) -> float | None:
        return self._api.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float | None) -> None:
        """Also send a bookmark after ``seconds`` without events (None: only on demand)."""
        self._api.bookmark_interval = seconds

    def fail(self, status: int, *, method: str | None = None, plural: str | None = None,
             times: int = 1, retry_after: int | None = None) -> None:
        """Answer the next ``times`` matching requests with ``status`` (and Retry-After)."""
        self._api.faults.append(Fault(status, method, plural, times, retry_after))

    def clear_faults(self) -> None:
        """Answer normally again (the injected failures not yet used are dropped)."""
        self._api.faults.clear()

    # ---- what clients did -------------------------------------------------------------
    def count(self, verb: str, plural: str, namespace: str = "", name: str = "",
              subresource: str = "") -> int:
        """Requests so far: verb is get|list|watch|create|update|patch|delete."""
        return self._store.counts[(verb, plural, namespace, name, subresource)]

    def watching(self, plural: str, *, group: str | None = None) -> int:
        """Watches open right now on one resource."""
        resource = self._type(plural, group).group_resource
        return sum(w.resource == resource for w in self._store.watchers)

    @property
    def patches(self) -> list[Patch]:
        return self._api.patches

    @property
    def writes(self) -> list[Write]:
        """Every write request so far, in order, with the client's User-Agent."""
        return self._api.writes

    @property
    def requests(self) -> list[str]:
        return self._api.requests

    @property
    def events(self) -> list[Obj]:
        """Events of both APIs (core/v1 and events.k8s.io/v1) in the order they were created."""
        found = [o for group in ("", "events.k8s.io")
                 for o in self._store.objects[(group, "events")].values()]
        return sorted(found, key=lambda o: int(o["metadata"].get("uid", "0").split("-")[0],
                                               16))

    @property
    def version(self) -> int:
        return self._store.version

    def served(self) -> list[ResourceType]:
        """Every resource type served right now (built-in and from installed CRDs)."""
        return self._store.types()
