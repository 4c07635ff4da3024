"""Loader: typed objects out, every bad document reported with file, index, object and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from podway.model import Ingress, Service
from podway.model import loader as loader_module
from podway.model.loader import LoadLimits, load_text
from podway.sources.files import load_paths

GOOD_SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  ports: [{name: http, port: 80, targetPort: 8080}]
"""


def test_loads_typed_objects_and_skips_unknown_kinds() -> None:
    """Known kinds become typed models; unknown kinds are skipped with a warning, no error."""
    result = load_text(GOOD_SERVICE
                       + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n")
    assert result.errors == []
    assert [w.object for w in result.warnings] == ["Deployment/default/x"]
    [svc] = result.objects
    assert isinstance(svc, Service)
    assert svc.spec.ports[0].target_port == 8080
    assert svc.key == ("shop", "web")


def test_bad_field_names_file_document_object_and_path() -> None:
    """A wrong type is reported with its document index, object and dotted field path."""
    bad = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: broken, namespace: shop}
spec:
  rules:
  - http:
      paths:
      - path: /x
        pathType: Sometimes
        backend: {service: {name: web, port: {number: 80}}}
"""
    result = load_text(GOOD_SERVICE + "---" + bad, source="m.yaml")
    assert [type(o) for o in result.objects] == [Service]
    [error] = result.errors
    assert error.file == "m.yaml"
    assert error.document == 1
    assert error.object == "Ingress/shop/broken"
    assert error.field == "spec.rules[0].http.paths[0].pathType"


def test_broken_yaml_keeps_documents_before_it() -> None:
    """Invalid YAML is one error; the documents before the break still load."""
    result = load_text(GOOD_SERVICE + "---\nkind: [unclosed\n", source="m.yaml")
    assert len(result.objects) == 1
    [error] = result.errors
    assert "invalid YAML" in error.message
    assert error.document == 1


def test_folder_load_reports_duplicates_and_keeps_first(tmp_path: Path) -> None:
    """The same object in two files: the first file's copy wins, the second is an error."""
    (tmp_path / "a.yaml").write_text(GOOD_SERVICE)
    (tmp_path / "b.yaml").write_text(GOOD_SERVICE.replace("port: 80", "port: 81"))
    result = load_paths([tmp_path])
    [svc] = result.objects
    assert isinstance(svc, Service)
    assert svc.spec.ports[0].port == 80
    [error] = result.errors
    assert "duplicate" in error.message
    assert error.file.endswith("b.yaml")


def test_ingress_backend_requires_exactly_one_port_form() -> None:
    """port.name and port.number together are rejected, naming the port field."""
    text = """
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: i}
spec:
  defaultBackend: {service: {name: web, port: {number: 80, name: http}}}
"""
    result = load_text(text)
    assert not [o for o in result.objects if isinstance(o, Ingress)]
    [error] = result.errors
    assert error.field.startswith("spec.defaultBackend.service.port")


def test_deeply_nested_yaml_is_one_error_not_a_crash() -> None:
    """YAML nested thousands deep (RecursionError in the parser) is a load error for the file."""
    result = load_text("a: " + "[" * 5000 + "]" * 5000, source="deep.yaml")
    assert result.objects == []
    [error] = result.errors
    assert "nest" in error.message  # libyaml: "exceeded maximum nesting depth"


def test_naive_timestamps_are_utc_and_never_overflow() -> None:
    """A timestamp without a zone is UTC; year 1 still sorts (oldest) without raising."""
    text = """
apiVersion: v1
kind: Service
metadata: {name: a, creationTimestamp: "0001-01-01T00:00:00"}
---
apiVersion: v1
kind: Service
metadata: {name: b, creationTimestamp: "2026-01-01T00:00:00Z"}
"""
    a, b = load_text(text).objects
    assert a.metadata.creation_timestamp is not None
    assert a.metadata.creation_timestamp.utcoffset() is not None
    assert sorted([b, a], key=lambda o: o.age_key()) == [a, b]


def test_unsupported_versions_of_known_kinds_are_reported() -> None:
    """networking.k8s.io/v1beta1 and extensions/v1beta1 Ingresses are errors, not silent."""
    text = """
apiVersion: networking.k8s.io/v1beta1
kind: Ingress
metadata: {name: old}
spec: {backend: {serviceName: web, servicePort: 80}}
---
apiVersion: extensions/v1beta1
kind: Ingress
metadata: {name: older}
---
apiVersion: example.com/v1
kind: Ingress
metadata: {name: someone-elses}
"""
    result = load_text(text)
    assert result.objects == []
    assert [(e.document, e.field) for e in result.errors] == [(0, "apiVersion"), (1, "apiVersion")]
    assert "use networking.k8s.io/v1" in result.errors[0].message


def test_error_locations_inside_lists_and_unions() -> None:
    """List items are located as items[i]; union tags never appear in field paths; cluster-
    scoped objects are named without a namespace."""
    text = """
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: ok}
- apiVersion: v1
  kind: Service
  metadata: {name: bad}
  spec: {ports: [{port: 80, targetPort: [1]}]}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: c}
spec: {controller: [1]}
"""
    result = load_text(text)
    first, second = result.errors
    assert first.field == "items[1].spec.ports[0].targetPort"
    assert second.object == "IngressClass/c"


def test_duplicates_name_their_document(tmp_path: Path) -> None:
    """A duplicate object's error says which document of the file repeats it."""
    (tmp_path / "a.yaml").write_text(GOOD_SERVICE + "---" + GOOD_SERVICE)
    [error] = load_paths([tmp_path]).errors
    assert error.document == 1
    assert "a.yaml document 0" in error.message


def _bomb(levels: int, width: int = 10) -> str:
    """The classic alias bomb: each level is ``width`` aliases of the one before."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]"
              for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    """Anchors expanding to a million paths of an Ingress: one error for the file, found
    before the validator walks the expansion (which took GBs), nothing built."""
    import tracemalloc

    text = ("apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: bomb}\n"
            "x: [&p {path: /, pathType: Prefix, backend: {service: {name: w, port: {number: 1}}}},"
            " &ps [" + ",".join(["*p"] * 1000) + "], &r {http: {paths: *ps}}]\n"
            "spec: {rules: [" + ",".join(["*r"] * 1000) + "]}\n")
    assert len(text) < 9000  # 1,000 rules of 1,000 paths each
    tracemalloc.start()
    try:
        result = load_text(text, source="bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.objects == []
    [error] = result.errors
    assert (error.file, error.document) == ("bomb.yaml", -1)
    assert "aliases expand" in error.message
    assert peak < 5_000_000


def test_a_few_plain_anchors_are_fine() -> None:
    """Anchors for shared labels (a handful of aliases) load as usual."""
    text = """
apiVersion: v1
kind: Service
metadata: {name: a, labels: &l {app: web}}
spec: {selector: *l, ports: [{port: 80}]}
"""
    result = load_text(text)
    assert result.errors == []
    assert len(result.objects) == 1


def test_a_recursive_alias_is_an_error() -> None:
    """An alias of its own enclosing node (a cyclic structure) is refused, not built."""
    [error] = load_text("a: &a [1, *a]\n", source="loop.yaml").errors
    assert "recursive alias" in error.message


@pytest.mark.parametrize(("text", "limits", "expected"), [
    (GOOD_SERVICE * 1, LoadLimits(max_file_bytes=50), "bytes per file"),
    ("---\n".join([GOOD_SERVICE] * 3), LoadLimits(max_objects_per_file=2), "3 objects"),
    ("---\n" * 5, LoadLimits(max_objects_per_file=2), "at least 5 documents"),
    ("a: " + "[" * 10 + "]" * 10, LoadLimits(max_depth=8), "nested deeper than the limit of 8"),
    ("a: &x " + "[" * 10 + "]" * 10, LoadLimits(max_depth=8), "nested deeper than the limit"),
    (_bomb(2), LoadLimits(max_alias_nodes=50), "more than 50 extra nodes"),
])
def test_each_limit_is_one_error_naming_the_file(text: str, limits: LoadLimits,
                                                 expected: str) -> None:
    """Size, object count, depth (with and without anchors) and alias expansion limits."""
    result = load_text(text, source="big.yaml", limits=limits)
    assert result.objects == []
    [error] = result.errors
    assert error.file == "big.yaml"
    assert expected in error.message


def test_messages_never_copy_a_huge_input() -> None:
    """A megabyte name or apiVersion is clipped in the error, which still names the object."""
    huge = "x" * 1_000_000
    text = f"apiVersion: v1\nkind: Service\nmetadata: {{name: {huge}}}\nspec: {{ports: 7}}\n"
    [error] = load_text(text).errors
    assert len(str(error)) < 1000
    assert error.object.startswith("Service/default/xxx")
    text = f"apiVersion: gateway.networking.k8s.io/{huge}\nkind: HTTPRoute\nmetadata: {{name: r}}\n"
    [error] = load_text(text).errors
    assert len(str(error)) < 1000


def test_unknown_kinds_are_warnings_and_unserved_versions_errors() -> None:
    """A Deployment is a warning naming document and kind; a v9 HTTPRoute is an error."""
    text = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
---
apiVersion: gateway.networking.k8s.io/v9
kind: HTTPRoute
metadata: {name: r}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: HTTPRoute
metadata: {name: ok}
"""
    result = load_text(text, source="m.yaml")
    assert [o.key for o in result.objects] == [("default", "ok")]
    [warning] = result.warnings
    assert (warning.file, warning.document, warning.object) == ("m.yaml", 0,
                                                                "Deployment/shop/web")
    assert "Deployment" in warning.message
    [error] = result.errors
    assert (error.document, error.field, error.object) == (1, "apiVersion", "HTTPRoute/default/r")
    assert "gateway.networking.k8s.io/v1" in error.message


def test_the_depth_limit_of_a_plain_text_needs_no_second_walk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lean loader measured the nesting while building: the limit holds without walking
    every value again (a cold start's parse at 10,000 routes spent ~8 % in that walk)."""
    def walk(*_args: object) -> str | None:
        raise AssertionError("walked the documents again")

    monkeypatch.setattr(loader_module, "_too_deep", walk)
    deep = load_text("a: " + "[" * 10 + "]" * 10, limits=LoadLimits(max_depth=8))
    assert deep.errors
    assert "nested deeper than the limit of 8" in deep.errors[0].message
    shallow = load_text("a: " + "[" * 7 + "]" * 7, limits=LoadLimits(max_depth=8))
    assert not any("nested" in e.message for e in shallow.errors)
