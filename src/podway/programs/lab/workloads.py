"""The workload controllers as Kubernetes runs them, as pure decisions over API objects:
Deployments own ReplicaSets (one per pod template, named ``<deployment>-<pod-template-hash>``),
ReplicaSets own pods, DaemonSets own one pod per fitting node.

Deployment rollouts (the upstream controller's rules, learnt from its documentation):

- ``RollingUpdate``: ``maxSurge`` (default 25 %, rounded up) and ``maxUnavailable`` (default
  25 %, rounded down; both 0 means 1). The new ReplicaSet grows while the sum of every
  ReplicaSet's ``spec.replicas`` stays within ``replicas + maxSurge``; old ReplicaSets shrink
  only as far as keeps ``replicas - maxUnavailable`` pods available (unhealthy old pods go
  first). Each step waits for pods to become Ready, so a rollout is as slow as its probes.
- ``Recreate``: old ReplicaSets go to 0, and the new one grows only once no old pod is left
  (terminating pods included).
- A pod that is terminating counts for nothing (it is draining, never available), exactly as
  the upstream controllers count it.
- Status: ``observedGeneration``, ``replicas``/``updatedReplicas``/``readyReplicas``/
  ``availableReplicas``/``unavailableReplicas`` and the conditions ``Available``
  (``MinimumReplicasAvailable`` once ``replicas - maxUnavailable`` pods are available) and
  ``Progressing`` (``NewReplicaSetCreated``, ``ReplicaSetUpdated``, ``NewReplicaSetAvailable``);
  what ``kubectl rollout status`` and ``kubectl wait --for=condition=Available`` read.
  Not modelled: ``minReadySeconds``, ``progressDeadlineSeconds`` (no
  ``ProgressDeadlineExceeded``), ``paused``, proportional scaling of several old ReplicaSets.

DaemonSets: one pod per node whose labels match the template's ``nodeSelector`` (``nodeName``
set directly), ``RollingUpdate`` with ``maxUnavailable`` (default 1) or ``OnDelete``.
"""

from __future__ import annotations

import copy
import math
import secrets
from datetime import UTC, datetime
from typing import Any

from podway.programs.lab.cluster import (
    key,
    matches,
    meta,
    pod_ready,
    template_hash,
    terminated,
    terminating,
)

Obj = dict[str, Any]
HASH = "pod-template-hash"
DS_HASH = "controller-revision-hash"
REVISION = "deployment.kubernetes.io/revision"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owned(obj: Obj, owner: Obj) -> bool:
    uid = meta(owner).get("uid")
    return any(ref.get("uid") == uid and ref.get("controller", True)
               for ref in meta(obj).get("ownerReferences") or [])


def live_pods(owner: Obj, pods: list[Obj]) -> list[Obj]:
    """The owner's pods that count: neither finished nor terminating."""
    return [p for p in pods if owned(p, owner) and not terminated(p) and not terminating(p)]


def _owner_ref(owner: Obj, kind: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": kind, "name": meta(owner)["name"],
            "uid": meta(owner).get("uid"), "controller": True, "blockOwnerDeletion": True}


def _replicas(obj: Obj) -> int:
    return int((obj.get("spec") or {}).get("replicas", 1))


def scaled(value: Any, replicas: int, *, up: bool, default: str = "25%") -> int:
    """``maxSurge``/``maxUnavailable``: an int, or a percentage of ``replicas`` rounded up
    (surge) or down (unavailable)."""
    raw = default if value is None else value
    if isinstance(raw, str) and raw.endswith("%"):
        amount = replicas * int(raw[:-1]) / 100
        return math.ceil(amount) if up else math.floor(amount)
    return int(raw)


def limits(deploy: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) of a Deployment (Recreate: 0, 0: all must be available)."""
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") == "Recreate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    replicas = _replicas(deploy)
    surge = scaled(rolling.get("maxSurge"), replicas, up=True)
    unavailable = scaled(rolling.get("maxUnavailable"), replicas, up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


# ---- ReplicaSets ----------------------------------------------------------------------------
def new_replicaset(deploy: Obj, template_id: str, revision: int) -> Obj:
    spec = deploy.get("spec") or {}
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), HASH: template_id}
    selector = copy.deepcopy(spec.get("selector") or {})
    selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH: template_id}
    name, ns = meta(deploy)["name"], meta(deploy).get("namespace", "default")
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{name}-{template_id}", "namespace": ns,
                         "labels": dict(tmeta["labels"]),
                         "annotations": {REVISION: str(revision)},
                         "ownerReferences": [_owner_ref(deploy, "Deployment")]},
            "spec": {"replicas": 0, "selector": selector, "template": template}}


def _spec(obj: Obj) -> Obj:
    spec: Obj = obj.setdefault("spec", {})
    return spec


def _revision(rs: Obj) -> int:
    value = str((meta(rs).get("annotations") or {}).get(REVISION, "0"))
    return int(value) if value.isdigit() else 0


def _available(rs: Obj, pods: list[Obj]) -> int:
    return sum(1 for p in live_pods(rs, pods) if pod_ready(p))


def rollout(deploy: Obj, sets: list[Obj], pods: list[Obj]) -> list[Obj]:
    """The ReplicaSets of ``deploy`` to write (created, or with ``spec.replicas`` changed) for
    one step of its rollout; ``sets`` are the ReplicaSets it owns."""
    replicas = _replicas(deploy)
    current = template_hash(deploy)
    sets = [copy.deepcopy(rs) for rs in sets]
    before = {key(rs): (_replicas(rs), _revision(rs)) for rs in sets}
    new = next((rs for rs in sets if (meta(rs).get("labels") or {}).get(HASH) == current), None)
    top = max((_revision(rs) for rs in sets), default=0)
    if new is None:
        new = new_replicaset(deploy, current, top + 1)
        sets.append(new)
    elif any(_revision(rs) >= _revision(new) for rs in sets if rs is not new):
        # Back to an older template (rollout undo): its ReplicaSet becomes the newest revision.
        new.setdefault("metadata", {}).setdefault("annotations", {})[REVISION] = str(top + 1)
    old = sorted((rs for rs in sets if rs is not new), key=_revision)
    strategy = ((deploy.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
    if strategy == "Recreate":
        for rs in old:
            _spec(rs)["replicas"] = 0
        left = any(owned(p, rs) and not terminated(p) for rs in old for p in pods)
        _spec(new)["replicas"] = 0 if left else replicas
    elif not any(_replicas(rs) for rs in old):
        _spec(new)["replicas"] = replicas
    else:
        surge, unavailable = limits(deploy)
        total = sum(_replicas(rs) for rs in sets)
        if _replicas(new) > replicas:
            _spec(new)["replicas"] = replicas
        elif total < replicas + surge:
            _spec(new)["replicas"] = min(replicas, _replicas(new) + replicas + surge - total)
        total = sum(_replicas(rs) for rs in sets)
        min_available = replicas - unavailable
        new_unavailable = max(0, _replicas(new) - _available(new, pods))
        budget = total - min_available - new_unavailable
        if budget > 0:
            # Unhealthy old pods first (they serve nothing), oldest set first ...
            for rs in old:
                cut = max(0, min(_replicas(rs) - _available(rs, pods), budget))
                _spec(rs)["replicas"] = _replicas(rs) - cut
                budget -= cut
            # ... then healthy ones, as far as keeps min_available pods available.
            budget = sum(_available(rs, pods) for rs in sets) - min_available
            for rs in old:
                cut = max(0, min(_replicas(rs), budget))
                _spec(rs)["replicas"] = _replicas(rs) - cut
                budget -= cut
    return [rs for rs in sets if before.get(key(rs)) != (_replicas(rs), _revision(rs))]


def deployment_revision(deploy: Obj, sets: list[Obj]) -> str | None:
    """The revision of the ReplicaSet of the current template (the Deployment carries it in
    ``deployment.kubernetes.io/revision``: ``kubectl rollout history|undo`` read it)."""
    current = template_hash(deploy)
    new = next((rs for rs in sets if (meta(rs).get("labels") or {}).get(HASH) == current), None)
    return None if new is None else str(_revision(new))


def stale_replicasets(deploy: Obj, sets: list[Obj], pods: list[Obj]) -> list[tuple[str, str]]:
    """Old ReplicaSets with no replica and no pod beyond ``revisionHistoryLimit`` (default
    10), oldest first: the ones to delete."""
    limit = int((deploy.get("spec") or {}).get("revisionHistoryLimit", 10))
    current = template_hash(deploy)
    idle = sorted((rs for rs in sets if (meta(rs).get("labels") or {}).get(HASH) != current
                   and _replicas(rs) == 0 and not any(owned(p, rs) for p in pods)),
                  key=_revision)
    return [key(rs) for rs in idle[:max(0, len(idle) - limit)]]


def _new_pod(owner: Obj, kind: str, template: Obj, *, node: str | None = None,
             extra_labels: dict[str, str] | None = None) -> Obj:
    tmeta = template.get("metadata") or {}
    name, ns = meta(owner)["name"], meta(owner).get("namespace", "default")
    spec = copy.deepcopy(template.get("spec") or {})
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{name}-{secrets.token_hex(3)[:5]}", "namespace": ns,
            "labels": {**(tmeta.get("labels") or {}), **(extra_labels or {})},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [_owner_ref(owner, kind)]},
        "spec": spec, "status": {"phase": "Pending"}}


def _age(pod: Obj) -> tuple[str, int]:
    return (str(meta(pod).get("creationTimestamp", "")),
            int(str(meta(pod).get("uid", "0")).split("-")[0], 16))


def replicaset_pods(rs: Obj, pods: list[Obj]) -> tuple[list[Obj], list[tuple[str, str]]]:
    """Pods to create and pods to terminate so ``rs`` has ``spec.replicas`` live pods. The
    ones to go: unscheduled first, then not ready, then the newest."""
    mine = live_pods(rs, pods)
    replicas = _replicas(rs)
    template = (rs.get("spec") or {}).get("template") or {}
    create = [_new_pod(rs, "ReplicaSet", template) for _ in range(max(0, replicas - len(mine)))]
    ranked = sorted(mine, key=_age, reverse=True)  # newest first, then (stable) by state
    ranked = sorted(ranked, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")),
                                           pod_ready(p)))
    delete = [key(p) for p in ranked[:max(0, len(mine) - replicas)]]
    return create, delete


def replicaset_status(rs: Obj, pods: list[Obj], old: Obj | None = None) -> Obj:
    mine = live_pods(rs, pods)
    ready = sum(1 for p in mine if pod_ready(p))
    return {"observedGeneration": meta(rs).get("generation", 1), "replicas": len(mine),
            "fullyLabeledReplicas": len(mine), "readyReplicas": ready,
            "availableReplicas": ready}


def _condition(old: Obj | None, kind: str, status: str, reason: str, message: str) -> Obj:
    before: Obj = next((c for c in ((old or {}).get("conditions") or [])
                        if c.get("type") == kind), {})
    now = _now()
    same = before.get("status") == status
    return {"type": kind, "status": status,
            "lastUpdateTime": before.get("lastUpdateTime", now)
            if same and before.get("reason") == reason else now,
            "lastTransitionTime": before.get("lastTransitionTime", now) if same else now,
            "reason": reason, "message": message}


def deployment_status(deploy: Obj, sets: list[Obj], pods: list[Obj],
                      old: Obj | None = None) -> Obj:
    """The Deployment's status from its ReplicaSets' pods (``old``: the stored status, whose
    condition times are kept while nothing changes)."""
    replicas = _replicas(deploy)
    current = template_hash(deploy)
    new = next((rs for rs in sets if (meta(rs).get("labels") or {}).get(HASH) == current), None)
    every = [p for rs in sets for p in live_pods(rs, pods)]
    updated = live_pods(new, pods) if new is not None else []
    available = sum(1 for p in every if pod_ready(p))
    _, unavailable = limits(deploy)
    status: Obj = {
        "observedGeneration": meta(deploy).get("generation", 1), "replicas": len(every),
        "updatedReplicas": len(updated), "readyReplicas": available,
        "availableReplicas": available,
        "unavailableReplicas": max(0, replicas - available)}
    if available >= replicas - unavailable:
        avail = _condition(old, "Available", "True", "MinimumReplicasAvailable",
                           "Deployment has minimum availability.")
    else:
        avail = _condition(old, "Available", "False", "MinimumReplicasUnavailable",
                           "Deployment does not have minimum availability.")
    name = meta(new)["name"] if new is not None else meta(deploy)["name"]
    done = len(updated) == replicas == len(every) and \
        sum(1 for p in updated if pod_ready(p)) == replicas
    if done:
        prog = _condition(old, "Progressing", "True", "NewReplicaSetAvailable",
                          f'ReplicaSet "{name}" has successfully progressed.')
    elif new is None:
        prog = _condition(old, "Progressing", "True", "NewReplicaSetCreated",
                          f'Created new replica set "{name}"')
    else:
        prog = _condition(old, "Progressing", "True", "ReplicaSetUpdated",
                          f'ReplicaSet "{name}" is progressing.')
    status["conditions"] = [avail, prog]
    return status


# ---- DaemonSets -----------------------------------------------------------------------------
def daemonset_nodes(ds: Obj, nodes: list[Obj]) -> list[str]:
    template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = template.get("nodeSelector") or {}
    return [str(meta(n)["name"]) for n in nodes
            if matches(selector, meta(n).get("labels") or {})
            and not (n.get("spec") or {}).get("unschedulable")]


def daemonset_pods(ds: Obj, nodes: list[Obj],
                   pods: list[Obj]) -> tuple[list[Obj], list[tuple[str, str]]]:
    """Pods to create (bound to their node) and to terminate: one current pod per fitting
    node; a rolling update replaces at most ``maxUnavailable`` (default 1) at a time."""
    spec = ds.get("spec") or {}
    template = spec.get("template") or {}
    current = template_hash(ds)
    fitting = daemonset_nodes(ds, nodes)
    mine = live_pods(ds, pods)
    by_node: dict[str, list[Obj]] = {}
    for p in mine:
        by_node.setdefault(str((p.get("spec") or {}).get("nodeName", "")), []).append(p)
    create: list[Obj] = []
    delete: list[tuple[str, str]] = []
    labels = {DS_HASH: current,
              "pod-template-generation": str(meta(ds).get("generation", 1))}
    for node in fitting:
        if not by_node.get(node):
            create.append(_new_pod(ds, "DaemonSet", template, node=node, extra_labels=labels))
    for node, found in by_node.items():
        if node not in fitting:
            delete.extend(key(p) for p in found)
        else:
            delete.extend(key(p) for p in sorted(found, key=_age)[1:])  # one per node
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        budget = scaled((strategy.get("rollingUpdate") or {}).get("maxUnavailable"),
                        len(fitting), up=False, default="1") or 1
        budget -= sum(1 for n in fitting if not any(pod_ready(p) for p in by_node.get(n, [])))
        stale = [p for n in fitting for p in by_node.get(n, [])[:1]
                 if (meta(p).get("labels") or {}).get(DS_HASH) != current]
        for p in sorted(stale, key=pod_ready):  # not-ready old pods go first, at no cost
            if not pod_ready(p):
                delete.append(key(p))
            elif budget > 0:
                delete.append(key(p))
                budget -= 1
    return create, delete


def daemonset_status(ds: Obj, nodes: list[Obj], pods: list[Obj]) -> Obj:
    fitting = daemonset_nodes(ds, nodes)
    current = template_hash(ds)
    mine = live_pods(ds, pods)
    placed = {str((p.get("spec") or {}).get("nodeName")) for p in mine}
    ready = [p for p in mine if pod_ready(p)]
    return {"observedGeneration": meta(ds).get("generation", 1),
            "desiredNumberScheduled": len(fitting),
            "currentNumberScheduled": len(placed & set(fitting)),
            "numberMisscheduled": len(placed - set(fitting)),
            "numberReady": len(ready), "numberAvailable": len(ready),
            "numberUnavailable": max(0, len(fitting) - len(ready)),
            "updatedNumberScheduled": sum(1 for p in mine if (meta(p).get("labels") or {})
                                          .get(DS_HASH) == current)}
