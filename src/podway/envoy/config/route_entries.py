"""One IR route → Envoy routes: the match, the forwarding action (weighted shares, timeouts,
retries, mirrors, hash policies), redirects, rewrites and header edits.

``routes`` assembles these into virtual hosts and route tables; this module knows nothing of
tables. A ``WeightedPool`` without a pool (an unresolvable backend) is answered with its
``status`` on a route of its own, selected by ``runtime_fraction`` ahead of the forwarding route
(docs/design/invalid-backends.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from podway.envoy.config.access import access_filters, body_buffer_limit
from podway.envoy.config.common import duration, pack
from podway.envoy.config.listeners import CORS_FILTER
from podway.ir import (
    CORS,
    DirectResponse,
    Forward,
    HeaderModifier,
    Mirror,
    PathKind,
    Persistence,
    PersistenceKind,
    Redirect,
    RetryOn,
    RetryPolicy,
    Route,
    RouteMatch,
    StringMatchKind,
    URLRewrite,
    WeightedPool,
)

_MILLION = 1_000_000
_REDIRECT_CODES = {
    301: rc.RedirectAction.MOVED_PERMANENTLY,
    302: rc.RedirectAction.FOUND,
    303: rc.RedirectAction.SEE_OTHER,
    307: rc.RedirectAction.TEMPORARY_REDIRECT,
    308: rc.RedirectAction.PERMANENT_REDIRECT,
}

PersistenceByPool = Mapping[str, Persistence]


def one_label_authority(hostname: str) -> rc.HeaderMatcher:
    suffix = re.escape(hostname[1:].lower())
    return rc.HeaderMatcher(
        name=":authority",
        string_match=string_pb2.StringMatcher(
            safe_regex=regex_pb2.RegexMatcher(regex=f"(?i)^[^.:]+{suffix}\\.?(:[0-9]+)?$")))


def envoy_routes(route: Route, persistence: PersistenceByPool, *,
            authority: rc.HeaderMatcher | None) -> list[rc.Route]:
    """One IR route → Envoy routes (more than one only for shares answered with a status)."""
    match = _match(route.match, authority)
    action = route.action
    if isinstance(action, DirectResponse):
        out = _base(route, match)
        out.direct_response.status = action.status
        if action.body:
            out.direct_response.body.inline_string = action.body
        return [out]
    if isinstance(action, Redirect):
        out = _base(route, match)
        _redirect(out.redirect, action, route.match)
        return [out]
    return _forward(route, action, match, persistence)


def _base(route: Route, match: rc.RouteMatch, *, suffix: str = "") -> rc.Route:
    out = rc.Route(name=route.name + suffix)
    out.match.CopyFrom(match)
    for f in route.filters:
        if isinstance(f, HeaderModifier):
            _headers(out, f)
        elif isinstance(f, CORS):
            out.typed_per_filter_config[CORS_FILTER].CopyFrom(pack(_cors(f)))
    for name, config in access_filters(route.filters):
        out.typed_per_filter_config[name].CopyFrom(config)
    if (buffered := body_buffer_limit(route.filters)) is not None:
        out.request_body_buffer_limit.value = buffered
    return out


def _cors(cors: CORS) -> cors_pb2.CorsPolicy:
    out = cors_pb2.CorsPolicy(allow_methods=",".join(cors.allow_methods),
                              allow_headers=",".join(cors.allow_headers),
                              expose_headers=",".join(cors.expose_headers),
                              max_age=str(cors.max_age_s))
    out.allow_credentials.value = cors.allow_credentials
    for origin in cors.allow_origins:
        matcher = out.allow_origin_string_match.add()
        if origin == "*":
            matcher.safe_regex.regex = ".*"
        elif "://*." in origin:  # any subdomain: one or more labels before the suffix
            scheme, _, rest = origin.partition("://*.")
            matcher.safe_regex.regex = f"{_re2_escape(scheme)}://[^/]+\\.{_re2_escape(rest)}"
        else:
            matcher.exact = origin
            matcher.ignore_case = True
    return out


def _forward(route: Route, action: Forward, match: rc.RouteMatch,
             persistence: PersistenceByPool) -> list[rc.Route]:
    shares = [b for b in action.backends if b.weight > 0]
    total = sum(b.weight for b in shares)
    pools = [b for b in shares if b.pool is not None]
    statuses = [b for b in shares if b.pool is None]
    out: list[rc.Route] = []
    if not shares:  # no backend with weight: Gateway API answers 500
        only = _base(route, match)
        only.direct_response.status = 500
        return [only]
    cumulative = 0
    for i, share in enumerate(statuses):
        cumulative += share.weight
        status = _base(route, match, suffix=f"/status/{i}")
        status.direct_response.status = share.status
        last = i == len(statuses) - 1 and not pools
        if not last:
            # Envoy draws one random value per request and tests every route's fraction against
            # it, so thresholds are cumulative: share i owns [sum(<i), sum(<=i)) of the range.
            fraction = status.match.runtime_fraction
            fraction.default_value.numerator = cumulative * _MILLION // total
            fraction.default_value.denominator = percent_pb2.FractionalPercent.MILLION
        out.append(status)
    if pools:
        out.append(_forward_route(route, action, match, pools, persistence))
    return out


def _forward_route(route: Route, action: Forward, match: rc.RouteMatch,
                   pools: list[WeightedPool], persistence: PersistenceByPool) -> rc.Route:
    out = _base(route, match)
    ra = out.route
    if len(pools) == 1 and not pools[0].filters:
        ra.cluster = pools[0].pool or ""
    else:
        for share in pools:
            weighted = rc.WeightedCluster.ClusterWeight(
                name=share.pool or "", weight=wrappers_pb2.UInt32Value(value=share.weight))
            for modifier in share.filters:  # backendRef filters: this share only
                _edit_headers(weighted, modifier)
            ra.weighted_clusters.clusters.append(weighted)
    # Gateway API timeouts: ``request`` bounds the whole exchange (route timeout; without it
    # the backend timeout, so Envoy's 15 s default never cuts a longer backend timeout short),
    # ``backendRequest`` each try towards a backend (per-try timeout, no retries added).
    timeout = action.timeout_ms if action.timeout_ms is not None else action.backend_timeout_ms
    if timeout is not None:
        ra.timeout.CopyFrom(duration(timeout))
    if action.backend_timeout_ms or action.retry is not None:
        # A route's own policy replaces its virtual host's entirely: repeat the retries.
        retry_connect_failures(ra.retry_policy)
        if action.retry is not None:
            _retry(ra.retry_policy, action.retry)
        if action.backend_timeout_ms:  # 0: no per-try timeout (the route timeout applies)
            ra.retry_policy.per_try_timeout.CopyFrom(duration(action.backend_timeout_ms))
    if action.idle_timeout_ms is not None:
        ra.idle_timeout.CopyFrom(duration(action.idle_timeout_ms))
    ra.upgrade_configs.append(rc.RouteAction.UpgradeConfig(upgrade_type="websocket"))
    for name in _unique(p.pool for p in pools if p.pool):
        policy = persistence.get(name)
        if policy is not None:
            ra.hash_policy.append(_hash_policy(policy))
    for f in route.filters:
        if isinstance(f, URLRewrite):
            _rewrite(ra, f, route.match)
        elif isinstance(f, Mirror):
            mirror = rc.RouteAction.RequestMirrorPolicy(cluster=f.pool)
            mirror.runtime_fraction.default_value.numerator = round(f.percent * _MILLION / 100)
            mirror.runtime_fraction.default_value.denominator = (
                percent_pb2.FractionalPercent.MILLION)
            ra.request_mirror_policies.append(mirror)
    return out


#: Failures where the request never reached the member: retrying them is safe for every method
#: (nothing was processed), and it hides a member that stopped accepting connections before its
#: endpoint was withdrawn (a pod shutting down). Set once per virtual host, and on a route that
#: needs its own policy (a per-try timeout). ``clusters.MAX_RETRIES`` on each cluster bounds the
#: extra load when many members fail at once.
RETRY_ON = "reset-before-request,connect-failure,refused-stream"
RETRIES = 2


def retry_connect_failures(policy: rc.RetryPolicy) -> None:
    """Retry on another member what never reached a member."""
    policy.retry_on = RETRY_ON
    policy.num_retries.value = RETRIES
    policy.retry_host_predicate.add(
        name="envoy.retry_host_predicates.previous_hosts",
        typed_config=pack(previous_hosts_pb2.PreviousHostsPredicate()))
    policy.host_selection_retry_max_attempts = 3


_IDEMPOTENT = "^(GET|HEAD|OPTIONS|PUT|DELETE|TRACE)$"
_RETRY_ON = {RetryOn.SERVER_ERROR: "5xx", RetryOn.GATEWAY_ERROR: "gateway-error",
             RetryOn.RESET: "reset", RetryOn.STATUS_CODES: "retriable-status-codes"}


def _retry(policy: rc.RetryPolicy, retry: RetryPolicy) -> None:
    """A route's retry policy on top of the connect-failure retries (``RETRY_ON``)."""
    extra = [_RETRY_ON[on] for on in retry.retry_on]
    policy.retry_on = ",".join(dict.fromkeys([*RETRY_ON.split(","), *extra]))
    policy.num_retries.value = retry.attempts
    policy.retriable_status_codes.extend(retry.status_codes)
    if retry.per_try_timeout_ms:
        policy.per_try_timeout.CopyFrom(duration(retry.per_try_timeout_ms))
    if retry.backoff_ms:
        policy.retry_back_off.base_interval.CopyFrom(duration(retry.backoff_ms))
    if retry.idempotent_only:
        policy.retriable_request_headers.append(rc.HeaderMatcher(
            name=":method", string_match=string_pb2.StringMatcher(
                safe_regex=regex_pb2.RegexMatcher(regex=_IDEMPOTENT))))


def _match(match: RouteMatch, authority: rc.HeaderMatcher | None) -> rc.RouteMatch:
    out = rc.RouteMatch()
    path = match.path
    if path.kind is PathKind.EXACT:
        out.path = path.value
    elif path.kind is PathKind.REGEX:
        out.safe_regex.regex = path.value
    elif path.value.rstrip("/") == "":
        out.prefix = "/"
    else:
        out.path_separated_prefix = path.value.rstrip("/")
    if authority is not None:
        out.headers.append(authority)
    if match.method:
        out.headers.append(rc.HeaderMatcher(
            name=":method", string_match=string_pb2.StringMatcher(exact=match.method)))
    for header in match.headers:
        out.headers.append(rc.HeaderMatcher(
            name=header.name.lower(), string_match=_string(header.kind, header.value)))
    for query in match.query:
        out.query_parameters.append(rc.QueryParameterMatcher(
            name=query.name, string_match=_string(query.kind, query.value)))
    if match.upto is not None:
        # Envoy draws one random value per request (its stream id) and tests every route's
        # runtime fraction against it: rising bounds on consecutive routes split by weight.
        out.runtime_fraction.default_value.numerator = match.upto
        out.runtime_fraction.default_value.denominator = percent_pb2.FractionalPercent.MILLION
    return out


def _string(kind: StringMatchKind, value: str) -> string_pb2.StringMatcher:
    if kind is StringMatchKind.REGEX:
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=value))
    return string_pb2.StringMatcher(exact=value)


def _redirect(out: rc.RedirectAction, action: Redirect, match: RouteMatch) -> None:
    if action.scheme:
        out.scheme_redirect = action.scheme
    if action.hostname:
        out.host_redirect = action.hostname
    if action.port:
        out.port_redirect = action.port
    if action.path is not None:
        out.path_redirect = action.path
    elif action.prefix is not None and match.path.kind is PathKind.PREFIX:
        pattern, substitution = replace_prefix_regex(match.path.value, action.prefix)
        out.regex_rewrite.pattern.regex = pattern
        out.regex_rewrite.substitution = substitution
    elif action.prefix is not None:
        out.prefix_rewrite = action.prefix
    out.response_code = _REDIRECT_CODES.get(action.status_code, rc.RedirectAction.FOUND)
    out.strip_query = action.strip_query


def _rewrite(ra: rc.RouteAction, rewrite: URLRewrite, match: RouteMatch) -> None:
    if rewrite.hostname:
        ra.host_rewrite_literal = rewrite.hostname
    if rewrite.path is not None:
        ra.regex_rewrite.pattern.regex = "^.*$"
        ra.regex_rewrite.substitution = _re2_literal_substitution(rewrite.path)
    elif rewrite.prefix is not None and match.path.kind is PathKind.PREFIX:
        pattern, substitution = replace_prefix_regex(match.path.value, rewrite.prefix)
        ra.regex_rewrite.pattern.regex = pattern
        ra.regex_rewrite.substitution = substitution
    elif rewrite.pattern is not None:
        ra.regex_rewrite.pattern.regex = rewrite.pattern
        ra.regex_rewrite.substitution = rewrite.substitution


def replace_prefix_regex(prefix: str, replacement: str) -> tuple[str, str]:
    """RE2 pattern and substitution replacing the element-wise ``prefix`` a path matched.

    Envoy's ``prefix_rewrite`` replaces characters, so ``/foo`` → ``/xyz/`` would turn
    ``/foo/bar`` into ``/xyz//bar``. Gateway API's ReplacePrefixMatch works on path elements:
    trailing slashes of the prefix and the replacement do not count, an empty replacement (or
    ``/``) removes the prefix and leaves the rest starting with ``/`` (``/foo`` → ``/``), and a
    non-empty one replaces it (``/foo/bar`` → ``/xyz/bar``, ``/foo`` → ``/xyz``). The pattern
    sees the path without its query string, which Envoy keeps.
    """
    p = _re2_escape(prefix.rstrip("/"))
    r = replacement.rstrip("/")
    if not r:
        return f"^{p}/*(.*)$", "/\\1"
    # An optional group that did not take part substitutes as "" in RE2 (and Python).
    return f"^{p}(/.*)?$", _re2_literal_substitution(r) + "\\1"


_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _re2_escape(text: str) -> str:
    """Escape RE2 metacharacters only (Python's ``re.escape`` also escapes characters such as
    space, which RE2 does not accept escaped)."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def _re2_literal_substitution(text: str) -> str:
    return text.replace("\\", "\\\\")


def _headers(out: rc.Route, modifier: HeaderModifier) -> None:
    _edit_headers(out, modifier)


def _edit_headers(out: rc.Route | rc.WeightedCluster.ClusterWeight,
                  modifier: HeaderModifier) -> None:
    """A route's or one weighted cluster's header edits (both have the same four fields)."""
    to_add = out.response_headers_to_add if modifier.response else out.request_headers_to_add
    to_remove = (out.response_headers_to_remove if modifier.response
                 else out.request_headers_to_remove)
    for name, value in modifier.set:
        to_add.append(base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=name, value=value),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD))
    for name, value in modifier.add:
        to_add.append(base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=name, value=value),
            append_action=base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD))
    to_remove.extend(modifier.remove)


def _hash_policy(policy: Persistence) -> rc.RouteAction.HashPolicy:
    out = rc.RouteAction.HashPolicy()
    if policy.kind is PersistenceKind.COOKIE:
        # A ttl (0: a session cookie) makes Envoy set the cookie when the client has none.
        out.cookie.name = policy.name or "podway-session"
        out.cookie.ttl.CopyFrom(duration_pb2.Duration(seconds=policy.ttl_s))
        out.cookie.path = "/"
    elif policy.kind is PersistenceKind.HEADER:
        out.header.header_name = policy.name
    else:
        out.connection_properties.source_ip = True
    return out


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
