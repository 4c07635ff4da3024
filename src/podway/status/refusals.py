"""Engine refusals on the Gateway API listeners they hit, each on the object that declared it.

An IR listener built from Gateway API listeners serves one or more of them
(``Listener.sections``): a Gateway's own, and those of ListenerSets attached to it, when they
share an address and port. An engine refusing the IR listener or one of its route tables (a NACK
naming it, a bind that failed after the ACK) is reported on exactly those listeners, and on the
objects that declared them — never on a Gateway none of whose own listeners is there: GEP-1713
says a Gateway's ``Accepted`` and ``Programmed`` "reflect the status of the local
configuration", and a ListenerSet's ``Programmed`` "only reflects the listeners in that
ListenerSet".

* A refused listener gets ``Programmed=False``: on a ListenerSet, reason ``PortUnavailable``
  when the engine could not bind or listen on the port (a shared ``ListenerEntry`` reason of
  ``Programmed``), else ``Invalid``; on a Gateway always ``Invalid`` (its listener's
  ``Programmed`` has no other False reason).
* The object gets ``Programmed=False`` likewise (a ListenerSet: ``PortUnavailable`` as its
  godoc lets child conditions decide, else ``Invalid``; a Gateway: ``Invalid``) — but a
  ListenerSet with another listener still served stays ``Programmed=True`` (reason
  ``Programmed``, the refusal in its message), as it does for a conflicted or invalid listener
  (the conformance suite's reading of ``Programmed``).
* ``Accepted`` is left as the translator decided, on the listener and on the object: it says
  the configuration is valid enough to produce data-plane configuration, and "does not indicate
  whether or not the configuration has been propagated to the data plane" (the ListenerSet
  ``Accepted`` godoc). So a refused ListenerSet stays counted in its Gateway's
  ``attachedListenerSets``, and the Gateway's conditions do not move for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from podway.envoy import types
from podway.ir import IR, Listener
from podway.model.base import ObjectRef
from podway.pipeline import Rejection
from podway.translate.core.status import Condition, ObjectStatus

#: What Envoy (a NACK, its log, ``podway.envoy.engine.listener_failures``) and HAProxy say when
#: a listener's port cannot be bound or listened on.
_PORT_WORDS = re.compile(
    r"cannot bind|could not bind|cannot listen|could not listen|failed to listen|"
    r"listener_create_failure|address already in use|address not available|errno=(98|99|13)\b",
    re.IGNORECASE)


def port_unavailable(rejection: Rejection) -> bool:
    """Whether the engine refused a listener because it could not use its port."""
    return rejection.type_url == types.LISTENER and bool(_PORT_WORDS.search(rejection.message))


def refused_listeners(ir: IR, rejection: Rejection) -> list[Listener]:
    """The IR listeners a refusal hits as a whole: the listener itself, its route table or
    an SNI table (``<listener>/sni/…``), a certificate it serves. Host scopes and their shared
    tables (``<listener>/host/…``, ``<listener>/hosts/…``) are the routes' own, not the
    listener's."""
    name = rejection.resource
    if not name:
        return []
    if rejection.type_url == types.SECRET:
        return [ls for ls in ir.listeners if any(c.name == name for c in ls.certificates)]
    if rejection.type_url == types.LISTENER:
        return [ls for ls in ir.listeners if ls.name == name]
    if rejection.type_url == types.ROUTE:
        return [ls for ls in ir.listeners
                if name == ls.name or name.startswith(ls.name + "/sni/")]
    return []


def listener_objects(listener: Listener) -> tuple[ObjectRef, ...]:
    """The objects a refusal of ``listener`` lands on: those that declared its Gateway API
    listeners, else (Services, Ingresses) its origins."""
    if listener.sections:
        return tuple(dict.fromkeys(s.origin for s in listener.sections))
    return listener.origins


def refused_sections(ir: IR, ref: ObjectRef, refused: Iterable[Rejection]
                     ) -> dict[str, list[Rejection]]:
    """Each listener of ``ref`` (by section name) an engine refused, with its refusals."""
    out: dict[str, list[Rejection]] = {}
    for rejection in refused:
        for listener in refused_listeners(ir, rejection):
            for section in listener.sections:
                if section.origin == ref and rejection not in out.get(section.name, ()):
                    out.setdefault(section.name, []).append(rejection)
    return out


def with_refusals(status: ObjectStatus, ref: ObjectRef, ir: IR,
                  refused: tuple[Rejection, ...]) -> ObjectStatus:
    """A Gateway's or ListenerSet's status with the engines' refusals that landed on it
    (``refused``, not empty): ``Programmed=False`` on the object and on each listener hit."""
    hit = refused_sections(ir, ref, refused)
    on_set = ref.kind != "Gateway"
    listeners = tuple(
        replace(ls, conditions=_with(ls.conditions, _refusal(hit[ls.name], on_set)))
        if ls.name in hit else ls for ls in status.listeners)
    own = _refusal(list(refused), on_set)
    served = [ls for ls in listeners if any(c.type == "Programmed" and c.status is True
                                            for c in ls.conditions)]
    if on_set and served:  # a set is Programmed while any of its listeners is served
        own = replace(own, status=True, reason="Programmed",
                      message=f"{len(served)} of {len(listeners)} listeners served; "
                      f"{own.message}")
    return replace(status, conditions=_with(status.conditions, own), listeners=listeners)


def _refusal(refused: list[Rejection], on_set: bool) -> Condition:
    port = on_set and any(port_unavailable(r) for r in refused)
    message = "; ".join(f"engine {r.node} refused {r.type_name} {r.resource}: {r.message}"
                        for r in refused)
    return Condition(type="Programmed", status=False,
                     reason="PortUnavailable" if port else "Invalid", message=message,
                     observed_generation=0)


def _with(conditions: tuple[Condition, ...], new: Condition) -> tuple[Condition, ...]:
    """``new`` in place of the condition of its type (keeping its generation), else appended
    with the generation the others observed."""
    if not any(c.type == new.type for c in conditions):
        gen = next((c.observed_generation for c in conditions), 0)
        return (*conditions, replace(new, observed_generation=gen))
    return tuple(replace(new, observed_generation=c.observed_generation) if c.type == new.type
                 else c for c in conditions)
