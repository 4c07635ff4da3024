"""The three patch formats the API server accepts, as Kubernetes clients use them.

- JSON merge patch (RFC 7386): ``null`` deletes a key, objects merge, lists are replaced.
- JSON patch (RFC 6902): ``add``/``remove``/``replace``/``move``/``copy``/``test`` on JSON
  pointers; a failed ``test`` or a missing path is a ``PatchError`` (the server answers 422).
- Strategic merge patch: a merge patch where lists of objects with a known merge key (containers
  by ``name``, conditions by ``type``, ports by ``containerPort``/``port`` ...) merge element by
  element, ``$patch: delete``/``replace``, ``$retainKeys`` and ``$deleteFromPrimitiveList``
  directives apply (``$setElementOrder`` is accepted, the order it gives is not kept). The real
  server reads merge keys from the Go types; this table covers the lists Podway and kubectl
  patch. Lists without a merge key are replaced, as in the real server.

All functions are pure: they return a new document and never mutate their inputs.
"""

from __future__ import annotations

from typing import Any

from podway.kube.emulator.jsondata import clone

# list field name -> merge key (the server's patchMergeKey for the fields clients patch)
MERGE_KEYS: dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "env": "name", "volumeMounts": "mountPath",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
    "tolerations": "key", "addresses": "type", "taints": "key",
    "hostAliases": "ip", "topologySpreadConstraints": "topologyKey", "volumeDevices": "devicePath",
    "resourceClaims": "name", "schedulingGates": "name", "podIPs": "ip", "hostIPs": "ip",
}
PORT_KEYS = ("containerPort", "port")  # ports: containers use containerPort, Services port
PRIMITIVE_SETS = frozenset({"finalizers"})  # merged as sets, like the server's "merge" strategy


class PatchError(ValueError):
    """The patch cannot apply (bad pointer, failed test, malformed body): HTTP 422."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for the fields in ``MERGE_KEYS`` (see the module docstring)."""
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/") and isinstance(value, list):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):  # $setElementOrder/…: the order is not modelled
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value)
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):  # e.g. a Deployment strategy switched to Recreate
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        sample = next((i for i in items if isinstance(i, dict)), {})
        return next((k for k in PORT_KEYS if k in sample), None)
    return MERGE_KEYS.get(field)


def _merge_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if field in PRIMITIVE_SETS:
        return list(current) + [v for v in patch if v not in current]
    key = _merge_key(field, patch)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return clone(patch)
    result = [clone(i) for i in current]
    for item in patch:
        index = next((n for n, old in enumerate(result)
                      if isinstance(old, dict) and old.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = clone(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"malformed operation: {op!r}")
        name, path = op["op"], _pointer(str(op["path"]))
        if name == "add":
            doc = _add(doc, path, clone(op.get("value")))
        elif name == "remove":
            doc, _ = _remove(doc, path)
        elif name == "replace":
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, clone(op.get("value")))
        elif name in ("move", "copy"):
            source = _pointer(str(op.get("from", "")))
            value = clone(_get(doc, source))
            if name == "move":
                doc, _ = _remove(doc, source)
            doc = _add(doc, path, value)
        elif name == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"test failed at {op['path']}")
        else:
            raise PatchError(f"unknown operation {name!r}")
    return doc


def _pointer(text: str) -> list[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise PatchError(f"bad JSON pointer {text!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in text[1:].split("/")]


def _get(doc: Any, path: list[str]) -> Any:
    for part in path:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(f"path /{'/'.join(path)} does not exist")
    return doc


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _get(doc, path[:-1]), path[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else int(last) if last.isdigit() else -1
        if not 0 <= index <= len(parent):
            raise PatchError(f"bad list index {last!r}")
        parent.insert(index, value)
    else:
        raise PatchError(f"cannot add under /{'/'.join(path[:-1])}")
    return doc


def _remove(doc: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        return None, doc
    parent, last = _get(doc, path[:-1]), path[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise PatchError(f"path /{'/'.join(path)} does not exist")
