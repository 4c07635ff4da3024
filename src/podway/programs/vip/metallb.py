"""MetalLB's BGP objects as they are, turned into one engine host's BIRD sessions (pure).

From the objects in MetalLB's namespace — ``BGPPeer`` (``metallb.io/v1beta2``),
``BGPAdvertisement``, ``Community``, ``BFDProfile``, ``IPAddressPool`` — the Secrets there and
this host's Node labels, ``plan`` works out what MetalLB's speaker on that node would do:

- the sessions: every ``BGPPeer`` whose ``nodeSelectors`` select the node (none: every node),
  with its ASNs, port, source address, hold and keepalive times, eBGP multi-hop, its password
  (``password``, or ``passwordSecret``: a ``kubernetes.io/basic-auth`` Secret's ``password``
  in MetalLB's namespace — held in memory and in the 0600 ``bird.conf`` only) and its
  ``bfdProfile`` (BIRD's per-session ``bfd { … }``; a peer without one has no BFD, as in
  MetalLB);
- what each session announces: for every ``BGPAdvertisement`` that selects the node, its pools
  (``ipAddressPools`` by name, ``ipAddressPoolSelectors`` by label; neither: every pool) go to
  its ``peers`` (none: every session), as their VIPs — the ``vips`` given that fall in the pool,
  or else the pool's own addresses — aggregated to ``aggregationLength`` /
  ``aggregationLengthV6``, with its ``communities`` (values, or names of a ``Community`` alias)
  and ``localPref``. No advertisement: nothing is announced (MetalLB's rule).

Nothing is silently ignored: every field Podway does not carry (``vrf``, ``dynamicASN``,
``interface``, BFD echo mode, …) and every value it cannot use is one line in ``problems``; an
unusable peer is left out, the others go on.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from podway.base.errors import ConfigError
from podway.model.core import Secret
from podway.model.gateway import LabelSelector
from podway.model.kinds import METALLB_SPEAKER_KINDS, PODWAY_SPEAKER_KINDS
from podway.model.vips import L2Advertisement
from podway.programs.ipam.pools import parse_range
from podway.programs.vip.bird import (
    BfdProfile,
    BgpSettings,
    Export,
    Neighbor,
    aggregated,
    check_settings,
)

Raw = Mapping[str, Any]
KINDS = (*(k.name for k in METALLB_SPEAKER_KINDS), L2Advertisement.KIND, Secret.KIND,
         *(k.name for k in PODWAY_SPEAKER_KINDS))
# BGPPeer fields Podway does not carry; the peer is still used unless the field changes who it
# talks to (``UNUSABLE``).
PEER_NOT_CARRIED = ("connectTime", "enableGracefulRestart", "disableMP")
PEER_UNUSABLE = ("vrf", "dynamicASN", "interface")
BFD_NOT_CARRIED = ("echoMode", "echoInterval", "minimumTtl")
# Every spec field of MetalLB's kinds Podway reads (MetalLB's v0.14 API); a field not here — a
# newer MetalLB's — is said (``unknown_fields``), never silently ignored.
KNOWN_FIELDS = {
    "BGPPeer": frozenset({"myASN", "peerASN", "peerAddress", "sourceAddress", "peerPort",
                          "holdTime", "keepaliveTime", "routerID", "nodeSelectors", "password",
                          "passwordSecret", "bfdProfile", "ebgpMultiHop", *PEER_NOT_CARRIED,
                          *PEER_UNUSABLE}),
    "BGPAdvertisement": frozenset({"aggregationLength", "aggregationLengthV6", "localPref",
                                   "communities", "ipAddressPools", "ipAddressPoolSelectors",
                                   "nodeSelectors", "peers"}),
    "BFDProfile": frozenset({"receiveInterval", "transmitInterval", "detectMultiplier",
                             "passiveMode", *BFD_NOT_CARRIED}),
    "Community": frozenset({"communities"}),
    "L2Advertisement": frozenset({"ipAddressPools", "ipAddressPoolSelectors", "nodeSelectors",
                                  "interfaces"}),
    "IPAddressPool": frozenset({"addresses", "autoAssign", "avoidBuggyIPs",
                                "serviceAllocation"}),
}


def unknown_fields(objects: Objects, kinds: Sequence[str]) -> list[str]:
    """One problem per spec field of ``kinds``' objects that Podway does not know."""
    return [f"{kind} {name!r}: {key} is not carried (a field Podway does not know)"
            for kind in kinds for name, raw in objects.of(kind)
            for key in sorted(set(spec_of(raw)) - KNOWN_FIELDS[kind])]


@dataclass(frozen=True, slots=True)
class Plan:
    """This host's BGP: the settings for BIRD, the routes to hold, and what was not used."""

    settings: BgpSettings
    vips: tuple[str, ...]
    problems: tuple[str, ...] = ()
    peers: tuple[tuple[str, str], ...] = ()  # (BIRD protocol name, BGPPeer name)


@dataclass(slots=True)
class Objects:
    """MetalLB's namespace as read: kind → name → the raw object."""

    by_kind: dict[str, dict[str, Raw]] = field(default_factory=lambda: {k: {} for k in KINDS})

    def of(self, kind: str) -> list[tuple[str, Raw]]:
        return sorted(self.by_kind.get(kind, {}).items())


def spec_of(raw: Raw) -> Mapping[str, Any]:
    spec = raw.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def selects(selectors: Any, labels: Mapping[str, str]) -> bool:
    """MetalLB's node and pool selectors: none selects everything, else any one matching."""
    if not selectors:
        return True
    if not isinstance(selectors, list):
        raise ValueError("selectors must be a list of label selectors")
    try:
        return any(LabelSelector.model_validate(s).matches(dict(labels)) for s in selectors)
    except (ValidationError, TypeError):
        raise ValueError("selectors must be a list of label selectors") from None


def advertised(spec: Mapping[str, Any], node_labels: Mapping[str, str],
               pools: Mapping[str, tuple[Mapping[str, str], Any]]) -> list[str] | None:
    """The pools (name → (labels, …)) an advertisement chooses (``ipAddressPools`` by name,
    ``ipAddressPoolSelectors`` by label; neither: every pool), in ``pools``' order; None when
    its ``nodeSelectors`` leave this node out. Bad selectors raise ``ValueError``."""
    if not selects(spec.get("nodeSelectors"), node_labels):
        return None
    named, selectors = spec.get("ipAddressPools") or [], spec.get(
        "ipAddressPoolSelectors") or []
    return [p for p, (labels, _) in pools.items()
            if (not named and not selectors) or p in named
            or (selectors and selects(selectors, labels))]


def seconds(duration: Any) -> int:
    """A Go duration (``90s``, ``1m30s``) in whole seconds; ValueError when it is not one."""
    text = str(duration).strip()
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s)?", text)
    if not text or parts is None:
        raise ValueError(f"{text!r} is not a duration such as 90s or 1m30s")
    hours, minutes, secs = (float(p or 0) for p in parts.groups())
    return int(hours * 3600 + minutes * 60 + secs)


def _password(name: str, spec: Mapping[str, Any], objects: Objects,
              namespace: str) -> str | None:
    """The peer's password, inline or from its Secret; ValueError saying what is wrong."""
    ref = spec.get("passwordSecret")
    if spec.get("password") and ref:
        raise ValueError("password and passwordSecret are both set")
    if not ref:
        return str(spec["password"]) if spec.get("password") else None
    if not isinstance(ref, Mapping) or not ref.get("name"):
        raise ValueError("passwordSecret needs a name")
    if ref.get("namespace", namespace) != namespace:
        raise ValueError(f"passwordSecret must be in {namespace!r}, as MetalLB requires")
    secret = objects.by_kind["Secret"].get(str(ref["name"]))
    if secret is None:
        raise ValueError(f"Secret {ref['name']!r} is not there (yet)")
    if secret.get("type") != "kubernetes.io/basic-auth":
        raise ValueError(f"Secret {ref['name']!r} must be of type kubernetes.io/basic-auth")
    data = secret.get("data") or {}
    try:
        return base64.b64decode(str(data["password"]), validate=True).decode()
    except (KeyError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"Secret {ref['name']!r} has no readable key 'password'") from None


def _bfd(spec: Mapping[str, Any], objects: Objects, problems: list[str],
         peer: str) -> BfdProfile | None:
    name = spec.get("bfdProfile")
    if not name:
        return None
    profile = objects.by_kind["BFDProfile"].get(str(name))
    if profile is None:
        raise ValueError(f"BFDProfile {name!r} is not there (yet)")
    p = spec_of(profile)
    for key in BFD_NOT_CARRIED:
        if p.get(key):
            problems.append(f"BFDProfile {name!r} (peer {peer!r}): {key} is not carried "
                            "(BIRD's BFD has no echo mode or TTL check)")
    try:
        return BfdProfile(receive_ms=int(p.get("receiveInterval", 300)),
                          transmit_ms=int(p.get("transmitInterval", 300)),
                          multiplier=int(p.get("detectMultiplier", 3)),
                          passive=bool(p.get("passiveMode", False)))
    except (TypeError, ValueError):
        raise ValueError(f"BFDProfile {name!r}: intervals and multiplier must be numbers"
                         ) from None


def _protocol_name(name: str, taken: set[str]) -> str:
    base = "peer_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    out, i = base, 2
    while out in taken:
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out


def _neighbor(name: str, spec: Mapping[str, Any], objects: Objects, namespace: str, *,
              problems: list[str], taken: set[str]) -> Neighbor:
    """One peer as a session (no exports yet); ValueError for a peer that cannot be used."""
    for key in PEER_UNUSABLE:
        if spec.get(key):
            raise ValueError(f"{key} is not supported by Podway's speaker")
    for key in PEER_NOT_CARRIED:
        if spec.get(key):
            problems.append(f"BGPPeer {name!r}: {key} is not carried")
    try:
        asn, local_as = int(spec["peerASN"]), int(spec["myASN"])
        address = str(spec["peerAddress"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("myASN, peerASN and peerAddress are needed") from None
    hold = seconds(spec["holdTime"]) if spec.get("holdTime") else None
    keepalive = seconds(spec["keepaliveTime"]) if spec.get("keepaliveTime") else None
    if hold is not None and keepalive is None:
        keepalive = max(hold // 3, 1)
    neighbor = Neighbor(
        address=address, asn=asn, name=_protocol_name(name, taken), local_as=local_as,
        port=int(spec["peerPort"]) if spec.get("peerPort") else None,
        source_address=str(spec["sourceAddress"]) if spec.get("sourceAddress") else None,
        hold_time=hold, keepalive=keepalive,
        password=_password(name, spec, objects, namespace),
        bfd=_bfd(spec, objects, problems, name),
        multihop=255 if spec.get("ebgpMultiHop") else None)
    if spec.get("routerID"):
        problems.append(f"BGPPeer {name!r}: routerID is taken from --router-id")
    return neighbor


def _peers(objects: Objects, node_labels: Mapping[str, str], namespace: str,
           problems: list[str]) -> dict[str, Neighbor]:
    """The sessions of this node, by BGPPeer name."""
    out: dict[str, Neighbor] = {}
    taken: set[str] = set()
    for name, raw in objects.of("BGPPeer"):
        spec = spec_of(raw)
        try:
            if not selects(spec.get("nodeSelectors"), node_labels):
                continue
            neighbor = _neighbor(name, spec, objects, namespace, problems=problems,
                                 taken=taken)
            check_settings(BgpSettings(router_id="198.18.0.1", local_as=1, bfd=False,
                                       neighbors=(neighbor,)))
        except (ValueError, ConfigError) as err:
            problems.append(f"BGPPeer {name!r} is not used: {err}")
            continue
        out[name] = neighbor
    return out


def _pool_routes(objects: Objects, vips: Sequence[str] | None,
                 problems: list[str]) -> dict[str, tuple[Mapping[str, str], list[str]]]:
    """Every pool: its labels, and the VIPs to announce for it (``vips`` in it, else its own
    addresses as prefixes)."""
    out: dict[str, tuple[Mapping[str, str], list[str]]] = {}
    for name, raw in objects.of("IPAddressPool"):
        try:
            ranges = [parse_range(str(a), whole_cidrs=True) for a in spec_of(raw).get("addresses")
                      or []]
        except ValueError as err:
            problems.append(f"IPAddressPool {name!r} is not announced: {err}")
            continue
        if vips is not None:
            nets = [ipaddress.ip_network(v, strict=False) for v in vips]
            routes = [str(n) for n in nets if any(n.network_address in r for r in ranges)]
        else:
            routes = [str(n) for r in ranges
                      for n in ipaddress.summarize_address_range(r.first, r.last)]
        labels = (raw.get("metadata") or {}).get("labels") or {}
        out[name] = (labels, routes)
    return out


def _communities(values: Iterable[Any], aliases: Mapping[str, str]) -> tuple[str, ...]:
    out = []
    for value in values:
        text = aliases.get(str(value), str(value))
        out.append(text.removeprefix("large:"))
    return tuple(out)


def _aliases(objects: Objects) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for _, raw in objects.of("Community")
            for c in spec_of(raw).get("communities") or [] if isinstance(c, Mapping)}


@dataclass(frozen=True, slots=True)
class _Advert:
    peers: tuple[str, ...]  # BGPPeer names; () every one
    prefixes: tuple[str, ...]
    communities: tuple[str, ...]
    local_pref: int | None


def _adverts(objects: Objects, node_labels: Mapping[str, str],
             pools: Mapping[str, tuple[Mapping[str, str], list[str]]],
             problems: list[str]) -> list[_Advert]:
    aliases = _aliases(objects)
    out = []
    for name, raw in objects.of("BGPAdvertisement"):
        spec = spec_of(raw)
        try:
            chosen = advertised(spec, node_labels, pools)
            if chosen is None:
                continue
            routes = [r for p in chosen for r in pools[p][1]]
            prefixes = aggregated(routes, int(spec.get("aggregationLength", 32)),
                                  int(spec.get("aggregationLengthV6", 128)))
            advert = _Advert(peers=tuple(map(str, spec.get("peers") or ())),
                             prefixes=tuple(prefixes),
                             communities=_communities(spec.get("communities") or (), aliases),
                             local_pref=int(spec["localPref"]) if spec.get("localPref")
                             is not None else None)
        except (ValueError, TypeError) as err:
            problems.append(f"BGPAdvertisement {name!r} is not used: {err}")
            continue
        out.append(advert)
    return out


def _exports(peer: str, adverts: Sequence[_Advert]) -> tuple[Export, ...]:
    """What one session announces: each prefix once, with the union of the communities of
    every advertisement that sends it there (the highest local preference)."""
    attrs: dict[str, tuple[set[str], int | None]] = {}
    for advert in adverts:
        if advert.peers and peer not in advert.peers:
            continue
        for prefix in advert.prefixes:
            communities, pref = attrs.setdefault(prefix, (set(), None))
            communities.update(advert.communities)
            if advert.local_pref is not None and (pref is None or advert.local_pref > pref):
                attrs[prefix] = (communities, advert.local_pref)
    groups: dict[tuple[tuple[str, ...], int | None], list[str]] = {}
    for prefix, (communities, pref) in attrs.items():
        groups.setdefault((tuple(sorted(communities)), pref), []).append(prefix)
    return tuple(Export(prefixes=tuple(prefixes), communities=c, local_pref=p)
                 for (c, p), prefixes in sorted(groups.items(), key=str))


def plan(objects: Objects, *, node_labels: Mapping[str, str], router_id: str,
         namespace: str, vips: Sequence[str] | None = None) -> Plan:
    """This node's BGP from MetalLB's objects (see the module docstring)."""
    problems = unknown_fields(objects, [k.name for k in METALLB_SPEAKER_KINDS])
    peers = _peers(objects, node_labels, namespace, problems)
    adverts = _adverts(objects, node_labels, _pool_routes(objects, vips, problems), problems)
    neighbors = []
    routes: dict[str, None] = {}
    for name, neighbor in peers.items():
        exports = _exports(name, adverts)
        neighbors.append(replace(neighbor, exports=exports))
        for export in exports:
            routes.update(dict.fromkeys(export.prefixes))
    local_as = neighbors[0].local_as or 1 if neighbors else 1
    settings = BgpSettings(router_id=router_id, local_as=local_as, neighbors=tuple(neighbors),
                           bfd=False, require_neighbors=False)
    for advert in adverts:
        for peer in advert.peers:
            if peer not in peers and peer not in _all_peer_names(objects):
                problems.append(f"a BGPAdvertisement names BGPPeer {peer!r}, which is not "
                                "there")
    return Plan(settings=settings, vips=tuple(routes), problems=tuple(dict.fromkeys(problems)),
                peers=tuple((n.name, name) for name, n in peers.items()))


def _all_peer_names(objects: Objects) -> set[str]:
    return set(objects.by_kind["BGPPeer"])
