"""One registry of ``podway.io/`` annotations: docs/reference.md lists exactly its entries, and no
module of ``src/`` declares an annotation name of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from podway.translate import annotations as ann

ROOT = Path(__file__).parents[3]
REFERENCE = ROOT / "docs/reference.md"
SRC = ROOT / "src/podway"
KEY = re.compile(r"(?<![\w./])podway\.io/[A-Za-z0-9][A-Za-z0-9-]*")
# The declarations outside the registry: the model reads them and is below translate.
DECLARED_BELOW = {("model/base.py", ann.ENGINE_GROUP.name),
                  ("model/npl.py", ann.NPL_SIGNATURE.name)}


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def sections() -> dict[str, str]:
    """Anchor → the text of the section and its sub-sections."""
    found: dict[str, str] = {}
    open_ones: list[tuple[int, str]] = []
    for line in REFERENCE.read_text().splitlines():
        heading = re.match(r"^(#+) (.*)$", line)
        if heading:
            level = len(heading.group(1))
            open_ones = [(lv, a) for lv, a in open_ones if lv < level]
            anchor = slug(heading.group(2))
            found.setdefault(anchor, "")
            open_ones.append((level, anchor))
        for _, anchor in open_ones:
            found[anchor] += line + "\n"
    return found


def listed_in_tables(text: str) -> set[str]:
    """The ``podway.io/`` names in the first column of the markdown tables of ``text``."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("| ---"):
            names.update(KEY.findall(line.split("|")[1]))
    return names


@pytest.mark.parametrize("entry", list(ann.REGISTRY.values()), ids=lambda e: e.short)
def test_every_entry_is_in_its_reference_section(entry: ann.Annotation) -> None:
    """Each registry entry is a table row of the reference section its ``doc`` anchor names."""
    found = sections()
    assert entry.doc in found, f"{entry.name}: no section #{entry.doc} in docs/reference.md"
    assert entry.name in listed_in_tables(found[entry.doc]), \
        f"{entry.name} is not in a table of docs/reference.md#{entry.doc}"


def test_the_reference_names_no_other_annotation() -> None:
    """Every ``podway.io/`` name of the reference is a registry entry or a key declared not to
    be an annotation (a condition type, a controller name, the API version)."""
    named = set(KEY.findall(REFERENCE.read_text()))
    unknown = named - set(ann.REGISTRY) - set(ann.OTHER_KEYS)
    assert not unknown, f"docs/reference.md names annotations Podway does not have: {unknown}"
    tabled = listed_in_tables(REFERENCE.read_text()) - set(ann.OTHER_KEYS)
    assert tabled == set(ann.REGISTRY), "the reference tables and the registry differ"


def strings_of(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings."""
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_no_module_declares_an_annotation_name() -> None:
    """Outside the registry, no string constant is an annotation's key (modules read names from
    ``podway.translate.annotations``), and no text names a ``podway.io/`` key that is neither
    registered nor declared not to be an annotation (a stale name in a hint, say)."""
    known = set(ann.REGISTRY) | set(ann.OTHER_KEYS)
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        if module == "translate/annotations.py":
            continue
        for line, value in strings_of(ast.parse(path.read_text())):
            if value in ann.REGISTRY and (module, value) not in DECLARED_BELOW:
                found.append(f"{module}:{line}: declares {value}")
            for key in KEY.findall(value):
                if key not in known and not (key.endswith("-") and any(
                        k.startswith(key) for k in ann.REGISTRY)):
                    found.append(f"{module}:{line}: names {key}, which is no annotation")
    assert not found, "\n".join(found)


def test_declared_below_is_the_registered_name() -> None:
    """The model's engine-group key and the registry's entry are one name."""
    from podway.model.base import ENGINE_GROUP

    assert ann.ENGINE_GROUP.name == ENGINE_GROUP


@pytest.mark.parametrize(("entry", "good", "bad"), [
    (ann.SSL_REDIRECT, " TRUE ", "yes"),
    (ann.XFF_TRUSTED_HOPS, "16", "17"),
    (ann.PROXY_PROTOCOL, "V2", "v1"),
    (ann.BACKEND_MODE, "nodeportlocal", "fast"),
    (ann.CONNECT_TIMEOUT, "1m30s", "90"),
    (ann.RETRIES, "3", "-1"),
], ids=lambda v: v.short if isinstance(v, ann.Annotation) else repr(v))
def test_parsers_accept_values_and_refuse_others(entry: ann.Annotation, good: str,
                                                 bad: str) -> None:
    """A parser returns a value for what the reference allows and ValueError otherwise."""
    entry.parse(good)
    with pytest.raises(ValueError, match=r"^(not|empty)"):
        entry.parse(bad)
