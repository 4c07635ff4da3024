"""The agent asks the controller for its node's signing key (``--npl-key-request``).

One CertificateSigningRequest (signer ``podway.io/npl-key``) carries a one-time public key; the
API server stamps who asked; the controller seals the key of the requester's node to that
public key (``podway.kube.npl_keys``). The private key stays in this process, so the agent's
key is in memory only: a restarted agent asks again. A refusal (wrong service account, a token
without a node name) stops the agent with the controller's reason: it could sign nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from kubernetes_asyncio import client

from podway.base.backoff import Backoff
from podway.base.errors import EnvironmentProblem
from podway.kube import npl_keys

log = logging.getLogger("podway.programs.agent")

WAIT_LOG_S = 30.0  # while no controller answers: say so this often


async def _call(call: Any, *args: Any) -> dict[str, Any]:
    resp = await call(*args, _preload_content=False)
    try:
        text = await resp.text()
        if resp.status >= 300:
            raise EnvironmentProblem(f"Kubernetes API: {resp.status} {text[:200]}")
        found: dict[str, Any] = json.loads(text)
        return found
    finally:
        resp.release()


async def request_node_key(api: client.ApiClient, node: str, *, poll_s: float = 1.0,
                           backoff: Backoff | None = None) -> bytes:
    """This node's key, once the controller has sealed it to this request (waits for it)."""
    certs: Any = client.CertificatesV1Api(api)
    private = npl_keys.new_private_key()
    retry = backoff or Backoff(base=1.0, cap=30.0)
    attempt = 0
    while True:
        try:
            created = await _call(certs.create_certificate_signing_request,
                                  npl_keys.csr_object(private, node))
            break
        except (EnvironmentProblem, OSError) as exc:
            attempt += 1
            delay = retry.delay(attempt)
            log.warning("event=npl-key-request-failed error=%s retry_in=%.1fs", exc, delay)
            await asyncio.sleep(delay)
    name = str(created["metadata"]["name"])
    log.info("event=npl-key-requested csr=%s node=%s", name, node)
    said = time.monotonic()
    while True:
        await asyncio.sleep(poll_s)
        try:
            found = await _call(certs.read_certificate_signing_request, name)
        except (EnvironmentProblem, OSError) as exc:
            log.warning("event=npl-key-read-failed csr=%s error=%s", name, exc)
            continue
        annotations = found.get("metadata", {}).get("annotations") or {}
        refused = annotations.get(npl_keys.REFUSED_ANNOTATION)
        if refused is not None:
            raise EnvironmentProblem(
                f"the controller refused this agent its NodePortLocal key ({name}): {refused}")
        sealed = annotations.get(npl_keys.SEALED_ANNOTATION)
        if sealed is not None:
            try:
                key = npl_keys.open_sealed(private, str(sealed))
            except npl_keys.SealError as exc:
                raise EnvironmentProblem(f"NodePortLocal key request {name}: {exc}") from None
            log.info("event=npl-key-received csr=%s node=%s", name, node)
            return key
        if time.monotonic() - said >= WAIT_LOG_S:
            said = time.monotonic()
            log.warning("event=npl-key-waiting csr=%s (is a controller with --npl-key and "
                        "--npl-agent running?)", name)
