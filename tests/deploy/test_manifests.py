"""Install manifests: the Helm chart lints and renders with Helm itself (every reachability
choice), every object validates against the Kubernetes 1.33 schema, and deploy/kubernetes/
podway.yaml is exactly the chart's default rendering (``--update-golden`` rewrites it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from podway.programs.controller.config import parse_config
from podway.programs.ipam import parse_pools
from podway.programs.remote_engine import READY
from tests.deploy.helm import ROOT, render

K8S = "1.33.0"
PLAIN = ROOT / "deploy" / "kubernetes" / "podway.yaml"
HEADER = ("# Rendered from deploy/helm/podway with its default values (release podway, namespace\n"
          "# podway-system). Do not edit: change the chart and run the deploy tests with\n"
          "# --update-golden. The chart generates the Secret podway-npl-key; with this file,\n"
          "# create it yourself first (docs/install.md).\n")


def validate(objects: list[Any]) -> None:
    """Each object validates strictly against the Kubernetes schema; GatewayClass (a CRD the
    schema set does not carry) is checked by hand."""
    for obj in objects:
        if obj["kind"] == "GatewayClass":
            assert obj["apiVersion"] == "gateway.networking.k8s.io/v1"
            assert obj["spec"]["controllerName"] == "podway.io/gateway-controller"
            continue
        kubernetes_validate.validate(obj, K8S, strict=True)


def by_kind(objects: list[Any], kind: str, name: str) -> Any:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def test_plain_manifests_validate() -> None:
    """deploy/kubernetes/podway.yaml: every object is valid Kubernetes 1.33."""
    objects = [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]
    assert {o["kind"] for o in objects} >= {"Deployment", "DaemonSet", "ClusterRole",
                                            "IngressClass", "GatewayClass", "Service"}
    validate(objects)


def test_a_broken_manifest_is_refused() -> None:
    """The schema check can fail: an unknown field in a Deployment is refused."""
    objects = [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]
    deployment = dict(by_kind(objects, "Deployment", "podway-controller"))
    deployment["spec"] = {**deployment["spec"], "replica": 2}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S, strict=True)


async def test_chart_defaults_lint_render_validate_and_match(helm: Any,
                                                             update_golden: bool) -> None:
    """Helm lints the chart without warnings, renders the defaults into valid objects: a
    2-replica controller with the VIP pools, the agent DaemonSet (hostNetwork, NET_ADMIN), an
    engine Deployment on edge nodes (hostNetwork); the plain manifest is that rendering."""
    lint, objects = await render(helm, {})
    assert lint["Errors"] is None
    assert all(m["Severity"] < 2 for m in lint["Messages"]), lint  # info only
    validate(objects)
    controller = by_kind(objects, "Deployment", "podway-controller")
    assert controller["spec"]["replicas"] == 2
    args = controller["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--vip-pools=/etc/podway/pools/pools.yaml" in args
    pools = by_kind(objects, "ConfigMap", "podway-vip-pools")["data"]["pools.yaml"]
    assert parse_pools(yaml.safe_load(pools))[0].name == "default"  # the controller reads it
    agent = by_kind(objects, "DaemonSet", "podway-agent")["spec"]["template"]["spec"]
    assert agent["hostNetwork"] is True
    assert "NET_ADMIN" in agent["containers"][0]["securityContext"]["capabilities"]["add"]
    engine = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    assert engine["hostNetwork"] is True
    assert engine["nodeSelector"] == {"podway.io/edge": "true"}
    assert [c["name"] for c in engine["containers"]] == ["engine"]
    ha_controller(objects)
    # The generated NodePortLocal master key is the one object the plain manifest leaves out:
    # a key in a file everyone applies would be everyone's (docs/install.md: create it).
    key = by_kind(objects, "Secret", "podway-npl-key")
    plain = [o for o in objects if o is not key]
    text = HEADER + "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in plain)
    if update_golden:
        PLAIN.parent.mkdir(parents=True, exist_ok=True)
        PLAIN.write_text(text)
    assert PLAIN.read_text() == text, "deploy/kubernetes/podway.yaml is stale: --update-golden"


def engine_command(args: list[str]) -> dict[str, Any]:
    """The rendered engine arguments as ``podway engine`` parses them."""
    import typer

    from podway.cli.commands.engine import engine

    alone = typer.Typer()
    alone.command()(engine)
    command: Any = typer.main.get_command(alone)
    assert args[0] == "engine"
    return dict(command.make_context("engine", list(args[1:])).params)


def controller_command(args: list[str]) -> dict[str, Any]:
    """The rendered controller arguments as ``podway controller`` parses them (a flag the
    command does not have, or a bad value type, fails here)."""
    import typer

    from podway.cli.commands.controller import controller

    alone = typer.Typer()
    alone.command()(controller)
    command: Any = typer.main.get_command(alone)  # one command: the command itself
    assert args[0] == "controller"
    return dict(command.make_context("controller", list(args[1:])).params)


def ha_controller(objects: list[Any]) -> None:
    """Two replicas electing a writer with a Lease: the flags parse, the Role allows exactly
    the Lease verbs the election uses (create; get and update of its own Lease), the xDS
    Service is headless (engines hold every replica), the admin socket sits in an emptyDir
    sub-folder and the dashboard listens on the pod's loopback."""
    deployment = by_kind(objects, "Deployment", "podway-controller")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    params = controller_command(container["args"])
    assert params["leader_elect"] == "true"
    assert params["renew_deadline_s"] < params["lease_duration_s"]
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.namespace"}}} in container["env"]
    role = by_kind(objects, "Role", "podway-controller-leader-election")
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": [params["lease_name"]], "verbs": ["get", "update"]}]
    binding = by_kind(objects, "RoleBinding", "podway-controller-leader-election")
    assert binding["subjects"][0]["name"] == pod["serviceAccountName"]
    assert by_kind(objects, "Service", "podway-xds")["spec"]["clusterIP"] == "None"
    assert by_kind(objects, "PodDisruptionBudget", "podway-controller")["spec"][
        "maxUnavailable"] == 1
    socket = params["admin_socket"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "admin")
    assert str(socket).startswith(mount["mountPath"] + "/")
    assert str(socket.parent) != mount["mountPath"]  # its own folder, made 0700 by Podway
    assert {"name": "admin", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in \
        pod["volumes"]
    assert params["dashboard_port"] > 0
    assert params["dashboard_address"] == "127.0.0.1"


async def test_chart_without_leader_election(helm: Any) -> None:
    """leaderElection.enabled false: --leader-elect=false and no Lease Role; admin and
    dashboard off: neither flag nor volume."""
    _, objects = await render(helm, {"controller": {
        "replicas": 1, "leaderElection": {"enabled": False}, "admin": {"enabled": False},
        "dashboard": {"enabled": False}}})
    validate(objects)
    container = by_kind(objects, "Deployment", "podway-controller")["spec"]["template"][
        "spec"]["containers"][0]
    params = controller_command(container["args"])
    assert params["leader_elect"] == "false"
    assert params["admin_socket"] is None
    assert params["dashboard_port"] == 0
    assert not [o for o in objects if (o["metadata"]["name"] == "podway-controller" and (
        o["kind"] == "PodDisruptionBudget")) or (o["kind"] in ("Role", "RoleBinding") and
                                                 o["metadata"]["name"].endswith("-election"))]
    assert all(m["name"] != "admin" for m in container["volumeMounts"])


async def test_chart_bgp_and_vrrp_choices(helm: Any) -> None:
    """reachability bgp: a BIRD sidecar announcing the pool prefix to the neighbours, the host
    set up for AnyIP and non-local binds; vrrp: a keepalived sidecar owning the pool's
    addresses; no agent when Antrea's NodePortLocal is used; all valid."""
    pools = [{"name": "edge", "addresses": ["198.18.60.0/30"]}]
    _, bgp = await render(helm, {"vipPools": pools, "reachability": {
        "mode": "bgp", "bgp": {"neighbors": ["198.18.51.1:65000"], "localAS": 65010}}})
    validate(bgp)
    spec = by_kind(bgp, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    sidecar = next(c for c in spec["containers"] if c["name"] == "bgp")
    assert sidecar["args"][:2] == ["vip", "announce"]
    assert "--vip=198.18.60.0/30" in sidecar["args"]
    assert "--neighbor=198.18.51.1:65000" in sidecar["args"]
    assert "--local-as=65010" in sidecar["args"]
    assert "--health-url=unix:/run/podway/admin.sock" in sidecar["args"]
    assert {"name": "state", "mountPath": "/run/podway"} in sidecar["volumeMounts"]
    setup = spec["initContainers"][0]["args"][0]
    assert "ip_nonlocal_bind=1" in setup
    assert "ip route replace local 198.18.60.0/30 dev lo" in setup
    assert not [o for o in bgp if o["metadata"]["name"] == "podway-engine-speaker"]
    _, vrrp = await render(helm, {"vipPools": pools, "agent": {"enabled": False},
                                  "reachability": {"mode": "vrrp"}})
    validate(vrrp)
    assert not [o for o in vrrp if o["kind"] == "DaemonSet"]
    spec = by_kind(vrrp, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    keep = next(c for c in spec["containers"] if c["name"] == "vrrp")
    assert "--vip=198.18.60.0/30" in keep["args"][0]
    assert "exec keepalived" in keep["args"][0]
    assert "vip check --url unix:/run/podway/admin.sock" in keep["args"][0]


async def test_chart_bgp_from_metallb_objects(helm: Any) -> None:
    """reachability.bgp.fromMetalLB: the sidecar is `vip announce-metallb` for its Node, with a
    service account that reads MetalLB's objects and Secrets in MetalLB's namespace (a Role
    there; cluster-wide only Nodes and Podway's BGP kinds, writing only VIPPeer status) and
    writes BGPSessionStates; all valid."""
    _, objects = await render(helm, {"reachability": {
        "mode": "bgp", "bgp": {"announce": ["198.18.60.0/28"],
                               "fromMetalLB": {"enabled": True, "namespace": "lb"}}}})
    validate(objects)
    spec = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    # One account per pod: the group's own keeps its certificate requests and gains the
    # sidecar's rights (a second serviceAccountName key silently replaced it, and the engine
    # could no longer ask for its certificate).
    assert spec["serviceAccountName"] == "podway-engine-edge"
    assert spec["automountServiceAccountToken"] is True
    assert not [o for o in objects if o["kind"] == "ServiceAccount"
                and o["metadata"]["name"] == "podway-engine-speaker"]
    sidecar = next(c for c in spec["containers"] if c["name"] == "bgp")
    assert sidecar["args"][:4] == ["vip", "announce-metallb", "--node=$(NODE_NAME)",
                                   "--metallb-namespace=lb"]
    assert "--vip=198.18.60.0/28" in sidecar["args"]
    assert not [a for a in sidecar["args"] if a.startswith(("--neighbor", "--local-as"))]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in sidecar["env"]
    role = by_kind(objects, "Role", "podway-engine-speaker")
    assert role["metadata"]["namespace"] == "lb"
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert {("bgppeers", "watch"), ("secrets", "list"), ("bgpsessionstates", "create"),
            ("bgpsessionstates/status", "patch")} <= granted
    cluster = by_kind(objects, "ClusterRole", "podway-engine-speaker")
    # cluster-wide: Nodes, and Podway's own (cluster-scoped) BGP kinds, writing only a
    # VIPPeer's status
    assert [(rule["apiGroups"], rule["resources"], rule["verbs"])
            for rule in cluster["rules"]] == [
        ([""], ["nodes"], ["get", "list", "watch"]),
        (["podway.io"], ["vippeers", "vipadvertisements", "vippools"], ["get", "list", "watch"]),
        (["podway.io"], ["vippeers/status"], ["patch"])]
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        subjects = by_kind(objects, binding, "podway-engine-speaker")["subjects"]
        assert [s["name"] for s in subjects] == ["podway-engine-edge"]


async def test_chart_bgp_from_podway_s_own_objects_alone(helm: Any) -> None:
    """reachability.bgp.fromVIPPeers, without fromMetalLB: the sidecar is still the live
    speaker (`vip announce-metallb --no-metallb`, Podway's VIPPeer/VIPAdvertisement/VIPPool),
    with a Role in the release's namespace for the password Secrets and Events only (nothing of
    metallb.io) and the cluster-wide rights of the fromMetalLB case; all valid."""
    _, objects = await render(helm, {"reachability": {
        "mode": "bgp", "bgp": {"announce": ["198.18.60.0/28"],
                               "fromVIPPeers": {"enabled": True}}}})
    validate(objects)
    spec = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is True
    sidecar = next(c for c in spec["containers"] if c["name"] == "bgp")
    assert sidecar["args"][:5] == ["vip", "announce-metallb", "--node=$(NODE_NAME)",
                                   "--metallb-namespace=podway-system", "--no-metallb"]
    assert "--vip=198.18.60.0/28" in sidecar["args"]
    assert not [a for a in sidecar["args"] if a.startswith(("--neighbor", "--local-as"))]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in sidecar["env"]
    role = by_kind(objects, "Role", "podway-engine-speaker")
    assert role["metadata"]["namespace"] == "podway-system"
    assert [(rule["apiGroups"], rule["resources"]) for rule in role["rules"]] == [
        ([""], ["secrets"]), ([""], ["events"])]
    cluster = by_kind(objects, "ClusterRole", "podway-engine-speaker")
    assert (["podway.io"], ["vippeers/status"], ["patch"]) in [
        (rule["apiGroups"], rule["resources"], rule["verbs"]) for rule in cluster["rules"]]
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        subjects = by_kind(objects, binding, "podway-engine-speaker")["subjects"]
        assert [s["name"] for s in subjects] == ["podway-engine-edge"]


async def test_chart_takes_ingress_classes_over(helm: Any) -> None:
    """controller.ingressClasses: one --ingress-class flag per class on the controller."""
    _, objects = await render(helm, {"controller": {"ingressClasses": ["nginx", "legacy"]}})
    validate(objects)
    spec = by_kind(objects, "Deployment", "podway-controller")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert [a for a in args if a.startswith("--ingress-class=")] == [
        "--ingress-class=nginx", "--ingress-class=legacy"]


async def test_chart_passes_ingress_nginx_settings(helm: Any) -> None:
    """controller.nginxConfig: one --nginx-config KEY=VALUE per key on the controller."""
    _, objects = await render(helm, {"controller": {"ingressClasses": ["nginx"], "nginxConfig": {
        "hsts-max-age": "600", "hsts-preload": "true"}}})
    validate(objects)
    spec = by_kind(objects, "Deployment", "podway-controller")["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert [a for a in args if a.startswith("--nginx-config=")] == [
        "--nginx-config=hsts-max-age=600", "--nginx-config=hsts-preload=true"]


async def test_chart_engine_group_can_serve_only_its_objects(helm: Any) -> None:
    """By default an engine group's engines serve everything (no --engine-group); with
    onlyItsObjects they pass --engine-group=<name>, and the rendering stays valid."""
    _, default = await render(helm, {})
    args = by_kind(default, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert not [a for a in args if a.startswith("--engine-group")]
    group = {"name": "edge", "replicas": 2, "nodeSelector": {"podway.io/edge": "true"},
             "tlsSecret": "podway-engine-tls", "concurrency": 2, "onlyItsObjects": True}
    _, only = await render(helm, {"engineGroups": [group]})
    validate(only)
    args = by_kind(only, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--engine-group=edge" in args


async def test_chart_runs_second_chance_for_a_pair(helm: Any) -> None:
    """Off by default; with secondChance.pair each engine pod gets a native sidecar (an init
    container that keeps running, so it starts before the engine and stops after it) passing
    the pair, this node's address and the VIP pool to flags the real command has."""
    _, default = await render(helm, {})
    spec = by_kind(default, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    assert not [c for c in spec.get("initContainers", []) if c["name"] == "second-chance"]
    group = {"name": "edge", "replicas": 2, "nodeSelector": {"podway.io/edge": "true"},
             "tlsSecret": "podway-engine-tls", "concurrency": 2,
             "secondChance": {"pair": ["198.18.51.2", "198.18.52.2"], "ports": [80, 443]}}
    _, paired = await render(helm, {"engineGroups": [group]})
    validate(paired)
    spec = by_kind(paired, "Deployment", "podway-engine-edge")["spec"]["template"]["spec"]
    sidecar, = (c for c in spec["initContainers"] if c["name"] == "second-chance")
    assert sidecar["restartPolicy"] == "Always"
    args = sidecar["args"]
    assert args[:2] == ["vip", "second-chance"]
    assert [a for a in args if a.startswith("--pair=")] == [
        "--pair=198.18.51.2", "--pair=198.18.52.2"]
    # it writes host sysctls (ip_forward, rp_filter): /proc/sys is read-only unless privileged
    assert sidecar["securityContext"]["privileged"] is True
    params = second_chance_command(args)  # the flags exist and their values parse
    assert params["local"] == "$(HOST_IP)"  # Kubernetes puts the node's address in
    assert params["pair"] == ["198.18.51.2", "198.18.52.2"]
    assert params["vip"] == ["198.18.100.0/28"]
    assert params["port"] == [80, 443]


def second_chance_command(args: list[str]) -> dict[str, Any]:
    """The rendered sidecar arguments as ``podway vip second-chance`` parses them."""
    import typer

    from podway.cli.commands.vip import second_chance

    alone = typer.Typer()
    alone.command()(second_chance)
    command: Any = typer.main.get_command(alone)
    assert args[:2] == ["vip", "second-chance"]
    return dict(command.make_context("second-chance", list(args[2:])).params)


async def test_chart_engine_groups_choose_their_engine_kind(helm: Any) -> None:
    """engineGroups[].engine: HAProxy and kernel groups pass --engine (the kernel one runs as
    root with NET_ADMIN only; memberTrafficCounters passes --member-traffic-counters); a group
    serving only its objects has its kind in the controller's --config, which the controller
    parses; Envoy groups render as before."""
    groups = [{"name": "web", "engine": "haproxy", "replicas": 1, "onlyItsObjects": True,
               "nodeSelector": {"podway.io/edge": "true"}, "tlsSecret": "podway-engine-tls",
               "concurrency": 1},
              {"name": "db", "engine": "kernel", "replicas": 1, "onlyItsObjects": True,
               "nodeSelector": {"podway.io/db": "true"}, "tlsSecret": "podway-engine-tls",
               "concurrency": 1, "memberTrafficCounters": True},
              {"name": "edge", "engine": "envoy", "replicas": 1, "onlyItsObjects": False,
               "nodeSelector": {"podway.io/edge": "true"}, "tlsSecret": "podway-engine-tls",
               "concurrency": 1}]
    lint, objects = await render(helm, {"engineGroups": groups})
    assert lint["Errors"] is None
    validate(objects)

    def engine(name: str) -> dict[str, Any]:
        spec = by_kind(objects, "Deployment", f"podway-engine-{name}")["spec"]["template"]
        return dict(spec["spec"]["containers"][0])

    assert "--engine=haproxy" in engine("web")["args"]
    assert engine("web")["securityContext"]["runAsNonRoot"] is True
    kernel = engine("db")
    assert "--engine=kernel" in kernel["args"]
    assert kernel["securityContext"]["runAsUser"] == 0
    assert kernel["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    assert "--member-traffic-counters" in kernel["args"]  # the group asked for them
    assert "--member-traffic-counters" not in engine("web")["args"]  # off by default
    assert not [a for a in engine("edge")["args"] if a.startswith("--engine=")]
    config = by_kind(objects, "ConfigMap", "podway-controller-config")["data"]["config.yaml"]
    assert dict(parse_config(config, path=Path("config.yaml")).engine_kinds) == {
        "web": "haproxy", "db": "kernel"}
    args = by_kind(objects, "Deployment", "podway-controller")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert controller_command(args)["config"] == Path("/etc/podway/config/config.yaml")


def test_the_controller_may_list_and_watch_every_kind_its_source_watches() -> None:
    """Every kind of the kinds table (built-in and CRD kinds alike) is listable and watchable
    by the controller's ClusterRole, and every kind whose status it writes is patchable at
    ``/status``: a kind added without its RBAC would be a 403 on a real cluster."""
    from podway.model.kinds import TABLE

    objects = [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]
    role = by_kind(objects, "ClusterRole", "podway-controller")
    granted = {(group, resource, verb) for rule in role["rules"]
               for group in rule.get("apiGroups", []) for resource in rule.get("resources", [])
               for verb in rule.get("verbs", [])}
    missing = [f"{k.plural}.{k.group or 'core'} {verb}" for k in TABLE
               for verb in ("list", "watch") if (k.group, k.plural, verb) not in granted]
    missing += [f"{k.plural}/status.{k.group or 'core'} patch" for k in TABLE if k.status
                and (k.group, f"{k.plural}/status", "patch") not in granted]
    assert missing == []


def test_controller_role_reads_every_kind_and_writes_every_status() -> None:
    """The controller's ClusterRole lets it list and watch every kind of the kinds table, and
    patch the status of every kind whose status it writes (ListenerSet and GatewayClassConfig
    once came without)."""
    from podway.model.kinds import TABLE

    objects = [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]
    rules = by_kind(objects, "ClusterRole", "podway-controller")["rules"]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(group in r.get("apiGroups", ()) and resource in r.get("resources", ())
                   and verb in r.get("verbs", ()) for r in rules)

    for kind in TABLE:
        for verb in ("list", "watch"):
            assert allowed(kind.group, kind.plural, verb), (kind.name, verb)
        if kind.status and kind.crd:
            assert allowed(kind.group, f"{kind.plural}/status", "patch"), kind.name


async def test_chart_rolls_engines_without_a_gap_and_every_workload_on_pod_annotations(
        helm: Any) -> None:
    """An Envoy group's new engine pod starts beside the old one on its node (surge 1, none
    unavailable, anti-affinity only preferred, the listeners sharing their ports through the
    controller's --listener-reuse-port) and is Ready only once its Envoy is live (the exec
    probe); a HAProxy group rolls the same way (the engine's --listener-reuse-port, a drain on
    stop, Ready once the engine's ``ready`` file is in its state folder); kernel groups, whose
    nftables table is the node's, keep replacing in place.
    ``podAnnotations`` lands on every pod template (what `helm upgrade` changes to roll
    them)."""
    groups = [{"name": "edge", "engine": "envoy", "replicas": 2, "onlyItsObjects": False,
               "nodeSelector": {"podway.io/edge": "true"}, "tlsSecret": "podway-engine-tls",
               "concurrency": 1},
              {"name": "web", "engine": "haproxy", "replicas": 2, "onlyItsObjects": True,
               "nodeSelector": {"podway.io/web": "true"}, "tlsSecret": "podway-engine-tls",
               "concurrency": 1},
              {"name": "db", "engine": "kernel", "replicas": 1, "onlyItsObjects": True,
               "nodeSelector": {"podway.io/db": "true"}, "tlsSecret": "podway-engine-tls",
               "concurrency": 1}]
    _, objects = await render(helm, {"engineGroups": groups,
                                     "podAnnotations": {"example.com/rev": "7"}})
    validate(objects)
    edge = by_kind(objects, "Deployment", "podway-engine-edge")["spec"]
    assert edge["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    anti = edge["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]
    probe = edge["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
    assert "/run/podway/admin.sock" in probe[-1]
    assert "GET /ready" in probe[-1]
    mount = {m["mountPath"] for m in edge["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert "/run/podway" in mount  # the admin socket the probe asks is in the state folder
    web = by_kind(objects, "Deployment", "podway-engine-web")["spec"]
    assert web["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert list(web["template"]["spec"]["affinity"]["podAntiAffinity"]) == [
        "preferredDuringSchedulingIgnoredDuringExecution"]
    container = web["template"]["spec"]["containers"][0]
    params = engine_command(container["args"])
    assert params["listener_reuse_port"] is True
    assert params["engine_kind"] == "haproxy"
    assert 0 < params["drain_s"] < web["template"]["spec"]["terminationGracePeriodSeconds"]
    ready = Path(str(params["state_dir"])) / READY
    assert container["readinessProbe"]["exec"]["command"] == ["test", "-e", str(ready)]
    db = by_kind(objects, "Deployment", "podway-engine-db")["spec"]
    assert db["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert list(db["template"]["spec"]["affinity"]["podAntiAffinity"]) == [
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert "readinessProbe" not in db["template"]["spec"]["containers"][0]
    controller = by_kind(objects, "Deployment", "podway-controller")["spec"]["template"]
    assert controller_command(controller["spec"]["containers"][0]["args"])[
        "listener_reuse_port"] is True
    templates = [by_kind(objects, kind, name)["spec"]["template"]["metadata"]
                 for kind, name in (("Deployment", "podway-controller"),
                                    ("Deployment", "podway-engine-edge"),
                                    ("Deployment", "podway-engine-db"),
                                    ("DaemonSet", "podway-agent"))]
    assert [t.get("annotations") for t in templates] == [{"example.com/rev": "7"}] * 4


async def test_chart_gives_envoy_stats_to_the_engines_and_the_controller(helm: Any) -> None:
    """``envoyStats`` reaches the Envoy engines' ``--envoy-stats`` and the controller's, which
    builds their routers (per-pool stats only with ``detailed``); not HAProxy engines."""
    groups = [{"name": "edge", "replicas": 2, "nodeSelector": {"podway.io/edge": "true"},
               "tlsSecret": "podway-engine-tls", "concurrency": 2},
              {"name": "ha", "engine": "haproxy", "replicas": 1, "nodeSelector": {},
               "tlsSecret": "podway-engine-tls", "concurrency": 1}]
    _, objects = await render(helm, {"envoyStats": "detailed", "engineGroups": groups})
    validate(objects)

    def args(name: str) -> list[str]:
        return list(by_kind(objects, "Deployment", name)["spec"]["template"]["spec"][
            "containers"][0]["args"])

    assert "--envoy-stats=detailed" in args("podway-controller")
    assert "--envoy-stats=detailed" in args("podway-engine-edge")
    assert not [a for a in args("podway-engine-ha") if a.startswith("--envoy-stats")]
    assert controller_command(args("podway-controller"))["envoy_stats"].value == "detailed"
