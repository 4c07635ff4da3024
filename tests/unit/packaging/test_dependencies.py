"""Every third-party package Podway's code imports is a declared runtime dependency, so a plain
``pip install podway`` runs every command (``podway echo`` once failed: ``h2`` was dev-only)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).parents[3]
SRC = ROOT / "src" / "podway"
# Imported lazily by one optional feature, declared as that feature's extra.
EXTRAS = {"matplotlib": "lab"}


def _imported_top_modules() -> set[str]:
    found: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"podway"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_imported_package_is_a_runtime_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = {key: {_name(r) for r in reqs}
              for key, reqs in project.get("optional-dependencies", {}).items()}
    owners = packages_distributions()
    missing = []
    for module in sorted(_imported_top_modules()):
        dists = {d.lower().replace("_", "-") for d in owners.get(module, [])}
        assert dists, f"{module} is imported by src/ but no installed distribution provides it"
        extra = EXTRAS.get(module)
        declared = runtime | (extras.get(extra, set()) if extra else set())
        if not dists & declared:
            missing.append(f"{module} (from {', '.join(sorted(dists))})")
    assert missing == []
