"""What the Kubernetes source watches, per kind: where it lives in the API, how to list it,
and how to trim it before it is parsed (memory is spent only on what the translator reads).

Every kind of the kinds table (``podway.model.kinds``) is watched: built-in kinds always, kinds
that come with a CRD (``CRDS``: every Gateway API kind Podway reads, and Podway's own
``TrafficPolicy``, whose CRD ships in ``deploy/helm/podway/crds/``) only while their CRD exists,
at the most stable version the CRD serves (``podway.kube.gateway_api.preferred``). This module
adds only how a kind is selected or trimmed.

Secrets: every type but the few Podway never reads, which the server leaves out (field selector:
service account tokens, image pull secrets, bootstrap tokens and Helm's release records — in a
usual cluster these are most Secrets, and Helm's are the biggest). Not "only TLS Secrets": basic
auth (an htpasswd file), JWT key sets and OIDC client secrets are ``Opaque`` Secrets, and a
source that saw only TLS Secrets left every such reference unresolved in controller mode (the
route refused, 403). Not "only the referenced ones": references are known only after
translation, and a source that watched what the translator asked for would couple the two
stages. A CA bundle for BackendTLSPolicy comes from a ConfigMap (``ca.crt``; a GatewayClass's
parameters are a ConfigMap too; the values of other keys are dropped on arrival).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from podway.kube import gateway_api
from podway.kube.informer import lean
from podway.model import npl
from podway.model.base import K8sObject
from podway.model.core import LB_READY, ConfigMap, Pod, Secret
from podway.model.gateway import GatewayClass
from podway.model.kinds import BY_NAME, TABLE, Kind
from podway.model.snapshot import Key, Snapshot
from podway.translate.jwt import JWKS_KEY

Raw = dict[str, Any]
Transform = Callable[[Raw], Raw]

KEEP_POD_ANNOTATIONS = (npl.ANNOTATION, npl.SIGNATURE_ANNOTATION)


def slim_pod(raw: Raw) -> Raw:
    """A Pod reduced to what the backend modes read: labels, node, IPs, phase, container ports
    (named targetPorts) and the NodePortLocal annotation; and, for a pod with Podway's readiness
    gate only, that gate and its condition (``podway.programs.controller.readiness``). Other pods'
    condition changes stay invisible: they cause no update."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    gated = any(isinstance(g, dict) and g.get("conditionType") == LB_READY
                for g in spec.get("readinessGates") or [])
    gate = {"readinessGates": [{"conditionType": LB_READY}]} if gated else {}
    condition = {"conditions": [c for c in status.get("conditions") or []
                                if isinstance(c, dict) and c.get("type") == LB_READY]
                 } if gated else {}
    return {
        "apiVersion": raw.get("apiVersion", "v1"), "kind": raw.get("kind", "Pod"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                          "creationTimestamp", "labels") if k in meta}
        | {"annotations": {k: v for k, v in annotations.items()
                           if k in KEEP_POD_ANNOTATIONS}},
        "spec": {"nodeName": spec.get("nodeName"),
                 "containers": [{"name": c.get("name", ""), "ports": c.get("ports") or []}
                                for c in spec.get("containers") or [] if isinstance(c, dict)]}
        | gate,
        "status": {k: status[k] for k in ("phase", "podIP", "podIPs", "hostIP") if k in status}
        | condition,
    }


# ConfigMap keys whose values Podway reads: BackendTLSPolicy's CA bundle, a GatewayClass's
# parameters (podway.translate.gateway.parameters) and a TrafficPolicy's JWT key set.
_CONFIGMAP_VALUES = frozenset({"ca.crt", "engineGroup", "engineKind", JWKS_KEY})


def slim_configmap(raw: Raw) -> Raw:
    """A ConfigMap keeps the values of the keys Podway reads (``_CONFIGMAP_VALUES``); other
    keys stay, emptied (a GatewayClass's parameters refuse unknown keys, here as from files)."""
    lean(raw)
    data = raw.get("data") or {}
    raw["data"] = {k: (v if k in _CONFIGMAP_VALUES else "") for k, v in data.items()}
    raw.pop("binaryData", None)
    return raw


@dataclass(frozen=True, slots=True, kw_only=True)
class KindSpec:
    model: type[K8sObject]
    group: str  # "" for the core group
    plural: str
    namespaced: bool
    version: str = "v1"  # Gateway API kinds: replaced by the CRD's preferred version
    field_selector: str = ""
    transform: Transform = lean
    crd: bool = False  # served only while its CRD exists

    @property
    def kind(self) -> str:
        return self.model.KIND

    @property
    def crd_name(self) -> str:
        """The name of the CRD that defines the kind (``crd`` kinds)."""
        return f"{self.plural}.{self.group}"

    def api_version(self, version: str | None = None) -> str:
        version = version or self.version
        return f"{self.group}/{version}" if self.group else version


# How the source selects or trims a kind before parsing it (others: ``lean``, no selector).
# Secret types no translation reads (kubernetes.io/basic-auth stays: a BGPPeer's password).
UNREAD_SECRET_TYPES = ("kubernetes.io/service-account-token", "kubernetes.io/dockercfg",
                       "kubernetes.io/dockerconfigjson", "bootstrap.kubernetes.io/token",
                       "helm.sh/release.v1")
_SELECTORS: dict[type[K8sObject], str] = {
    Secret: ",".join(f"type!={t}" for t in UNREAD_SECRET_TYPES)}
_TRANSFORMS: dict[type[K8sObject], Transform] = {Pod: slim_pod, ConfigMap: slim_configmap}


def _spec(kind: Kind) -> KindSpec:
    """The watch of one row of the kinds table."""
    return KindSpec(model=kind.model, group=kind.group, plural=kind.plural,
                    namespaced=kind.namespaced, version=kind.versions[0],
                    field_selector=_SELECTORS.get(kind.model, ""),
                    transform=_TRANSFORMS.get(kind.model, lean), crd=kind.crd)


BUILTIN: tuple[KindSpec, ...] = tuple(_spec(k) for k in TABLE if not k.crd)  # always watched
CRDS: tuple[KindSpec, ...] = tuple(_spec(k) for k in TABLE if k.crd)  # while their CRD exists
PODWAY: tuple[KindSpec, ...] = tuple(s for s in CRDS if BY_NAME[s.kind].ships_crd)


_BY_KIND: dict[str, KindSpec] = {s.kind: s for s in (*BUILTIN, *CRDS)}


def spec_of(kind: str) -> KindSpec | None:
    """The watch spec of ``kind`` (None: not a kind the source watches). Once or twice per
    watch event: a dict, not a search."""
    return _BY_KIND.get(kind)


def served_versions(spec: KindSpec) -> list[str]:
    """The versions a CRD kind may be served at, most stable first."""
    known = gateway_api.KINDS.get(spec.kind)
    versions = known[2] if known is not None else (spec.version,)
    return sorted(versions, key=gateway_api.version_rank, reverse=True)


BUNDLE_VERSION = "gateway.networking.k8s.io/bundle-version"
GATEWAY_API_GROUPS = ("gateway.networking.k8s.io", "gateway.networking.x-k8s.io")


@dataclass(slots=True)
class Bundles:
    """The Gateway API CRDs' bundle versions as the CRD informer reports them, for
    ``Snapshot.gateway_api_bundles``; ``dirty`` until the snapshot has taken them."""

    seen: dict[str, str] | None = None
    dirty: bool = False

    def note(self, event: str, raw: Raw) -> bool:
        """One CRD event; whether it changed anything."""
        noted = noted_bundle(self.seen, event, raw)
        if noted is None:
            return False
        self.seen, self.dirty = noted, True
        return True

    def apply(self, snapshot: Snapshot, changed: dict[str, dict[Key, Any]]) -> Snapshot:
        """``snapshot`` with the bundle versions, every GatewayClass in it as a new object
        (its SupportedVersion may change), those added to ``changed`` (by kind and key)."""
        self.dirty = False
        classes = {key: obj.model_copy() for key, obj in
                   snapshot.objects.get(GatewayClass.KIND, {}).items()}
        changed.setdefault(GatewayClass.KIND, {}).update(classes)
        return replace(snapshot.replace(GatewayClass.KIND, classes),
                       gateway_api_bundles=MappingProxyType(dict(self.seen or {})))


def noted_bundle(bundles: dict[str, str] | None, event: str, raw: Raw
                 ) -> dict[str, str] | None:
    """``bundles`` (Gateway API CRD name → bundle version, "" unannotated) after one CRD
    event, or None when the event changes nothing (another API's CRD, the same version)."""
    meta = raw.get("metadata") or {}
    if (raw.get("spec") or {}).get("group") not in GATEWAY_API_GROUPS:
        return None
    out = dict(bundles or {})
    name = str(meta.get("name", ""))
    if event == "DELETED":
        out.pop(name, None)
    else:
        out[name] = str((meta.get("annotations") or {}).get(BUNDLE_VERSION, ""))
    return None if out == bundles else out


def slim_crd(raw: Raw) -> Raw:
    """A CRD keeps its name, group, names, scope, served versions and Gateway API bundle
    version (not its huge schema)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    slim = {k: meta[k] for k in ("name", "resourceVersion") if k in meta}
    bundle = (meta.get("annotations") or {}).get(BUNDLE_VERSION)
    if bundle is not None:
        slim["annotations"] = {BUNDLE_VERSION: bundle}
    return {"metadata": slim,
            "spec": {"group": spec.get("group", ""), "names": spec.get("names") or {},
                     "scope": spec.get("scope", "Namespaced"),
                     "versions": [{"name": v.get("name"), "served": v.get("served", True)}
                                  for v in spec.get("versions") or []
                                  if isinstance(v, dict)]}}


def snake(kind: str) -> str:
    """``ConfigMap`` → ``config_map`` (kubernetes-asyncio's method names)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind).lstrip("_")
