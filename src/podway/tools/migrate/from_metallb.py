"""``podway migrate from-metallb``: MetalLB's configuration objects as Podway's.

Pure: raw objects in, Podway objects and notes out. Each ``IPAddressPool`` becomes a
``VIPPool`` with the same addresses (an IPv4 CIDR is written as the range it spans, since
MetalLB hands out a CIDR's network and broadcast addresses and a VIPPool's CIDR leaves them
out), the same ``autoAssign``, ``avoidBuggyIPs`` and ``serviceAllocation``. Podway announces VIPs
through each engine host's BGP speaker: a ``BGPPeer`` becomes a ``VIPPeer`` and a
``BGPAdvertisement`` a ``VIPAdvertisement`` (``from_metallb_bgp``; a ``BFDProfile`` is written
into the peers that use it, a ``Community`` name as its value); an ``L2Advertisement`` becomes a
note with the equivalent command, and every field or kind Podway does not serve is a note naming
it — nothing is dropped silently. A last note says that ``podway vip announce-metallb`` and
``podway vip l2 --from-metallb`` read MetalLB's objects as they are instead.

Instead of converting, ``podway controller --vip-pools-from metallb`` reads the
``IPAddressPool`` objects as they are.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podway.model.kinds import METALLB_SPEAKER_KINDS
from podway.model.vips import IPAddressPool, L2Advertisement
from podway.tools.migrate import from_metallb_bgp

Obj = dict[str, Any]
GROUP = "metallb.io"

@dataclass(slots=True)
class Converted:
    objects: list[Obj] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def convert(raw: Iterable[Any]) -> Converted:
    """Podway objects and notes for MetalLB's objects among ``raw`` (others: a note)."""
    out = Converted()
    raw = list(raw)
    aliases = _community_aliases(raw)
    profiles = {str((o.get("metadata") or {}).get("name")): o.get("spec") or {} for o in raw
                if isinstance(o, Mapping) and o.get("kind") == "BFDProfile"}
    for obj in raw:
        if not isinstance(obj, Mapping):
            continue
        kind, name = obj.get("kind"), (obj.get("metadata") or {}).get("name", "?")
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        raw_spec = obj.get("spec")
        spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
        if group != GROUP:
            out.notes.append(f"{kind} {name!r}: not a MetalLB object; skipped")
        elif kind == "IPAddressPool":
            out.objects.append(_pool(name, spec, out.notes))
        elif kind == "BGPPeer":
            out.objects.append(from_metallb_bgp.peer(name, spec, profiles, out.notes))
        elif kind == "BGPAdvertisement":
            out.objects.append(from_metallb_bgp.advertisement(name, spec, aliases, out.notes))
        elif kind == "BFDProfile":
            out.notes.append(f"BFDProfile {name!r}: written into the VIPPeers that use it")
        elif kind == "L2Advertisement":
            out.notes.append(_l2(name, spec))
        elif kind == "Community":
            out.notes.append(f"Community {name!r}: its names are written as values in the "
                             "VIPAdvertisements")
        else:
            out.notes.append(f"{kind} {name!r}: not carried (Podway has no equivalent object)")
    out.notes += _as_they_are({str(o.get("kind")) for o in raw if isinstance(o, Mapping)})
    return out


def _as_they_are(kinds: set[str]) -> list[str]:
    """Where the speakers can read the objects themselves instead of the commands above."""
    notes = []
    bgp = {k.name for k in METALLB_SPEAKER_KINDS} - {IPAddressPool.KIND}
    if kinds & bgp:
        notes.append("or keep MetalLB's BGP objects as they are: `podway vip "
                     "announce-metallb --node NODE --router-id ADDRESS` on each engine host "
                     "reads BGPPeer (with nodeSelectors, passwordSecret, bfdProfile, peerPort, "
                     "sourceAddress, ebgpMultiHop), BGPAdvertisement (peers, nodeSelectors), "
                     "Community and BFDProfile live from the API "
                     "(docs/vips.md#bgp-from-metallbs-objects; the Helm chart: "
                     "reachability.mode bgp with "
                     "reachability.bgp.fromMetalLB.enabled)")
    if L2Advertisement.KIND in kinds:
        notes.append("or keep the L2Advertisements as they are: `podway vip l2 --from-metallb` "
                     "on each engine host honours their nodeSelectors and interfaces (the Helm "
                     "chart: reachability.mode l2 with reachability.l2.fromMetalLB.enabled)")
    return notes


def _community_aliases(raw: Iterable[Any]) -> dict[str, str]:
    """Community names (MetalLB's Community objects) → values."""
    out: dict[str, str] = {}
    for obj in raw:
        if isinstance(obj, Mapping) and obj.get("kind") == "Community":
            for alias in (obj.get("spec") or {}).get("communities") or []:
                if isinstance(alias, Mapping) and alias.get("name"):
                    out[str(alias["name"])] = str(alias.get("value", ""))
    return out


def _pool(name: str, spec: Mapping[str, Any], notes: list[str]) -> Obj:
    body: Obj = {"addresses": [_spelled_out(a) for a in spec.get("addresses") or []]}
    for key in ("autoAssign", "avoidBuggyIPs", "serviceAllocation"):
        if key in spec:
            body[key] = spec[key]
    unknown = sorted(set(spec) - {"addresses", "autoAssign", "avoidBuggyIPs",
                                  "serviceAllocation"})
    if unknown:
        notes.append(f"IPAddressPool {name!r}: not carried: {', '.join(unknown)}")
    return {"apiVersion": "podway.io/v1alpha1", "kind": "VIPPool", "metadata": {"name": name},
            "spec": body}


def _spelled_out(text: Any) -> Any:
    """An IPv4 CIDR as the range of every address it holds; anything else as written (a bad
    value is left for the VIPPool's own validation to name)."""
    if not isinstance(text, str) or "/" not in text or "-" in text:
        return text
    try:
        net = ipaddress.ip_network(text.strip(), strict=True)
    except ValueError:
        return text
    if net.version != 4 or net.num_addresses == 1:
        return text
    return f"{net.network_address}-{net.broadcast_address}"


def _l2(name: str, spec: Mapping[str, Any]) -> str:
    pools = ", ".join(map(str, spec.get("ipAddressPools") or ["every pool"]))
    unserved = [k for k in ("ipAddressPoolSelectors", "nodeSelectors", "interfaces",
                            "serviceSelectors", "preferredNodeSelectors") if spec.get(k)]
    tail = f"; not carried: {', '.join(unserved)}" if unserved else ""
    return (f"L2Advertisement {name!r}: the VIPs of {pools} are answered for by one engine host "
            "each with `podway vip l2 --vip …` on every engine host (docs/vips.md#l2-mode-arpndp"
            f"-as-metallbs){tail}")
