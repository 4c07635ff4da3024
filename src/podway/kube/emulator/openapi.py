"""The OpenAPI v3 documents kubectl reads, and strict field validation, for what is served.

The schema of a built-in kind is generated from kubernetes-asyncio's models (the same
Kubernetes version the client speaks): every model's ``openapi_types``/``attribute_map`` give
its JSON fields and their types. A CRD kind's schema is its own ``openAPIV3Schema``, with
``metadata`` as ObjectMeta, as the API server publishes it. List fields with a strategic merge
key (``patching.MERGE_KEYS``) carry ``x-kubernetes-patch-merge-key``/``-strategy``, so the patch
kubectl computes and the one the emulator applies agree.

What kubectl does with it: ``kubectl apply`` (``--validate=true``, the default) asks the
``/openapi/v3`` index for the group-version, finds the PATCH operation of the kind (by
``x-kubernetes-group-version-kind``) and, since it declares the ``fieldValidation`` query
parameter, sends ``fieldValidation=Strict`` and leaves validation to the server:
``unknown_fields`` is that check (``strict decoding error: unknown field "spec.x"``).
"""

from __future__ import annotations

import functools
from typing import Any

from podway.kube.emulator.patching import MERGE_KEYS
from podway.kube.emulator.resources import ResourceType

Obj = dict[str, Any]
SCALARS: dict[str, Obj] = {
    "str": {"type": "string"}, "int": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"}, "float": {"type": "number", "format": "double"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "object": {"x-kubernetes-preserve-unknown-fields": True},  # int-or-string, raw JSON
}
OBJECT_META = "V1ObjectMeta"
WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation")


def _models() -> Any:
    from kubernetes_asyncio.client import models  # heavy: imported on the first document

    return models


def model_name(rtype: ResourceType) -> str | None:
    """The kubernetes-asyncio model of a built-in kind, or None (a CRD kind, or unknown)."""
    if rtype.crd is not None:
        return None
    return _model_of(rtype.group, rtype.version, rtype.kind)


@functools.cache
def _model_of(group: str, version: str, kind: str) -> str | None:
    models = _models()
    prefix = "Core" if not group else group.split(".", maxsplit=1)[0].capitalize()
    for name in (f"{prefix}{version.capitalize()}{kind}", f"{version.capitalize()}{kind}"):
        if hasattr(models, name):
            return name
    return None


def _list_merge(field: str, item_model: str | None) -> Obj:
    if field == "ports" and item_model is not None:
        fields = set(getattr(_models(), item_model).attribute_map.values())
        key = next((k for k in ("containerPort", "port") if k in fields), None)
        if key is None or item_model not in ("V1ContainerPort", "V1ServicePort"):
            return {}
    else:
        key = MERGE_KEYS.get(field)
    if key is None:
        return {}
    return {"x-kubernetes-patch-merge-key": key, "x-kubernetes-patch-strategy": "merge"}


def _type_schema(typ: str, field: str, out: dict[str, Obj]) -> Obj:
    if typ in SCALARS:
        return dict(SCALARS[typ])
    if typ.startswith("list[") and typ.endswith("]"):
        inner = typ[5:-1]
        item_model = inner if inner not in SCALARS and not inner.startswith(("list", "dict")) \
            else None
        return {"type": "array", "items": _type_schema(inner, field, out),
                **_list_merge(field, item_model)}
    if typ.startswith("dict(") and typ.endswith(")"):
        value = typ[5:-1].split(",", 1)[1].strip()
        return {"type": "object", "additionalProperties": _type_schema(value, field, out)}
    _model_schema(typ, out)
    return {"$ref": f"#/components/schemas/{typ}"}


def _model_schema(name: str, out: dict[str, Obj]) -> None:
    if name in out:
        return
    model = getattr(_models(), name, None)
    if model is None:
        out[name] = {"x-kubernetes-preserve-unknown-fields": True}
        return
    out[name] = {}  # placeholder first: models refer to themselves (JSONSchemaProps)
    props = {model.attribute_map[attr]: _type_schema(typ, model.attribute_map[attr], out)
             for attr, typ in model.openapi_types.items()}
    out[name] = {"type": "object", "properties": props}


@functools.cache
def _builtin_components(name: str) -> tuple[tuple[str, Obj], ...]:
    out: dict[str, Obj] = {}
    _model_schema(name, out)
    return tuple(out.items())


@functools.cache
def _builtin_kind(name: str, group: str, version: str, kind: str) -> dict[str, Obj]:
    """A built-in kind's components, made once (callers only read them)."""
    components = dict(_builtin_components(name))
    components[name] = {**components[name], "x-kubernetes-group-version-kind": [
        {"group": group, "version": version, "kind": kind}]}
    return components


def _gvk(rtype: ResourceType) -> Obj:
    return {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}


def kind_schema(rtype: ResourceType) -> tuple[str, dict[str, Obj]]:
    """The component name of a kind's schema and every component it needs."""
    name = model_name(rtype)
    if name is not None:
        return name, _builtin_kind(name, rtype.group, rtype.version, rtype.kind)
    name = f"{rtype.group}.{rtype.version}.{rtype.kind}"
    components = dict(_builtin_components(OBJECT_META))
    root = dict(((rtype.crd or {}).get("schema") or {}).get("openAPIV3Schema")
                or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    props = dict(root.get("properties") or {})
    props.update({"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                  "metadata": {"$ref": f"#/components/schemas/{OBJECT_META}"}})
    root["properties"] = props
    components[name] = root
    components[name] = {**components[name], "x-kubernetes-group-version-kind": [_gvk(rtype)]}
    return name, components


def _operation(rtype: ResourceType, action: str, ref: str, params: tuple[str, ...]) -> Obj:
    body = {"content": {"application/json": {"schema": {"$ref": ref}}}}
    op: Obj = {
        "operationId": f"{action}{rtype.kind}", "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rtype),
        "parameters": [{"name": p, "in": "query", "schema": {"type": "string"},
                        "uniqueItems": True} for p in params],
        "responses": {"200": body}}
    if action in ("post", "put", "patch"):
        types = ("application/json",) if action != "patch" else (
            "application/json-patch+json", "application/merge-patch+json",
            "application/strategic-merge-patch+json", "application/apply-patch+yaml")
        op["requestBody"] = {"content": {t: {"schema": {"$ref": ref}} for t in types}}
    return op


def document(types: list[ResourceType], group: str, version: str) -> Obj:
    """The OpenAPI v3 document of one group-version (``/openapi/v3/apis/{group}/{version}``)."""
    paths: Obj = {}
    components: dict[str, Obj] = {}
    for rtype in sorted(types, key=lambda t: t.plural):
        if rtype.group != group or rtype.version != version:
            continue
        name, needed = kind_schema(rtype)
        components.update(needed)
        ref = f"#/components/schemas/{name}"
        base = f"/apis/{group}/{version}" if group else "/api/v1"
        scope = f"{base}/namespaces/{{namespace}}" if rtype.namespaced else base
        paths[f"{scope}/{rtype.plural}"] = {
            "get": _operation(rtype, "list", ref, ("labelSelector", "watch")),
            "post": _operation(rtype, "post", ref, WRITE_PARAMS)}
        paths[f"{scope}/{rtype.plural}/{{name}}"] = {
            "get": _operation(rtype, "get", ref, ()),
            "put": _operation(rtype, "put", ref, WRITE_PARAMS),
            "patch": _operation(rtype, "patch", ref, (*WRITE_PARAMS, "force")),
            "delete": _operation(rtype, "delete", ref, ("dryRun",))}
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes (Podway emulator)", "version": "v1.31.0"},
            "paths": paths, "components": {"schemas": components}}


def index(types: list[ResourceType]) -> Obj:
    """``/openapi/v3``: one entry per served group-version."""
    paths: Obj = {}
    for rtype in types:
        key = f"apis/{rtype.group}/{rtype.version}" if rtype.group else "api/v1"
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}"}
    return {"paths": dict(sorted(paths.items()))}


def unknown_fields(obj: Any, rtype: ResourceType) -> list[str]:
    """Fields of ``obj`` its kind's schema does not declare, as ``spec.containers[0].x``."""
    name, components = kind_schema(rtype)
    found: list[str] = []
    _walk(obj, components[name], components, "", found)
    return found


def _walk(value: Any, schema: Obj, components: dict[str, Obj], path: str,
          found: list[str]) -> None:
    while "$ref" in schema:
        schema = components.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
    for part in schema.get("allOf") or []:
        _walk(value, part, components, path, found)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        open_ = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if props is not None and key in props:
                _walk(item, props[key], components, where, found)
            elif isinstance(extra, dict):
                _walk(item, extra, components, where, found)
            elif props is not None and not open_ and extra is not True:
                found.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for n, item in enumerate(value):
            _walk(item, schema["items"], components, f"{path}[{n}]", found)


