"""Load manifests (multi-document YAML or JSON, files or folders) into typed objects.

One bad document never stops the others: each failure becomes a ``LoadError`` that names the
file, the document index, the object (kind/namespace/name, as far as known) and the field path.
Unknown kinds are skipped with a debug log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from podway.model.base import K8sObject
from podway.model.registry import KINDS, api_group

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class LoadError:
    file: str
    document: int  # 0-based index of the document in the file; -1 when the file failed whole
    message: str
    object: str = ""  # kind/namespace/name as far as it could be read
    field: str = ""  # dotted path of the offending field, e.g. spec.rules[0].http.paths[1].pathType

    def __str__(self) -> str:
        where = f"{self.file}" + (f" document {self.document}" if self.document >= 0 else "")
        what = f" {self.object}" if self.object else ""
        at = f" field {self.field}" if self.field else ""
        return f"{where}{what}{at}: {self.message}"


@dataclass(slots=True)
class LoadResult:
    objects: list[K8sObject] = field(default_factory=list)
    errors: list[LoadError] = field(default_factory=list)
    documents: list[int] = field(default_factory=list)  # document index of each object


def manifest_files(paths: Iterable[Path]) -> list[Path]:
    """Expand folders (recursively, sorted) into the manifest files they hold.

    Dot files and dot folders *inside* a folder are skipped; the folder's own path may have
    any name (``~/.config/podway`` works)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*")
                                if p.is_file() and p.suffix in MANIFEST_SUFFIXES
                                and not any(part.startswith(".")
                                            for part in p.relative_to(path).parts)))
        else:
            files.append(path)
    return files


def load_paths(paths: Sequence[Path]) -> LoadResult:
    """Load every manifest under ``paths``; a duplicate object keeps its first definition."""
    result = LoadResult()
    seen: dict[tuple[str, str, str], str] = {}
    for file in manifest_files(paths):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            result.errors.append(LoadError(str(file), -1, f"cannot read: {exc}"))
            continue
        part = load_text(text, source=str(file))
        for obj, document in zip(part.objects, part.documents, strict=True):
            ident = (obj.KIND, *obj.key)
            if ident in seen:
                result.errors.append(LoadError(
                    str(file), document, f"duplicate object, already defined in {seen[ident]}",
                    object=str(obj.ref)))
                continue
            seen[ident] = f"{file} document {document}"
            result.objects.append(obj)
            result.documents.append(document)
        result.errors.extend(part.errors)
    return result


def load_text(text: str, *, source: str = "<text>") -> LoadResult:
    """Load all documents of one YAML/JSON text."""
    result = LoadResult()
    try:
        documents = list(yaml.safe_load_all(text))
    except RecursionError:
        result.errors.append(LoadError(source, -1, "invalid YAML: nested too deeply"))
        return result
    except yaml.YAMLError as exc:
        # Keep what parsed before the broken document, report the rest as one error.
        documents = _documents_until_error(text)
        reason = f"invalid YAML: {_yaml_reason(exc)}"
        result.errors.append(LoadError(source, len(documents), reason))
    for index, doc in enumerate(documents):
        for prefix, item in _items(doc):
            obj, error = parse_object(item, source=source, document=index, prefix=prefix)
            if obj is not None:
                result.objects.append(obj)
                result.documents.append(index)
            if error is not None:
                result.errors.append(error)
    return result


def parse_object(raw: Any, *, source: str = "<object>", document: int = 0, prefix: str = ""
                 ) -> tuple[K8sObject | None, LoadError | None]:
    """One raw mapping → a typed object, or ``None`` and an error (``None, None`` when skipped).

    ``prefix`` locates the object inside its document (``items[3].`` in a ``List``).
    """
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, LoadError(source, document, f"expected a mapping, got {type(raw).__name__}",
                               field=prefix.rstrip("."))
    kind, api_version = raw.get("kind"), raw.get("apiVersion")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    meta = raw.get("metadata")
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    namespace = meta.get("namespace", "default") if isinstance(meta, dict) else ""
    if cls is not None and not cls.NAMESPACED:
        namespace = ""
    ident = "/".join(str(p) for p in (kind, namespace, name) if p) if kind else ""
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None, LoadError(source, document, "apiVersion and kind must be strings",
                               object=ident, field=prefix + ("kind" if not isinstance(kind, str)
                                                             else "apiVersion"))
    group = api_group(api_version)
    if cls is not None and (group in cls.LEGACY_GROUPS or (
            group in cls.API_GROUPS and cls.API_VERSIONS
            and api_version not in cls.API_VERSIONS)):
        return None, LoadError(source, document,
                               f"{api_version} {kind} is not supported; use "
                               f"{' or '.join(cls.API_VERSIONS or cls.API_GROUPS)}",
                               object=ident, field=f"{prefix}apiVersion")
    if cls is None or group not in cls.API_GROUPS:
        log.debug("skipping unknown kind source=%s document=%d kind=%s apiVersion=%s",
                  source, document, kind, api_version)
        return None, None
    try:
        return cls.model_validate(raw), None
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return None, LoadError(source, document, f"{first['msg']}{more}", object=ident,
                               field=prefix + field_path(first["loc"]))


def field_path(loc: Iterable[int | str]) -> str:
    """pydantic's ``('spec', 'rules', 0, 'host')`` → ``spec.rules[0].host``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _NOT_FIELDS or "[" in str(part):
            continue  # validator wrappers and union tags (int | str) are not fields
        else:
            out += f".{part}" if out else str(part)
    return out


_NOT_FIELDS = frozenset({"function-after", "function-before", "int", "str", "float", "bool"})


def _items(doc: Any) -> Iterator[tuple[str, Any]]:
    """The objects of a document with their location prefix (``items[i].`` inside a List)."""
    if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
        for i, item in enumerate(doc["items"]):
            yield f"items[{i}].", item
    else:
        yield "", doc


def _documents_until_error(text: str) -> list[Any]:
    docs: list[Any] = []
    try:
        for doc in yaml.safe_load_all(text):
            docs.append(doc)
    except (yaml.YAMLError, RecursionError):
        pass
    return docs


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(problem)
