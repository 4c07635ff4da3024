"""IP addresses as the engine accepts them: checked before they reach the IR.

Envoy refuses a whole load assignment (or listener) over one address it cannot parse, and
a refused assignment is re-sent with every later endpoint change, so one ``999.1.1.1`` in one
EndpointSlice could block the endpoints of unrelated Services. Every address read from an object
(EndpointSlice endpoints, Node addresses, NodePortLocal annotations, Service VIPs) goes through
``address_problem`` first; a bad one is a problem on its object and is left out.

Where a listener binds is the operator's choice (``TranslateOptions.address``), not a
manifest's: a Service VIP or Gateway address other than it is bound only when
``TranslateOptions.manifest_addresses`` allows it (``choose_address``); otherwise the listener
binds the configured address and the object is told (``AddressNotAllowed``), so no manifest can
open ``0.0.0.0`` behind the operator's back.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache

from podway.translate.core.options import TranslateOptions
from podway.translate.core.problems import Reason, Verdict, quote


@lru_cache(maxsize=65536)
def address_problem(address: str, family: str | None = None) -> str | None:
    """Why ``address`` is not a plain IP address (of ``family`` "IPv4"/"IPv6"), or None."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return f"{quote(address)} is not an IP address"
    if "%" in address:
        return f"{quote(address)} has a zone index, which the engine does not take"
    if family is not None and f"IPv{parsed.version}" != family:
        return f"{quote(address)} is not an {family} address"
    return None


@dataclass(frozen=True, slots=True)
class AddressChoice:
    """The address a listener binds for an object that asked for ``requested``."""

    address: str | None  # None: nothing can be bound (the request is not an IP address)
    refusal: Verdict | None = None  # ok False: error (InvalidAddress) or warning (NotAllowed)


def choose_address(requested: str | None, opts: TranslateOptions, what: str) -> AddressChoice:
    """Bind ``requested`` (named ``what`` in messages) if the options allow manifests to choose
    addresses, else the configured address; a request that is not an IP binds nothing."""
    if not requested or requested == opts.address:
        return AddressChoice(opts.address)
    wrong = address_problem(requested)
    if wrong is not None:
        return AddressChoice(None, Verdict(False, Reason.INVALID_ADDRESS,
                                           f"{what} {wrong}; nothing is bound for it"))
    if not opts.manifest_addresses:
        return AddressChoice(opts.address, Verdict(
            False, Reason.ADDRESS_NOT_ALLOWED,
            f"{what} {requested} is not bound: manifests may not choose bind addresses "
            f"(allow it with --manifest-addresses); bound on {opts.address} instead"))
    return AddressChoice(requested)
