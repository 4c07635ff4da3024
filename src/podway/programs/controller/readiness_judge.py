"""The readiness gate's decision (pure): which engines a pod waits for (``counted_engines``),
which engine is sent which pool (``serving``), the verdict on one pod from the engines' member
health (``judge``) and the Pod condition that says it (``condition``). The rules are in
``readiness``'s docstring and ``docs/design/readiness-gate.md``.
"""

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from podway.engines.member_health import Health, HostKey, HostState
from podway.model.core import LB_READY, PodCondition

View = Mapping[HostKey, HostState]
_LISTED = 3  # members or engines named in one message, at most
VERDICTS = ("Healthy", "Unhealthy", "WaitingForEngines", "NoEngine", "NotServed", "Terminating")


@dataclass(frozen=True, slots=True)
class Verdict:
    """``status`` None: unknown (see the module docstring)."""

    status: Literal["True", "False"] | None
    reason: str
    message: str


def counted_engines(connected: Iterable[str], reporting: Iterable[str]) -> frozenset[str]:
    """The engines a pod waits for here: connected over ADS to this replica (a silent one
    blocks True) or reporting to it (its xDS may go to another replica)."""
    return frozenset(connected) | frozenset(reporting)


Serves = Callable[[str, str], bool]  # (engine, pool) → that engine is sent that pool


def _everything(engine: str, pool: str) -> bool:
    return True


def serving(groups: Mapping[str, str], pools_of: Callable[[str], Collection[str]]) -> Serves:
    """Which engine is sent which pool: an engine without a group (not in ``groups``, or "")
    every pool, one of group G the pools ``pools_of(G)`` names."""
    def serves(engine: str, pool: str) -> bool:
        group = groups.get(engine, "")
        return not group or pool in pools_of(group)
    return serves


def judge(members: tuple[HostKey, ...], engines: Collection[str],
          views: Callable[[str], View | None], serves: Serves = _everything) -> Verdict:
    """The verdict for one pod from its members, the counted engines and their reports; each
    engine is asked only about the members whose pool it is sent (``serves``)."""
    if not members:
        return Verdict(None, "NotServed", "no pool of Podway has this pod as a member")
    if not engines:
        return Verdict(None, "NoEngine",
                       "no engine is connected or reporting to the writing controller")
    asked = {engine: tuple(h for h in members if serves(engine, h[0]))
             for engine in sorted(engines)}
    asked = {engine: hosts for engine, hosts in asked.items() if hosts}
    if not asked:
        return Verdict(None, "NoEngine", "no engine connected or reporting to the writing "
                       "controller is sent this pod's pools (engine groups)")
    failing: list[str] = []
    waiting = [f"no engine connected or reporting here is sent {pool} (engine groups)"
               for pool in sorted({h[0] for h in members} - {
                   h[0] for hosts in asked.values() for h in hosts})]
    for engine, hosts in asked.items():
        view = views(engine)
        if view is None:
            waiting.append(f"engine {engine} has not reported member health")
            continue
        for host in hosts:
            state = view.get(host)
            where = f"{host[0]} {host[1]}"
            if state is None:
                waiting.append(f"engine {engine} does not have {where} yet")
            elif state.health is Health.UNHEALTHY:
                failing.append(f"engine {engine}: {where} {state.reason}".rstrip())
            elif state.health is Health.PENDING:
                waiting.append(f"engine {engine}: {where} {state.reason}".rstrip())
    if failing:
        return Verdict("False", "Unhealthy", _join(failing))
    if waiting:
        return Verdict(None, "WaitingForEngines", _join(waiting))
    where = _join([f"{pool} {address}" for pool, address in members])
    return Verdict("True", "Healthy", f"healthy in {len(asked)} engine(s): {where}")


def _join(items: list[str]) -> str:
    more = len(items) - _LISTED
    return "; ".join(items[:_LISTED]) + (f"; and {more} more" if more > 0 else "")


def condition(current: PodCondition | None, verdict: Verdict, *, now: str
              ) -> dict[str, str] | None:
    """The condition to write, or None when the pod already says it (or an unknown verdict
    meets a True condition, which stays)."""
    status = verdict.status
    if status is None:
        if current is not None and current.status == "True":
            return None
        status = "False"
    if current is not None and (current.status, current.reason or "", current.message or "") \
            == (status, verdict.reason, verdict.message):
        return None
    since = (current.last_transition_time if current is not None
             and current.status == status and current.last_transition_time else now)
    return {"type": LB_READY, "status": status, "reason": verdict.reason,
            "message": verdict.message, "lastTransitionTime": since}
