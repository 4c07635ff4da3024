"""Big updates in parts: how many resources one delta response may carry, and which names go
in the first part (``docs/design/xds-ordering.md``, "Big updates in parts").

At most ``most`` (``MAX_RESOURCES_PER_RESPONSE``), the rest once Envoy has answered; whole where
Envoy takes a first response as a set (``WHOLE_FIRST_TYPES``). A listener update that removes a
listener goes whole too: Envoy refuses a listener on the address of one it still has ("duplicate
address"), and takes a removal and an add of one address only within one response (it removes
first), so a part boundary between them would close the port until the next part or have the
new listener refused. A listener refused so far because its address was still taken goes along
in that response instead of waiting for its backoff. Pure.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping

from podway.envoy import types
from podway.envoy.xds.protocol import WHOLE_FIRST_TYPES
from podway.envoy.xds.refusals import Refusals


def bound(type_url: str, *, first: bool, most: int, removes: bool = False) -> int:
    """Resources a response of ``type_url`` may carry (``first``: the stream's first of it;
    ``removes``: a listener update that removes one, ``removes_listener``)."""
    return sys.maxsize if removes or (first and type_url in WHOLE_FIRST_TYPES) else most


def removes_listener(type_url: str, names: Iterable[str], known: Mapping[str, str],
                     resources: Mapping[str, object]) -> bool:
    """Whether this listener update removes a listener Envoy holds: then it goes whole."""
    return type_url == types.LISTENER and any(n in known and n not in resources for n in names)


#: Envoy's words when it refuses a listener because another holds its address.
ADDRESS_TAKEN = "duplicate address"


def with_refused(names: Iterable[str], refusals: Refusals, resources: Mapping[str, object],
                 grouped: Collection[str]) -> list[str]:
    """``names`` and the listeners refused for their address that are still wanted (and not
    offered in a group), in order. One refused for anything else keeps its backoff: offered
    with every removal, it would turn each into a refusal of its own."""
    taken = (n for n in refusals.names() if n in resources and n not in grouped
             and address_taken(refusals, n))
    return sorted({*names, *taken})


def address_taken(refusals: Refusals, name: str) -> bool:
    """Whether Envoy refused ``name`` because another listener held its address."""
    refusal = refusals.get(name)
    return refusal is not None and ADDRESS_TAKEN in refusal.message
