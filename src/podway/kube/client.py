"""Build a Kubernetes API client from a kubeconfig file or the in-cluster service account.

Every way this can fail becomes a ``KubeConfigError`` whose message is one line saying what is
wrong and what to do (the CLI prints it, exits non-zero, no traceback): not inside a cluster
and no ``--kubeconfig``; a kubeconfig that does not exist, is not readable, or lacks a context.
``check_reachable`` asks the server for ``/version`` so a wrong address fails at start with
``KubeUnreachable`` instead of as retries in the log. Each client gets its own
``Configuration``: nothing global is touched, so tests and the lab can hold several.

``without_env_lookups``: the client's HTTP session reads the environment (a proxy for the
API's address, a ``.netrc`` entry for its host) once, at the start, instead of on every
request, where each lookup was a hop to a worker thread (two per request: 20,000 for the
statuses of 10,000 routes, bench/statuses.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import helpers
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException
from yarl import URL

from podway.kube.errors import KubeConfigError, KubeUnreachable, api_error

NO_TIME_LIMIT = aiohttp.ClientTimeout()  # what the client's REST layer sends by default
IN_CLUSTER_HINT = "give --kubeconfig FILE, or run it in a Pod with a service account"


async def load_configuration(*, kubeconfig: str | None,
                             context: str | None = None) -> client.Configuration:
    """The client configuration from ``kubeconfig`` or, when None, the in-cluster one."""
    cfg = client.Configuration()
    if kubeconfig is None:
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise KubeConfigError("not running inside a Kubernetes cluster "
                                  f"(KUBERNETES_SERVICE_HOST is not set): {IN_CLUSTER_HINT}")
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise KubeConfigError(f"in-cluster configuration unusable ({exc}): "
                                  f"{IN_CLUSTER_HINT}") from None
        return cfg
    path = _existing_file(kubeconfig)
    try:
        await config.load_kube_config(config_file=str(path), context=context,
                                      client_configuration=cfg, persist_config=False)
    except OSError as exc:
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: cannot read it "
                              f"({exc.strerror or exc})") from None
    except ConfigException as exc:
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: not a usable kubeconfig ({exc})"
                              ) from None
    except Exception as exc:  # a YAML error or a malformed entry deep in the loader
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: not a usable kubeconfig "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0]})") from None
    return cfg


def _existing_file(kubeconfig: str) -> Path:
    path = Path(kubeconfig).expanduser()
    if not path.exists():
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: no such file")
    if not path.is_file():
        raise KubeConfigError(f"--kubeconfig {kubeconfig}: not a file")
    return path


async def connect(*, kubeconfig: str | None, context: str | None = None) -> client.ApiClient:
    """An API client (the caller closes it: ``async with``)."""
    api = client.ApiClient(configuration=await load_configuration(kubeconfig=kubeconfig,
                                                                  context=context))
    without_env_lookups(api)
    return api


def without_env_lookups(api: client.ApiClient) -> bool:
    """Stop ``api``'s session from looking up a proxy and ``.netrc`` credentials in the
    environment on every request, when neither applies to the API's address now (else nothing
    changes: the session keeps reading the environment as before). True when changed.

    kubernetes_asyncio opens its session with ``trust_env``; aiohttp then reads the ``.netrc``
    file in a worker thread and the proxy variables in another, for each request."""
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if not isinstance(session, aiohttp.ClientSession) or not session.trust_env:
        return False
    url = URL(api.configuration.host or "")
    if url.host is None:
        return False
    try:
        helpers.basicauth_from_netrc(helpers.netrc_from_env(), url.host)
        return False  # the session would send these credentials: keep it as it is
    except LookupError:
        pass
    if not api.rest_client.proxy:
        try:
            helpers.get_env_proxy_for_url(url)
            return False  # a proxy from the environment applies: keep reading it
        except LookupError:
            pass
    session._trust_env = False  # in aiohttp's ClientSession.ATTRS; read per request
    return True


async def check_reachable(api: client.ApiClient, *, limit_s: float = 10.0) -> None:
    """Raise ``KubeUnreachable`` (or the typed API error) unless the server answers."""
    host = api.configuration.host
    try:
        version: Any = client.VersionApi(api)  # raw response: the stubs do not model it
        resp = await version.get_code(
            _preload_content=False, _request_timeout=aiohttp.ClientTimeout(total=limit_s))
        status = resp.status
        resp.release()
        if status in (401, 403):
            raise ApiException(status=status, reason="credentials refused")
    except ApiException as exc:
        if exc.status in (401, 403):
            raise api_error(exc) from None
        # Any other answer proves the server is there; the informers will report the rest.
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KubeUnreachable(f"cannot reach the Kubernetes API at {host} ({detail}): check "
                              "--kubeconfig and that the cluster is up") from None


async def raw_request(api: client.ApiClient, method: str, path: str, *,
                      body: Any = None, content_type: str = "application/json") -> Any:
    """One request on ``api``'s session, below kubernetes_asyncio's generated layer: the same
    headers and credentials (a refreshed token included), without its per-call parameter
    checks, serializer walk over ``body`` and response wrapper (most of a status PATCH's cost
    in Python, bench/statuses.py). ``path`` is quoted by the caller. The raw answer, any
    status (the caller reads and releases it)."""
    headers: dict[str, str] = {"Accept": "application/json", "Content-Type": content_type,
                               **api.default_headers}
    if api.cookie:
        headers["Cookie"] = api.cookie
    await api.update_params_for_auth(headers, [], ["BearerToken"])
    # Straight to the session, as the client's REST layer would send it (its proxy and TLS
    # server name, no time limit), with the body encoded here once, compactly: that layer's
    # per-call wrapping was a tenth of a status PATCH's cost in the controller (py-spy).
    rest = api.rest_client
    options: dict[str, Any] = {}
    if rest.proxy:
        options["proxy"] = rest.proxy
    if rest.proxy_headers:
        options["proxy_headers"] = rest.proxy_headers
    if rest.server_hostname:
        options["server_hostname"] = rest.server_hostname
    data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
    return await rest.pool_manager.request(method, f"{api.configuration.host}{path}",
                                           headers=headers, data=data, timeout=NO_TIME_LIMIT,
                                           **options)
