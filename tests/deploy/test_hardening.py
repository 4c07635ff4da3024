"""Deployment hardening (issue 23.13), on the plain manifest (the chart's default rendering):
the agent's metrics on the node's address, seccomp RuntimeDefault on agent and engine, no
xtables lock under nftables (the chart's iptables choice keeps it), and the admission policy
that lets the agent patch only the NodePortLocal annotation of pods on its own node — its CEL
evaluated here against the requests the agent makes and those a stolen agent token would."""

from __future__ import annotations

import base64
import copy
from typing import Any

import celpy
import pytest
import yaml

from tests.deploy.helm import helm_python, render
from tests.deploy.test_manifests import PLAIN, by_kind, validate

NPL = "nodeportlocal.antrea.io"
SIGNATURE = "podway.io/npl-signature"
AGENT = "system:serviceaccount:podway-system:podway-agent"


@pytest.fixture(scope="module")
def objects() -> list[Any]:
    return [d for d in yaml.safe_load_all(PLAIN.read_text()) if d]


def pod_spec(objects: list[Any], kind: str, name: str) -> Any:
    return by_kind(objects, kind, name)["spec"]["template"]["spec"]


def test_agent_metrics_bind_the_nodes_address(objects: list[Any]) -> None:
    """Host networking: the metrics listen on status.hostIP, never every interface."""
    agent = pod_spec(objects, "DaemonSet", "podway-agent")["containers"][0]
    address = next(a for a in agent["args"] if a.startswith("--metrics-address="))
    assert address.startswith("--metrics-address=$(NODE_IP):")
    assert {"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}} \
        in agent["env"]


def test_agent_and_engine_run_with_the_runtime_seccomp_profile(objects: list[Any]) -> None:
    for kind, name in (("DaemonSet", "podway-agent"), ("Deployment", "podway-engine-edge"),
                       ("Deployment", "podway-controller")):
        spec = pod_spec(objects, kind, name)
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_no_xtables_lock_under_nftables(objects: list[Any]) -> None:
    spec = pod_spec(objects, "DaemonSet", "podway-agent")
    assert "--rules=nftables" in spec["containers"][0]["args"]
    assert "volumes" not in spec
    assert "volumeMounts" not in spec["containers"][0]


def test_agents_sign_and_the_controller_checks_npl_mappings(objects: list[Any]) -> None:
    """Only the controller mounts the master key; each agent asks it for its node's key (a
    CertificateSigningRequest: it may create and read them, the controller list and annotate
    them) and holds no Secret at all; the controller knows the agents' port range."""
    agent = pod_spec(objects, "DaemonSet", "podway-agent")
    controller = pod_spec(objects, "Deployment", "podway-controller")
    args = controller["containers"][0]["args"]
    assert "--npl-key=/etc/podway/npl/key" in args
    assert f"--npl-agent={AGENT}" in args
    volume = next(v for v in controller["volumes"] if v["name"] == "npl-key")
    assert volume["secret"]["secretName"] == "podway-npl-key"
    assert "--npl-key-request" in agent["containers"][0]["args"]
    assert not [a for a in agent["containers"][0]["args"] if a.startswith("--npl-key=")]
    assert not [v for v in agent.get("volumes", []) if "secret" in v]
    assert "--npl-port-range=61000-62000" in args
    assert "--port-range=61000-62000" in agent["containers"][0]["args"]
    csr = {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"]}
    rules = by_kind(objects, "ClusterRole", "podway-agent")["rules"]
    assert {**csr, "verbs": ["create", "get"]} in rules
    rules = by_kind(objects, "ClusterRole", "podway-controller")["rules"]
    assert {**csr, "verbs": ["get", "list", "watch", "patch"]} in rules


async def test_the_iptables_choice_keeps_the_xtables_lock() -> None:
    python = helm_python()
    if python is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (see tests/deploy/helm.py)")
    _, objects = await render(python, {"agent": {"rules": "iptables"}})
    validate(objects)
    spec = pod_spec(objects, "DaemonSet", "podway-agent")
    lock = next(v for v in spec["volumes"] if v["name"] == "xtables-lock")
    assert lock["hostPath"]["path"] == "/run/xtables.lock"
    assert {"name": "xtables-lock", "mountPath": "/run/xtables.lock"} in \
        spec["containers"][0]["volumeMounts"]
    _, without = await render(python, {"agent": {"admissionPolicy": False}})
    assert not [o for o in without if o["kind"].startswith("ValidatingAdmissionPolicy")
                and o["metadata"]["name"] == "podway-agent-pods"]
    _, antrea = await render(python, {"agent": {"enabled": False}})
    args = pod_spec(antrea, "Deployment", "podway-controller")["containers"][0]["args"]
    assert "--npl-unsigned" in args
    assert not [a for a in args if a.startswith("--npl-key")]


class Policy:
    """The ValidatingAdmissionPolicy of the plain manifest, evaluated as the API server would:
    match conditions, then variables, then every validation."""

    def __init__(self, objects: list[Any], name: str = "podway-agent-pods") -> None:
        self.spec = by_kind(objects, "ValidatingAdmissionPolicy", name)["spec"]
        binding = by_kind(objects, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert self.spec["failurePolicy"] == "Fail"
        self.env = celpy.Environment()

    def _eval(self, expression: str, activation: dict[str, Any]) -> Any:
        return self.env.program(self.env.compile(expression)).evaluate(activation)

    def denied(self, *, user: str, node: str | None, old: Any, new: Any) -> list[str]:
        """The messages of the validations that fail (empty: allowed; a request the policy
        does not match is allowed too)."""
        extra = {"authentication.kubernetes.io/node-name": [node]} if node else {}
        request = {"userInfo": {"username": user, "extra": extra}}
        activation: dict[str, Any] = {
            "request": celpy.json_to_cel(request), "object": celpy.json_to_cel(new),
            "oldObject": celpy.json_to_cel(old)}
        if not all(bool(self._eval(c["expression"], activation))
                   for c in self.spec["matchConditions"]):
            return []
        variables: dict[str, Any] = {}
        for variable in self.spec.get("variables") or []:
            variables[variable["name"]] = self._eval(
                variable["expression"], {**activation, "variables": _Variables(variables)})
        activation["variables"] = _Variables(variables)
        return [v["message"] for v in self.spec["validations"]
                if not bool(self._eval(v["expression"], activation))]


class _Variables(celpy.celtypes.MapType):
    """``variables.<name>`` for the expressions (a CEL map of the values so far)."""

    def __init__(self, values: dict[str, Any]) -> None:
        super().__init__({celpy.celtypes.StringType(k): v for k, v in values.items()})


def pod(node: str = "n1", annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web-0", "namespace": "shop",
                            "labels": labels or {"app": "web"}}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}]}}


MAPPING = '[{"podPort":8080,"nodeIP":"198.18.0.1","nodePort":61000,"protocol":"tcp"}]'


def test_the_agent_may_write_the_npl_annotation_of_its_own_nodes_pods(objects: list[Any]
                                                                       ) -> None:
    policy = Policy(objects)
    before = pod(annotations={"a": "1"})
    after = pod(annotations={"a": "1", NPL: MAPPING, SIGNATURE: "v1:x"})
    assert policy.denied(user=AGENT, node="n1", old=before, new=after) == []
    assert policy.denied(user=AGENT, node="n1", old=after, new=before) == []  # removed
    # The same patch adding another annotation beside it is not the agent's to make.
    assert policy.denied(user=AGENT, node="n1", old=pod(), new=after) != []


@pytest.mark.parametrize(("what", "node", "change"), [
    ("another node's pod", "n2", lambda p: p["metadata"].setdefault("annotations", {})
     .update({NPL: MAPPING})),
    ("no node in the token", None, lambda p: p["metadata"].setdefault("annotations", {})
     .update({NPL: MAPPING})),
    ("another annotation", "n1", lambda p: p["metadata"].setdefault("annotations", {})
     .update({"podway.io/backend-mode": "clusterip"})),
    ("a label", "n1", lambda p: p["metadata"]["labels"].update({"app": "other"})),
    ("the spec", "n1", lambda p: p["spec"].update({"nodeName": "n2"})),
    ("a finalizer", "n1", lambda p: p["metadata"].update({"finalizers": ["x"]})),
])
def test_anything_else_the_agent_asks_is_denied(objects: list[Any], what: str,
                                                node: str | None, change: Any) -> None:
    policy = Policy(objects)
    before = pod(annotations={"a": "1"})
    after = copy.deepcopy(before)
    change(after)
    assert policy.denied(user=AGENT, node=node, old=before, new=after), what


def test_other_users_are_not_matched(objects: list[Any]) -> None:
    """The policy narrows the agent only: a user's edit of any pod is not its business."""
    policy = Policy(objects)
    after = pod(labels={"app": "other"})
    assert policy.denied(user="system:serviceaccount:shop:deployer", node=None, old=pod(),
                         new=after) == []


async def test_engines_can_get_a_certificate_each_from_cert_manager() -> None:
    """engineCertificates.source cert-manager-csi: each engine pod mounts its own certificate
    naming the pod (its node id) and, for a group serving only its objects, that group — what
    the controller checks (podway.engines.identity)."""
    python = helm_python()
    if python is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (see tests/deploy/helm.py)")
    values = {"engineCertificates": {"source": "cert-manager-csi",
                                     "issuer": {"name": "podway-engines"}},
              "engineGroups": [{"name": "edge", "replicas": 2, "tlsSecret": "unused",
                                "nodeSelector": {"podway.io/edge": "true"}, "concurrency": 2,
                                "onlyItsObjects": True}]}
    lint, objects = await render(python, values)
    assert lint["Errors"] is None
    validate(objects)
    spec = pod_spec(objects, "Deployment", "podway-engine-edge")
    engine = spec["containers"][0]
    assert "--node-id=$(POD_NAME)" in engine["args"]
    assert "--engine-group=edge" in engine["args"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} \
        in engine["env"]
    volume = next(v for v in spec["volumes"] if v["name"] == "xds-tls")
    assert "secret" not in volume
    attributes = volume["csi"]["volumeAttributes"]
    assert volume["csi"]["driver"] == "csi.cert-manager.io"
    assert attributes["csi.cert-manager.io/issuer-name"] == "podway-engines"
    assert attributes["csi.cert-manager.io/common-name"] == "${POD_NAME}"
    assert attributes["csi.cert-manager.io/dns-names"] == "${POD_NAME}"
    assert attributes["csi.cert-manager.io/organizations"] == "podway.io/engine-group=edge"
    # The default: each group's Secret, the node's name as node id.
    _, default = await render(python, {})
    args = pod_spec(default, "Deployment", "podway-engine-edge")["containers"][0]["args"]
    assert "--node-id=$(NODE_NAME)" in args


def helm_secret(key: bytes | None, *, by_helm: bool) -> dict[str, Any]:
    """The NodePortLocal key Secret as a cluster holds it: from an earlier install of this
    release (Helm's labels and ownership annotations), or created by hand."""
    meta: dict[str, Any] = {"name": "podway-npl-key", "namespace": "podway-system"}
    if by_helm:
        meta["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
        meta["annotations"] = {"meta.helm.sh/release-name": "podway",
                               "meta.helm.sh/release-namespace": "podway-system"}
    data = {} if key is None else {"key": base64.b64encode(key).decode()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque",
            "data": data}


async def test_the_chart_generates_the_npl_key_and_keeps_it_across_upgrades() -> None:
    python = helm_python()
    if python is None:
        pytest.skip("no Python >= 3.12 with helm-sdkpy (see tests/deploy/helm.py)")
    keys = []
    for _ in range(2):  # two fresh installs: two different random keys
        _, objects = await render(python, {})
        secret = by_kind(objects, "Secret", "podway-npl-key")
        keys.append(base64.b64decode(secret["data"]["key"]))
    assert keys[0] != keys[1]
    assert all(len(k) >= 32 for k in keys)  # at least the 16 bytes the controller asks
    # An upgrade finds the installed key and renders it again, unchanged.
    installed = b"the-key-this-cluster-holds-000000"
    _, upgraded = await render(python, {}, existing=(helm_secret(installed, by_helm=True),))
    assert base64.b64decode(by_kind(upgraded, "Secret", "podway-npl-key")["data"]["key"]) \
        == installed
    # A Secret the operator made is theirs: not rendered, so not overwritten nor deleted.
    _, theirs = await render(python, {}, existing=(helm_secret(installed, by_helm=False),))
    assert not [o for o in theirs if o["kind"] == "Secret"]
    # Antrea's agent: no key at all.
    _, antrea = await render(python, {"agent": {"enabled": False}})
    assert not [o for o in antrea if o["kind"] == "Secret"]
