"""OpenID Connect login (``envoy.filters.http.oauth2``): one filter per ``Oidc`` policy.

Envoy's OAuth2 filter has no per-route config: its provider, client and cookies are the
filter's own. So each policy is a filter of its own, named ``podway.oauth2/<ns>/<policy>``,
carried switched off (``disabled``) by the connection managers of the listeners whose routes
use it — only there — and switched on per route by an empty ``FilterConfig`` (``per_route``).
Its config comes over ADS (ECDS, a resource of the filter's name), as the JWT filter's does
(``podway.envoy.config.jwt``): a policy's change (scopes, endpoints, client, its Secret)
updates that resource alone and keeps the listener and its connections. What does change a
listener is the set of policies its routes use: the first route of a listener to use a policy
(or the last to stop) adds (removes) a filter, so that listener is replaced and its open
connections drain (``--drain-s``); unlike the optional filters every manager carries
(``access``), the set of policies is not bounded, so they cannot all be carried everywhere.

The client secret and the HMAC secret that signs the session cookies (and encrypts the tokens
in them) are SDS secrets (``generic_secret``), never inline: Envoy's config dump shows only
their names, and Podway's dumps redact them (``podway.envoy.xds.dump``).

The token endpoint is reached through the policy's pool (a cluster like any other; TLS with
the endpoint's host as SNI when ``https``). Stats: ``podway_oauth2.<policy>.*``.
"""

from __future__ import annotations

from collections.abc import Iterable

from envoy.config.core.v3 import config_source_pb2, extension_pb2, http_uri_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.oauth2.v3 import oauth_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm,
)
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from envoy.type.matcher.v3 import path_pb2, string_pb2
from google.protobuf import any_pb2

from podway.envoy.config.common import ads_source, duration, pack, stat_prefix
from podway.envoy.config.resource import Resource
from podway.ir import Listener, Oidc

PREFIX = "podway.oauth2/"
_TYPE = "type.googleapis.com/envoy.extensions.filters.http.oauth2.v3.OAuth2"
_TOKEN_TIMEOUT_MS = 5000


def filter_name(f: Oidc) -> str:
    return f"{PREFIX}{f.name}"


def used(listener: Listener) -> list[Oidc]:
    """The ``Oidc`` policies of ``listener``'s routes, one each, by name (a stable order)."""
    found = {f.name: f for v in listener.virtual_hosts for r in v.routes for f in r.filters
             if isinstance(f, Oidc)}
    return [found[name] for name in sorted(found)]


def manager_filters(policies: Iterable[Oidc]) -> list[hcm.HttpFilter]:
    """The switched-off filter of each policy, its config from ADS."""
    source = config_source_pb2.ExtensionConfigSource(config_source=ads_source(),
                                                     type_urls=[_TYPE])
    return [hcm.HttpFilter(name=filter_name(f), disabled=True, config_discovery=source)
            for f in policies]


def per_route() -> any_pb2.Any:
    """Switches the route's policy filter on: the filter has no per-route config, and Envoy
    reads a ``FilterConfig`` whose ``config`` is present but empty as "enabled" (absent is an
    error)."""
    out = rc.FilterConfig()
    out.config.SetInParent()
    return pack(out)


def resources(f: Oidc) -> list[Resource]:
    """The filter's config (ECDS) and its two secrets (SDS)."""
    client, session = f"oidc/{f.name}/client", f"oidc/{f.name}/hmac"
    return [Resource.of(filter_name(f), extension_pb2.TypedExtensionConfig(
                name=filter_name(f), typed_config=pack(_config(f, client, session)))),
            Resource.of(client, _secret(client, f.client_secret)),
            Resource.of(session, _secret(session, f.hmac_secret))]


def _secret(name: str, value: str) -> secret_pb2.Secret:
    out = secret_pb2.Secret(name=name)
    out.generic_secret.secret.inline_string = value
    return out


def _config(f: Oidc, client: str, session: str) -> oauth_pb2.OAuth2:
    config = oauth_pb2.OAuth2Config(
        token_endpoint=http_uri_pb2.HttpUri(uri=f.token_endpoint, cluster=f.pool,
                                            timeout=duration(_TOKEN_TIMEOUT_MS)),
        authorization_endpoint=f.authorization_endpoint,
        end_session_endpoint=f.end_session_endpoint,
        redirect_uri=f.redirect_uri,
        redirect_path_matcher=_path(f.redirect_path),
        signout_path=_path(f.logout_path),
        forward_bearer_token=f.forward_token,
        auth_scopes=f.scopes,
        resources=f.resources,
        # HTTP basic authentication of the client at the token endpoint (RFC 6749 2.3.1:
        # every provider must take it)
        auth_type=oauth_pb2.OAuth2Config.BASIC_AUTH,
        stat_prefix=stat_prefix(f.name),
    )
    credentials = config.credentials
    credentials.client_id = f.client_id
    credentials.token_secret.CopyFrom(secret_pb2.SdsSecretConfig(name=client,
                                                                 sds_config=ads_source()))
    credentials.hmac_secret.CopyFrom(secret_pb2.SdsSecretConfig(name=session,
                                                                sds_config=ads_source()))
    for field, value in f.cookie_names:
        setattr(credentials.cookie_names, field, value)
    credentials.cookie_domain = f.cookie_domain
    return oauth_pb2.OAuth2(config=config)


def _path(path: str) -> path_pb2.PathMatcher:
    return path_pb2.PathMatcher(path=string_pb2.StringMatcher(exact=path))
