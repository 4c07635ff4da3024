"""The controller signs engine client certificates with its own CA (issue 23.10).

It keeps the CA in a Secret (``ca.crt``, ``ca.key``) that it creates when missing: replicas
racing to create it agree, the loser reads the winner's. It watches CertificateSigningRequests
of signer ``podway.io/engine-client`` and answers each pending one: approved and signed when
``podway.kube.engine_certs.granted`` allows (the requester's node and its service account's
group only), denied with the reason otherwise. Approval comes first, as the API server
requires; a write that lost a race with another replica (409) is left to that replica.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client

from podway.base.errors import EnvironmentProblem
from podway.kube import engine_certs
from podway.kube.informer import Informer, Raw

if TYPE_CHECKING:
    from podway.envoy.xds.server import ServerTLS

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCertSettings:
    """``podway controller --engine-account``: who may ask, and where the CA lives."""

    users: Mapping[str, str] = field(default_factory=dict)  # service account user → group
    namespace: str = "default"  # of the CA Secret
    ca_secret: str = "podway-engine-ca"


async def _call(call: Any, *args: Any, ok: tuple[int, ...] = ()) -> tuple[int, dict[str, Any]]:
    resp = await call(*args, _preload_content=False)
    try:
        text = await resp.text()
        if resp.status >= 300 and resp.status not in ok:
            raise EnvironmentProblem(f"Kubernetes API: {resp.status} {text[:200]}")
        found: dict[str, Any] = json.loads(text) if text else {}
        return resp.status, found
    finally:
        resp.release()


class EngineCertSigner:
    def __init__(self, api: client.ApiClient, *, namespace: str, ca_secret: str,
                 users: Mapping[str, str]) -> None:
        self._core: Any = client.CoreV1Api(api)
        self._certs: Any = client.CertificatesV1Api(api)
        self._namespace = namespace
        self._ca_secret = ca_secret
        self._users = dict(users)
        self._pending: asyncio.Queue[Raw] = asyncio.Queue()
        self.ca_pem = b""  # the CA's certificate once known (the xDS server's client CA)
        self.answered: dict[str, str] = {}  # request → node/group or "denied: why" (tests)

    @classmethod
    def of(cls, api: client.ApiClient, settings: EngineCertSettings) -> EngineCertSigner:
        return cls(api, namespace=settings.namespace, ca_secret=settings.ca_secret,
                   users=settings.users)

    async def trusted_by(self, tls: ServerTLS | None) -> ServerTLS | None:
        """``tls`` trusting this CA's engine certificates too, besides any CA it had (e.g.
        cert-manager's): the CA is read (made when missing) before the xDS server starts, so
        no engine is refused for a CA the server does not know yet. None stays None (a unix
        socket, or clear text on loopback: no client certificates at all)."""
        ca_cert, _ = await self.ca()
        self.ca_pem = ca_cert
        if tls is None:
            return None
        before = tls.client_ca_pem or b""
        if before and not before.endswith(b"\n"):
            before += b"\n"
        return replace(tls, client_ca_pem=before + ca_cert)

    async def ca(self) -> tuple[bytes, bytes]:
        """The CA (certificate, key) from its Secret, made first when missing."""
        while True:
            status, found = await _call(self._core.read_namespaced_secret, self._ca_secret,
                                        self._namespace, ok=(404,))
            if status == 200:
                data = found.get("data") or {}
                return (base64.b64decode(data["ca.crt"]), base64.b64decode(data["ca.key"]))
            cert, key = engine_certs.new_ca()
            body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": self._ca_secret, "namespace": self._namespace},
                    "data": {"ca.crt": base64.b64encode(cert).decode(),
                             "ca.key": base64.b64encode(key).decode()}}
            status, _ = await _call(self._core.create_namespaced_secret, self._namespace,
                                    body, ok=(409,))
            if status != 409:  # made it; on 409 another replica did: read theirs
                log.info("event=engine-ca-created secret=%s/%s", self._namespace,
                         self._ca_secret)
                return cert, key

    async def run(self) -> None:
        ca_cert, ca_key = await self.ca()
        self.ca_pem = ca_cert
        informer = Informer(
            name="engine-certificate-requests",
            lister=self._certs.list_certificate_signing_request,
            params={"field_selector": f"spec.signerName={engine_certs.SIGNER}"},
            handler=self._on_request)
        async with asyncio.TaskGroup() as group:
            group.create_task(informer.run(), name="controller-engine-csrs")
            while True:
                raw = await self._pending.get()
                try:
                    await self._answer(raw, ca_cert, ca_key)
                except EnvironmentProblem as exc:
                    log.warning("event=engine-csr-answer-failed csr=%s error=%s",
                                raw.get("metadata", {}).get("name"), exc)

    def _on_request(self, kind: str, raw: Raw) -> None:
        status = raw.get("status") or {}
        decided = any(c.get("type") in ("Denied", "Failed") for c in
                      status.get("conditions") or [])
        if kind != "DELETED" and not status.get("certificate") and not decided:
            self._pending.put_nowait(raw)

    async def _answer(self, raw: Raw, ca_cert: bytes, ca_key: bytes) -> None:
        name = str(raw["metadata"]["name"])
        grant, why = engine_certs.granted(raw, users=self._users)
        conditions = [{"type": "Approved" if grant else "Denied", "status": "True",
                       "reason": "PodwayEngine" if grant else "NotThisEngines",
                       "message": "the requester's node and engine group" if grant else why}]
        approval = {**raw, "status": {**(raw.get("status") or {}), "conditions": conditions}}
        status, answered = await _call(self._certs.replace_certificate_signing_request_approval,
                                       name, approval, ok=(404, 409))
        if status in (404, 409):
            return  # gone, or another replica answered first
        if grant is None:
            log.warning("event=engine-csr-denied csr=%s reason=%r", name, why)
            self.answered[name] = f"denied: {why}"
            return
        node, group = grant
        pem = engine_certs.sign(raw, ca_cert, ca_key, node=node, group=group)
        signed = {**answered, "status": {**(answered.get("status") or {}),
                                         "certificate": base64.b64encode(pem).decode()}}
        status, _ = await _call(self._certs.replace_certificate_signing_request_status,
                                name, signed, ok=(404, 409))
        if status == 200:
            log.info("event=engine-certificate-issued csr=%s node=%s group=%s", name, node,
                     group or "-")
            self.answered[name] = f"{node}/{group}"
