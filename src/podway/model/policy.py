"""Traffic policies: Gateway API's BackendLBPolicy and Podway's own ``TrafficPolicy``.

Both attach to other objects through ``targetRefs`` (Gateway API policy attachment). Values the
translator judges (algorithm names, durations, status ranges) stay plain strings here, so a bad
value reaches the translator and becomes a problem on the policy instead of failing the load;
only shapes (a list where a list belongs, integers that are integers) are checked on load.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from podway.model.base import Int, K8sModel, K8sObject
from podway.model.gateway import GROUP

PODWAY_GROUP = "podway.io"


class PolicyTargetReference(K8sModel):
    """``group``/``kind``/``name`` of an object in the policy's namespace; ``sectionName`` a
    Service port name (Service targets only)."""

    group: str = ""
    kind: str = "Service"
    name: str = Field(min_length=1)
    section_name: str | None = None


class SessionPersistence(K8sModel):
    """Gateway API ``SessionPersistence`` (HTTPRoute rules and BackendLBPolicy)."""

    session_name: str | None = None
    absolute_timeout: str | None = None
    idle_timeout: str | None = None
    type: str = "Cookie"
    cookie_config: dict[str, str] | None = None  # {lifetimeType: Permanent|Session}


class BackendLBPolicySpec(K8sModel):
    target_refs: tuple[PolicyTargetReference, ...] = ()
    session_persistence: SessionPersistence | None = None


class BackendLBPolicy(K8sObject):
    KIND: ClassVar[str] = "BackendLBPolicy"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: BackendLBPolicySpec = Field(default_factory=BackendLBPolicySpec)


class HealthCheckSpec(K8sModel):
    enabled: bool = True
    type: str | None = None  # TCP | HTTP | GRPC; unset: what fits the backend protocol
    interval: str | None = None
    timeout: str | None = None
    healthy_threshold: Int | None = None
    unhealthy_threshold: Int | None = None
    path: str | None = None
    host: str | None = None
    expected_statuses: tuple[str | Int, ...] = ()  # 200, "200-399"
    grpc_service: str | None = None


class OutlierDetectionSpec(K8sModel):
    enabled: bool = True
    consecutive_errors: Int | None = None
    interval: str | None = None
    base_ejection_time: str | None = None
    max_ejection_percent: Int | None = None


class LoadBalancerSpec(K8sModel):
    type: str = "RoundRobin"  # RoundRobin | LeastRequest | Random | RingHash | Maglev
    hash_on: PersistenceSpec | None = None  # the key of RingHash / Maglev


class PersistenceSpec(K8sModel):
    type: str = "Cookie"  # Cookie | Header | SourceIP
    name: str | None = None
    ttl: str | None = None


class TimeoutsSpec(K8sModel):
    connect: str | None = None
    request: str | None = None
    idle: str | None = None


class RetrySpec(K8sModel):
    attempts: Int | None = None
    retry_on: tuple[str, ...] = ()  # 5xx | gateway-error | reset (not `on`: YAML reads it as true)
    status_codes: tuple[Int, ...] = ()
    idempotent_only: bool = True
    per_try_timeout: str | None = None
    backoff: str | None = None


class _Strict(K8sModel):
    """Security sections keep the keys Podway does not know (``model_extra``): the translator
    refuses such a section (fail closed) rather than apply part of what restricts access."""

    model_config = ConfigDict(**{**K8sModel.model_config, "extra": "allow"})


class SecretReference(_Strict):
    name: str = ""
    namespace: str | None = None


class BasicAuthSpec(_Strict):
    """``security.basicAuth``: the users of an htpasswd Secret (its key ``.htpasswd``, else
    ``auth``, as ingress-nginx names it)."""

    users: SecretReference | None = None


class ServiceReference(_Strict):
    name: str = ""
    namespace: str | None = None
    port: Int | None = None


class ExtAuthSpec(_Strict):
    """``security.extAuth``: a Service of the policy's namespace that authorizes each request
    (``protocol`` HTTP or GRPC: Envoy's ext_authz)."""

    protocol: str = "HTTP"
    backend_ref: ServiceReference | None = None
    path: str = ""  # HTTP: prefixed to the request's path
    allowed_response_headers: tuple[str, ...] = ()
    timeout: str | None = None


class HeaderRule(_Strict):
    name: str = ""
    values: tuple[str, ...] = ()  # any of them (exact)


class JWTClaim(_Strict):
    """A claim of the request's valid token (``security.jwt``): ``name`` (dots for nested
    claims), one of ``values``; ``valueType`` String, or StringArray (a list claim holding one
    of them)."""

    name: str = ""
    value_type: str = "String"
    values: tuple[str, ...] = ()


class JWTPrincipal(_Strict):
    """Who the valid token of ``provider`` (a provider of the policy's ``jwt``) says the
    client is: each of ``claims`` holds."""

    provider: str = ""
    claims: tuple[JWTClaim, ...] = ()


class AuthorizationPrincipal(_Strict):
    client_cidrs: tuple[str, ...] = Field(default=(), alias="clientCIDRs")  # after trusted hops
    headers: tuple[HeaderRule, ...] = ()
    jwt: JWTPrincipal | None = None


class AuthorizationRule(_Strict):
    name: str = ""
    action: str = ""  # Allow | Deny
    principal: AuthorizationPrincipal | None = None
    methods: tuple[str, ...] = ()


class AuthorizationSpec(_Strict):
    """``security.authorization``: the first rule that matches decides; none: ``defaultAction``."""

    default_action: str = "Deny"
    rules: tuple[AuthorizationRule, ...] = ()


class LocalJWKS(_Strict):
    """A JWKS given in the policy (``type: Inline``, ``inline``) or read from a Secret or
    ConfigMap of its namespace (``type: ValueRef``, ``valueRef``; key ``jwks.json``)."""

    type: str = "Inline"  # Inline | ValueRef
    inline: str | None = None
    value_ref: ObjectReference | None = None


class ObjectReference(_Strict):
    group: str = ""
    kind: str = "ConfigMap"  # ConfigMap | Secret
    name: str = ""


class RemoteJWKS(_Strict):
    """A JWKS fetched from ``uri`` through ``backendRef`` (a Service port of the policy's
    namespace; the URI's host is sent as Host), kept ``cacheDuration``."""

    uri: str = ""
    backend_ref: ServiceReference | None = None
    cache_duration: str | None = None


class ClaimToHeader(_Strict):
    header: str = ""
    claim: str = ""


class JWTHeader(_Strict):
    name: str = ""
    value_prefix: str = ""


class JWTExtractor(_Strict):
    """Where a token is looked for instead of ``Authorization: Bearer``: request headers (the
    value after ``valuePrefix``), cookies, query parameters."""

    headers: tuple[JWTHeader, ...] = ()
    cookies: tuple[str, ...] = ()
    params: tuple[str, ...] = ()


class JWTProvider(_Strict):
    name: str = ""
    issuer: str = ""
    audiences: tuple[str, ...] = ()
    remote_jwks: RemoteJWKS | None = Field(default=None, alias="remoteJWKS")
    local_jwks: LocalJWKS | None = Field(default=None, alias="localJWKS")
    claim_to_headers: tuple[ClaimToHeader, ...] = ()
    extract_from: JWTExtractor | None = None
    recompute_route: bool = False


class JWTSpec(_Strict):
    """``security.jwt``: a request needs a valid JWT (``Authorization: Bearer``) of one of
    ``providers``; ``optional``: a request without one passes (a bad one does not)."""

    optional: bool = False
    providers: tuple[JWTProvider, ...] = ()


class OIDCProvider(_Strict):
    """The OpenID provider: its ``issuer``, the endpoints the browser is sent to
    (``authorizationEndpoint``) and the engine asks for tokens (``tokenEndpoint``, reached
    through ``backendRef``, a Service port of the policy's namespace; ``https``: TLS with the
    URL's host as SNI and name), and optionally ``endSessionEndpoint`` (logout)."""

    issuer: str = ""
    authorization_endpoint: str = ""
    token_endpoint: str = ""
    end_session_endpoint: str = ""
    backend_ref: ServiceReference | None = None


class OIDCCookieNames(_Strict):
    access_token: str = ""
    id_token: str = ""


class OIDCSpec(_Strict):
    """``security.oidc``: a browser without a valid session is sent to log in at ``provider``
    (OAuth 2.0 authorization code flow), and comes back to ``redirectURL`` with the session in
    cookies; ``logoutPath`` ends it."""

    provider: OIDCProvider | None = None
    client_id: str = Field(default="", alias="clientID")
    client_secret: SecretReference | None = None  # key ``client-secret``
    redirect_url: str = Field(default="", alias="redirectURL")
    logout_path: str = ""
    scopes: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    cookie_names: OIDCCookieNames | None = None
    cookie_domain: str = ""
    forward_access_token: bool = False


class SecuritySpec(_Strict):
    """Who may reach the target's routes (Envoy Gateway's SecurityPolicy, in part)."""

    jwt: JWTSpec | None = None
    oidc: OIDCSpec | None = None
    basic_auth: BasicAuthSpec | None = None
    ext_auth: ExtAuthSpec | None = None
    authorization: AuthorizationSpec | None = None


class RetryBudgetSpec(K8sModel):
    """A pool's retries in flight as a share of its requests in flight (Envoy's retry budget)
    instead of the default fixed cap."""

    percent: Int | None = None  # of the active requests; default 20
    min_concurrent: Int | None = None  # retries always allowed; default 3


class TrafficPolicySpec(K8sModel):
    target_refs: tuple[PolicyTargetReference, ...] = ()
    security: SecuritySpec | None = None
    health_check: HealthCheckSpec | None = None
    outlier_detection: OutlierDetectionSpec | None = None
    load_balancer: LoadBalancerSpec | None = None
    persistence: PersistenceSpec | None = None
    timeouts: TimeoutsSpec | None = None
    retry: RetrySpec | None = None
    retry_budget: RetryBudgetSpec | None = None


class TrafficDefaults(_Strict):
    """The TrafficPolicy sections a GatewayClassConfig applies to every Gateway of its class
    (``spec.defaults``), below every TrafficPolicy. Keys Podway does not take here (``security``,
    ``targetRefs``, a misspelt section) stay in ``model_extra``: the translator refuses the class
    parameters (fail closed) rather than drop them."""

    health_check: HealthCheckSpec | None = None
    outlier_detection: OutlierDetectionSpec | None = None
    load_balancer: LoadBalancerSpec | None = None
    persistence: PersistenceSpec | None = None
    timeouts: TimeoutsSpec | None = None
    retry: RetrySpec | None = None
    retry_budget: RetryBudgetSpec | None = None

    def as_policy_spec(self) -> TrafficPolicySpec:
        """The sections as a TrafficPolicy spec without targets (one parser, one precedence)."""
        return TrafficPolicySpec(
            health_check=self.health_check, outlier_detection=self.outlier_detection,
            load_balancer=self.load_balancer, persistence=self.persistence,
            timeouts=self.timeouts, retry=self.retry, retry_budget=self.retry_budget)


class TrafficPolicy(K8sObject):
    """``podway.io/v1alpha1 TrafficPolicy``: health, balancing, persistence, timeouts, retries
    for Services, routes (HTTPRoute, GRPCRoute, Ingress) or Gateways; ``security`` (who may
    reach them) for routes and Gateways."""

    KIND: ClassVar[str] = "TrafficPolicy"
    API_GROUPS: ClassVar[tuple[str, ...]] = (PODWAY_GROUP,)
    API_VERSIONS: ClassVar[tuple[str, ...]] = (f"{PODWAY_GROUP}/v1alpha1",)
    spec: TrafficPolicySpec = Field(default_factory=TrafficPolicySpec)


LoadBalancerSpec.model_rebuild()
LocalJWKS.model_rebuild()
