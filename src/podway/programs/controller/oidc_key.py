"""The controller's OIDC session key: every OIDC policy's HMAC secret derives from it
(``podway.translate.oidc``), so every replica and every engine signs and checks sessions alike,
and a restart keeps them.

It lives in a Secret of the controller's namespace (``key``: 32 random bytes), made when
missing — replicas racing to make it read the one that won (409). It is read once at start;
a key that cannot be read or made leaves every OIDC policy refused (403, with a condition):
fail closed, and the reason is logged. To end every session at once, delete the Secret and
restart the controllers.
"""

from __future__ import annotations

import base64
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client

from podway.base.errors import EnvironmentProblem

if TYPE_CHECKING:
    from podway.programs.controller.main import ControllerOptions

log = logging.getLogger(__name__)
KEY = "key"
_SIZE = 32


async def keyed(api: client.ApiClient, opts: ControllerOptions) -> ControllerOptions:
    """``opts`` with its translation's OIDC key read from (or made in) ``oidc_key_secret``;
    as they are when a key is given or no Secret is named (no key: OIDC refused)."""
    if opts.translate.oidc_key is not None or opts.oidc_key_secret is None:
        return opts
    key = await session_key(api, *opts.oidc_key_secret)
    return replace(opts, translate=replace(opts.translate, oidc_key=key))


async def session_key(api: client.ApiClient, namespace: str, name: str) -> bytes | None:
    """The key from its Secret, made first when missing; None (logged) when neither works."""
    core = client.CoreV1Api(api)
    try:
        for _ in range(3):
            status, found = await _call(core.read_namespaced_secret, name, namespace)
            if status == 200:
                data = base64.b64decode((found.get("data") or {}).get(KEY, ""))
                if len(data) < _SIZE:
                    raise EnvironmentProblem(f"Secret {namespace}/{name} has no key {KEY!r} of "
                                             f"{_SIZE} bytes or more")
                return data
            body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": name, "namespace": namespace},
                    "data": {KEY: base64.b64encode(os.urandom(_SIZE)).decode()}}
            status, _ = await _call(core.create_namespaced_secret, namespace, body)
            if status < 300:
                log.info("event=oidc-key-created secret=%s/%s", namespace, name)
            # made, or (409) another replica made it: read it back either way
        raise EnvironmentProblem(f"Secret {namespace}/{name} could not be made and read")
    except EnvironmentProblem as exc:
        log.warning("event=oidc-key-unavailable secret=%s/%s OIDC policies are refused: %s",
                    namespace, name, exc)
        return None


async def _call(call: Any, *args: Any) -> tuple[int, dict[str, Any]]:
    """(status, JSON) of a call that may find nothing (404) or lose a race (409)."""
    import json

    resp = await call(*args, _preload_content=False)
    try:
        text = await resp.text()
        if resp.status >= 300 and resp.status not in (404, 409):
            raise EnvironmentProblem(f"Kubernetes API: {resp.status} {text[:200]}")
        found: dict[str, Any] = json.loads(text) if text and resp.status < 300 else {}
        return resp.status, found
    finally:
        resp.release()
