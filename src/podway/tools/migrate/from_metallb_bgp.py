"""MetalLB's BGP objects as Podway's own (``podway migrate from-metallb``; pure).

A ``BGPPeer`` becomes a ``VIPPeer`` (its ``bfdProfile``'s timers written inline, a
``passwordSecret`` as ``passwordSecretRef``), a ``BGPAdvertisement`` a ``VIPAdvertisement``
(``Community`` names resolved to their values). Both are cluster-scoped and keep the MetalLB
object's name; every field Podway has no equivalent for is a note naming it, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
API_VERSION = "podway.io/v1alpha1"
# BGPPeer fields → VIPPeer fields of the same meaning
_PEER_FIELDS = {"peerAddress": "address", "peerASN": "asn", "myASN": "localASN",
                "peerPort": "port", "sourceAddress": "sourceAddress",
                "ebgpMultiHop": "ebgpMultiHop", "holdTime": "holdTime",
                "keepaliveTime": "keepaliveTime", "nodeSelectors": "nodeSelectors"}
_ADVERT_FIELDS = {"ipAddressPools": "pools", "ipAddressPoolSelectors": "poolSelectors",
                  "peers": "peers", "localPref": "localPref",
                  "aggregationLength": "aggregationLength",
                  "aggregationLengthV6": "aggregationLengthV6", "nodeSelectors": "nodeSelectors"}
_BFD_FIELDS = {"receiveInterval": "receiveInterval", "transmitInterval": "transmitInterval",
               "detectMultiplier": "detectMultiplier", "passiveMode": "passive"}


def _object(kind: str, name: str, spec: Obj) -> Obj:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}


def peer(name: str, spec: Mapping[str, Any], profiles: Mapping[str, Mapping[str, Any]],
         notes: list[str]) -> Obj:
    """A ``VIPPeer`` for MetalLB's ``BGPPeer``."""
    out: Obj = {_PEER_FIELDS[k]: v for k, v in spec.items() if k in _PEER_FIELDS}
    ref = spec.get("passwordSecret")
    if isinstance(ref, Mapping) and ref.get("name"):
        out["passwordSecretRef"] = {"name": ref["name"]}
        notes.append(f"BGPPeer {name!r}: Secret {ref['name']!r} must be in the speaker's "
                     "namespace (--metallb-namespace)")
    if spec.get("password"):
        notes.append(f"BGPPeer {name!r}: its inline password is not written: put it in a "
                     "kubernetes.io/basic-auth Secret and name it in passwordSecretRef")
    if spec.get("bfdProfile"):
        profile = profiles.get(str(spec["bfdProfile"]))
        if profile is None:
            notes.append(f"BGPPeer {name!r}: BFDProfile {spec['bfdProfile']!r} is not among "
                         "the objects given: no BFD written")
        else:
            out["bfd"] = {_BFD_FIELDS[k]: v for k, v in profile.items() if k in _BFD_FIELDS}
            unserved = sorted(set(profile) - set(_BFD_FIELDS))
            if unserved:
                notes.append(f"BFDProfile {spec['bfdProfile']!r}: not carried: "
                             f"{', '.join(unserved)}")
    if spec.get("routerID"):
        notes.append(f"BGPPeer {name!r}: routerID is the speaker's --router-id")
    unserved = sorted(k for k in spec if k not in _PEER_FIELDS and spec[k]
                      and k not in ("passwordSecret", "password", "bfdProfile", "routerID"))
    if unserved:
        notes.append(f"BGPPeer {name!r}: not carried: {', '.join(unserved)}")
    return _object("VIPPeer", name, out)


def advertisement(name: str, spec: Mapping[str, Any], aliases: Mapping[str, str],
                  notes: list[str]) -> Obj:
    """A ``VIPAdvertisement`` for MetalLB's ``BGPAdvertisement`` (pools and peers keep their
    names: the converted VIPPools and VIPPeers)."""
    out: Obj = {_ADVERT_FIELDS[k]: v for k, v in spec.items() if k in _ADVERT_FIELDS}
    if spec.get("communities"):
        out["communities"] = [aliases.get(str(c), str(c)) for c in spec["communities"]]
    unserved = sorted(k for k in spec if k not in _ADVERT_FIELDS and k != "communities"
                      and spec[k])
    if unserved:
        notes.append(f"BGPAdvertisement {name!r}: not carried: {', '.join(unserved)}")
    return _object("VIPAdvertisement", name, out)
