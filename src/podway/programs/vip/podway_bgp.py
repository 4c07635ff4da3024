"""Podway's own BGP kinds (``VIPPeer``, ``VIPAdvertisement``, ``VIPPool``; ``model/bgp.py``)
mapped onto the MetalLB-shaped objects ``metallb.plan`` works from, so both sources share one
plan, one BIRD configuration and one session report (pure).

Each Podway object becomes the MetalLB object that means the same, named ``podway:<name>`` — a
name no Kubernetes object can have, so the two sources never collide. A Podway advertisement
chooses only ``VIPPool``\\ s and sends only to ``VIPPeer``\\ s (by name or, with neither,
every one of them), never MetalLB's. A spec the model refuses (a field Podway does not know, an
ASN out of range, …) is one problem naming the object, and that object is left out; the problems
the plan finds on the mapped objects are renamed back to the Podway object (``podway_names``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from podway.model.bgp import VIPAdvertisementSpec, VIPPeerSpec
from podway.model.kinds import PODWAY_FOR_METALLB
from podway.programs.vip.metallb import Objects, Plan, Raw, plan, selects, spec_of

PREFIX = "podway:"
_BACK = PODWAY_FOR_METALLB


def podway_names(problem: str) -> str:
    """A problem the plan found on a mapped object, said of the Podway object."""
    return re.sub(rf"\b({'|'.join(_BACK)}) '{PREFIX}",
                  lambda m: f"{_BACK[m.group(1)]} '", problem)


def _refusal(kind: str, name: str, err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(("spec", *(str(p) for p in first["loc"])))
    return f"{kind} {name!r} is not used: {where}: {first['msg']}"


def _peer(name: str, raw: Raw, out: Objects) -> None:
    spec = VIPPeerSpec.model_validate(spec_of(raw))
    mapped: dict[str, Any] = {
        "peerAddress": spec.address, "peerASN": spec.asn, "myASN": spec.local_asn,
        "ebgpMultiHop": spec.ebgp_multi_hop,
        "nodeSelectors": list(spec_of(raw).get("nodeSelectors") or [])}
    for key, value in (("peerPort", spec.port), ("sourceAddress", spec.source_address),
                       ("holdTime", spec.hold_time), ("keepaliveTime", spec.keepalive_time)):
        if value is not None:
            mapped[key] = value
    if spec.password_secret_ref is not None:
        mapped["passwordSecret"] = {"name": spec.password_secret_ref.name}
    if spec.bfd is not None:
        mapped["bfdProfile"] = PREFIX + name
        out.by_kind["BFDProfile"][PREFIX + name] = {"spec": {
            "receiveInterval": spec.bfd.receive_interval,
            "transmitInterval": spec.bfd.transmit_interval,
            "detectMultiplier": spec.bfd.detect_multiplier, "passiveMode": spec.bfd.passive}}
    out.by_kind["BGPPeer"][PREFIX + name] = {"metadata": {"name": PREFIX + name},
                                             "spec": mapped}


def _chosen(kind: str, name: str, named: tuple[str, ...], there: list[str],
            problems: list[str]) -> list[str]:
    for missing in sorted(set(named) - set(there)):
        problems.append(f"VIPAdvertisement {name!r} names {kind} {missing!r}, which is not "
                        "there")
    return [PREFIX + n for n in there if not named or n in named]


def _advert(name: str, raw: Raw, objects: Objects, out: Objects,
            problems: list[str]) -> None:
    wire = spec_of(raw)
    spec = VIPAdvertisementSpec.model_validate(wire)
    pools = [p for p, pool in objects.of("VIPPool")
             if not spec.pool_selectors or p in spec.pools
             or selects(wire.get("poolSelectors"),
                        (pool.get("metadata") or {}).get("labels") or {})]
    pools = _chosen("VIPPool", name, spec.pools if not spec.pool_selectors else (), pools,
                    problems)
    peers = _chosen("VIPPeer", name, spec.peers, [p for p, _ in objects.of("VIPPeer")],
                    problems)
    if not pools or not peers:
        return  # nothing to announce, or no one to announce it to
    mapped: dict[str, Any] = {
        "ipAddressPools": pools, "peers": peers, "communities": list(spec.communities),
        "aggregationLength": spec.aggregation_length,
        "aggregationLengthV6": spec.aggregation_length_v6,
        "nodeSelectors": list(wire.get("nodeSelectors") or [])}
    if spec.local_pref is not None:
        mapped["localPref"] = spec.local_pref
    out.by_kind["BGPAdvertisement"][PREFIX + name] = {"metadata": {"name": PREFIX + name},
                                                      "spec": mapped}


def _metallb_own(objects: Objects, out: Objects) -> None:
    """MetalLB's advertisements keep to MetalLB's pools and peers: "every pool" and "every
    peer" (or a selector) are spelt out as MetalLB's own names, so a Podway pool or peer never
    joins them. A selector the plan will refuse is left for it to say."""
    pools = objects.of("IPAddressPool")
    peers = [p for p, _ in objects.of("BGPPeer")]
    for name, raw in objects.of("BGPAdvertisement"):
        spec = dict(spec_of(raw))
        named, selectors = spec.get("ipAddressPools") or [], spec.get("ipAddressPoolSelectors")
        try:
            chosen = [p for p, pool in pools if (not named and not selectors) or p in named
                      or (selectors and selects(selectors, (pool.get("metadata") or {}).get(
                          "labels") or {}))]
        except ValueError:
            continue
        if not chosen or not (spec.get("peers") or peers):
            del out.by_kind["BGPAdvertisement"][name]  # nothing of MetalLB's to send, or no one
            continue
        spec.update(ipAddressPools=chosen, ipAddressPoolSelectors=[],
                    peers=spec.get("peers") or peers)
        out.by_kind["BGPAdvertisement"][name] = {**raw, "spec": spec}


def with_podway(objects: Objects) -> tuple[Objects, list[str]]:
    """``objects`` plus Podway's peers, advertisements and pools in MetalLB's shape, and the
    problems of the Podway objects that could not be mapped."""
    out = Objects(by_kind={kind: dict(items) for kind, items in objects.by_kind.items()})
    problems: list[str] = []
    if not objects.by_kind["VIPPool"] and not objects.by_kind["VIPPeer"]:
        return out, problems  # MetalLB's objects only: as they are
    _metallb_own(objects, out)
    for name, raw in objects.of("VIPPool"):
        meta: Mapping[str, Any] = raw.get("metadata") or {}
        out.by_kind["IPAddressPool"][PREFIX + name] = {
            "metadata": {"name": PREFIX + name, "labels": dict(meta.get("labels") or {})},
            "spec": {"addresses": list(spec_of(raw).get("addresses") or [])}}
    for kind, build in (("VIPPeer", _peer), ("VIPAdvertisement", None)):
        for name, raw in objects.of(kind):
            try:
                if build is not None:
                    build(name, raw, out)
                else:
                    _advert(name, raw, objects, out, problems)
            except ValidationError as err:
                problems.append(_refusal(kind, name, err))
            except ValueError as err:
                problems.append(f"{kind} {name!r} is not used: {err}")
    return out, problems


def plan_both(objects: Objects, *, node_labels: Mapping[str, str], router_id: str,
              namespace: str, vips: Sequence[str] | None = None) -> Plan:
    """This node's BGP from MetalLB's objects and Podway's together; every problem said of the
    object it is about."""
    merged, problems = with_podway(objects)
    found = plan(merged, node_labels=node_labels, router_id=router_id, namespace=namespace,
                 vips=vips)
    return replace(found, problems=tuple(dict.fromkeys(
        podway_names(p) for p in (*problems, *found.problems))))
