"""``podway lab compare``: the backend modes side by side, measured in one run.

For one Service (by default the seed example's ``default/lb-httpd``) the pool members each mode
gives a load balancer are read from the lab's API:

- ``nodeportlocal``: ``NodeIP:nplPort`` per pod, from the pods' ``nodeportlocal.antrea.io``
  annotations (the agents' work);
- ``clusterip``: ``PodIP:port`` per ready endpoint of the EndpointSlice (the client reaches pod
  CIDRs through the edge's static routes);
- ``nodeport-cluster`` / ``nodeport-local``: every node's ``NodeIP:nodePort`` of a temporary
  NodePort copy of the Service with ``externalTrafficPolicy`` Cluster / Local (removed after);
  for Local the members failing a health check (nodes without a pod drop the traffic) are left
  out, as a load balancer's monitor would;
- when the controller has published a VIP for the Service, through Podway's engines, one row
  each: ``l4-envoy`` (the Service itself, Envoy's TCP proxy), ``l4-kernel`` (a temporary copy
  of the Service on its own port, in the kernel engine's group: nftables DNAT) and
  ``l7-haproxy`` (a temporary Gateway of the HAProxy engine's group with an HTTPRoute to the
  Service: HTTP through HAProxy). Each of these rows also gives the engine's CPU per
  connection: the CPU time its processes (``podway engine`` and its Envoy or HAProxy) used
  during the rounds, divided by the row's requests (the kernel's own packet work is softirq
  time, in no process: the kernel engine's figure is its Python process's alone).

The client namespace then plays an L4 load balancer that only rewrites destinations: request
``i`` of each mode goes to member ``i mod n`` (round robin) over a new TCP connection, and the
modes are interleaved request by request in a shuffled order, so load on the machine hits them
alike. Each echo answer says which pod (and node) answered and which client address
the pod saw.
"""

from __future__ import annotations

import copy
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from podway.model.base import ENGINE_GROUP
from podway.model.npl import ANNOTATION
from podway.programs.lab.api import LabApi
from podway.programs.lab.network import LabError
from podway.programs.lab.plan import CLIENT_IP, ENGINE_GROUPS, LabPlan
from podway.programs.lab.traffic import Reply, Target, request
from podway.translate import annotations as ann

Obj = dict[str, Any]
MODES = ("nodeportlocal", "clusterip", "nodeport-cluster", "nodeport-local")
ENGINE_ROWS = ("l4-envoy", "l4-kernel", "l7-haproxy")
L4_KERNEL_PORT = 18211  # the l4-kernel copy's port on the VIP (the VIP is shared)
L7_HAPROXY_PORT = 18212  # the l7-haproxy Gateway's listener
GATEWAY_CLASS = "podway-lab-compare"


@dataclass(frozen=True, slots=True)
class Member:
    host: str
    port: int
    node: str  # the node the member address belongs to ("" for a pod IP)


@dataclass(slots=True)
class ModeResult:
    mode: str
    members: list[Member]
    left_out: list[Member] = field(default_factory=list)  # failed the health check
    replies: list[tuple[Member, Reply]] = field(default_factory=list)
    engine: str = ""  # the node id of the engine serving this row ("": none)
    cpu_s: float | None = None  # that engine's CPU seconds during the rounds

    def summary(self, *, pod_nodes: dict[str, str], empty_nodes: set[str]) -> Obj:
        ok = [(m, r) for m, r in self.replies if r.ok]
        pods = Counter(str(r.echo().get("pod", "?")) for _, r in ok)
        crossed = sum(1 for m, r in ok if m.node and r.echo().get("node") != m.node)
        real = sum(1 for _, r in ok
                   if str(r.echo().get("client", "")).rsplit(":", 1)[0] == CLIENT_IP
                   or CLIENT_IP in str(r.echo().get("headers", {}).get("x-forwarded-for", "")))
        seen = Counter(str(r.echo().get("client", "")).rsplit(":", 1)[0] for _, r in ok)
        micros = sorted(r.seconds * 1e6 for _, r in ok)
        to_empty = [r for m, r in self.replies if m.node in empty_nodes]
        total = len(self.replies)
        return {
            "mode": self.mode, "requests": total, "failed": total - len(ok),
            "members": [f"{m.host}:{m.port}" for m in self.members],
            "left_out_by_health_check": [f"{m.host}:{m.port}" for m in self.left_out],
            "share": {pod: round(n / total, 4) for pod, n in sorted(pods.items())},
            # Fractions of all requests, like "share" (a count here read as a share).
            "share_by_node": {node: round(n / total, 4) for node, n in sorted(Counter(
                pod_nodes.get(p, "?") for p in (str(r.echo().get("pod")) for _, r in ok))
                .items())},
            "client_ip_seen": round(real / len(ok), 4) if ok else 0.0,
            "source_seen": dict(seen.most_common(4)),
            "crossed_nodes": crossed,
            "p50_us": round(statistics.median(micros), 1) if micros else None,
            "p99_us": round(micros[min(len(micros) - 1, int(len(micros) * 0.99))], 1)
            if micros else None,
            "sent_to_node_without_pod": len(to_empty),
            "engine_cpu_per_connection_us": round(self.cpu_s * 1e6 / total, 1)
            if self.cpu_s is not None and total else None,
        }


def _rounds(results: list[ModeResult], requests: int) -> None:
    """Round ``i`` sends request ``i`` of every mode, in a shuffled order (seeded): each mode
    goes first, and follows each other mode, equally often — a mode that leaves work behind
    (Envoy closing its upstream connection) does not always slow the same next mode. Runs in
    the client namespace's thread: no thread hand-off inside the timing loop."""
    rng = random.Random(0)
    order = list(results)
    for i in range(requests):
        rng.shuffle(order)
        for result in order:
            member = result.members[i % len(result.members)]
            result.replies.append((member, request(Target(member.host, member.port, "/"))))


def _copy_service(service: Obj, policy: str) -> Obj:
    body = copy.deepcopy(service)
    meta = body["metadata"]
    for drop in ("uid", "resourceVersion", "creationTimestamp", "generation", "annotations"):
        meta.pop(drop, None)
    meta["name"] = f"{meta['name']}-np-{policy.lower()}"
    spec = body["spec"]
    for drop in ("clusterIP", "clusterIPs"):
        spec.pop(drop, None)
    spec["type"] = "NodePort"
    spec["externalTrafficPolicy"] = policy
    for port in spec.get("ports") or []:
        port.pop("nodePort", None)
    body.pop("status", None)
    return body


class Comparison:
    def __init__(self, *, api: LabApi, plan: LabPlan, client: ThreadPoolExecutor,
                 namespace: str, name: str, say: Callable[[str], None]) -> None:
        self.api, self.plan, self.client, self.say = api, plan, client, say
        self.namespace, self.name = namespace, name
        self.node_ips = {n.ip: n.name for n in plan.nodes}

    def _get(self, plural: str, name: str) -> Obj:
        kind = self.api.kind(plural)
        code, body = self.api.call("GET", kind.path(self.namespace, name))
        if code != 200:
            raise LabError(f"{plural} {self.namespace}/{name}: {body.get('message', code)}")
        return body

    def _ask(self, member: Member, timeout: float = 3.0) -> Reply:
        return self.client.submit(request, Target(member.host, member.port, "/"),
                                  timeout=timeout).result()

    def run(self, requests: int) -> Obj:
        service = self._get("services", self.name)
        port = (service.get("spec") or {}).get("ports", [{}])[0]
        pods = [p for p in self.api.list(self.api.kind("pods"), self.namespace)
                if all(((p["metadata"].get("labels") or {}).get(k) == v)
                       for k, v in (service["spec"].get("selector") or {}).items())
                and (p.get("status") or {}).get("podIP")]
        if not pods:
            raise LabError(f"Service {self.namespace}/{self.name} selects no running pod")
        pod_nodes = {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}
        empty = {n.name for n in self.plan.nodes} - set(pod_nodes.values())
        results = [ModeResult("nodeportlocal", self._npl(pods, port)),
                   ModeResult("clusterip", self._clusterip(port))]
        made: list[str] = []
        created: list[tuple[str, str, str]] = []  # (plural, namespace, name) to delete after
        try:
            for policy in ("Cluster", "Local"):
                copy_ = _copy_service(service, policy)
                self.say(f"temporary NodePort Service {copy_['metadata']['name']}")
                self.api.apply(copy_)
                made.append(copy_["metadata"]["name"])
                results.append(self._nodeport(copy_["metadata"]["name"], policy, pod_nodes))
            vip = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
            if vip and vip[0].get("ip"):
                results += self._engine_rows(service, str(vip[0]["ip"]), int(port["port"]),
                                             created)
            for result in results:
                if not result.members:
                    raise LabError(f"mode {result.mode}: no pool members (is the agent/"
                                   "controller up, are the pods ready?)")
            self.say(f"{requests} requests per mode, interleaved")
            before = {r.engine: engine_cpu(r.engine) for r in results if r.engine}
            self.client.submit(_rounds, results, requests).result()
            for r in results:
                start = before.get(r.engine)
                end = engine_cpu(r.engine) if r.engine and start is not None else None
                r.cpu_s = None if start is None or end is None else end - start
        finally:
            kind = self.api.kind("services")
            for name in made:
                self.api.call("DELETE", kind.path(self.namespace, name))
            for plural, namespace, name in reversed(created):
                self.api.call("DELETE", self.api.kind(plural).path(namespace, name))
        modes = [r.summary(pod_nodes=pod_nodes, empty_nodes=empty) for r in results]
        p50 = {m["mode"]: m["p50_us"] for m in modes}
        delta = band = None
        if p50.get("nodeportlocal") is not None and p50.get("clusterip") is not None:
            delta = round(p50["nodeportlocal"] - p50["clusterip"], 1)
            samples = {r.mode: [reply.seconds * 1e6 for _, reply in r.replies if reply.ok]
                       for r in results}
            low, high = median_difference_interval(samples["nodeportlocal"],
                                                   samples["clusterip"])
            band = [round(low, 1), round(high, 1)]
        return {"service": f"{self.namespace}/{self.name}", "requests_per_mode": requests,
                "pods": pod_nodes, "nodes_without_pod": sorted(empty), "modes": modes,
                "npl_minus_clusterip_p50_us": delta,
                "npl_minus_clusterip_p50_ci95_us": band}


    def _engine_rows(self, service: Obj, vip: str, port: int,
                     created: list[tuple[str, str, str]]) -> list[ModeResult]:
        """l4-envoy (the Service itself), l4-kernel and l7-haproxy (temporary objects in the
        engine groups of the lab's kernel and HAProxy engines), each once it answers."""
        edge = f"lab-{self.plan.name}-edge"
        rows = [ModeResult("l4-envoy", [Member(vip, port, "")], engine=edge)]
        name = self.name
        kernel = copy.deepcopy(service)
        meta = kernel["metadata"]
        for drop in ("uid", "resourceVersion", "creationTimestamp", "generation"):
            meta.pop(drop, None)
        meta["name"] = f"{name}-l4-kernel"
        meta["annotations"] = {ENGINE_GROUP: ENGINE_GROUPS["kernel"],
                               ann.ENGINE.name: "kernel"}
        spec = kernel["spec"]
        for drop in ("clusterIP", "clusterIPs"):
            spec.pop(drop, None)
        spec["ports"] = [{**{k: v for k, v in spec["ports"][0].items() if k != "nodePort"},
                          "port": L4_KERNEL_PORT}]
        kernel.pop("status", None)
        gateway_api = "gateway.networking.k8s.io/v1"
        objects: list[tuple[str, Obj]] = [
            ("services", kernel),
            ("gatewayclasses", {"apiVersion": gateway_api, "kind": "GatewayClass",
                                "metadata": {"name": GATEWAY_CLASS},
                                "spec": {"controllerName": "podway.io/gateway-controller"}}),
            ("gateways", {"apiVersion": gateway_api, "kind": "Gateway", "metadata": {
                "name": f"{name}-l7-haproxy", "namespace": self.namespace,
                "annotations": {ENGINE_GROUP: ENGINE_GROUPS["haproxy"]}},
                "spec": {"gatewayClassName": GATEWAY_CLASS, "listeners": [
                    {"name": "http", "protocol": "HTTP", "port": L7_HAPROXY_PORT}]}}),
            ("httproutes", {"apiVersion": gateway_api, "kind": "HTTPRoute", "metadata": {
                "name": f"{name}-l7-haproxy", "namespace": self.namespace},
                "spec": {"parentRefs": [{"name": f"{name}-l7-haproxy"}],
                         "rules": [{"backendRefs": [{"name": name, "port": port}]}]}})]
        for plural, body in objects:
            self.say(f"temporary {body['kind']} {body['metadata']['name']}")
            self.api.apply(body)
            created.append((plural, str(body["metadata"].get("namespace", "")),
                            str(body["metadata"]["name"])))
        for mode, at in (("l4-kernel", L4_KERNEL_PORT), ("l7-haproxy", L7_HAPROXY_PORT)):
            member = Member(vip, at, "")
            deadline = time.monotonic() + 30
            while not self._ask(member, 1.0).ok:
                if time.monotonic() > deadline:
                    raise LabError(f"{mode}: {vip}:{at} does not answer (is the lab's "
                                   f"{mode.split('-')[1]} engine up? logs/engine-"
                                   f"{mode.split('-')[1]}.log)")
                time.sleep(0.2)
            rows.append(ModeResult(mode, [member], engine=f"{edge}-{mode.split('-')[1]}"))
        return rows

    def _npl(self, pods: list[Obj], port: Obj) -> list[Member]:
        out = []
        for pod in pods:
            raw = (pod["metadata"].get("annotations") or {}).get(ANNOTATION)
            for entry in json.loads(raw) if raw else []:
                if entry.get("protocol", "tcp") == str(port.get("protocol", "TCP")).lower():
                    out.append(Member(entry["nodeIP"], int(entry["nodePort"]),
                                      self.node_ips.get(entry["nodeIP"], "")))
        return sorted(set(out), key=lambda m: (m.host, m.port))

    def _clusterip(self, port: Obj) -> list[Member]:
        kind = self.api.kind("endpointslices")
        out: list[Member] = []
        for sl in self.api.list(kind, self.namespace):
            if (sl["metadata"].get("labels") or {}).get("kubernetes.io/service-name") \
                    != self.name:
                continue
            number = next((p["port"] for p in sl.get("ports") or []
                           if p.get("name") == port.get("name")), None)
            for ep in sl.get("endpoints") or []:
                if number and (ep.get("conditions") or {}).get("ready"):
                    out.extend(Member(a, int(number), "") for a in ep["addresses"])
        return sorted(out, key=lambda m: m.host)

    def _nodeport(self, name: str, policy: str, pod_nodes: dict[str, str]) -> ModeResult:
        svc = self._get("services", name)
        node_port = int(svc["spec"]["ports"][0]["nodePort"])
        members = [Member(n.ip, node_port, n.name) for n in self.plan.nodes]
        with_pods = [m for m in members if m.node in set(pod_nodes.values())]
        # Wait (bounded) until kube-proxy's rules answer on the nodes that run pods.
        deadline = time.monotonic() + 15
        while not all(self._ask(m, 0.5).ok for m in with_pods):
            if time.monotonic() > deadline:
                raise LabError(f"NodePort {node_port} of {name} does not answer")
            time.sleep(0.1)
        result = ModeResult(f"nodeport-{policy.lower()}", members)
        if policy == "Local":  # the load balancer's health monitor
            result.members = [m for m in members if self._ask(m, 0.5).ok]
            result.left_out = [m for m in members if m not in result.members]
        return result


def engine_cpu(node_id: str, proc: str = "/proc") -> float | None:
    """CPU seconds used so far by the ``podway engine`` process started with ``--node-id
    node_id`` and every process below it (its Envoy or HAProxy), every thread counted; None
    when no such process runs."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    roots: list[int] = []
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"{proc}/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        # user + system, and that of its children already waited for (a reloaded HAProxy's
        # old workers)
        cpu[pid] = sum(int(x) for x in fields[11:15]) / tick
        if b"engine" in argv and _flag(argv, b"--node-id") == node_id.encode():
            roots.append(pid)
    if not roots:
        return None
    tree = set(roots)
    grew = True
    while grew:
        below = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(below)
        tree |= below
    return sum(_run_time(proc, p, cpu.get(p, 0.0)) for p in tree)


def _run_time(proc: str, pid: int, ticks_s: float) -> float:
    """Seconds ``pid``'s threads ran on a CPU: the scheduler's nanoseconds (``schedstat`` of
    each thread) where the kernel keeps them, else ``ticks_s`` (10 ms steps: too coarse for a
    few hundred connections)."""
    try:
        total = 0
        for task in os.listdir(f"{proc}/{pid}/task"):
            with open(f"{proc}/{pid}/task/{task}/schedstat", encoding="utf-8") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return ticks_s
    # A kernel without schedstats says 0; waited-for children are in the ticks only.
    return max(total / 1e9, ticks_s) if total else ticks_s


def _flag(argv: list[bytes], name: bytes) -> bytes | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + b"="):
            return arg[len(name) + 1:]
    return None


def median_difference_interval(a: list[float], b: list[float], *, rounds: int = 1000,
                               seed: int = 0) -> tuple[float, float]:
    """The 95 % interval of median(a) - median(b) by bootstrap (resampling each side with
    replacement, seeded): the noise band of a difference of two medians. An interval that
    holds 0 says the two modes' difference is within this run's noise."""
    rng = random.Random(seed)
    diffs = sorted(statistics.median(rng.choices(a, k=len(a)))
                   - statistics.median(rng.choices(b, k=len(b))) for _ in range(rounds))
    return diffs[int(rounds * 0.025)], diffs[min(rounds - 1, int(rounds * 0.975))]


def plot(report: Obj, path: str) -> None:
    """A PNG: per-pod share of requests per mode, and p50/p99 latency per mode."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise LabError("--plot needs matplotlib: pip install 'podway[lab]'") from None
    modes = report["modes"]
    pods = sorted(report["pods"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        xs = [j + i * width for j in range(len(pods))]
        left.bar(xs, [mode["share"].get(p, 0) * 100 for p in pods], width, label=mode["mode"])
    left.set_xticks([j + 0.4 - width / 2 for j in range(len(pods))])
    left.set_xticklabels([f"{p}\n({report['pods'][p]})" for p in pods], fontsize=7)
    left.set_ylabel("% of requests")
    left.set_title("share per pod")
    left.legend(fontsize=7)
    names = [m["mode"] for m in modes]
    right.bar([i - 0.2 for i in range(len(modes))], [m["p50_us"] or 0 for m in modes], 0.4,
              label="p50")
    right.bar([i + 0.2 for i in range(len(modes))], [m["p99_us"] or 0 for m in modes], 0.4,
              label="p99")
    right.set_xticks(range(len(modes)))
    right.set_xticklabels(names, fontsize=7)
    # p50 (~0.5 ms) and p99 (~10 ms) differ by 20x: a linear axis flattens every p50 bar.
    right.set_yscale("log")
    right.set_ylabel("µs per request (new connection, log scale)")
    right.set_title("latency")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
