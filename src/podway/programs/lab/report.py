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


Rows = list[dict[str, str]]  # one section of ``podway lab status``: column → cell, per row


#: The columns of each section, also when it has no rows.
COLUMNS = {
    "Nodes": ("node", "InternalIP", "pod CIDR"),
    "Pods": ("pod", "node", "IP", "ready", "restarts", "NodePortLocal"),
    "Services": ("service", "type", "clusterIP", "ports", "VIP (status)", "mode"),
    "Ingresses": ("ingress", "class", "hosts", "VIP (status)"),
    "Engine: virtual services": ("listener", "address"),
    "Engine: pools": ("pool", "member", "health", "requests"),
    "Lab processes": ("process", "pid", "running"),
}


def status_tables(api: LabApi, state: LabState) -> list[Table]:
    """``podway lab status`` as tables: one per section of ``status_sections``."""
    return [table_of(title, rows) for title, rows in status_sections(api, state).items()]


def table_of(title: str, rows: Rows) -> Table:
    table = Table(title=title)
    for column in COLUMNS[title]:
        table.add_column(column)
    for row in rows:
        table.add_row(*row.values())
    return table


def status_sections(api: LabApi, state: LabState) -> dict[str, Rows]:
    """Nodes, pods with IPs and NodePortLocal mappings, Services and Ingresses with their VIPs,
    Envoy's view (when it runs) and the lab's processes: the data of ``podway lab status``
    (``-o json`` prints it as it is)."""
    sections: dict[str, Rows] = {
        "Nodes": [_node_row(node) for node in api.list(api.kind("nodes"))],
        "Pods": [_pod_row(pod) for pod in api.list(api.kind("pods"))],
        "Services": [_service_row(svc) for svc in api.list(api.kind("services"))],
        "Ingresses": [_ingress_row(ing) for ing in api.list(api.kind("ingresses"))],
        **engine_sections(state),
    }
    daemon = state.daemon()
    procs = [{"process": "daemon", "pid": str(daemon or ""), "running": "yes" if daemon else "no"}]
    procs += [{"process": what, "pid": str(pid), "running": "yes" if alive(pid) else "no"}
              for what, pid in sorted(state.recorded().items())]
    sections["Lab processes"] = procs
    return sections


def _node_row(node: Obj) -> dict[str, str]:
    ip = next((a["address"] for a in node.get("status", {}).get("addresses", [])
               if a.get("type") == "InternalIP"), "")
    return {"node": node["metadata"]["name"], "InternalIP": ip,
            "pod CIDR": node.get("spec", {}).get("podCIDR", "")}


def _pod_row(pod: Obj) -> dict[str, str]:
    st = pod.get("status") or {}
    restarts = sum(c.get("restartCount", 0) for c in st.get("containerStatuses") or [])
    return {"pod": f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}",
            "node": pod.get("spec", {}).get("nodeName", ""), "IP": st.get("podIP", ""),
            "ready": "yes" if pod_ready(pod) else "no", "restarts": str(restarts),
            "NodePortLocal": npl_text(pod)}


def _vips(obj: Obj) -> str:
    return ", ".join(i.get("ip", "") for i in (obj.get("status") or {})
                     .get("loadBalancer", {}).get("ingress") or [])


def _service_row(svc: Obj) -> dict[str, str]:
    spec, meta = svc.get("spec") or {}, svc["metadata"]
    ports = ", ".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                      + (f" node:{p['nodePort']}" if p.get("nodePort") else "")
                      for p in spec.get("ports") or [])
    annotations = meta.get("annotations") or {}
    mode = annotations.get(ann.BACKEND_MODE.name, "")
    if annotations.get("nodeportlocal.antrea.io/enabled") == "true":
        mode = mode or "nodeportlocal"
    return {"service": f"{meta.get('namespace')}/{meta['name']}", "type": spec.get("type", ""),
            "clusterIP": spec.get("clusterIP", ""), "ports": ports, "VIP (status)": _vips(svc),
            "mode": mode}


def _ingress_row(ing: Obj) -> dict[str, str]:
    spec = ing.get("spec") or {}
    return {"ingress": f"{ing['metadata'].get('namespace')}/{ing['metadata']['name']}",
            "class": spec.get("ingressClassName", ""),
            "hosts": ", ".join(r.get("host", "*") for r in spec.get("rules") or []),
            "VIP (status)": _vips(ing)}


def engine_sections(state: LabState) -> dict[str, Rows]:
    """Envoy's view, from its admin socket: listeners (virtual services) and pool members
    with their health. Empty when the engine is not running."""
    import asyncio

    from podway.envoy.engine.admin import request

    admin = state.engine_dir / "admin.sock"
    if not admin.exists():
        return {}
    try:
        _, listeners = asyncio.run(request(f"unix:{admin}", "/listeners?format=json"))
        _, clusters = asyncio.run(request(f"unix:{admin}", "/clusters?format=json"))
        listening = json.loads(listeners).get("listener_statuses") or []
        pools = json.loads(clusters).get("cluster_statuses") or []
    except (OSError, TimeoutError, ValueError):
        return {}
    services: Rows = []
    for item in listening:
        where = (item.get("local_address") or {}).get("socket_address") or {}
        services.append({"listener": item.get("name", ""),
                         "address": f"{where.get('address', '')}:{where.get('port_value', '')}"})
    members: Rows = []
    for pool in pools:
        if not str(pool.get("name", "")).startswith("pool/"):
            continue
        for host in pool.get("host_statuses") or []:
            where = (host.get("address") or {}).get("socket_address") or {}
            health = host.get("health_status") or {}
            flags = [k for k, v in health.items() if v is True]
            stats = {s.get("name"): s.get("value", "0") for s in host.get("stats") or []}
            members.append({
                "pool": pool["name"],
                "member": f"{where.get('address')}:{where.get('port_value')}",
                "health": ", ".join(flags) or str(health.get("eds_health_status", "")),
                "requests": str(stats.get("rq_total") or stats.get("cx_total") or 0)})
    return {"Engine: virtual services": services, "Engine: pools": members}


def compare_table(report: Obj) -> Table:
    table = Table(title=f"{report['service']}: {report['requests_per_mode']} requests per mode "
                        f"(pods: {len(report['pods'])}, nodes without a pod: "
                        f"{', '.join(report['nodes_without_pod']) or 'none'})")
    for col in ("mode", "members", "share per pod", "client IP seen", "2nd hop",
                "p50 µs", "p99 µs", "to pod-less node", "failed", "engine CPU µs/conn"):
        table.add_column(col)
    for mode in report["modes"]:
        share = " ".join(f"{v * 100:.0f}%" for v in mode["share"].values())
        left = len(mode["left_out_by_health_check"])
        table.add_row(mode["mode"], f"{len(mode['members'])}"
                      + (f" (-{left} by health check)" if left else ""), share,
                      f"{mode['client_ip_seen'] * 100:.0f}%", str(mode["crossed_nodes"]),
                      str(mode["p50_us"]), str(mode["p99_us"]),
                      str(mode["sent_to_node_without_pod"]), str(mode["failed"]),
                      "" if mode.get("engine_cpu_per_connection_us") is None
                      else str(mode["engine_cpu_per_connection_us"]))
    delta = report.get("npl_minus_clusterip_p50_us")
    if delta is not None:
        band = report.get("npl_minus_clusterip_p50_ci95_us")
        noise = ""
        if band:
            verdict = ("within noise" if band[0] <= 0 <= band[1]
                       else "beyond noise")
            noise = f" (95 % interval {band[0]} to {band[1]} µs: {verdict})"
        table.caption = (f"NodePortLocal p50 minus ClusterIP p50: {delta} µs per new "
                         f"connection{noise}")
    return table
