"""The resource types the emulator serves: built-in kinds and those CRDs add.

A ``ResourceType`` is what discovery lists and what the URL router resolves: group, version,
plural, kind, scope and subresources. Built-in kinds are always served; a CRD's kinds only while
the CRD exists (``from_crd``), exactly like the real API server, so a client can test "the
Gateway API is not installed" and "installed later". ``gateway_api_crd`` builds a minimal CRD for
each Gateway API kind Podway reads (served versions as the upstream standard/experimental
channels ship them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podway.kube.gateway_api import GROUP as GATEWAY_GROUP
from podway.kube.gateway_api import KINDS as GATEWAY_KINDS
from podway.translate.gateway.status import GATEWAY_API_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceType:
    group: str  # "" is the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status: bool = True  # has a status subresource
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()  # ``kubectl get all`` lists the kinds in "all"
    crd: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # ^ the served version of the CRD that serves this kind (None: a built-in kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def group_resource(self) -> tuple[str, str]:
        return (self.group, self.plural)


def _core(plural: str, kind: str, *, namespaced: bool = True, status: bool = True,
          short: tuple[str, ...] = (), categories: tuple[str, ...] = ()) -> ResourceType:
    return ResourceType(group="", version="v1", plural=plural, kind=kind, namespaced=namespaced,
                        status=status, short_names=short, categories=categories)


def _typed(group: str, plural: str, kind: str, *, namespaced: bool = True, status: bool = True,
           short: tuple[str, ...] = (), categories: tuple[str, ...] = ()) -> ResourceType:
    return ResourceType(group=group, version="v1", plural=plural, kind=kind,
                        namespaced=namespaced, status=status, short_names=short,
                        categories=categories)


ALL = ("all",)
RBAC = "rbac.authorization.k8s.io"


BUILTIN: tuple[ResourceType, ...] = (
    _core("pods", "Pod", short=("po",), categories=ALL),
    _core("services", "Service", short=("svc",), categories=ALL),
    _core("serviceaccounts", "ServiceAccount", status=False, short=("sa",)),
    _core("nodes", "Node", namespaced=False, short=("no",)),
    _core("namespaces", "Namespace", namespaced=False, short=("ns",)),
    _core("secrets", "Secret", status=False),
    _core("configmaps", "ConfigMap", status=False, short=("cm",)),
    _core("events", "Event", status=False, short=("ev",)),
    ResourceType(group="events.k8s.io", version="v1", plural="events", kind="Event",
                 namespaced=True, status=False, short_names=("ev",)),
    _typed("apps", "deployments", "Deployment", short=("deploy",), categories=ALL),
    _typed("apps", "replicasets", "ReplicaSet", short=("rs",), categories=ALL),
    _typed("apps", "daemonsets", "DaemonSet", short=("ds",), categories=ALL),
    _typed("policy", "poddisruptionbudgets", "PodDisruptionBudget", short=("pdb",)),
    _typed(RBAC, "roles", "Role", status=False),
    _typed(RBAC, "rolebindings", "RoleBinding", status=False),
    _typed(RBAC, "clusterroles", "ClusterRole", namespaced=False, status=False),
    _typed(RBAC, "clusterrolebindings", "ClusterRoleBinding", namespaced=False, status=False),
    ResourceType(group="discovery.k8s.io", version="v1", plural="endpointslices",
                 kind="EndpointSlice", namespaced=True, status=False),
    ResourceType(group="coordination.k8s.io", version="v1", plural="leases", kind="Lease",
                 namespaced=True, status=False),
    ResourceType(group="networking.k8s.io", version="v1", plural="ingresses", kind="Ingress",
                 namespaced=True, short_names=("ing",)),
    ResourceType(group="networking.k8s.io", version="v1", plural="ingressclasses",
                 kind="IngressClass", namespaced=False, status=False),
    # Stored, not enforced: the install ships a policy pair (kubectl apply must accept it).
    _typed("admissionregistration.k8s.io", "validatingadmissionpolicies",
           "ValidatingAdmissionPolicy", namespaced=False),
    _typed("admissionregistration.k8s.io", "validatingadmissionpolicybindings",
           "ValidatingAdmissionPolicyBinding", namespaced=False, status=False),
    _typed("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
           namespaced=False, status=False),
    _typed("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview",
           namespaced=False, status=False),
    ResourceType(group="certificates.k8s.io", version="v1",
                 plural="certificatesigningrequests", kind="CertificateSigningRequest",
                 namespaced=False, short_names=("csr",)),
    ResourceType(group="apiextensions.k8s.io", version="v1",
                 plural="customresourcedefinitions", kind="CustomResourceDefinition",
                 namespaced=False, short_names=("crd", "crds")),
)


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """The resource types one CRD object serves (one per served version)."""
    spec = crd.get("spec", {})
    names = spec.get("names", {})
    out = []
    for version in spec.get("versions", []):
        if not version.get("served", True):
            continue
        out.append(ResourceType(
            group=str(spec.get("group", "")), version=str(version["name"]),
            plural=str(names.get("plural", "")), kind=str(names.get("kind", "")),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            status="status" in (version.get("subresources") or {}),
            short_names=tuple(names.get("shortNames", ())),
            categories=tuple(names.get("categories", ())), crd=version))
    return out


def gateway_api_crd(kind: str) -> dict[str, Any]:
    """A minimal CustomResourceDefinition for one Gateway API kind (no schema: accepts all)."""
    plural, namespaced, versions = GATEWAY_KINDS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GATEWAY_GROUP}", "annotations": {
            "gateway.networking.k8s.io/bundle-version": GATEWAY_API_VERSION}},
        "spec": {
            "group": GATEWAY_GROUP,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                      "listKind": f"{kind}List"},
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [{"name": v, "served": True, "storage": i == 0,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {
                              "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
                         for i, v in enumerate(versions)],
        },
    }
