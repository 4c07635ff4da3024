"""gateway.networking.k8s.io route kinds: HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute.

Closed enums of the specification (match types, path-modifier types) are ``Literal``s so the
loader rejects what the API server's schema would reject; open or implementation-specific values
(filter ``type``, backend ``kind``, redirect ``statusCode``) stay loose and are judged by the
translator, which reports them in route status.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from podway.model.base import Int, K8sModel, K8sObject, Port
from podway.model.gateway import GROUP
from podway.model.policy import SessionPersistence

StringMatchType = Literal["Exact", "RegularExpression"]
# The API schema's header (and query parameter) name: an RFC 7230 token. Values must not hold
# CR, LF or NUL, which the engine refuses and which would split a header.
HeaderName = Annotated[str, Field(min_length=1, max_length=256,
                                  pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$")]
HeaderValue = Annotated[str, Field(max_length=4096, pattern=r"^[^\r\n\x00]*$")]


class ParentReference(K8sModel):
    group: str = GROUP
    kind: str = "Gateway"
    namespace: str | None = None
    name: str = Field(min_length=1)
    section_name: str | None = None
    port: Port | None = None


class BackendObjectReference(K8sModel):
    group: str = ""
    kind: str = "Service"
    name: str = Field(min_length=1)
    namespace: str | None = None
    port: Port | None = None


class HTTPHeader(K8sModel):
    name: HeaderName
    value: HeaderValue = ""


class HeaderFilter(K8sModel):
    set: tuple[HTTPHeader, ...] = ()
    add: tuple[HTTPHeader, ...] = ()
    remove: tuple[HeaderName, ...] = ()


class Fraction(K8sModel):
    numerator: Int = Field(ge=0)
    denominator: Int = Field(default=100, ge=1)


class RequestMirrorFilter(K8sModel):
    backend_ref: BackendObjectReference
    percent: Int | None = Field(default=None, ge=0, le=100)
    fraction: Fraction | None = None


class PathModifier(K8sModel):
    type: Literal["ReplaceFullPath", "ReplacePrefixMatch"]
    replace_full_path: str | None = None
    replace_prefix_match: str | None = None


class RequestRedirectFilter(K8sModel):
    scheme: str | None = None
    hostname: str | None = None
    path: PathModifier | None = None
    port: Port | None = None
    status_code: Int = 302


class URLRewriteFilter(K8sModel):
    hostname: str | None = None
    path: PathModifier | None = None


class CORSFilter(K8sModel):
    """HTTPRoute ``CORS`` filter (experimental channel, Gateway API v1.2+)."""

    allow_origins: tuple[str, ...] = ()
    allow_credentials: bool = False
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: Int = Field(default=5, ge=0)


class LocalReference(K8sModel):
    group: str = ""
    kind: str = ""
    name: str = ""


class ExternalAuthHTTP(K8sModel):
    path: str = ""
    allowed_headers: tuple[str, ...] = ()
    allowed_response_headers: tuple[str, ...] = ()


class ExternalAuthGRPC(K8sModel):
    allowed_headers: tuple[str, ...] = ()


class ForwardBody(K8sModel):
    max_size: Int = 0


class ExternalAuthFilter(K8sModel):
    """Experimental HTTPRoute filter ``ExternalAuth`` (Gateway API v1.4+)."""

    protocol: str = ""  # HTTP | GRPC
    backend_ref: BackendObjectReference | None = None
    grpc: ExternalAuthGRPC | None = None
    http: ExternalAuthHTTP | None = None
    forward_body: ForwardBody | None = None


class RouteFilter(K8sModel):
    type: str
    request_header_modifier: HeaderFilter | None = None
    response_header_modifier: HeaderFilter | None = None
    request_mirror: RequestMirrorFilter | None = None
    request_redirect: RequestRedirectFilter | None = None
    url_rewrite: URLRewriteFilter | None = Field(default=None, alias="urlRewrite")
    extension_ref: LocalReference | None = None
    cors: CORSFilter | None = None
    external_auth: ExternalAuthFilter | None = None


class HTTPPathMatch(K8sModel):
    type: Literal["Exact", "PathPrefix", "RegularExpression"] = "PathPrefix"
    value: str = "/"


class HTTPHeaderMatch(K8sModel):
    type: StringMatchType = "Exact"
    name: HeaderName
    value: HeaderValue


class HTTPRouteMatch(K8sModel):
    path: HTTPPathMatch = Field(default_factory=HTTPPathMatch)
    headers: tuple[HTTPHeaderMatch, ...] = ()
    query_params: tuple[HTTPHeaderMatch, ...] = ()
    method: str | None = None


class BackendRef(BackendObjectReference):
    weight: Int = Field(default=1, ge=0, le=1_000_000)
    filters: tuple[RouteFilter, ...] = ()


class HTTPRouteTimeouts(K8sModel):
    request: str | None = None
    backend_request: str | None = None


class HTTPRouteRetry(K8sModel):
    """Experimental (GEP-1731): retry on these 5xx codes, ``attempts`` times, ``backoff`` apart."""

    codes: tuple[Int, ...] = ()
    attempts: Int | None = None
    backoff: str | None = None


class HTTPRouteRule(K8sModel):
    name: str | None = None
    matches: tuple[HTTPRouteMatch, ...] = ()
    filters: tuple[RouteFilter, ...] = ()
    backend_refs: tuple[BackendRef, ...] = ()
    timeouts: HTTPRouteTimeouts | None = None
    retry: HTTPRouteRetry | None = None
    session_persistence: SessionPersistence | None = None  # experimental


class HTTPRouteSpec(K8sModel):
    parent_refs: tuple[ParentReference, ...] = ()
    hostnames: tuple[str, ...] = ()
    rules: tuple[HTTPRouteRule, ...] = (HTTPRouteRule(),)


class HTTPRoute(K8sObject):
    KIND: ClassVar[str] = "HTTPRoute"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: HTTPRouteSpec = Field(default_factory=HTTPRouteSpec)


class GRPCMethodMatch(K8sModel):
    type: StringMatchType = "Exact"
    service: str | None = None
    method: str | None = None


class GRPCRouteMatch(K8sModel):
    method: GRPCMethodMatch | None = None
    headers: tuple[HTTPHeaderMatch, ...] = ()


class GRPCRouteRule(K8sModel):
    name: str | None = None
    matches: tuple[GRPCRouteMatch, ...] = ()
    filters: tuple[RouteFilter, ...] = ()
    backend_refs: tuple[BackendRef, ...] = ()


class GRPCRouteSpec(K8sModel):
    parent_refs: tuple[ParentReference, ...] = ()
    hostnames: tuple[str, ...] = ()
    rules: tuple[GRPCRouteRule, ...] = (GRPCRouteRule(),)


class GRPCRoute(K8sObject):
    KIND: ClassVar[str] = "GRPCRoute"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: GRPCRouteSpec = Field(default_factory=GRPCRouteSpec)


class L4RouteRule(K8sModel):
    name: str | None = None
    backend_refs: tuple[BackendRef, ...] = ()


class TLSRouteSpec(K8sModel):
    parent_refs: tuple[ParentReference, ...] = ()
    hostnames: tuple[str, ...] = ()
    rules: tuple[L4RouteRule, ...] = ()


class TLSRoute(K8sObject):
    KIND: ClassVar[str] = "TLSRoute"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: TLSRouteSpec = Field(default_factory=TLSRouteSpec)


class L4RouteSpec(K8sModel):
    parent_refs: tuple[ParentReference, ...] = ()
    rules: tuple[L4RouteRule, ...] = ()


class TCPRoute(K8sObject):
    KIND: ClassVar[str] = "TCPRoute"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: L4RouteSpec = Field(default_factory=L4RouteSpec)


class UDPRoute(K8sObject):
    KIND: ClassVar[str] = "UDPRoute"
    API_GROUPS: ClassVar[tuple[str, ...]] = (GROUP,)
    spec: L4RouteSpec = Field(default_factory=L4RouteSpec)


AnyRoute = HTTPRoute | GRPCRoute | TLSRoute | TCPRoute | UDPRoute
