"""The agent asks the controller for its node's signing key (``--npl-key-request``).

One CertificateSigningRequest (signer ``podway.io/npl-key``) carries a one-time public key; the
API server stamps who asked; the controller seals the key of the requester's node to that
public key (``podway.kube.npl_keys``). The private key stays in this process, so the agent's
key is in memory only: a restarted agent asks again. A refusal (wrong service account, a token
without a node name) stops the agent with the controller's reason: it could sign nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.base.errors import EnvironmentProblem
from podway.kube import csr_wait, npl_keys

log = logging.getLogger("podway.programs.agent")



def _answer(private: Any, name: str, node: str) -> Callable[[dict[str, Any]], bytes | None]:
    """The key once the request carries it sealed; raises on a refusal."""
    def answer(found: dict[str, Any]) -> bytes | None:
        annotations = found.get("metadata", {}).get("annotations") or {}
        refused = annotations.get(npl_keys.REFUSED_ANNOTATION)
        if refused is not None:
            raise EnvironmentProblem(
                f"the controller refused this agent its NodePortLocal key ({name}): {refused}")
        sealed = annotations.get(npl_keys.SEALED_ANNOTATION)
        if sealed is None:
            return None
        try:
            key = npl_keys.open_sealed(private, str(sealed))
        except npl_keys.SealError as exc:
            raise EnvironmentProblem(f"NodePortLocal key request {name}: {exc}") from None
        log.info("event=npl-key-received csr=%s node=%s", name, node)
        return key
    return answer


async def request_node_key(api: client.ApiClient, node: str, *, poll_s: float = 1.0,
                           backoff: Backoff | None = None) -> bytes:
    """This node's key, once the controller has sealed it to this request (waits for it)."""
    certs: Any = client.CertificatesV1Api(api)
    private = npl_keys.new_private_key()
    name = await csr_wait.create(certs, npl_keys.csr_object(private, node),
                                 backoff or Backoff(base=1.0, cap=30.0), log=log,
                                 event="npl-key-request-failed")
    log.info("event=npl-key-requested csr=%s node=%s", name, node)
    return await csr_wait.answered(certs, name, _answer(private, name, node), poll_s=poll_s,
                                   log=log, prefix="npl-key",
                                   hint="is a controller with --npl-key and --npl-agent running?")
