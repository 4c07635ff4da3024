"""Members in server slots: which member sits in which ``server`` line of a backend.

A backend is rendered with a fixed number of server slots (a power of two, at least
``MIN_SLOTS``); members fill them and the rest stay disabled. A member change then is a few
runtime commands on the slots it touches (``set server addr/weight/state``), no reload, as
long as the members fit; a member that stays keeps its slot (its connections, its cookie and
its health-check history stay with it). Pure: the supervisor keeps the assignment between
renderings and hands it back in.

A draining member that still serves (``Member.serving``: a terminating pod in a rollout) is the
pool's fallback, as Envoy's priority 1 (``podway.envoy.config.endpoints``): it leaves its slot
and sits in a *backup* slot (``b1``, ``b2``, ...: HAProxy's ``backup`` servers), which HAProxy
sends to only while no active server is usable (none up with a weight above 0: every ready
member failed its checks, or none is left). Backup slots are made the first time a pool has a
fallback member (a reload, once) and then stay, so later rollouts are runtime edits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from podway.engines.handover import MemberKey, key
from podway.ir import Member, MemberState

MIN_SLOTS = 4
MAX_WEIGHT = 256  # HAProxy's largest server weight

def capacity_for(count: int, previous: int = 0, *, lazy: bool = False) -> int:
    """Slots for ``count`` members: the previous capacity when they fit, else the next power
    of two with room to grow (a reload is then due anyway). ``lazy`` (backup slots): none
    until a first member needs one."""
    if previous and count <= previous:
        return previous
    if lazy and not count:
        return 0
    size = MIN_SLOTS
    while size < count + count // 2:
        size *= 2
    return size


def assign(members: tuple[Member, ...], previous: tuple[MemberKey | None, ...] | None, *,
           lazy: bool = False) -> tuple[MemberKey | None, ...]:
    """Each member in a slot: members already placed keep their slot, new ones take free
    slots in order. The capacity grows only when they do not fit (``lazy``: none at all
    until a member needs one)."""
    prev = previous or ()
    size = capacity_for(len(members), len(prev), lazy=lazy)
    before: list[MemberKey | None] = list(prev) + [None] * (size - len(prev))
    wanted = {key(m) for m in members}
    slots = [k if k in wanted else None for k in before]
    placed = {k for k in slots if k is not None}
    # Slots that were empty first: a slot freed by this very change is reused only when no
    # other is left, so a member swapped for another is a new server coming up beside the
    # old one going down, never one server changing address under traffic.
    free = iter([i for i, k in enumerate(before) if k is None]
                + [i for i, k in enumerate(before) if k is not None and k not in wanted])
    for m in members:
        if key(m) not in placed:
            slots[next(free)] = key(m)
            placed.add(key(m))
    return tuple(slots)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotState:
    """What one server slot should be: an address or none (disabled)."""

    name: str = "s1"  # the server's name in its backend (``slot_name``)
    address: str = "0.0.0.0"
    port: int = 0
    weight: int = 1
    state: str = "maint"  # ready | maint (an empty slot); HAProxy's runtime words
    checked: bool = False  # the backend's servers have an active check


def slot_states(members: tuple[Member, ...], slots: tuple[MemberKey | None, ...], *,
                backup: bool = False, checked: bool = False) -> tuple[SlotState, ...]:
    by_key = {key(m): m for m in members}
    out = []
    for i, k in enumerate(slots):
        name = slot_name(i, backup=backup)
        m = by_key.get(k) if k is not None else None
        if m is None:
            out.append(SlotState(name=name, checked=checked))
            continue
        # Draining and not-ready members get weight 0: no new connections, in-flight ones
        # finish, and health checks keep running (a member in maintenance is not checked, so
        # a pod held back by the readiness gate could never be found healthy). The same in the
        # configuration and at runtime, so a reload and a runtime edit agree. A member enabled
        # at runtime is marked down until its first check passes (``commands``).
        # A fallback member in a backup slot keeps its weight: HAProxy sends there only while
        # no active server is usable.
        usable = m.state is MemberState.READY or (backup and m.fallback)
        weight = min(m.weight, MAX_WEIGHT) if usable else 0
        out.append(SlotState(name=name, address=m.address, port=m.port, weight=weight,
                             state="ready", checked=checked))
    return tuple(out)


def slot_name(index: int, *, backup: bool = False) -> str:
    return f"{'b' if backup else 's'}{index + 1}"


def commands(backend: str, before: tuple[SlotState, ...], after: tuple[SlotState, ...]
             ) -> list[str]:
    """Runtime API commands turning ``before`` into ``after`` (same capacity). A slot that gets
    another address is put in maintenance first, so no request reaches a half-changed server.

    A checked slot that comes up (out of maintenance, or at another address) takes no request
    before its first check passes, as a new member in Envoy: HAProxy 2.6 counts a server
    leaving maintenance as up until a check fails, so it leaves at weight 0 and is marked down
    (``health down``) before it gets its weight. Its first check comes on the slot's running
    schedule, within one check interval (``podway.engines.handover`` bridges that wait when
    every serving member is replaced)."""
    assert len(before) == len(after)
    up: list[str] = []
    down: list[str] = []  # after every slot that comes up: the pool is never left empty
    for old, new in zip(before, after, strict=True):
        if old == new:
            continue
        server = f"{backend}/{new.name}"
        if new.state == "maint":  # emptied: taken out, its address left as it was
            if old.state != "maint":
                down.append(f"set server {server} state maint")
            continue
        moved = (old.address, old.port) != (new.address, new.port)
        if moved and old.state != "maint":
            up.append(f"set server {server} state maint")
        if moved:
            up.append(f"set server {server} addr {new.address} port {new.port}")
        if new.checked and (moved or old.state == "maint"):
            if old.weight != 0:
                up.append(f"set server {server} weight 0")
            up += [f"set server {server} state ready", f"set server {server} health down"]
            if new.weight != 0:
                up.append(f"set server {server} weight {new.weight}")
            continue
        if old.weight != new.weight:
            up.append(f"set server {server} weight {new.weight}")
        if new.state != old.state or moved:
            up.append(f"set server {server} state {new.state}")
    return up + down


def proving(backend: str, states: tuple[SlotState, ...], names: frozenset[str]) -> list[str]:
    """After a reload that wrote the ``names`` slots at weight 0 (``unproven``): each marked
    down until its first check passes, then given its weight."""
    out: list[str] = []
    for state in states:
        if state.name in names:
            out.append(f"set server {backend}/{state.name} health down")
            if state.weight:
                out.append(f"set server {backend}/{state.name} weight {state.weight}")
    return out


Slots = Mapping[str, tuple[MemberKey | None, ...]]  # pool name → its slots
