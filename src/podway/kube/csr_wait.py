"""Ask something of the controller with a CertificateSigningRequest and wait for its answer.

Both the engine's client certificate (``podway.programs.engine_cert``) and the agent's
NodePortLocal key (``podway.programs.agent.keyrequest``) create one request (retried with a
backoff while the API does not take it), then read it every ``poll_s`` until the controller has
answered it; while nobody answers, a warning says so every ``WAIT_LOG_S``. What an answer is
(a signed certificate, a sealed key, a refusal) is the caller's ``answer``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from podway.base.backoff import Backoff
from podway.base.errors import EnvironmentProblem

T = TypeVar("T")
WAIT_LOG_S = 30.0  # while no controller answers: say so this often


async def call(method: Any, *args: Any) -> dict[str, Any]:
    """``method(*args)`` of a Kubernetes client, its JSON body; a status ≥ 300 raises."""
    resp = await method(*args, _preload_content=False)
    try:
        text = await resp.text()
        if resp.status >= 300:
            raise EnvironmentProblem(f"Kubernetes API: {resp.status} {text[:200]}")
        found: dict[str, Any] = json.loads(text)
        return found
    finally:
        resp.release()


async def pause(log: logging.Logger, event: str, exc: Exception, retry: Backoff,
                attempt: int) -> None:
    """Say ``event`` failed with ``exc`` and wait the ``attempt``-th delay of ``retry``."""
    delay = retry.delay(attempt)
    log.warning("event=%s error=%s retry_in=%.1fs", event, exc, delay)
    await asyncio.sleep(delay)


async def create(certs: Any, body: dict[str, Any], retry: Backoff, *, log: logging.Logger,
                 event: str) -> str:
    """The name of the CertificateSigningRequest ``body`` once created (retried for ever;
    each failure logged as ``event``)."""
    attempt = 0
    while True:
        try:
            created = await call(certs.create_certificate_signing_request, body)
            return str(created["metadata"]["name"])
        except (EnvironmentProblem, OSError) as exc:
            attempt += 1
            await pause(log, event, exc, retry, attempt)


async def answered(certs: Any, name: str, answer: Callable[[dict[str, Any]], T | None], *,
                   poll_s: float, log: logging.Logger, prefix: str, hint: str) -> T:
    """``answer`` of the request ``name`` once it gives one (not None); ``answer`` raises on a
    refusal. A failed read is logged as ``<prefix>-read-failed``; the wait, every
    ``WAIT_LOG_S``, as ``<prefix>-waiting`` with ``hint``."""
    said = time.monotonic()
    while True:
        await asyncio.sleep(poll_s)
        try:
            found = await call(certs.read_certificate_signing_request, name)
        except (EnvironmentProblem, OSError) as exc:
            log.warning("event=%s-read-failed csr=%s error=%s", prefix, name, exc)
            continue
        result = answer(found)
        if result is not None:
            return result
        if time.monotonic() - said >= WAIT_LOG_S:
            said = time.monotonic()
            log.warning("event=%s-waiting csr=%s (%s)", prefix, name, hint)
