"""What the emulator's HTTP face works with: the request target, the records tests read
(patches, writes, injected faults), identities, and the constants of the wire."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from podway.kube.emulator import patching
from podway.kube.emulator.resources import ResourceType
from podway.kube.emulator.store import ApiError, Obj

PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    "application/merge-patch+json": patching.merge_patch,
    "application/json-patch+json": patching.json_patch,
    "application/strategic-merge-patch+json": patching.strategic_merge_patch,
}
NAMESPACE_FINALIZE_S = 1.0  # a deleted namespace's content goes this long after (cluster mode)
APPLY = "application/apply-patch+yaml"  # server-side apply (``_apply``)
TRUE = ("true", "1", "True")
SCALABLE = {("apps", "deployments")}  # kinds with a ``scale`` subresource (kubectl scale)
EXTRA_SUBRESOURCES = {(("", "pods"), "log"), (("", "serviceaccounts"), "token")}
REVIEWS = {("authorization.k8s.io", "selfsubjectaccessreviews"),
           ("authentication.k8s.io", "selfsubjectreviews")}  # answered, never stored
PodLogs = Callable[[str, str, str | None], str | None]  # (namespace, pod, container) → text


@dataclass(frozen=True, slots=True)
class Target:
    """What a request path names."""

    rtype: ResourceType
    namespace: str | None  # None: across all namespaces (or cluster-scoped)
    name: str | None
    subresource: str


@dataclass(frozen=True, slots=True)
class Patch:
    """One PATCH request as received (tests assert on them)."""

    plural: str
    namespace: str
    name: str
    subresource: str
    content_type: str
    body: Any


@dataclass(frozen=True, slots=True)
class Write:
    """One write request (create, update, patch, delete) and the client's User-Agent: tests
    tell controller replicas apart by it."""

    agent: str
    verb: str
    plural: str
    namespace: str
    name: str
    subresource: str


@dataclass(slots=True)
class Fault:
    """An injected failure: the next ``times`` matching requests get ``status``."""

    status: int
    method: str | None
    plural: str | None
    times: int
    retry_after: int | None


def _dry_run(request: web.Request) -> bool:
    """``dryRun=All`` (the only value the API server knows); anything else is 400."""
    values = request.query.getall("dryRun", [])
    if any(v != "All" for v in values):
        raise ApiError(400, "BadRequest", f"dryRun: Unsupported value: {values[0]!r}: "
                                          'supported values: "All"')
    return bool(values)


def status_body(code: int, reason: str, message: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


@dataclass(frozen=True, slots=True)
class User:
    """Who a bearer token authenticates as (``KubeEmulator.add_user``): what the real API
    server stamps on a CertificateSigningRequest (``spec.username``, ``groups``, ``extra``)."""

    username: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))
CSR = ("certificates.k8s.io", "certificatesigningrequests")
