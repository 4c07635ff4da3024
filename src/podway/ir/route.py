"""Routes: a match, an action and filters, ordered by the owning API's precedence rules.

The translator orders routes; the engine evaluates them first-match. Everything Kubernetes-specific
about precedence is decided here, not left to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from podway.model.base import ObjectRef


class PathKind(StrEnum):
    EXACT = "exact"
    PREFIX = "prefix"  # element-wise: /foo matches /foo and /foo/bar, never /foobar
    REGEX = "regex"


class StringMatchKind(StrEnum):
    EXACT = "exact"
    REGEX = "regex"


@dataclass(frozen=True, slots=True, kw_only=True)
class PathMatch:
    kind: PathKind
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderMatch:
    name: str
    value: str
    kind: StringMatchKind = StringMatchKind.EXACT


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryMatch:
    name: str
    value: str
    kind: StringMatchKind = StringMatchKind.EXACT


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteMatch:
    path: PathMatch = PathMatch(kind=PathKind.PREFIX, value="/")
    headers: tuple[HeaderMatch, ...] = ()
    query: tuple[QueryMatch, ...] = ()
    method: str | None = None
    # A share of the requests: the route matches only when the request's draw (one random
    # number per request, 0..999999, the same for every route it is tested against) is below
    # ``upto``. Consecutive routes with rising bounds and the same match split requests by
    # weight, first match wins (Gateway API backendRef filters an engine cannot apply per
    # weighted backend: a redirect or rewrite of one backendRef). None: every request.
    upto: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HeaderModifier:
    """Request or response header edits, applied in the order set → add → remove."""

    response: bool = False
    set: tuple[tuple[str, str], ...] = ()
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightedPool:
    """One share of a forward; ``pool`` None means the share is answered with ``status``.

    ``filters``: header edits for requests sent to (and responses from) this share only
    (Gateway API backendRef filters), after the route's own."""

    pool: str | None = None
    weight: int = 1
    status: int = 500  # answer for an unresolvable backend's share
    filters: tuple[HeaderModifier, ...] = ()


class RetryOn(StrEnum):
    """What a retry policy retries, besides what never reached a member (always retried)."""

    SERVER_ERROR = "5xx"  # any 5xx answer (and a member that never answered)
    GATEWAY_ERROR = "gateway-error"  # 502, 503, 504 only
    RESET = "reset"  # the member reset or closed the connection mid-request
    STATUS_CODES = "status-codes"  # exactly the codes listed in ``RetryPolicy.status_codes``


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Retries of one route, on another member each time, within the pool's retry cap.

    ``idempotent_only``: only GET, HEAD, OPTIONS, PUT, DELETE and TRACE are retried (on any
    condition, connect failures included); a POST is then tried once.
    """

    attempts: int = 2  # retries after the first try
    retry_on: tuple[RetryOn, ...] = (RetryOn.SERVER_ERROR, RetryOn.RESET)
    status_codes: tuple[int, ...] = ()
    idempotent_only: bool = True
    per_try_timeout_ms: int | None = None
    backoff_ms: int | None = None  # base interval; None: the engine's (25 ms)


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    backends: tuple[WeightedPool, ...]
    timeout_ms: int | None = None  # None: the engine's default; 0: no timeout
    backend_timeout_ms: int | None = None
    idle_timeout_ms: int | None = None  # a stream with no bytes either way for this long ends
    retry: RetryPolicy | None = None  # None: only what never reached a member is retried


@dataclass(frozen=True, slots=True, kw_only=True)
class Redirect:
    scheme: str | None = None
    hostname: str | None = None
    port: int | None = None
    path: str | None = None  # full replacement
    prefix: str | None = None  # replaces the matched PREFIX path; see URLRewrite.prefix
    status_code: int = 302
    strip_query: bool = False  # drop the request's query string (a fixed target URL)


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectResponse:
    status: int
    body: str = ""


Action = Forward | Redirect | DirectResponse


@dataclass(frozen=True, slots=True, kw_only=True)
class URLRewrite:
    """Host and path rewrite before forwarding.

    ``prefix`` (also ``Redirect.prefix``) replaces the part of the path matched by the route's
    ``PathKind.PREFIX`` match, element-wise as Gateway API's ReplacePrefixMatch: trailing
    slashes of the match and of ``prefix`` do not count; ``""`` or ``"/"`` removes the matched
    prefix and keeps the rest (``/foo/bar`` → ``/bar``, ``/foo`` → ``/``); any other value
    takes its place (``/foo`` → ``/xyz``: ``/foo/bar`` → ``/xyz/bar``, ``/foo`` → ``/xyz``;
    match ``/`` → ``/xyz``: ``/bar`` → ``/xyz/bar``). The query string is kept. Used only
    with a PREFIX match (the translator rejects anything else).
    """

    hostname: str | None = None
    path: str | None = None  # full replacement
    prefix: str | None = None  # replaces the matched prefix (see above)
    # A regex rewrite (ingress-nginx rewrite-target): when ``pattern`` (RE2, matched against
    # the whole path without the query) matches, the path becomes ``substitution`` with
    # ``\1``-``\9`` replaced by its groups. Never together with ``path`` or ``prefix``.
    pattern: str | None = None
    substitution: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mirror:
    pool: str
    percent: float = 100.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CORS:
    """Cross-origin resource sharing: the engine answers preflights and adds the
    ``Access-Control-*`` response headers for allowed origins.

    ``allow_origins``: ``*`` (any), or ``scheme://host[:port]`` where the host may start with
    ``*.`` (any subdomain)."""

    allow_origins: tuple[str, ...]
    allow_credentials: bool = False
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age_s: int = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientAccess:
    """Which client addresses the route serves (the address after trusted X-Forwarded-For
    hops): ``allow`` CIDRs (empty: any) minus ``deny`` CIDRs; everyone else gets 403."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """A token bucket per engine and, with ``per_client``, per client address: ``burst``
    tokens at most, ``requests`` added every ``interval_ms``; a request finding none is
    answered ``status``."""

    requests: int
    interval_ms: int = 1000
    burst: int
    per_client: bool = True
    status: int = 429


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyLimit:
    """Requests with a body over ``max_bytes`` are answered 413; the engine reads a body
    whole before forwarding it (as nginx does by default)."""

    max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BasicAuth:
    """HTTP basic authentication: a request whose ``Authorization: Basic`` credentials match
    none of ``users`` is answered 401 with ``WWW-Authenticate: Basic realm="<realm>"``.

    ``users``: (name, ``{SHA}`` + base64 of the password's SHA-1), the one htpasswd hash the
    engine checks; the translator drops (and reports) other hashes and never builds this with
    no user left (it refuses the route instead). ``source``: where the users came from (a
    Secret), for ``explain``. ``realm``: as asked; Envoy's basic auth filter has no realm
    setting and names the request's URL instead (reported to the user)."""

    users: tuple[tuple[str, str], ...]
    realm: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtAuth:
    """External authorization: before forwarding, the request is checked by the service of
    ``pool``; its refusal is the answer (with its status and body), an error or no answer
    within ``timeout_ms`` is 403 (fail closed).

    ``grpc``: Envoy's ext_authz gRPC protocol (``envoy.service.auth.v3.Authorization``); else
    HTTP: the request's method and ``path_prefix`` + path with Host, Authorization and
    Content-Length (the engine cannot send more per route), any 2xx allows.
    ``response_headers``: headers of an allowing HTTP answer copied to the request to the
    backend (empty: all but Host). ``body_bytes``: up to this much of the request body is sent
    along (0: none)."""

    pool: str
    grpc: bool = False
    path_prefix: str = ""
    response_headers: tuple[str, ...] = ()
    body_bytes: int = 0
    timeout_ms: int = 2000


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRule:
    """A claim of the valid token of JWT provider ``provider`` (a ``JwtProvider`` name): at
    ``claim`` (a path into the token's payload) one of ``values``, or with ``array`` a list
    holding one of them. A request without such a token never matches."""

    provider: str
    claim: tuple[str, ...]
    values: tuple[str, ...]
    array: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessRule:
    """One rule of an ``Authorization``: it matches a request whose client address is in one
    of ``cidrs``, each header of ``headers`` has one of its values, whose method is one of
    ``methods``, and whose token satisfies each of ``claims`` (an empty condition matches
    anything)."""

    allow: bool
    cidrs: tuple[str, ...] = ()
    headers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    methods: tuple[str, ...] = ()
    claims: tuple[ClaimRule, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Authorization:
    """Who may reach the route: the first of ``rules`` that matches decides (a refused request
    gets 403); when none matches, ``default_allow``. ``source``: for ``explain``."""

    rules: tuple[AccessRule, ...] = ()
    default_allow: bool = False
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthRequest:
    """ingress-nginx's external authentication (``auth-url``, nginx's ``auth_request``): before
    forwarding, ``method`` (empty: GET, as nginx's subrequests) ``path`` — the auth URL's path
    and query, exactly as written — is asked of ``pool`` with Host ``authority``, with the request's
    headers (no body) and ``X-Original-URL``, ``X-Original-Method``,
    ``X-Auth-Request-Redirect`` (``redirect``, empty: the request's URI), ``X-Sent-From``,
    ``X-Real-IP``. A 2xx answer lets the request through with ``response_headers`` set from
    it (a client's own values of those are dropped); 401 is answered 401 (its
    ``WWW-Authenticate`` kept), or with ``signin`` a 302 to it (its nginx variables
    ``$scheme``, ``$host``, ``$http_host``, ``$request_uri``, ``$escaped_request_uri``
    expanded); 403 is 403; anything else, an error or no answer within ``timeout_ms`` 500."""

    pool: str
    authority: str
    path: str
    method: str = ""
    signin: str = ""
    redirect: str = ""
    response_headers: tuple[str, ...] = ()
    timeout_ms: int = 5000
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorPages:
    """ingress-nginx ``custom-http-errors`` with ``default-backend``: an answer whose status is
    one of ``codes`` is replaced, status, headers and body, by the answer of ``pool`` to
    ``GET /`` (the request's method and Host) carrying ``X-Code``, ``X-Format`` (the request's
    Accept), ``X-Original-URI``, ``X-Namespace`` (``namespace``), ``X-Ingress-Name``
    (``ingress``), ``X-Service-Name`` / ``X-Service-Port`` (``service`` / ``port``: the
    route's backend) and ``X-Request-ID``; when that pool cannot answer, the original answer
    stays."""

    codes: tuple[int, ...]
    pool: str
    namespace: str = ""
    ingress: str = ""
    service: str = ""
    port: str = ""
    timeout_ms: int = 5000


@dataclass(frozen=True, slots=True, kw_only=True)
class JwtProvider:
    """Who issues the tokens a ``Jwt`` accepts: ``name`` (unique in the IR: the engine holds
    every provider in one place), the ``iss`` it must carry (empty: any), one of ``audiences``
    in its ``aud`` (empty: any), signed by a key of ``jwks`` (the key set itself, JSON) or of
    the key set at ``jwks_uri``, fetched through ``jwks_pool`` and kept ``jwks_cache_s``
    seconds. ``claim_headers``: (claim, header) — a valid token's claim is set as the header
    of the request to the backend. The token is looked for in ``from_headers`` ((header,
    value prefix)), ``from_cookies`` and ``from_params`` (query parameters); none of them: in
    ``Authorization: Bearer``. ``recompute_route``: the route is chosen again after the
    claims' headers are set (a route may match on them)."""

    name: str
    issuer: str = ""
    audiences: tuple[str, ...] = ()
    jwks: str = ""
    jwks_uri: str = ""
    jwks_pool: str = ""
    jwks_cache_s: int = 300
    claim_headers: tuple[tuple[str, str], ...] = ()
    from_headers: tuple[tuple[str, str], ...] = ()
    from_cookies: tuple[str, ...] = ()
    from_params: tuple[str, ...] = ()
    recompute_route: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Jwt:
    """JWT authentication: a request needs ``Authorization: Bearer <token>`` with a token of
    one of ``providers`` that is valid (signature, ``exp``/``nbf``, issuer, audience), else
    401 (403 for a valid token of another audience); ``optional``: a request with no token
    passes (one with a bad token does not). ``name``: the requirement's name, unique in the
    IR; ``source``: for ``explain``."""

    name: str
    providers: tuple[JwtProvider, ...]
    optional: bool = False
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Oidc:
    """OpenID Connect login (OAuth 2.0 authorization code flow): a request without a valid
    session (cookies signed with ``hmac_secret``) is redirected (302) to
    ``authorization_endpoint`` with ``client_id``, ``scopes``, ``redirect_uri`` and a state;
    the provider sends the browser back to ``redirect_uri`` (its path ``redirect_path``) with a
    code that the engine trades at ``token_endpoint`` (through ``pool``, authenticated with
    ``client_id`` and ``client_secret``) for tokens, kept in cookies (``cookie_names``: Envoy's
    cookie field → name; ``cookie_domain``); ``logout_path`` clears them (and, with
    ``end_session_endpoint``, redirects there). ``forward_token``: the access
    token goes to the backend as ``Authorization: Bearer``. ``name``: unique in the IR (the
    engine's filter and secrets are named after it); ``source``: for ``explain``. The
    secrets are never dumped (``podway.ir.dump``)."""

    name: str
    pool: str
    authorization_endpoint: str
    token_endpoint: str
    client_id: str
    redirect_uri: str
    redirect_path: str
    logout_path: str
    client_secret: str = field(default="", repr=False)
    hmac_secret: str = field(default="", repr=False)
    end_session_endpoint: str = ""
    scopes: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    cookie_names: tuple[tuple[str, str], ...] = ()
    cookie_domain: str = ""
    forward_token: bool = False
    source: str = ""


Filter = (HeaderModifier | URLRewrite | Mirror | CORS | ClientAccess | RateLimit | BodyLimit
          | BasicAuth | ExtAuth | Authorization | Jwt | AuthRequest | ErrorPages | Oidc)


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    name: str  # stable, hierarchical: ingress/<ns>/<name>/rule/<i>/path/<j>
    match: RouteMatch
    action: Action
    filters: tuple[Filter, ...] = ()
    origin: ObjectRef
