"""One kinds table (``podway.model.kinds``): every row reaches the manifest loader, the Kubernetes
source, the status writer and the translator, and no module keeps a list of kinds of its own — so
adding a kind (a route kind, say) is one row, its model and its translation."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from podway.model import kinds
from podway.model.kinds import TABLE, Kind, Role
from podway.model.loader import load_text

SRC = Path(__file__).parents[3] / "src/podway"
ROWS = pytest.mark.parametrize("kind", TABLE, ids=lambda k: k.name)
# Collections that name several kinds because each kind's translation differs, not because they
# list the kinds Podway reads: (module, the kinds named) → why.
PER_KIND_TRANSLATION = {
    ("translate/gateway/translation.py", frozenset(k.name for k in TABLE if k.role is Role.ROUTE)):
        "_FLAVOUR: how each route kind is translated (checked complete below)",
    ("translate/traffic_policies.py", frozenset({"HTTPRoute", "GRPCRoute", "Ingress"})):
        "the kinds a TrafficPolicy may target (its translation)",
    ("translate/traffic.py", frozenset({"HTTPRoute", "GRPCRoute", "Ingress"})):
        "the kinds that carry route-level traffic settings (their translation)",
    ("programs/vip/metallb.py", frozenset({"BGPPeer", "BGPAdvertisement", "BFDProfile",
                                           "Community", "IPAddressPool", "L2Advertisement"})):
        "KNOWN_FIELDS: the spec fields the speakers read of each MetalLB kind (per kind)",
}


# The smallest valid spec of the kinds whose spec is required.
REQUIRED_SPEC = {"Gateway": {"gatewayClassName": "podway",
                             "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]},
                 "ListenerSet": {"parentRef": {"name": "gw"},
                                 "listeners": [{"name": "http", "protocol": "HTTP",
                                                "port": 80}]}}


def manifest(kind: Kind, version: str) -> str:
    meta = {"name": "x", **({"namespace": "ns"} if kind.namespaced else {})}
    spec = {"spec": REQUIRED_SPEC[kind.name]} if kind.name in REQUIRED_SPEC else {}
    return json.dumps({"apiVersion": kind.api_version(version), "kind": kind.name,
                       "metadata": meta, **spec})


@ROWS
def test_every_kind_loads_from_a_manifest_at_every_version(kind: Kind) -> None:
    """The loader turns a manifest of the row's kind, at each version the row names, into the
    row's model (the files source reads manifests with this loader)."""
    for version in kind.versions:
        result = load_text(manifest(kind, version))
        assert result.errors == [], (version, result.errors)
        [obj] = result.objects
        assert type(obj) is kind.model
        assert obj.key == (("ns" if kind.namespaced else ""), "x")
    assert kind.group in kind.model.API_GROUPS


@ROWS
def test_every_kind_is_watched_by_the_kube_source(kind: Kind) -> None:
    """The Kubernetes source watches the row where the row says it lives; CRD kinds only while
    their CRD exists, and the CRDs Podway ships are the ones in the chart."""
    from podway.sources.kube_kinds import BUILTIN, CRDS, PODWAY, spec_of

    spec = spec_of(kind.name)
    assert spec is not None
    assert (spec.model, spec.group, spec.plural, spec.namespaced, spec.version) == (
        kind.model, kind.group, kind.plural, kind.namespaced, kind.versions[0])
    assert (spec in CRDS, spec in BUILTIN, spec in PODWAY) == (kind.crd, not kind.crd,
                                                              kind.ships_crd)
    chart = Path(__file__).parents[3] / "deploy/helm/podway/crds" / f"{kind.crd_name}.yaml"
    assert chart.exists() == kind.ships_crd


@ROWS
def test_the_status_writer_knows_every_kind_with_status(kind: Kind) -> None:
    """The controller keeps the API's status of, and writes status to, exactly the rows with
    ``status``; the status document reads acceptance from those defined by a CRD."""
    from podway.programs.controller import source
    from podway.programs.controller import status_desired as status
    from podway.status import document

    assert (kind.name in source.STATUS_KINDS) == kind.status
    assert (kind.name in status.CRD_STATUS_KINDS) == (kind.status and kind.crd)
    assert (kind.name in document.CRD_STATUS_KINDS) == (kind.status and kind.crd)


def test_the_translator_collects_every_route_kind_and_has_its_translation() -> None:
    """Every route row is collected by the Gateway translation and has a translation of its
    own (a flavour); the route rows are what the incremental path treats as routes."""
    from podway.translate.core.status import POLICY_KINDS
    from podway.translate.gateway import translation as gateway

    routes = {k.name for k in TABLE if k.role is Role.ROUTE}
    assert {m.KIND for m in gateway.ROUTE_MODELS} == routes
    assert set(gateway._FLAVOUR) == routes
    assert {k.name for k in TABLE if k.role is Role.POLICY} == POLICY_KINDS


def kind_lists(tree: ast.AST, names: set[str], models: set[str]
               ) -> list[tuple[int, frozenset[str]]]:
    """Literal collections that name three or more kinds of the table (by name or model)."""
    skip = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        named = {e.value for e in elements if isinstance(e, ast.Constant) and e.value in names}
        named |= {e.elts[1].value for e in elements if isinstance(e, ast.Tuple)
                  and len(e.elts) == 2 and isinstance(e.elts[1], ast.Constant)
                  and e.elts[1].value in names}  # (group, kind) pairs
        named |= {e.id for e in elements if isinstance(e, ast.Name) and e.id in models}
        if len(named) >= 3:
            found.append((node.lineno, frozenset(named)))
    return found


def test_no_other_list_of_kinds_exists() -> None:
    """Outside the table no module lists three or more of its kinds (by name, (group, kind) or
    model class), except the per-kind translations named in ``PER_KIND_TRANSLATION``."""
    names = {k.name for k in TABLE}
    models = {k.model.__name__ for k in TABLE}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module == "model/kinds.py":
            continue
        for line, named in kind_lists(ast.parse(path.read_text()), names, models):
            if (module, named) not in PER_KIND_TRANSLATION:
                found.append(f"{module}:{line}: {sorted(named)}")
    assert not found, "lists of kinds outside podway.model.kinds:\n" + "\n".join(found)


def test_the_views_are_the_table() -> None:
    """The loader's, the sources' and the Gateway API names are views of the table."""
    from podway.kube import gateway_api

    assert {k.name: k.model for k in TABLE} == kinds.KINDS
    assert {k.name: (k.plural, k.namespaced, k.versions) for k in TABLE
                                 if k.group == gateway_api.GROUP} == gateway_api.KINDS
    assert len(kinds.BY_NAME) == len(TABLE)  # one row per kind
