"""Golden tests of ``podway migrate to-gateway``: ``migrate/<case>.in.yaml`` Ingresses →
``<case>.out.yaml`` (the Gateway API objects, then the notes as comments). Each output must also
be something Podway serves without an error: it is loaded and translated with a Service per
backendRef and a Secret per certificateRef. A document of ``kind: ConvertOptions``
(``podway.io/test``) sets the options. Regenerate with ``pytest --update-golden``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from podway.model import Ingress, Snapshot
from podway.model.loader import load_text
from podway.tools.migrate.to_gateway import ConvertOptions, convert, dump
from podway.translate import Severity, TranslateOptions, translate
from tests.certs import tls_secret

CASES = sorted((Path(__file__).parent / "migrate").glob("*.in.yaml"))


def options_of(text: str) -> ConvertOptions:
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "ConvertOptions":
            return ConvertOptions(**doc.get("spec", {}))
    return ConvertOptions()


def world(objects: tuple[dict[str, Any], ...]) -> str:
    """A Service for every backendRef and a Secret for every certificateRef of ``objects``."""
    ports: dict[tuple[str, str], set[int]] = {}
    secrets: set[tuple[str, str]] = set()
    gateway_ns = next(o["metadata"]["namespace"] for o in objects if o["kind"] == "Gateway")
    for obj in objects:
        if obj["kind"] in ("HTTPRoute", "TLSRoute"):
            for rule in obj["spec"]["rules"]:
                for ref in rule.get("backendRefs", []):
                    ports.setdefault((obj["metadata"]["namespace"], ref["name"]), set()).add(
                        ref["port"])
        if obj["kind"] == "Gateway":
            for listener in obj["spec"]["listeners"]:
                for ref in listener.get("tls", {}).get("certificateRefs", []):
                    secrets.add((ref.get("namespace", gateway_ns), ref["name"]))
    docs = [yaml.safe_dump({"apiVersion": "v1", "kind": "Service",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {"ports": [{"name": f"p{p}", "port": p}
                                               for p in sorted(numbers)]}})
            for (ns, name), numbers in sorted(ports.items())]
    docs += [tls_secret(name, ns) for ns, name in sorted(secrets)]
    return "---\n".join(docs)


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".in.yaml"))
def test_to_gateway_golden(case: Path, update_golden: bool) -> None:
    """The case converts to exactly the recorded objects and notes."""
    text = case.read_text()
    loaded = load_text(text, source=case.name)
    assert not loaded.errors, loaded.errors
    result = convert(loaded.objects, options_of(text))
    actual = dump(result.objects) + "".join(f"# note: {n}\n" for n in result.notes)
    expected_file = case.with_name(case.name.replace(".in.yaml", ".out.yaml"))
    if update_golden or not expected_file.exists():
        expected_file.write_text(actual)
        if not update_golden:
            pytest.fail(f"{expected_file.name} was missing and has been written; review it")
    assert actual == expected_file.read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".in.yaml"))
def test_to_gateway_output_is_served_without_errors(case: Path) -> None:
    """Podway loads and translates the output with no error: every listener, route and
    reference of the conversion is one it accepts."""
    text = case.read_text()
    result = convert(load_text(text).objects, options_of(text))
    served = load_text(dump(result.objects) + "---\n" + world(result.objects))
    assert not served.errors, served.errors
    translation = translate(Snapshot.of_objects(served.objects),
                            TranslateOptions(address="198.18.0.10"))
    errors = [p for p in translation.problems if p.severity is Severity.ERROR]
    assert errors == []
    routes = [o for o in result.objects if o["kind"] == "HTTPRoute"]
    assert len(translation.ir.listeners) >= 1
    assert routes


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name.removesuffix(".in.yaml"))
def test_to_gateway_drops_no_ingress_in_silence(case: Path) -> None:
    """Every Ingress gives a route named after it, joins another's as a canary, or is named in
    a note (an ssl-passthrough Ingress once vanished with neither)."""
    text = case.read_text()
    ingresses = [o for o in load_text(text).objects if isinstance(o, Ingress)]
    result = convert(ingresses, options_of(text))
    routes = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in result.objects
              if o["kind"] in ("HTTPRoute", "TLSRoute")}
    noted = {n.ingress for n in result.notes}
    for ing in ingresses:
        ns, name = ing.metadata.namespace, ing.metadata.name
        canary = ing.metadata.annotations.get("nginx.ingress.kubernetes.io/canary") == "true"
        named = any(r_ns == ns and (r == name or r.startswith(name + "-"))
                    for r_ns, r in routes)
        assert named or canary or f"{ns}/{name}" in noted, f"{ns}/{name} vanished"


def test_there_are_golden_cases() -> None:
    assert len(CASES) >= 5
