"""HTTPRoute and GRPCRoute rules → ordered IR routes.

Each (rule, match) pair becomes one IR route named ``<kind>/<ns>/<name>/rule/<i>/match/<j>`` with a
*precedence key*; the listener assembly sorts every route attached to a hostname by that key,
which encodes the specification's order: Exact path, then RegularExpression, then PathPrefix
by length as written (longest first), then a method match, then most header matches, then most
query matches, then the oldest route (creationTimestamp), then namespace/name, then rule and
match order. GRPCRoute matches become paths ``/service/method``: both set → Exact, service only →
PathPrefix ``/service``, method only or RegularExpression → a regex, none → PathPrefix ``/``.

A backendRef that cannot be resolved keeps its weight and is answered with HTTP 500; weight 0
entries are left out; a rule with no usable share at all answers 500.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from podway.ir import (
    DirectResponse,
    ExtAuth,
    Filter,
    Forward,
    HeaderModifier,
    Mirror,
    PathKind,
    PoolProtocol,
    RetryOn,
    RetryPolicy,
    Route,
    RouteMatch,
    WeightedPool,
)
from podway.ir.route import Action
from podway.model.gateway_routes import (
    BackendObjectReference,
    BackendRef,
    GRPCRoute,
    GRPCRouteMatch,
    GRPCRouteRule,
    HTTPRoute,
    HTTPRouteMatch,
    HTTPRouteRetry,
    HTTPRouteRule,
    RouteFilter,
)
from podway.model.policy import RetrySpec
from podway.translate.core.problems import Reason, quote
from podway.translate.gateway import filters as flt
from podway.translate.gateway.matches import PATH_RANK, grpc_key, grpc_match, http_match
from podway.translate.gateway.refs import RefIssue
from podway.translate.pools import traffic_values as tv
from podway.translate.pools.backends import PoolSpec

Resolve = Callable[[BackendObjectReference], PoolSpec | RefIssue]


@dataclass(frozen=True, slots=True)
class Issue:
    reason: Reason
    message: str
    field: str
    warning: bool = False  # served anyway; no PartiallyInvalid


class CompiledMatch(NamedTuple):
    """One rule x match, before the listener is known (a tuple: thousands are built per pass)."""

    key: tuple[object, ...]
    name: str
    match: RouteMatch
    action: Action | flt.RedirectSpec
    filters: tuple[Filter, ...]
    rule: int
    match_index: int  # of the match within the rule


class PlacedRoute(NamedTuple):
    """An IR route as served on one listener, with its precedence key and where it was
    written (``spec.rules[rule].matches[match_index]``)."""

    key: tuple[object, ...]
    route: Route
    rule: int
    match_index: int


@dataclass(slots=True)
class CompiledRoute:
    route: HTTPRoute | GRPCRoute
    matches: list[CompiledMatch] = field(default_factory=list)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    ref_issues: list[tuple[RefIssue, str]] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    rules_total: int = 0
    rules_dropped: int = 0
    _by_port: dict[tuple[int, str], list[PlacedRoute]] = field(default_factory=dict)

    def routes(self, *, port: int, scheme: str) -> list[PlacedRoute]:
        """IR routes with their precedence keys, as served on a listener of ``port`` and
        ``scheme`` (redirects depend on both)."""
        cached = self._by_port.get((port, scheme))
        if cached is not None:
            return cached
        origin = self.route.ref
        out = []
        for m in self.matches:
            action = m.action.build(listener_port=port, listener_scheme=scheme) if isinstance(
                m.action, flt.RedirectSpec) else m.action
            out.append(PlacedRoute(m.key, Route(name=m.name, match=m.match, action=action,
                                                filters=m.filters, origin=origin),
                                   m.rule, m.match_index))
        self._by_port[(port, scheme)] = out
        return out


# A rule without matches matches every request (the API's default: PathPrefix "/").
_NO_HTTP_MATCH, _NO_GRPC_MATCH = (HTTPRouteMatch(),), (GRPCRouteMatch(),)
_EVERY_PATH = http_match(_NO_HTTP_MATCH[0])


def compile_route(route: HTTPRoute | GRPCRoute, resolve: Resolve) -> CompiledRoute:
    out = CompiledRoute(route=route, rules_total=len(route.spec.rules))
    grpc = isinstance(route, GRPCRoute)
    kind = "grpcroute" if grpc else "httproute"
    ns, name = route.key
    age = route.age_key()
    rules: tuple[HTTPRouteRule | GRPCRouteRule, ...] = route.spec.rules
    for i, rule in enumerate(rules):
        where = f"spec.rules[{i}]"
        matches: list[tuple[int, RouteMatch]] = []
        raw: tuple[HTTPRouteMatch | GRPCRouteMatch, ...] = rule.matches or (
            _NO_GRPC_MATCH if grpc else _NO_HTTP_MATCH)
        for j, given in enumerate(raw):
            try:
                matches.append((j, _EVERY_PATH if given is _NO_HTTP_MATCH[0]
                                else grpc_match(given) if isinstance(given, GRPCRouteMatch)
                                else http_match(given)))
            except ValueError as exc:
                out.issues.append(Issue(Reason.UNSUPPORTED_VALUE, str(exc),
                                        f"{where}.matches[{j}]"))
        if not matches:
            out.rules_dropped += 1
            continue
        prefix_only = all(m.path.kind is PathKind.PREFIX for _, m in matches)
        try:
            variants = _rule(out, rule.filters, rule.backend_refs, getattr(
                rule, "timeouts", None), resolve=resolve, prefix_only=prefix_only, where=where,
                retry=getattr(rule, "retry", None))
        except flt.FilterError as exc:
            out.issues.append(Issue(exc.reason, str(exc), f"{where}.{exc.field}"))
            out.rules_dropped += 1
            continue
        for j, m in matches:
            given = raw[j]
            if isinstance(given, GRPCRouteMatch):
                key = (*grpc_key(given, m), age, i, j)
            else:
                # Length as written ("largest number of characters"): PathPrefix "/foo/" ranks
                # above "/foo" although both match as "/foo".
                key = (PATH_RANK[m.path.kind], -len(given.path.value), 0 if m.method else 1,
                       -len(m.headers), -len(m.query), age, i, j)
            base = f"{kind}/{ns}/{name}/rule/{i}/match/{j}"
            for v, (action, filters, upto) in enumerate(variants):
                # One route per backendRef share when the shares differ beyond headers
                # (``_per_backend``): consecutive, with rising ``upto`` bounds.
                split = len(variants) > 1
                out.matches.append(CompiledMatch(
                    key=(*key, v) if split else key,
                    name=f"{base}/backend/{v}" if split else base,
                    match=replace(m, upto=upto) if upto is not None else m,
                    action=action, filters=filters, rule=i, match_index=j))
    return out


Variant = tuple["Action | flt.RedirectSpec", tuple[Filter, ...], int | None]
_SHARE_SCALE = 1_000_000  # RouteMatch.upto is in millionths of the requests


def _rule(out: CompiledRoute, filters: tuple[RouteFilter, ...],
          backend_refs: tuple[BackendRef, ...], timeouts: object, *, resolve: Resolve,
          prefix_only: bool, where: str, retry: HTTPRouteRetry | None = None
          ) -> list[Variant]:
    """The rule's action and filters: one variant, or one per backendRef share when a
    backendRef carries a redirect or a rewrite (``_per_backend``)."""
    if (isinstance(out.route, HTTPRoute)
            and any(f.type in _PER_ROUTE for ref in backend_refs for f in ref.filters)
            and not any(f.type == "RequestRedirect" for f in filters)):  # else refs ignored
        if any(f.type == "URLRewrite" for f in filters):
            raise flt.FilterError(
                Reason.INCOMPATIBLE_FILTERS, "a URLRewrite on the rule and a RequestRedirect or "
                "URLRewrite on a backendRef cannot be used together")
        common, _, failing = _filters(out, filters, resolve=resolve, prefix_only=prefix_only,
                                      where=where)
        if failing:
            return [(DirectResponse(status=500), common, None)]
        return _per_backend(out, backend_refs, common, timeouts, resolve=resolve,
                            prefix_only=prefix_only, where=where, retry=retry)
    action, ir_filters = _rule_filters(out, filters, backend_refs, timeouts, resolve=resolve,
                                       prefix_only=prefix_only, where=where, retry=retry)
    return [(action, ir_filters, None)]


# backendRef filters no engine applies per weighted backend: each share then gets its own route.
_PER_ROUTE = ("RequestRedirect", "URLRewrite")


def _ref_filters(out: CompiledRoute, ref: BackendRef, k: int, here: str, *, prefix_only: bool
                 ) -> tuple[flt.RedirectSpec | None, list[Filter], list[HeaderModifier]]:
    """One backendRef's own filters: its redirect, its other filters and its header
    modifiers; an unsupported one is a warning and ignored."""
    redirect: flt.RedirectSpec | None = None
    extra: list[Filter] = []
    modifiers: list[HeaderModifier] = []
    for j, spec in enumerate(ref.filters):
        try:
            if spec.type == "RequestRedirect":
                redirect = flt.redirect(spec, prefix_only=prefix_only)
            elif spec.type == "URLRewrite":
                extra.append(flt.rewrite(spec, prefix_only=prefix_only))
            elif spec.type in ("RequestHeaderModifier", "ResponseHeaderModifier"):
                response = spec.type == "ResponseHeaderModifier"
                modifiers.append(flt.header_modifier(
                    spec.response_header_modifier if response
                    else spec.request_header_modifier, response=response))
            else:
                out.issues.append(Issue(Reason.UNSUPPORTED_VALUE,
                                        f"backendRef filter {quote(spec.type)} is not "
                                        "supported and is ignored", f"{here}.filters[{j}]",
                                        warning=True))
        except flt.FilterError as error:
            raise flt.FilterError(error.reason, str(error),
                                  f"backendRefs[{k}].filters[{j}]") from error
    if redirect is not None and extra:
        raise flt.FilterError(Reason.INCOMPATIBLE_FILTERS,
                              "RequestRedirect and URLRewrite cannot be used together",
                              f"backendRefs[{k}].filters")
    return redirect, extra, modifiers


def _per_backend(out: CompiledRoute, backend_refs: tuple[BackendRef, ...],
                 common: tuple[Filter, ...], timeouts: object, *, resolve: Resolve,
                 prefix_only: bool, where: str, retry: HTTPRouteRetry | None
                 ) -> list[Variant]:
    """One variant per backendRef with a weight, each taking its share of the requests
    (``RouteMatch.upto``: cumulative weights in millionths, the last one takes the rest): the
    rule's filters, then the backendRef's own — its header modifiers, a ``URLRewrite``, or a
    ``RequestRedirect`` that answers instead of forwarding. The spec's "filters defined at this
    level are executed if and only if the request is being forwarded to the backend defined
    here", served by splitting the request share before the route, not inside it. A share
    whose backend cannot be resolved is answered 500, as in a plain split."""
    timeout_ms, backend_ms = _timeouts(timeouts)
    shares: list[tuple[int, Action | flt.RedirectSpec, tuple[Filter, ...]]] = []
    for k, ref in enumerate(backend_refs):
        here = f"{where}.backendRefs[{k}]"
        redirect, extra, modifiers = _ref_filters(out, ref, k, here, prefix_only=prefix_only)
        target = resolve(ref)
        if isinstance(target, RefIssue):
            out.ref_issues.append((target, here))
        else:
            out.pools.setdefault(target.name, target)
        if not ref.weight:
            continue
        action: Action | flt.RedirectSpec
        if isinstance(target, RefIssue):
            action = DirectResponse(status=500)
        elif redirect is not None:
            action = redirect
        else:
            action = Forward(backends=(WeightedPool(pool=target.name, weight=1,
                                                    filters=tuple(modifiers)),),
                             timeout_ms=timeout_ms, backend_timeout_ms=backend_ms)
            if retry is not None:
                action = replace(action, retry=_retry(retry, where=where))
        shares.append((ref.weight, action, (*common, *extra)))
    if not shares:
        return [(DirectResponse(status=500), common, None)]
    total = sum(w for w, _, _ in shares)
    out_variants: list[Variant] = []
    running = 0
    for n, (weight, action, filters) in enumerate(shares):
        running += weight
        last = n == len(shares) - 1
        out_variants.append((action, filters,
                             None if last else running * _SHARE_SCALE // total))
    return out_variants


def _rule_filters(out: CompiledRoute, filters: tuple[RouteFilter, ...],
                  backend_refs: tuple[BackendRef, ...], timeouts: object, *, resolve: Resolve,
                  prefix_only: bool, where: str, retry: HTTPRouteRetry | None = None
                  ) -> tuple[Action | flt.RedirectSpec, tuple[Filter, ...]]:
    ir_filters, redirect, failing = _filters(out, filters, resolve=resolve,
                                             prefix_only=prefix_only, where=where)
    if failing:
        return DirectResponse(status=500), ir_filters
    if redirect is not None:
        if backend_refs:
            out.issues.append(Issue(Reason.UNSUPPORTED_VALUE,
                                    "backendRefs are ignored by a redirect",
                                    f"{where}.backendRefs", warning=True))
        return redirect, ir_filters
    timeout_ms, backend_ms = _timeouts(timeouts)
    action = _forward(out, backend_refs, resolve=resolve, where=where, timeout_ms=timeout_ms,
                      backend_ms=backend_ms)
    if retry is not None and isinstance(action, Forward):
        action = replace(action, retry=_retry(retry, where=where))
    return action, ir_filters


def _filters(out: CompiledRoute, filters: tuple[RouteFilter, ...], *, resolve: Resolve,
             prefix_only: bool, where: str
             ) -> tuple[tuple[Filter, ...], flt.RedirectSpec | None, bool]:
    """The rule's own filters: IR filters, its redirect, and whether one cannot be served (the
    rule then answers 500: an unknown or ExtensionRef filter must not be skipped)."""
    ir_filters: list[Filter] = []
    redirect: flt.RedirectSpec | None = None
    rewrites = 0
    failing = False
    for k, f in enumerate(filters):
        if f.type == "RequestHeaderModifier":
            ir_filters.append(flt.header_modifier(f.request_header_modifier, response=False))
        elif f.type == "ResponseHeaderModifier":
            ir_filters.append(flt.header_modifier(f.response_header_modifier, response=True))
        elif f.type == "RequestRedirect" and isinstance(out.route, HTTPRoute):
            redirect = flt.redirect(f, prefix_only=prefix_only)
        elif f.type == "URLRewrite" and isinstance(out.route, HTTPRoute):
            ir_filters.append(flt.rewrite(f, prefix_only=prefix_only))
            rewrites += 1
        elif f.type == "CORS" and isinstance(out.route, HTTPRoute):
            ir_filters.append(flt.cors(f))
        elif f.type == "ExternalAuth" and isinstance(out.route, HTTPRoute):
            auth = _external_auth(out, f, resolve=resolve, where=f"{where}.filters[{k}]")
            if auth is None:  # unusable: refused, never forwarded unchecked
                failing = True
                continue
            out.pools.setdefault(auth[1].name, auth[1])
            ir_filters.append(auth[0])
        elif f.type == "RequestMirror" and f.request_mirror is not None:
            target = resolve(f.request_mirror.backend_ref)
            if isinstance(target, RefIssue):
                out.ref_issues.append((target, f"{where}.filters[{k}].requestMirror.backendRef"))
                continue
            out.pools.setdefault(target.name, target)
            ir_filters.append(Mirror(pool=target.name, percent=flt.mirror_percent(f)))
        else:
            failing = True
            out.issues.append(Issue(Reason.UNSUPPORTED_VALUE, f"filter type {quote(f.type)} is "
                                    "not supported; the rule answers HTTP 500",
                                    f"{where}.filters[{k}]"))
    if redirect is not None and rewrites:
        raise flt.FilterError(Reason.INCOMPATIBLE_FILTERS,
                              "RequestRedirect and URLRewrite cannot be used together")
    return tuple(ir_filters), redirect, failing


def _external_auth(out: CompiledRoute, f: RouteFilter, *, resolve: Resolve, where: str
                   ) -> tuple[ExtAuth, PoolSpec] | None:
    """Experimental ``ExternalAuth``: the auth service's pool (gRPC: a pool speaking HTTP/2)
    and the check; None (with an issue) when it cannot be served: the rule answers 500."""
    spec = f.external_auth
    protocol = spec.protocol if spec is not None else ""
    if spec is None or protocol not in ("HTTP", "GRPC") or spec.backend_ref is None:
        out.issues.append(Issue(Reason.UNSUPPORTED_VALUE, "ExternalAuth needs protocol HTTP or "
                                "GRPC and a backendRef; the rule answers HTTP 500", where))
        return None
    target = resolve(spec.backend_ref)
    if isinstance(target, RefIssue):
        out.ref_issues.append((target, f"{where}.externalAuth.backendRef"))
        return None
    grpc = protocol == "GRPC"
    if grpc and target.settings.protocol not in (PoolProtocol.GRPC, PoolProtocol.HTTP2):
        target = replace(target, name=f"{target.name}/grpc",
                         settings=replace(target.settings, protocol=PoolProtocol.GRPC))
    extra = spec.grpc.allowed_headers if spec.grpc else spec.http.allowed_headers \
        if spec.http else ()
    if extra:
        sent = "every header" if grpc else "only Host, Method, Path, Content-Length and " \
            "Authorization"
        out.issues.append(Issue(Reason.UNSUPPORTED_VALUE, f"allowedHeaders is not served: "
                                f"the auth service gets {sent}", f"{where}.externalAuth",
                                warning=True))
    http = spec.http
    return ExtAuth(pool=target.name, grpc=grpc, path_prefix=http.path if http and not grpc
                   else "", response_headers=http.allowed_response_headers if http else (),
                   body_bytes=spec.forward_body.max_size if spec.forward_body else 0), target


def _retry(retry: HTTPRouteRetry, *, where: str) -> RetryPolicy:
    """HTTPRoute ``retry``: the listed codes, ``attempts`` retries (2 when unset), ``backoff``
    as the base interval; every method, as the API says. A retry stanza also retries connection
    errors (the API's "SHOULD retry on disconnect, reset, timeout, TCP failure"), with or without
    codes: a reset mid-request, a member closing without an answer and a per-try timeout
    (``timeouts.backendRequest``); what never reached a member is always retried. A bad value is
    a problem and the rule is dropped (``FilterError``)."""
    issues = tv.Issues()
    policy = tv.retry(RetrySpec(attempts=retry.attempts, status_codes=retry.codes,
                                idempotent_only=False, backoff=retry.backoff),
                      where=f"{where}.retry", issues=issues)
    if policy is None:
        first = issues.found[0]
        raise flt.FilterError(first.reason, first.message, first.field.removeprefix(where + "."))
    codes = (RetryOn.STATUS_CODES,) if retry.codes else ()
    return replace(policy, retry_on=(*codes, RetryOn.RESET))


def _timeouts(timeouts: object) -> tuple[int | None, int | None]:
    if timeouts is None:
        return None, None
    request = getattr(timeouts, "request", None)
    backend = getattr(timeouts, "backend_request", None)
    try:
        req_ms = flt.duration_ms(request) if request is not None else None
        back_ms = flt.duration_ms(backend) if backend is not None else None
    except ValueError as exc:
        raise flt.FilterError(Reason.UNSUPPORTED_VALUE, f"timeouts: {exc}", "timeouts") from exc
    # The API's rule: backendRequest must not exceed a non-zero request timeout. "0s" disables
    # a timeout, so a zero backendRequest is valid under any request timeout.
    if req_ms and back_ms and back_ms > req_ms:
        raise flt.FilterError(Reason.UNSUPPORTED_VALUE,
                              "timeouts.backendRequest must not exceed timeouts.request",
                              "timeouts")
    return req_ms, back_ms


def weighted_shares(backend_refs: Sequence[BackendRef], *, resolve: Resolve, where: str,
                    pools: dict[str, PoolSpec], ref_issues: list[tuple[RefIssue, str]]
                    ) -> dict[str | None, int]:
    """Weight per pool name; an unresolvable ref keeps its weight under ``None`` (its share is
    answered with an error, never moved onto the valid backends). Weight 0 is left out."""
    shares: dict[str | None, int] = {}
    for k, ref in enumerate(backend_refs):
        target = resolve(ref)
        if isinstance(target, RefIssue):
            ref_issues.append((target, f"{where}.backendRefs[{k}]"))
            if ref.weight:
                shares[None] = shares.get(None, 0) + ref.weight
            continue
        pools.setdefault(target.name, target)
        if ref.weight:
            shares[target.name] = shares.get(target.name, 0) + ref.weight
    return shares


def _forward(out: CompiledRoute, backend_refs: tuple[BackendRef, ...], *, resolve: Resolve,
             where: str, timeout_ms: int | None, backend_ms: int | None) -> Action:
    if not any(ref.filters for ref in backend_refs):
        shares = weighted_shares(backend_refs, resolve=resolve, where=where, pools=out.pools,
                                 ref_issues=out.ref_issues)
        backends = tuple(WeightedPool(pool=pool, weight=w) for pool, w in shares.items())
    else:
        backends = _filtered_shares(out, backend_refs, resolve=resolve, where=where)
    if not backends:
        return DirectResponse(status=500)
    return Forward(backends=backends, timeout_ms=timeout_ms, backend_timeout_ms=backend_ms)


def _filtered_shares(out: CompiledRoute, backend_refs: tuple[BackendRef, ...], *,
                     resolve: Resolve, where: str) -> tuple[WeightedPool, ...]:
    """Shares when some backendRef has filters: one per (pool, filters), weights added up.

    Header modifiers apply to that share only (a redirect or rewrite on a backendRef of an
    HTTPRoute takes ``_per_backend`` instead); other filter types are not served there (a
    warning; the route-level filter is the way to get them).
    """
    shares: dict[tuple[str | None, tuple[HeaderModifier, ...]], int] = {}
    for k, ref in enumerate(backend_refs):
        here = f"{where}.backendRefs[{k}]"
        modifiers: list[HeaderModifier] = []
        for j, spec in enumerate(ref.filters):
            if spec.type not in ("RequestHeaderModifier", "ResponseHeaderModifier"):
                out.issues.append(Issue(Reason.UNSUPPORTED_VALUE,
                                        f"backendRef filter {quote(spec.type)} is not supported "
                                        "(header modifiers only) and is ignored",
                                        f"{here}.filters[{j}]", warning=True))
                continue
            response = spec.type == "ResponseHeaderModifier"
            try:
                modifiers.append(flt.header_modifier(
                    spec.response_header_modifier if response else spec.request_header_modifier,
                    response=response))
            except flt.FilterError as error:
                out.issues.append(Issue(error.reason, f"{error}; the filter is ignored",
                                        f"{here}.filters[{j}]", warning=True))
        target = resolve(ref)
        if isinstance(target, RefIssue):
            out.ref_issues.append((target, here))
            key: tuple[str | None, tuple[HeaderModifier, ...]] = (None, ())
        else:
            out.pools.setdefault(target.name, target)
            key = (target.name, tuple(modifiers))
        if ref.weight:
            shares[key] = shares.get(key, 0) + ref.weight
    return tuple(WeightedPool(pool=pool, weight=w, filters=mods)
                 for (pool, mods), w in shares.items())
