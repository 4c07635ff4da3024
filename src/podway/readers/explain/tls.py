"""TLS filter chains as the engine builds them, and which one a client's SNI reaches.

Mirrors ``podway.envoy.config.listeners``: an SNI name belongs to the first certificate (or
passthrough route) that names it — Envoy refuses a name in two chains — and a client's SNI
reaches the chain with the most specific covering name (exact, then the longest wildcard, at
any depth). Pure.

SNI is compared as Envoy does (``engine_sni``): in lower case (Envoy lower-cases the client's
name and the chains' ``server_names``; DNS names are case-insensitive, RFC 6066), and otherwise
as sent: a trailing dot, which RFC 6066 forbids in SNI, stays, so such a name matches no chain
(curl and browsers drop it; OpenSSL-based clients such as Python send it).
"""

from __future__ import annotations

from collections.abc import Iterable

from podway.ir import Listener, WildcardMode
from podway.ir.hosts import covers, host_order


def sni_chains(items: Iterable[tuple[str, tuple[str, ...]]]
               ) -> list[tuple[str, tuple[str, ...]]]:
    """(name, SNI names) per filter chain, as the engine gets them: a name only in its first
    chain (Envoy refuses duplicates), and no chain for an item whose names all came before."""
    out = []
    seen: set[str] = set()
    for name, hostnames in items:
        names = tuple(h.lower() for h in hostnames if h.lower() not in seen)
        seen.update(names)
        if names:
            out.append((name, names))
    return out


def engine_sni(sni: str) -> str:
    """A client's SNI as the engine matches it against ``server_names``."""
    return sni.lower()


def by_sni(chains: list[tuple[str, tuple[str, ...]]], sni: str | None
           ) -> tuple[str, tuple[str, ...], str] | None:
    """(chain name, its SNI names, the name that matched): the most specific match for
    ``sni`` as the client sent it."""
    if not sni:
        return None
    sni = engine_sni(sni)
    found = [(host_order(n), i, n) for i, (_, names) in enumerate(chains) for n in names
             if covers(n, sni, WildcardMode.SUFFIX)]
    if not found:
        return None
    _, i, matched = min(found)
    return chains[i][0], chains[i][1], matched


def sni_owner(host: str, names: tuple[str, ...]) -> str | None:
    covering = [n for n in names if covers(n, host, WildcardMode.SUFFIX)]
    return min(covering, key=host_order) if covering else None


def default_only(listener: Listener) -> bool:
    """Whether an HTTPS listener whose certificates all name hosts has one chain only, its
    default: one certificate's chain and nothing passed through by SNI, so the engine leaves
    the named chain out (it would equal the default: ``listeners._drop_redundant``) and that
    certificate serves every SNI, with no look at the client's hello first."""
    chains = sni_chains([*((c.name, c.hostnames) for c in listener.certificates),
                         *((r.name, r.hostnames) for r in listener.l4_routes)])
    return (bool(listener.certificates) and len(chains) == 1
            and all(c.hostnames for c in listener.certificates))
