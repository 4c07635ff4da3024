"""The controller hands each NodePortLocal agent its own node's key (``--npl-agent``).

It watches CertificateSigningRequests of signer ``podway.io/npl-key`` and answers each pending
one once: the key of the requester's node sealed to the request's public key, or a refusal with
the reason (``podway.kube.npl_keys`` has the rules and the cryptography). Every replica answers
(each holds the master key, so two answers to one request are both good; no leader has to be
elected before an agent can start).
Answered requests are left to Kubernetes' own clean-up of old requests (kube-controller-manager
deletes pending ones after 24 hours); the agent may not delete them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from podway.kube import npl_keys
from podway.kube.informer import Informer, Raw
from podway.model import npl

log = logging.getLogger(__name__)


class NplKeyIssuer:
    def __init__(self, api: client.ApiClient, *, master: bytes, agent_user: str,
                 retry_s: float = 1.0) -> None:
        self._certs: Any = client.CertificatesV1Api(api)
        self._master = master
        self._agent_user = agent_user
        self._retry_s = retry_s
        self._pending: asyncio.Queue[Raw] = asyncio.Queue()
        self.answered: dict[str, str] = {}  # request name → node or "refused: why" (tests)

    async def run(self) -> None:
        informer = Informer(
            name="npl-key-requests", lister=self._certs.list_certificate_signing_request,
            params={"field_selector": f"spec.signerName={npl_keys.SIGNER}"},
            handler=self._on_request)
        async with asyncio.TaskGroup() as group:
            group.create_task(informer.run(), name="controller-npl-key-requests")
            while True:
                raw = await self._pending.get()
                if not await self._answer(raw):  # tried again shortly
                    asyncio.get_running_loop().call_later(self._retry_s,
                                                          self._pending.put_nowait, raw)

    def _on_request(self, kind: str, raw: Raw) -> None:
        if kind == "DELETED":
            return
        annotations = raw.get("metadata", {}).get("annotations") or {}
        if npl_keys.SEALED_ANNOTATION in annotations or \
                npl_keys.REFUSED_ANNOTATION in annotations:
            return  # answered
        self._pending.put_nowait(raw)

    async def _answer(self, raw: Raw) -> bool:
        """Write the answer to one request; False if the write failed."""
        name = str(raw.get("metadata", {}).get("name", ""))
        node, why = npl_keys.requester_node(raw, agent_user=self._agent_user)
        if node is None:
            answer = {npl_keys.REFUSED_ANNOTATION: why}
            log.warning("event=npl-key-refused csr=%s reason=%r", name, why)
        else:
            try:
                sealed = npl_keys.seal(str(raw["spec"]["request"]),
                                       npl.node_key(self._master, node))
            except (npl_keys.SealError, ValueError) as exc:
                answer = {npl_keys.REFUSED_ANNOTATION: str(exc)}
                node = None
            else:
                answer = {npl_keys.SEALED_ANNOTATION: sealed}
        body = {"metadata": {"annotations": answer}}
        try:
            resp = await self._certs.patch_certificate_signing_request(
                name, body, _content_type="application/merge-patch+json",
                _preload_content=False)
            resp.release()
            if resp.status >= 300:
                raise ApiException(status=resp.status, reason="patch refused")
        except (ApiException, OSError) as exc:
            if getattr(exc, "status", 0) == 404:
                return True  # deleted meanwhile: nobody waits for it
            log.warning("event=npl-key-answer-failed csr=%s error=%s", name, exc)
            return False
        self.answered[name] = node if node is not None else f"refused: {answer}"
        if node is not None:
            log.info("event=npl-key-issued csr=%s node=%s", name, node)
        return True
