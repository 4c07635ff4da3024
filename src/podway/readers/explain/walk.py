"""Walk one request through the IR, the way the engine will: the decision logic of ``explain``.

``explain(ir, query, ...)`` is pure: it reads the IR (and, when known, the translator's problems,
the engine's refusals and live member health) and returns an ``Explanation``. It follows the
Envoy configuration ``podway.envoy.config`` builds, step for step:

* listener: the one bound to the destination port and address (an exact address before a
  wildcard ``0.0.0.0``/``::``); TCP-based and UDP listeners are separate;
* TLS: the filter chain whose SNI names cover the client's SNI most specifically (exact, then the
  longest wildcard, any depth; in any case, a trailing dot matching nothing:
  ``podway.readers.explain.tls``), else the default chain (the certificate without hostnames, else
  the first); passthrough chooses an L4 route the same way;
* virtual host: ``ir.evaluate.select_virtual_host`` (exact, longest wildcard, ``*``; the Host
  without port and one trailing dot, in any case: ``ir.hosts.request_host``); with
  ``sni_host_check`` a host owned by another certificate's SNI answers 421;
* routes: first match in the order the translator gave (``ir.evaluate.mismatch`` names the
  first differing condition of each route that does not match); a route's client allowlist
  answers 403 to a ``--source-ip`` outside it, and a chain that requires a client certificate
  fails the handshake (explain walks a client without one);
* forward: shares by weight, a share without pool answers its status; a pool missing from the
  IR or refused by the engine answers 503, and so does a pool with no member that takes new
  requests (``ready``, and live: healthy for the engine; panic mode is off).

Envoy agreement is tested (tests/e2e/test_explain_agrees.py): the verdicts' status classes and
pools are what a real Envoy configured from the same IR does.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from podway.ir import (
    IR,
    DirectResponse,
    EngineKind,
    Forward,
    L4Route,
    Listener,
    Redirect,
    Route,
    VirtualHost,
    WeightedPool,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol
from podway.ir.evaluate import Request, describe_match, mismatch, select_virtual_host
from podway.ir.hosts import covers, host_order, request_host
from podway.model.base import ObjectRef
from podway.readers.explain.access import AccessChecks
from podway.readers.explain.model import (
    Candidate,
    Explanation,
    Mark,
    Outcome,
    OutcomeKind,
    PoolView,
    Step,
    Verdict,
)
from podway.readers.explain.pools import Health, persistence_note, pool_view, summary, unique
from podway.readers.explain.query import Query
from podway.readers.explain.shares import drawn_shares, split
from podway.readers.explain.tls import by_sni, default_only, sni_chains, sni_owner
from podway.readers.explain.words import (
    filter_text,
    host_kind,
    hostport,
    kernel_dnat,
    listing,
    no_sni,
    protocol_mismatch,
    state_counts,
)
from podway.translate.core.problems import Problem, Severity

_WILDCARD_ADDRESSES = ("0.0.0.0", "::")
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What the walk may know besides the IR; every field is optional."""

    problems: tuple[Problem, ...] = ()
    mode: str = ""  # the backend mode (clusterip, nodeportlocal, nodeport)
    health: Health | None = None  # live member health from the engine, when known
    refused: Mapping[str, str] = field(default_factory=dict)  # engine-refused name -> message


def explain(ir: IR, query: Query, context: Context | None = None) -> Explanation:
    """Every decision on ``query``'s way through ``ir``, and the verdict."""
    return _Walk(ir, query, context or Context()).run()


class _Walk(AccessChecks):
    def __init__(self, ir: IR, query: Query, ctx: Context) -> None:
        self.ir, self.q, self.ctx = ir, query, ctx
        self.steps: list[Step] = []
        self.listener: Listener | None = None
        self.vhost: VirtualHost | None = None
        self.candidates: tuple[Candidate, ...] = ()
        self.route: Route | None = None
        self.filters: tuple[str, ...] = ()
        self.chain = ""  # HTTPS: the certificate whose filter chain took the connection
        self.client_ca = ""  # … and the CA of the client certificate it requires, if any
        self.pools: list[PoolView] = []
        self.member_notes: dict[str, str] = {}  # pool -> why no member takes requests

    def step(self, stage: str, mark: Mark, text: str) -> None:
        self.steps.append(Step(stage=stage, mark=mark, text=text))

    def run(self) -> Explanation:
        verdict = self._walk()
        problems = tuple(sorted(
            (p for p in self.ctx.problems if p.ref in set(verdict.fix) and self._relevant(p)),
            key=lambda p: (_SEVERITY_ORDER.get(p.severity, 3), str(p.ref), p.reason)))
        return Explanation(
            query=self.q, steps=tuple(self.steps),
            verdict=Verdict(summary=verdict.summary, outcomes=verdict.outcomes,
                            fix=verdict.fix, problems=problems),
            listener=self.listener.name if self.listener else None,
            virtual_host=self.vhost.name if self.vhost else None,
            candidates=self.candidates, route=self.route.name if self.route else None,
            filters=self.filters, pools=tuple(self.pools))

    def _relevant(self, problem: Problem) -> bool:
        """A problem of the chosen route's object about another of its rules is left out."""
        route = self.route
        if route is None or problem.ref != route.origin or not problem.field.startswith(
                "spec.rules["):
            return True
        rule = re.search(r"/rule/(\d+)(/|$)", route.name)
        return rule is None or problem.field.startswith(f"spec.rules[{rule.group(1)}]")

    # -- listener and TLS -------------------------------------------------------------------

    def _walk(self) -> Verdict:
        listener = self._select_listener()
        if listener is None:
            return self._reset(f"connection refused: nothing serves {self._transport()} port "
                               f"{self.q.port}{self._served_ports()}")
        self.listener = listener
        if listener.name in self.ctx.refused:
            self.step("listener", Mark.FAIL, f"the engine refused listener {listener.name}: "
                      f"{self.ctx.refused[listener.name]}")
            return self._reset(f"connection refused: the engine refused listener "
                               f"{listener.name}", listener.origins)
        wrong = protocol_mismatch(self.q.scheme, listener.protocol)
        if wrong:
            self.step("listener", Mark.FAIL, wrong)
            return self._reset(f"the connection fails: {wrong}", listener.origins)
        if listener.protocol is Protocol.HTTPS:
            if self._passed_through(listener):
                return self._passthrough(listener)
            names = self._terminate(listener)
            if names is None:
                return self._reset(f"the TLS handshake fails: listener {listener.name} has no "
                                   "certificate", listener.origins)
            if self.client_ca:
                text = (f"the TLS handshake fails: certificate {self.chain} asks for a client "
                        f"certificate signed by {self.client_ca}, and explain walks a client "
                        "without one")
                self.step("tls", Mark.FAIL, text)
                return self._reset(text, listener.origins)
            return self._http(listener, names)
        if listener.protocol is Protocol.HTTP:
            return self._http(listener, None)
        if listener.protocol is Protocol.TLS:
            return self._passthrough(listener)
        return self._l4(listener, listener.l4_routes[0] if listener.l4_routes else None)

    def _passed_through(self, listener: Listener) -> bool:
        """On an HTTPS listener that also passes TLS through by SNI (a TLS listener sharing the
        port): the client's SNI reaches a passthrough chain, not a certificate. Certificates'
        chains come first, so a name both claim stays with the certificate (as the engine has
        it)."""
        if not listener.l4_routes:
            return False
        chains = sni_chains([*((c.name, c.hostnames) for c in listener.certificates),
                             *((r.name, r.hostnames) for r in listener.l4_routes)])
        chosen = by_sni(chains, self.q.sni)
        return chosen is not None and any(r.name == chosen[0] for r in listener.l4_routes)

    def _client_certificates(self, listener: Listener, name: str | None) -> None:
        """Note the chain's certificate and whether it requires a client certificate (nginx
        ``auth-tls-*``); without an SNI match the default chain's (no hostnames, else the
        first) applies."""
        found = next((c for c in listener.certificates if c.name == name), None)
        if found is None:
            found = next((c for c in listener.certificates if not c.hostnames),
                         listener.certificates[0] if listener.certificates else None)
        if found is not None:
            self.chain = found.name
            required = found.options.client_ca_pem and found.options.client_required
            self.client_ca = (found.options.client_ca or "a configured CA") if required else ""

    def _transport(self) -> str:
        return "UDP" if self.q.scheme == "udp" else "TCP"

    def _served_ports(self) -> str:
        ports = sorted({(ls.port, str(ls.protocol)) for ls in self.ir.listeners})
        if not ports:
            return " (no listener is configured at all)"
        shown = ", ".join(f"{p}/{proto}" for p, proto in ports[:8])
        more = f" and {len(ports) - 8} more" if len(ports) > 8 else ""
        return f" (served: {shown}{more})"

    def _select_listener(self) -> Listener | None:
        udp = self.q.scheme == "udp"
        on_port = [ls for ls in self.ir.listeners
                   if ls.port == self.q.port and (ls.protocol is Protocol.UDP) == udp]
        if self.q.address is not None:
            exact = [ls for ls in on_port if _same_ip(ls.address, self.q.address)]
            wildcard = [ls for ls in on_port if ls.address in _WILDCARD_ADDRESSES]
            chosen = (exact or wildcard)[0] if exact or wildcard else None
            if chosen is not None:
                why = ("bound to that address" if exact else
                       f"bound to every address ({chosen.address})")
                self.step("listener", Mark.OK, f"{chosen.name}: {chosen.protocol} on "
                          f"{hostport(chosen.address, chosen.port)}, {why}")
            elif on_port:
                others = ", ".join(hostport(ls.address, ls.port) for ls in on_port)
                self.step("listener", Mark.FAIL, f"no listener on {self.q.address} port "
                          f"{self.q.port}; port {self.q.port} is bound at {others}")
            return chosen
        if not on_port:
            return None
        chosen = on_port[0]
        text = (f"{chosen.name}: {chosen.protocol} on {hostport(chosen.address, chosen.port)}, "
                f"the listener on {self._transport()} port {self.q.port}")
        if len(on_port) > 1:
            others = ", ".join(ls.address for ls in on_port[1:])
            text += (f" (also on that port at {others}: give the VIP as the URL's host and the "
                     "name with --header 'Host: …' to choose)")
        self.step("listener", Mark.OK, text)
        return chosen

    def _terminate(self, listener: Listener) -> tuple[str, ...] | None:
        """Pick the certificate (filter chain) for the SNI; the chain's SNI names, or None when
        the listener has no certificate at all."""
        chains = sni_chains((c.name, c.hostnames) for c in listener.certificates)
        chosen = by_sni(chains, self.q.sni)
        self._client_certificates(listener, chosen[0] if chosen is not None else None)
        only = ", the listener's only one (for any SNI)" if default_only(listener) else ""
        if chosen is not None:
            name, names, matched = chosen
            self.step("tls", Mark.OK, f"terminates TLS with certificate {name}{only}: SNI "
                      f"{self.q.sni} matches {matched}")
            return names
        default = next((c for c in listener.certificates if not c.hostnames), None)
        if default is not None:
            self.step("tls", Mark.OK, f"terminates TLS with the default certificate "
                      f"{default.name} ({no_sni(self.q.sni)})")
            return ()
        if not listener.certificates:
            self.step("tls", Mark.FAIL, f"listener {listener.name} has no certificate: the "
                      "handshake fails")
            return None
        first = listener.certificates[0]
        names = next((n for c, n in chains if c == first.name), ())
        which = only or ", the listener's first"
        self.step("tls", Mark.INFO if self.q.sni else Mark.OK,
                  f"terminates TLS with certificate {first.name}{which} "
                  f"({no_sni(self.q.sni)}); a client checking names sees "
                  f"{', '.join(first.hostnames) or 'no name'}")
        return names

    # -- HTTP ---------------------------------------------------------------------------------

    def _http(self, listener: Listener, sni_names: tuple[str, ...] | None) -> Verdict:
        address = self.q.address or ""
        sent = self.q.host or (f"[{address}]" if ":" in address else address)  # a client's Host
        vhost = select_virtual_host(listener, sent)
        host = request_host(sent)  # as the engine matched it (the texts below)
        hosts = [v.hostname for v in listener.virtual_hosts]
        if vhost is None:
            elsewhere = [ls.name for ls in self.ir.listeners if ls is not listener
                         and ls.virtual_hosts and select_virtual_host(ls, sent) is not None]
            hint = f"; that host is served on {', '.join(elsewhere)}" if elsewhere else ""
            self.step("virtual_host", Mark.FAIL, f"no virtual host of {listener.name} covers "
                      f"Host {host!r} (hosts: {listing(hosts)}){hint}")
            return self._direct(404, f"404 because no virtual host of listener {listener.name} "
                                f"covers Host {host!r}{hint}", listener.origins)
        self.vhost = vhost
        self.step("virtual_host", Mark.OK, f"{vhost.name}: {host_kind(vhost, host)}"
                  + self._skipped_wildcards(listener, host, vhost))
        if sni_names is not None and listener.sni_host_check:
            every = tuple(n for _, names in sni_chains(
                (c.name, c.hostnames) for c in listener.certificates) for n in names)
            owner = sni_owner(vhost.hostname.lower(), every)
            if owner not in (sni_names or (None,)):
                text = (f"host {vhost.hostname} belongs to the certificate for {owner}, not to "
                        f"the one this connection's SNI chose: 421 Misdirected Request"
                        if owner else f"host {vhost.hostname} has no certificate of its own, "
                        "and this connection's SNI chose one: 421 Misdirected Request")
                self.step("tls", Mark.FAIL, text)
                return self._direct(421, f"421 because {text.partition(': 421')[0]}",
                                    listener.origins)
        return self._routes(vhost)

    def _skipped_wildcards(self, listener: Listener, host: str, chosen: VirtualHost) -> str:
        skipped = [v.hostname for v in listener.virtual_hosts
                   if v.wildcard is WildcardMode.ONE_LABEL and v.hostname.startswith("*.")
                   and covers(v.hostname, host, WildcardMode.SUFFIX)
                   and not covers(v.hostname, host, v.wildcard)
                   and host_order(v.hostname) < host_order(chosen.hostname)]
        if not skipped:
            return ""
        return (f" ({', '.join(skipped)} covers one label only, as Ingress wildcards do)")

    def _routes(self, vhost: VirtualHost) -> Verdict:
        request = Request(host=self.q.host, path=self.q.path, method=self.q.method,
                          headers=dict(self.q.headers))
        chosen: Route | None = None
        out = []
        for route in vhost.routes:
            why = mismatch(route.match, request)
            picked = why is None and chosen is None
            if picked:
                chosen = route
            reason = ("chosen: the first route that matches" if picked else
                      "matches too, but an earlier route won" if why is None else why)
            out.append(Candidate(name=route.name, origin=route.origin,
                                 match=describe_match(route.match), matched=why is None,
                                 chosen=picked, why=reason))
        self.candidates = tuple(out)
        origins = unique(r.origin for r in vhost.routes)
        if chosen is None:
            text = (f"none of the {len(out)} routes of {vhost.name} matches "
                    f"{self.q.method} {self.q.path}" if out else f"{vhost.name} has no route")
            self.step("route", Mark.FAIL, text)
            return self._direct(404, f"404 because {text}", origins)
        self.route = chosen
        self.step("route", Mark.OK, f"{chosen.name} (from {chosen.origin}): "
                  f"{describe_match(chosen.match)}")
        self.filters = tuple(filter_text(f) for f in chosen.filters)
        for text in self.filters:
            self.step("filter", Mark.INFO, text)
        shares = drawn_shares(vhost.routes, chosen, request)
        if len(shares) > 1:
            self.step("route", Mark.INFO, "a share of the requests (one random draw per "
                      "request): " + ", ".join(f"{r.name} {fraction * 100:.0f} %"
                                               for r, fraction in shares))
            return split([(self._route_verdict(r), fraction) for r, fraction in shares])
        return self._route_verdict(chosen)

    def _route_verdict(self, route: Route) -> Verdict:
        refused = self.refused_by_filters(route)
        if refused is not None:
            return refused
        return self.asked_first(route, self._action(route))

    def _action(self, route: Route) -> Verdict:
        action = route.action
        fix = (route.origin,)
        if isinstance(action, DirectResponse):
            self.step("route", Mark.INFO, f"answered by the engine with {action.status}")
            return self._direct(action.status, f"{action.status}: a direct response of "
                                f"{route.name} (from {route.origin})", fix)
        if isinstance(action, Redirect):
            self.step("route", Mark.INFO, f"redirected with {action.status_code}")
            return Verdict(summary=f"redirect {action.status_code} by {route.name} (from "
                           f"{route.origin})", fix=fix, outcomes=(Outcome(
                               kind=OutcomeKind.REDIRECT, status=action.status_code),))
        return self._forward(action, fix)

    def _forward(self, action: Forward, fix: tuple[ObjectRef, ...]) -> Verdict:
        shares = [b for b in action.backends if b.weight > 0]
        if not shares:
            self.step("pool", Mark.FAIL, "the route has no backend with a weight above 0")
            return self._direct(500, f"500 because route {self.route.name if self.route else ''}"
                                " has no backend with weight", fix)
        return self._shares(shares, fix, http=True)

    # -- L4 -----------------------------------------------------------------------------------

    def _passthrough(self, listener: Listener) -> Verdict:
        chains = sni_chains((r.name, r.hostnames) for r in listener.l4_routes)
        chosen = by_sni(chains, self.q.sni)
        route: L4Route | None = None
        if chosen is not None:
            route = next(r for r in listener.l4_routes if r.name == chosen[0])
            how = ("passthrough (TLS is not terminated)" if route.certificate is None else
                   f"terminates TLS with certificate {route.certificate.name}, forwards the "
                   "decrypted bytes")
            self.step("tls", Mark.OK, f"{how}: SNI {self.q.sni} matches {chosen[2]} of "
                      f"{route.name}")
        else:
            route = next((r for r in listener.l4_routes if not r.hostnames), None)
            if route is None:
                names = [n for _, ns in chains for n in ns]
                self.step("tls", Mark.FAIL, f"passthrough: no route of {listener.name} takes "
                          f"{no_sni(self.q.sni)} (SNI names: {listing(names)})")
                return self._reset(f"the connection is closed: no TLS route for "
                                   f"{no_sni(self.q.sni)}", listener.origins)
            how = ("passthrough" if route.certificate is None else
                   f"terminates TLS with certificate {route.certificate.name}")
            self.step("tls", Mark.OK, f"{how}: {route.name} takes any SNI "
                      f"({no_sni(self.q.sni)})")
        return self._l4(listener, route)

    def _l4(self, listener: Listener, route: L4Route | None) -> Verdict:
        if route is None:
            self.step("route", Mark.FAIL, f"listener {listener.name} has no route")
            return self._reset("the connection is closed: no route on the listener",
                               listener.origins)
        self.step("route", Mark.OK, f"{route.name} (from {route.origin})")
        shares = [b for b in route.backends if b.weight > 0]
        if self.q.scheme == "udp":  # one split cluster: an unusable share goes to the others
            shares = [b for b in shares if b.pool]
        if not shares:
            self.step("pool", Mark.FAIL, "no backend with a weight above 0")
            return self._reset("the connection is closed: the route has no usable backend",
                               (route.origin,))
        if listener.engine is not EngineKind.KERNEL:
            return self._shares(shares, (route.origin,), http=False)
        self.step("engine", Mark.INFO, kernel_dnat(listener, route, self._transport()))
        verdict = self._shares(shares, (route.origin,), http=False)
        return replace(verdict, summary=verdict.summary.replace(
            "served by ", "DNAT by the kernel engine to a member of "))

    # -- pools and members --------------------------------------------------------------------

    def _shares(self, shares: list[WeightedPool], fix: tuple[ObjectRef, ...], *, http: bool
                ) -> Verdict:
        total = sum(b.weight for b in shares)
        outcomes: list[Outcome] = []
        fixes = list(fix)
        for share in shares:
            percent = 100.0 * share.weight / total
            if share.pool is None:
                if http:
                    self.step("pool", Mark.FAIL, f"{percent:.0f} % of requests: a backend that "
                              f"cannot be used answers {share.status}")
                    outcomes.append(Outcome(kind=OutcomeKind.DIRECT, status=share.status,
                                            percent=percent))
                else:
                    self.step("pool", Mark.FAIL, f"{percent:.0f} % of connections: a backend "
                              "that cannot be used: closed")
                    outcomes.append(Outcome(kind=OutcomeKind.NO_POOL, percent=percent))
                continue
            outcomes.append(self._pool(share.pool, percent, http, fixes))
        return Verdict(summary=summary(outcomes, self.route, http, self.member_notes),
                       fix=tuple(unique(fixes)),
                       outcomes=tuple(outcomes))

    def _pool(self, name: str, percent: float, http: bool, fixes: list[ObjectRef]) -> Outcome:
        pool = self.ir.pools.get(name)
        status = 503 if http else None
        if pool is None or name in self.ctx.refused:
            why = (f"the engine refused it: {self.ctx.refused[name]}" if pool is not None
                   else "it is not configured")
            self.step("pool", Mark.FAIL, f"{name} ({percent:.0f} %): {why}")
            self.pools.append(PoolView(name=name, percent=percent, exists=pool is not None))
            return Outcome(kind=OutcomeKind.NO_POOL, status=status, pool=name, percent=percent)
        view = pool_view(pool, percent, engine_health=self.ctx.health, mode=self.ctx.mode)
        self.pools.append(view)
        if pool.origin is not None:
            fixes.append(pool.origin)
        if view.receiving == 0:
            counts = state_counts(view.members)
            self.member_notes[name] = counts
            self.step("pool", Mark.FAIL, f"{name} ({percent:.0f} %, {view.mode}): no member "
                      f"takes new requests ({counts})")
            return Outcome(kind=OutcomeKind.NO_MEMBER, status=status, pool=name,
                           percent=percent)
        self.step("pool", Mark.OK, f"{name} ({percent:.0f} %, {view.mode}, "
                  f"{pool.settings.lb_policy}): {view.receiving} of {len(view.members)} "
                  "members take new requests" + persistence_note(pool, self.q.source_ip))
        return Outcome(kind=OutcomeKind.SERVED, pool=name, percent=percent)

    # -- verdict helpers ----------------------------------------------------------------------

    def _direct(self, status: int, summary: str, fix: Iterable[ObjectRef]) -> Verdict:
        return Verdict(summary=summary, fix=tuple(unique(fix)),
                       outcomes=(Outcome(kind=OutcomeKind.DIRECT, status=status),))

    def _reset(self, summary: str, fix: Iterable[ObjectRef] = ()) -> Verdict:
        if not any(s.mark is Mark.FAIL for s in self.steps):
            self.step("listener", Mark.FAIL, summary)
        return Verdict(summary=summary, fix=tuple(unique(fix)),
                       outcomes=(Outcome(kind=OutcomeKind.RESET),))


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b
