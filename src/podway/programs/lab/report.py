"""``podway lab status`` as rich tables, read from the lab's API and state folder."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from podway.model.npl import ANNOTATION
from podway.programs.lab.api import LabApi
from podway.programs.lab.cluster import pod_ready
from podway.programs.lab.state import LabState, alive
from podway.translate import annotations as ann

Obj = dict[str, Any]


def npl_text(pod: Obj) -> str:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not raw:
        return ""
    try:
        entries = json.loads(raw)
    except ValueError:
        return "(invalid)"
    return ", ".join(f"{e.get('podPort')}/{e.get('protocol')}→{e.get('nodeIP')}:"
                     f"{e.get('nodePort')}" for e in entries if isinstance(e, dict))


def status_tables(api: LabApi, state: LabState) -> list[Table]:
    nodes = Table(title="Nodes")
    for col in ("node", "InternalIP", "pod CIDR"):
        nodes.add_column(col)
    for node in api.list(api.kind("nodes")):
        ip = next((a["address"] for a in node.get("status", {}).get("addresses", [])
                   if a.get("type") == "InternalIP"), "")
        nodes.add_row(node["metadata"]["name"], ip, node.get("spec", {}).get("podCIDR", ""))
    pods = Table(title="Pods")
    for col in ("pod", "node", "IP", "ready", "restarts", "NodePortLocal"):
        pods.add_column(col)
    for pod in api.list(api.kind("pods")):
        st = pod.get("status") or {}
        restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses") or [])
        pods.add_row(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}",
                     pod.get("spec", {}).get("nodeName", ""), st.get("podIP", ""),
                     "yes" if pod_ready(pod) else "no", str(restarts), npl_text(pod))
    services = Table(title="Services")
    for col in ("service", "type", "clusterIP", "ports", "VIP (status)", "mode"):
        services.add_column(col)
    for svc in api.list(api.kind("services")):
        spec, meta = svc.get("spec") or {}, svc["metadata"]
        ports = ", ".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                          + (f" node:{p['nodePort']}" if p.get("nodePort") else "")
                          for p in spec.get("ports") or [])
        vips = ", ".join(i.get("ip", "") for i in (svc.get("status") or {})
                         .get("loadBalancer", {}).get("ingress") or [])
        annotations = meta.get("annotations") or {}
        mode = annotations.get(ann.BACKEND_MODE.name, "")
        if annotations.get("nodeportlocal.antrea.io/enabled") == "true":
            mode = mode or "nodeportlocal"
        services.add_row(f"{meta.get('namespace')}/{meta['name']}", spec.get("type", ""),
                         spec.get("clusterIP", ""), ports, vips, mode)
    ingresses = Table(title="Ingresses")
    for col in ("ingress", "class", "hosts", "VIP (status)"):
        ingresses.add_column(col)
    for ing in api.list(api.kind("ingresses")):
        spec = ing.get("spec") or {}
        hosts = ", ".join(r.get("host", "*") for r in spec.get("rules") or [])
        vips = ", ".join(i.get("ip", "") for i in (ing.get("status") or {})
                         .get("loadBalancer", {}).get("ingress") or [])
        ingresses.add_row(f"{ing['metadata'].get('namespace')}/{ing['metadata']['name']}",
                          spec.get("ingressClassName", ""), hosts, vips)
    procs = Table(title="Lab processes")
    for col in ("process", "pid", "running"):
        procs.add_column(col)
    daemon = state.daemon()
    procs.add_row("daemon", str(daemon or ""), "yes" if daemon else "no")
    for what, pid in sorted(state.recorded().items()):
        procs.add_row(what, str(pid), "yes" if alive(pid) else "no")
    return [nodes, pods, services, ingresses, *engine_tables(state), procs]


def engine_tables(state: LabState) -> list[Table]:
    """Envoy's view, from its admin socket: listeners (virtual services) and pool members
    with their health. Empty when the engine is not running."""
    import asyncio

    from podway.envoy.engine.admin import request

    admin = state.engine_dir / "admin.sock"
    if not admin.exists():
        return []
    try:
        _, listeners = asyncio.run(request(f"unix:{admin}", "/listeners?format=json"))
        _, clusters = asyncio.run(request(f"unix:{admin}", "/clusters?format=json"))
        listening = json.loads(listeners).get("listener_statuses") or []
        pools = json.loads(clusters).get("cluster_statuses") or []
    except (OSError, TimeoutError, ValueError):
        return []
    services = Table(title="Engine: virtual services")
    for col in ("listener", "address"):
        services.add_column(col)
    for item in listening:
        where = (item.get("local_address") or {}).get("socket_address") or {}
        services.add_row(item.get("name", ""),
                         f"{where.get('address', '')}:{where.get('port_value', '')}")
    members = Table(title="Engine: pools")
    for col in ("pool", "member", "health", "requests"):
        members.add_column(col)
    for pool in pools:
        if not str(pool.get("name", "")).startswith("pool/"):
            continue
        for host in pool.get("host_statuses") or []:
            where = (host.get("address") or {}).get("socket_address") or {}
            health = host.get("health_status") or {}
            flags = [k for k, v in health.items() if v is True]
            stats = {s.get("name"): s.get("value", "0") for s in host.get("stats") or []}
            members.add_row(pool["name"], f"{where.get('address')}:{where.get('port_value')}",
                            ", ".join(flags) or str(health.get("eds_health_status", "")),
                            str(stats.get("rq_total") or stats.get("cx_total") or 0))
    return [services, members]


def compare_table(report: Obj) -> Table:
    table = Table(title=f"{report['service']}: {report['requests_per_mode']} requests per mode "
                        f"(pods: {len(report['pods'])}, nodes without a pod: "
                        f"{', '.join(report['nodes_without_pod']) or 'none'})")
    for col in ("mode", "members", "share per pod", "client IP seen", "2nd hop",
                "p50 µs", "p99 µs", "to pod-less node", "failed"):
        table.add_column(col)
    for mode in report["modes"]:
        share = " ".join(f"{v * 100:.0f}%" for v in mode["share"].values())
        left = len(mode["left_out_by_health_check"])
        table.add_row(mode["mode"], f"{len(mode['members'])}"
                      + (f" (-{left} by health check)" if left else ""), share,
                      f"{mode['client_ip_seen'] * 100:.0f}%", str(mode["crossed_nodes"]),
                      str(mode["p50_us"]), str(mode["p99_us"]),
                      str(mode["sent_to_node_without_pod"]), str(mode["failed"]))
    delta = report.get("npl_minus_clusterip_p50_us")
    if delta is not None:
        table.caption = f"NodePortLocal p50 minus ClusterIP p50: {delta} µs per new connection"
    return table
