"""libyaml's safe loader with a lean constructor for plain documents (the common case).

PyYAML's ``CSafeLoader`` parses and composes in C, but builds every value in Python through a
general machinery (per node: a memo of constructed objects for aliases, a recursion guard, a
tag lookup, generators for two-step construction) and resolves each plain scalar's tag by
trying regular expressions. At 10,000 routes that was 85 % of the cold start's parse
(docs/performance.md, "Cold start").

``FastSafeLoader`` gives the same values, faster:

* the composer's per-node resolver hooks are builtins that do nothing when no path resolver is
  registered (none in the safe loader), instead of Python methods that do nothing, and its
  tag lookup a closure over what it reads (the three: 0.78 -> 0.66 CPU-s for the 20,000-object
  file of the 10,000-route bench);
* plain scalars' implicit tags are remembered per value (manifests repeat the same words:
  ``http``, ``80``, ``true``), so each distinct value is matched against the resolvers once;
* a document without anchors (so without aliases: every node is used once) is built by one
  tight recursive walk: mappings, sequences and strings directly, other scalar tags (int, float,
  bool, null, timestamp, binary) by PyYAML's own constructors. Anything else (merge keys,
  ``!!set``/``!!omap``, unknown tags, a collection as a mapping key) sends the whole document
  back to PyYAML's constructor, so its values and errors are PyYAML's own.

Documents with anchors always take PyYAML's path (they are small: the alias limits of
``podway.model.loader`` apply before this loader runs).

The lean walk also measures each document's nesting as it goes (``deepest``: the deepest
mapping or sequence, a document itself being level 1), so the loader's depth limit needs no
second walk over every value (about 8 % of a 10,000-route folder's parse).
"""

from __future__ import annotations

import operator
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_CLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_CACHE_LIMIT = 65_536  # distinct plain scalars remembered per load (then it starts over)


class _Slow(Exception):
    """This document needs PyYAML's general constructor."""


class FastSafeLoader(_CLoader):  # type: ignore[misc,valid-type]
    """``yaml.load_all(text, Loader=FastSafeLoader)``: the values of ``CSafeLoader``."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._tags: dict[str, str] = {}
        text = stream if isinstance(stream, str) else ""
        # No anchor in the text: no alias either, so no node is shared and the lean walk may
        # build every node afresh (an '&' inside a string merely costs the fast path).
        self._lean = isinstance(stream, str) and "&" not in text
        # The deepest collection of every document built so far, or None once one took
        # PyYAML's path (its depth was not measured).
        self.deepest: int | None = 0
        if not self.yaml_path_resolvers:
            # libyaml's composer calls these two around every node (1.1 million calls for a
            # 20,000-object file); without path resolvers they do nothing, so builtins that do
            # nothing stand in for them (5-8 % of the parse; ``is_`` takes the two arguments).
            self.descend_resolver = operator.is_
            self.ascend_resolver = tuple
            self.resolve = self._plain_resolver()

    def _plain_resolver(self) -> Any:
        """``resolve`` for a loader without path resolvers, as a closure over what it reads
        (libyaml calls it for every node: 540,000 times for a 20,000-object file): quoted
        scalars are strings, plain ones resolved once per value. A loader with path resolvers
        keeps PyYAML's own ``resolve``."""
        tags, limit, resolve = self._tags, _CACHE_LIMIT, super().resolve
        scalar, mapping = self.DEFAULT_SCALAR_TAG, self.DEFAULT_MAPPING_TAG
        sequence = self.DEFAULT_SEQUENCE_TAG

        def plain(kind: Any, value: Any, implicit: Any) -> Any:
            if kind is ScalarNode:
                if not implicit[0]:
                    return scalar  # quoted: always a string
                tag = tags.get(value)
                if tag is None:
                    tag = resolve(kind, value, implicit)
                    if len(tags) >= limit:
                        tags.clear()
                    tags[value] = tag
                return tag
            return mapping if kind is MappingNode else sequence

        return plain

    def construct_document(self, node: Node) -> Any:
        if self._lean:
            deepest = self.deepest
            try:
                return self._build(node, 1)
            except _Slow:
                self.deepest = deepest
        self.deepest = None
        return super().construct_document(node)

    def _build(self, node: Node, depth: int) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        if tag == _MAP and type(node) is MappingNode:
            self._reached(depth)
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if type(key_node) is not ScalarNode or key_node.tag not in _KEY_TAGS:
                    raise _Slow  # merge keys, '=', collections or odd tags as keys
                out[self._build(key_node, depth)] = self._build(value_node, depth + 1)
            return out
        if tag == _SEQ and type(node) is SequenceNode:
            self._reached(depth)
            return [self._build(item, depth + 1) for item in node.value]
        if type(node) is ScalarNode and tag in _SCALAR_TAGS:
            return self.yaml_constructors[tag](self, node)
        raise _Slow

    def _reached(self, depth: int) -> None:
        if self.deepest is not None and depth > self.deepest:
            self.deepest = depth


# Scalar tags whose PyYAML constructors return a value at once (no generator, no state).
_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in (
    "null", "bool", "int", "float", "binary", "timestamp", "str"))
# Keys seen in manifests; anything else (e.g. a binary or timestamp key) takes PyYAML's path.
_KEY_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "bool", "null", "float"))
