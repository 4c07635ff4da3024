"""The traffic path as a graph: client → VIP:port/listener → virtual hosts → routes → pools →
members → node / pod, drawn as Mermaid (a flowchart, as seed 004 exports) or Graphviz DOT.

``graph(ir, ...)`` is pure and deterministic (the same IR gives the same text, node ids
included), so diagrams diff well and tests compare them. It marks what an operator looks for:
where TLS is terminated or passed through, the backend mode on each member edge (ClusterIP
straight to the pod, NodePortLocal DNAT on the pod's node, NodePort's extra kube-proxy hop),
and members that take no new requests (not ready, draining, or failing the engine's checks)
drawn as unhealthy. Each listener says which engine serves it: the kernel engine (nftables DNAT,
``Listener.engine`` KERNEL: ``podway.io/engine: kernel``) or the proxy ``engine`` names (Envoy
or HAProxy); the kernel's client edge says DNAT, a proxy's the protocol it speaks.
``host`` keeps only the virtual hosts and the TLS routes whose SNI names
cover it (TCP and UDP routes know no host: they are left out).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from podway.ir import (
    IR,
    DirectResponse,
    EngineKind,
    Forward,
    L4Route,
    Listener,
    Member,
    MemberState,
    Pool,
    Redirect,
    Route,
    WeightedPool,
    WildcardMode,
)
from podway.ir import ListenerProtocol as Protocol
from podway.ir.evaluate import describe_match
from podway.ir.hosts import covers, host_name
from podway.readers.explain.pools import Health
from podway.readers.explain.words import backend_mode

FORMATS = ("mermaid", "dot")
ENGINES = {"envoy": "Envoy", "haproxy": "HAProxy", "kernel": "the kernel engine"}


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    label: str  # lines joined with "\n"
    kind: str  # client, listener, vhost, route, answer, pool, member, backend
    unhealthy: bool = False


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    label: str = ""


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


class _Builder:
    def __init__(self, ir: IR, mode: str, health: Health | None) -> None:
        self.ir, self.mode, self.health = ir, mode, health
        self.nodes: dict[str, Node] = {}
        self.edges: list[Edge] = []
        self.ids: dict[tuple[str, str], str] = {}

    def node(self, kind: str, key: str, label: str, *, unhealthy: bool = False) -> str:
        ident = self.ids.get((kind, key))
        if ident is None:
            ident = f"{kind}{len(self.ids)}"
            self.ids[(kind, key)] = ident
            self.nodes[ident] = Node(ident, label, kind, unhealthy)
        return ident

    def edge(self, source: str, target: str, label: str = "") -> None:
        edge = Edge(source, target, label)
        if edge not in self.edges:
            self.edges.append(edge)


def graph(ir: IR, *, host: str | None = None, mode: str = "",
          health: Health | None = None, engine: str = "envoy") -> Graph:
    """The traffic path of ``ir`` (only what serves ``host`` when given); ``engine``: the
    engine serving the listeners the IR does not give the kernel (envoy, haproxy)."""
    b = _Builder(ir, mode, health)
    client = b.node("client", "", "Client")
    for listener in ir.listeners:
        vhosts = [v for v in listener.virtual_hosts if _serves(v.hostname, host, v.wildcard)]
        l4 = [r for r in listener.l4_routes if host is None
              or any(_serves(h, host, WildcardMode.SUFFIX) for h in r.hostnames)]
        if host is not None and not vhosts and not l4:
            continue
        kernel = listener.engine is EngineKind.KERNEL
        ls = b.node("listener", listener.name, _listener_label(listener, engine))
        b.edge(client, ls, f"{listener.protocol} · DNAT" if kernel else str(listener.protocol))
        for vhost in vhosts:
            vh = b.node("vhost", f"{listener.name}|{vhost.name}", f"host {vhost.hostname}")
            b.edge(ls, vh)
            for route in vhost.routes:
                rt = b.node("route", f"{listener.name}|{route.name}",
                            f"{describe_match(route.match)}\n{route.origin}")
                b.edge(vh, rt)
                _action(b, rt, route)
        for l4_route in l4:
            rt = b.node("route", f"{listener.name}|{l4_route.name}", _l4_label(l4_route))
            b.edge(ls, rt, "SNI" if l4_route.hostnames else "")
            _shares(b, rt, l4_route.backends)
    return Graph(tuple(b.nodes.values()), tuple(b.edges))


def _serves(hostname: str, host: str | None, wildcard: WildcardMode) -> bool:
    """``host`` as a user names it: any case, a trailing dot dropped (``host_name``)."""
    if host is None:
        return True
    name = host_name(host)
    return hostname == name or (hostname != "*" and covers(hostname, name, wildcard))


def _listener_label(listener: Listener, engine: str) -> str:
    address = f"[{listener.address}]" if ":" in listener.address else listener.address
    lines = [f"{address}:{listener.port} {listener.protocol}", listener.name]
    if listener.engine is EngineKind.KERNEL:
        lines.append("kernel engine: nftables DNAT (no proxy)")
    else:
        lines.append(f"served by {ENGINES.get(engine, engine)}")
    if listener.protocol is Protocol.HTTPS:
        certs = ", ".join(c.name.rsplit("/", 1)[-1] for c in listener.certificates[:3])
        more = f" +{len(listener.certificates) - 3}" if len(listener.certificates) > 3 else ""
        lines.append(f"TLS terminated here ({certs or 'no certificate'}{more})")
    elif listener.protocol is Protocol.TLS:
        lines.append("TLS passthrough (not terminated)")
    return "\n".join(lines)


def _l4_label(route: L4Route) -> str:
    names = ", ".join(route.hostnames[:3]) if route.hostnames else "any connection"
    return f"{names}\n{route.origin}"


def _action(b: _Builder, source: str, route: Route) -> None:
    action = route.action
    if isinstance(action, DirectResponse):
        b.edge(source, b.node("answer", str(action.status), f"answers {action.status}"))
    elif isinstance(action, Redirect):
        b.edge(source, b.node("answer", f"redirect {action.status_code}",
                              f"redirect {action.status_code}"))
    elif isinstance(action, Forward):
        _shares(b, source, action.backends)


def _shares(b: _Builder, source: str, shares: tuple[WeightedPool, ...]) -> None:
    used = [s for s in shares if s.weight > 0]
    total = sum(s.weight for s in used) or 1
    for share in used:
        percent = f"{100 * share.weight / total:.0f} %" if len(used) > 1 else ""
        if share.pool is None:
            b.edge(source, b.node("answer", f"{share.status} invalid",
                                  f"answers {share.status}\n(invalid backend)"), percent)
            continue
        pool = b.ir.pools.get(share.pool)
        if pool is None:
            b.edge(source, b.node("answer", f"missing {share.pool}",
                                  f"{share.pool}\nnot configured: 503", unhealthy=True),
                   percent)
            continue
        b.edge(source, _pool(b, pool), percent)


def _pool(b: _Builder, pool: Pool) -> str:
    mode, health = b.mode, b.health
    how = backend_mode(pool, mode)
    ready = sum(_takes(pool, m, health) for m in pool.members)
    label = f"pool {pool.name}\n{how or 'mode unknown'}\n{ready}/{len(pool.members)} members"
    ident = b.node("pool", pool.name, label, unhealthy=ready == 0)
    short = _short_mode(pool, mode)
    for m in pool.members:
        takes = _takes(pool, m, health)
        hostport = _key(m)
        state = "ready" if takes else _why_not(pool, m, health)
        member = b.node("member", f"{pool.name}|{hostport}", f"{hostport}\n{state}",
                        unhealthy=not takes)
        b.edge(ident, member, short)
        where = _where(m, short)
        if where:
            b.edge(member, b.node("backend", where, where), _hop(short))
    return ident


def _short_mode(pool: Pool, mode: str) -> str:
    if any(m.origin is not None and m.origin.kind == "Node" for m in pool.members):
        return "NodePort"
    return {"clusterip": "ClusterIP", "nodeportlocal": "NPL", "nodeport": "NodePort"}.get(
        mode, mode)


def _where(m: Member, short: str) -> str:
    pod = f"pod {m.origin.namespace}/{m.origin.name}" if (
        m.origin is not None and m.origin.kind == "Pod") else ""
    node = f"node {m.node}" if m.node else ""
    if short == "NodePort":
        return f"{node or 'a node'}\nkube-proxy → any ready pod"
    return "\n".join(x for x in (pod, node) if x)


def _hop(short: str) -> str:
    return {"NPL": "DNAT on the node", "NodePort": "extra hop", "ClusterIP": "direct"}.get(
        short, "")


def _takes(pool: Pool, m: Member, health: Health | None) -> bool:
    if m.state is not MemberState.READY:
        return False
    live = (health or {}).get(pool.name, {}).get(_key(m))
    return live is None or live == "healthy"


def _why_not(pool: Pool, m: Member, health: Health | None) -> str:
    if m.state is not MemberState.READY:
        return str(m.state).replace("_", " ")
    live = (health or {}).get(pool.name, {}).get(_key(m), "")
    return f"unhealthy: {live.strip('/')}"


def _key(m: Member) -> str:
    return f"[{m.address}]:{m.port}" if ":" in m.address else f"{m.address}:{m.port}"


def mermaid(g: Graph) -> str:
    """A Mermaid flowchart (left to right); unhealthy nodes in class ``unhealthy``."""
    lines = ["flowchart LR"]
    for n in g.nodes:
        text = n.label.replace('"', "#quot;").replace("\n", "<br/>")
        shape = ('(["', '"])') if n.kind == "client" else ('{{"', '"}}') if n.kind == "pool" \
            else ('["', '"]')
        lines.append(f"    {n.id}{shape[0]}{text}{shape[1]}")
    for e in g.edges:
        label = e.label.replace('"', "#quot;").replace("|", "/")
        lines.append(f"    {e.source} -->|{label}| {e.target}" if label
                     else f"    {e.source} --> {e.target}")
    lines.append("    classDef unhealthy fill:#fdd,stroke:#c00,color:#600")
    lines.append("    classDef tls stroke:#06c,stroke-width:2px")
    bad = [n.id for n in g.nodes if n.unhealthy]
    if bad:
        lines.append(f"    class {','.join(bad)} unhealthy")
    tls = [n.id for n in g.nodes if n.kind == "listener" and "TLS" in n.label]
    if tls:
        lines.append(f"    class {','.join(tls)} tls")
    return "\n".join(lines) + "\n"


def dot(g: Graph) -> str:
    """Graphviz DOT of the same graph (``dot -Tsvg`` / ``-Tpng`` renders it)."""
    shapes = {"client": "oval", "pool": "hexagon", "answer": "note", "backend": "box3d"}
    lines = ["digraph podway {", "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fillcolor="#f4f6fb", '
             'fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for n in g.nodes:
        attrs = [f"label={_q(n.label)}"]
        if n.kind in shapes:
            attrs.append(f"shape={shapes[n.kind]}")
        if n.unhealthy:
            attrs.append('fillcolor="#ffdddd", color="#cc0000"')
        elif n.kind == "listener" and "TLS" in n.label:
            attrs.append('color="#0066cc", penwidth=2')
        lines.append(f"  {n.id} [{', '.join(attrs)}];")
    for e in g.edges:
        label = f" [label={_q(e.label)}]" if e.label else ""
        lines.append(f"  {e.source} -> {e.target}{label};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    """A DOT string: JSON's escaping is a subset DOT reads; newlines become centred breaks."""
    return json.dumps(text, ensure_ascii=False)
