"""ingress-nginx canaries: a canary Ingress joins the main Ingress's route for the same host and
path instead of conflicting with it.

For a main route and a canary (``nginx.ingress.kubernetes.io/canary: "true"``), the routes, in
ingress-nginx's precedence (header, then cookie, then weight), all with the main route's match
and filters:

1. by header: with a value (or pattern) only that value goes to the canary; without one,
   ``always`` goes to the canary and ``never`` to the main backends (others fall through);
2. by cookie: ``always`` / ``never`` likewise (the cookie's value, in any position);
3. the main route, its forward split ``weight : weight_total - weight`` between the canary's and
   its own backends (only when both forward; a weight of 0 leaves it as it was).

Every route keeps the main route's origin, so the main Ingress's TLS redirect applies to all.
"""

from __future__ import annotations

from dataclasses import replace

from podway.ir import Forward, HeaderMatch, Route, RouteMatch, StringMatchKind, WeightedPool
from podway.ir.route import Action
from podway.translate.ingress.nginx.serve import re2_escape
from podway.translate.ingress.part import IngressPart


def canary_routes(main: Route, target: Action, canary: IngressPart) -> list[Route]:
    config = canary.canary
    if config is None:
        return [main]
    out: list[Route] = []

    def variant(suffix: str, header: HeaderMatch, action: Action) -> None:
        match = RouteMatch(path=main.match.path, headers=(*main.match.headers, header),
                           query=main.match.query, method=main.match.method)
        out.append(replace(main, name=f"{main.name}/canary/{suffix}", match=match,
                           action=action))

    if config.by_header is not None:
        name = config.by_header
        if config.header_value is not None:
            variant("header", HeaderMatch(name=name, value=config.header_value), target)
        elif config.header_pattern is not None:
            # nginx searches the value (unanchored); the engine matches it whole
            variant("header", HeaderMatch(name=name, value=f".*(?:{config.header_pattern}).*",
                                          kind=StringMatchKind.REGEX), target)
        else:
            variant("header-always", HeaderMatch(name=name, value="always"), target)
            variant("header-never", HeaderMatch(name=name, value="never"), main.action)
    if config.by_cookie is not None:
        variant("cookie-always", _cookie(config.by_cookie, "always"), target)
        variant("cookie-never", _cookie(config.by_cookie, "never"), main.action)
    weight, total = config.weight, config.weight_total
    if weight > 0 and isinstance(main.action, Forward) and isinstance(target, Forward):
        shares = [*_scaled(main.action.backends, total - weight),
                  *_scaled(target.backends, weight)]
        out.append(replace(main, action=replace(main.action, backends=tuple(shares))))
    else:
        out.append(main)
    return out


def _scaled(backends: tuple[WeightedPool, ...], factor: int) -> list[WeightedPool]:
    return [replace(b, weight=b.weight * factor) for b in backends] if factor > 0 else []


def _cookie(name: str, value: str) -> HeaderMatch:
    """The Cookie header holds ``name=value`` as one of its pairs."""
    pair = f"{re2_escape(name)}={value}"
    return HeaderMatch(name="cookie", value=f"(?:.*;\\s*)?{pair}(?:;.*)?",
                       kind=StringMatchKind.REGEX)
