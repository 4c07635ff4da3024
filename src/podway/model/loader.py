"""Manifest text (multi-document YAML or JSON) → typed objects, within bounded resources.

Text parsing only: listing folders, reading files and the rule for the same object in two files
live in ``podway.sources.files``. One bad document never stops the others: each failure becomes a
``LoadError`` that names the source, the document index, the object (kind/namespace/name, as far
as known) and the field path.

Invariants:

* Bounded input (``LoadLimits``): a text larger than its limits, with more objects, aliases that
  expand beyond a small budget (the "billion laughs" alias bomb), or nesting deeper than allowed
  is one ``LoadError`` for the whole text, found *before* anything is expanded, so memory and
  time stay proportional to the bytes read. Messages are clipped, so no input is copied whole
  into a log line or status file.
* Unknown kinds are never dropped in silence: each is a warning (``LoadResult.warnings``) naming
  the document and kind; a known kind in an API version Podway does not serve is an error.
* Parsing uses libyaml (``CSafeLoader``) when present: about 9 times faster than the
  pure-Python loader on large files (bench/source_stall.py); plain documents are then built by
  a lean constructor with the same values (``podway.model.yaml_fast``).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from podway.model.base import K8sObject
from podway.model.kinds import KINDS, api_group
from podway.model.yaml_fast import FastSafeLoader

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# API versions served per group, for kinds that list none of their own (every Gateway API kind
# accepts each version the project has shipped it in; anything else is a typo or from the future).
_SERVED_VERSIONS: dict[str, tuple[str, ...]] = {
    "gateway.networking.k8s.io": ("v1", "v1beta1", "v1alpha2", "v1alpha3"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadLimits:
    """Bounds on what one manifest text (and, in the file source, one folder) may cost.

    Each limit, once exceeded, is one load error naming the file; the defaults admit any
    realistic hand-written or generated folder (the project's own generators write 20,000
    objects to one file; 50,000 plain objects load) while keeping a hostile file from taking the
    control plane (and with it Envoy's config) down: what bounds a bomb is the bytes, the aliases
    and the depth, each checked before anything is built. Raise them for giant inputs.
    """

    max_file_bytes: int = 32 * 1024 * 1024
    """Bytes per file (default 32 MiB: 50,000 plain objects of ~600 bytes). Checked before
    reading; memory and parse time grow linearly with it (~50 ms/MiB with libyaml, ~0.3 ms per
    object with the typed model). The API server's own per-object cap is 1.5 MiB."""
    max_objects_per_file: int = 100_000
    """Documents plus ``List`` items per file (default 100,000, as many as ``max_objects_total``:
    the bytes bound a file already, so this only names the problem sooner). A big file stalls
    its own reload for seconds, never an edit of another file (``podway.sources.files``)."""
    max_objects_total: int = 100_000
    """Objects across the whole folder (default 100,000); a file that would pass it is refused
    whole and keeps its last good objects. Bounds the memory of the snapshot (~5 KB/object)."""
    max_alias_nodes: int = 10_000
    """YAML nodes that aliases (``*anchor``) may add to a file once expanded (default 10,000).
    Plain anchors for shared labels cost a few dozen; an alias bomb wants millions."""
    max_depth: int = 64
    """Nesting of mappings and sequences (default 64; the deepest Kubernetes schema Podway reads
    needs ~12). Deeper input is refused before construction (libyaml itself stops at 1,000)."""
    max_message_chars: int = 300
    """Characters of input quoted in one error message (default 300): errors name the input,
    they never copy it into logs, status files or ``validate`` output."""


DEFAULT_LIMITS = LoadLimits()


class Stopped(Exception):  # a stop asked for, not an error of the input
    """The load was stopped (its ``stop`` said so between two documents or objects): the
    process is stopping and nobody wants the result."""


Stop = Callable[[], bool]  # asked between documents and objects: True stops the load
Built = tuple[list[Any], int | None]  # documents of a text, the deepest nesting (if measured)


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
    warnings: list[LoadError] = field(default_factory=list)  # e.g. kinds Podway does not read


def clip(text: str, limit: int = DEFAULT_LIMITS.max_message_chars) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def load_text(text: str, *, source: str = "<text>", limits: LoadLimits = DEFAULT_LIMITS,
              stop: Stop | None = None, built: Built | None = None) -> LoadResult:
    """Load all documents of one YAML/JSON text, within ``limits``; ``Stopped`` as soon as
    ``stop`` returns True (asked between documents, so a stop never waits for a big file).
    ``built``: this very text's documents as ``load_documents`` built them elsewhere (the
    file source's prefetch process); taken for a text without anchors, the limits still
    checked here first."""
    result = LoadResult()
    anchored = "&" in text  # aliases are possible only with anchors
    over = (_over_size(text, limits) or _too_many_documents(text, limits)
            or (_scan_events(text, limits) if anchored else None))
    if over is not None:
        return _refused(result, source, over)
    deepest: int | None = None  # measured while building (None: walk the documents for it)
    try:
        documents, deepest = built if built is not None and not anchored \
            else _load_all(text, stop)
    except RecursionError:
        return _refused(result, source, "invalid YAML: nested too deeply")
    except yaml.YAMLError as exc:
        # Keep what parsed before the broken document, report the rest as one error.
        documents = _documents_until_error(text)
        reason = clip(f"invalid YAML: {_yaml_reason(exc)}", limits.max_message_chars)
        result.errors.append(LoadError(source, len(documents), reason))
    if anchored:
        over = None  # ``_scan_events`` checked the depth before anything was built
    elif deepest is not None:
        over = _depth_over(deepest, limits.max_depth)
    else:
        over = _too_deep(documents, limits.max_depth)
    if over is not None:
        return _refused(LoadResult(), source, over)
    count = sum(1 for doc in documents for _ in _items(doc))
    if count > limits.max_objects_per_file:
        return _refused(LoadResult(), source, (
            f"{count} objects, more than the limit of {limits.max_objects_per_file} per file "
            "(split the file or raise max_objects_per_file)"))
    for index, doc in enumerate(documents):
        if stop is not None and stop():
            raise Stopped(source)
        for prefix, item in _items(doc):
            obj, error = parse_object(item, source=source, document=index, prefix=prefix,
                                      limits=limits)
            if obj is not None:
                result.objects.append(obj)
                result.documents.append(index)
            if error is not None:
                result.errors.append(error)
            elif obj is None and isinstance(item, dict):
                result.warnings.append(_not_read(item, source=source, document=index,
                                                 prefix=prefix, limits=limits))
    return result


def parse_object(raw: Any, *, source: str = "<object>", document: int = 0, prefix: str = "",
                 limits: LoadLimits = DEFAULT_LIMITS
                 ) -> tuple[K8sObject | None, LoadError | None]:
    """One raw mapping → a typed object, or ``None`` and an error (``None, None`` when the kind
    is not one Podway reads; ``load_text`` turns that into a warning).

    ``prefix`` locates the object inside its document (``items[3].`` in a ``List``).
    """
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        return None, LoadError(source, document, f"expected a mapping, got {type(raw).__name__}",
                               field=prefix.rstrip("."))
    kind, api_version = raw.get("kind"), raw.get("apiVersion")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if not isinstance(kind, str) or not isinstance(api_version, str):
        return None, LoadError(source, document, "apiVersion and kind must be strings",
                               object=_ident(raw, cls, limits),
                               field=prefix + ("kind" if not isinstance(kind, str)
                                               else "apiVersion"))
    group = api_group(api_version)
    served = _served(cls) if cls else ()
    if cls is not None and (group in cls.LEGACY_GROUPS or (
            group in cls.API_GROUPS and served and api_version not in served)):
        return None, LoadError(source, document,
                               f"{clip(api_version, limits.max_message_chars)} {kind} is not "
                               f"supported; use {' or '.join(served or cls.API_GROUPS)}",
                               object=_ident(raw, cls, limits), field=f"{prefix}apiVersion")
    if cls is None or group not in cls.API_GROUPS:
        return None, None
    try:
        return cls.model_validate(raw), None
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return None, LoadError(source, document,
                               clip(f"{first['msg']}{more}", limits.max_message_chars),
                               object=_ident(raw, cls, limits),
                               field=prefix + field_path(first["loc"]))


@functools.cache
def _served(cls: type[K8sObject]) -> tuple[str, ...]:
    """The apiVersions of ``cls`` Podway reads (empty: any version of its groups)."""
    return cls.API_VERSIONS or tuple(f"{g}/{v}" for g in cls.API_GROUPS
                                     for v in _SERVED_VERSIONS.get(g, ()))


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


def _ident(raw: dict[Any, Any], cls: type[K8sObject] | None, limits: LoadLimits) -> str:
    """kind/namespace/name as far as they can be read, clipped."""
    kind = raw.get("kind")
    meta = raw.get("metadata")
    name = meta.get("name", "") if isinstance(meta, dict) else ""
    namespace = meta.get("namespace", "default") if isinstance(meta, dict) else ""
    if cls is not None and not cls.NAMESPACED:
        namespace = ""
    ident = "/".join(str(p) for p in (kind, namespace, name) if p) if kind else ""
    return clip(ident, limits.max_message_chars)


def _not_read(raw: dict[Any, Any], *, source: str, document: int, prefix: str,
              limits: LoadLimits) -> LoadError:
    """The warning for an object of a kind (or API group) Podway does not read."""
    api_version = clip(str(raw.get("apiVersion")), limits.max_message_chars)
    kind = clip(str(raw.get("kind")), limits.max_message_chars)
    return LoadError(source, document,
                     f"kind {kind} ({api_version}) is not read by Podway; skipped",
                     object=_ident(raw, KINDS.get(kind), limits), field=prefix.rstrip("."))


def _items(doc: Any) -> Iterator[tuple[str, Any]]:
    """The objects of a document with their location prefix (``items[i].`` inside a List)."""
    if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
        for i, item in enumerate(doc["items"]):
            yield f"items[{i}].", item
    else:
        yield "", doc


def _refused(result: LoadResult, source: str, reason: str) -> LoadResult:
    """``result`` with the whole text refused for ``reason`` (one error, one log line)."""
    log.warning("manifest refused source=%s: %s", source, reason)
    result.errors.append(LoadError(source, -1, reason))
    return result


def _over_size(text: str, limits: LoadLimits) -> str | None:
    if len(text) > limits.max_file_bytes or (
            len(text) * 4 > limits.max_file_bytes
            and len(text.encode("utf-8", "surrogatepass")) > limits.max_file_bytes):
        return (f"larger than the limit of {limits.max_file_bytes} bytes per file "
                "(split the file or raise max_file_bytes)")
    return None


def _too_many_documents(text: str, limits: LoadLimits) -> str | None:
    """Cheap early refusal: each ``---`` line starts a document, so more of them than the limit
    means too many objects without parsing any (``List`` items are counted after parsing)."""
    separators = sum(1 for _ in _DOCUMENT_START.finditer(text))
    if separators > limits.max_objects_per_file:
        return (f"at least {separators} documents, more than the limit of "
                f"{limits.max_objects_per_file} objects per file (split the file or raise "
                "max_objects_per_file)")
    return None


_DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|$)", re.MULTILINE)


def _scan_events(text: str, limits: LoadLimits) -> str | None:
    """One pass over the parser's events: nesting depth and the nodes aliases would add.

    Each anchor's subtree size is known when its collection ends; an alias adds that size
    (minus the one node it is). An alias of a collection still open is a recursive structure.
    """
    sizes: dict[str, int] = {}  # anchor → nodes of its subtree, expanded
    stack: list[list[Any]] = []  # open collections: [anchor, nodes so far]
    added = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            size = 0
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append([event.anchor, 1])
                if len(stack) > limits.max_depth:
                    return f"nested deeper than the limit of {limits.max_depth} levels"
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, size = stack.pop()
                if anchor is not None:
                    sizes[anchor] = size
            elif isinstance(event, yaml.ScalarEvent):
                size = 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                if any(frame[0] == event.anchor for frame in stack):
                    return f"recursive alias *{clip(str(event.anchor), 40)}"
                size = sizes.get(event.anchor or "", 1)
                added += size - 1
                if added > limits.max_alias_nodes:
                    return (f"aliases expand to more than {limits.max_alias_nodes} extra nodes "
                            "(an alias bomb? raise max_alias_nodes if meant)")
            elif isinstance(event, yaml.DocumentEndEvent):
                sizes.clear()  # anchors are local to their document
            if stack:
                stack[-1][1] += size
    except yaml.YAMLError:
        return None  # reported, with its location, by the real load
    return None


def load_documents(text: str) -> Built:
    """The documents of ``text`` and their deepest nesting, as ``load_text`` builds them
    (YAML errors and ``RecursionError`` raised), for ``load_text(built=...)``."""
    return _load_all(text)


def _load_all(text: str, stop: Stop | None = None) -> Built:
    """Every document of ``text`` (``yaml.load_all`` with ``FastSafeLoader``), and the deepest
    nesting among them when the loader measured it (every document took its lean path)."""
    loader = FastSafeLoader(text)
    try:
        documents = []
        while loader.check_data():
            if stop is not None and stop():
                raise Stopped("<text>")
            documents.append(loader.get_data())
        return documents, loader.deepest
    finally:
        loader.dispose()


def _depth_over(deepest: int, max_depth: int) -> str | None:
    return f"nested deeper than the limit of {max_depth} levels" if deepest > max_depth \
        else None


def _too_deep(documents: list[Any], max_depth: int) -> str | None:
    """Depth check of alias-free documents (trees, so the walk is bounded by the text)."""
    todo: list[tuple[Any, int]] = [(doc, 1) for doc in documents]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if (over := _depth_over(depth, max_depth)) is not None:
            return over
        todo.extend((child, depth + 1) for child in children
                    if isinstance(child, (dict, list)))
    return None


def _documents_until_error(text: str) -> list[Any]:
    docs: list[Any] = []
    try:
        for doc in yaml.load_all(text, Loader=FastSafeLoader):
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
