"""The layer contract (pyproject's ``[tool.importlinter]``) holds, and no package has a cycle.

``lint-imports`` checks that layers point one way (cli > programs > … > model > base) and that
``translate``, ``ir`` and ``model`` import nothing that does I/O. Layers alone do not forbid a
cycle *inside* a layer (two sub-packages of ``envoy`` importing each other), so the second check
walks every package: its children (sub-packages, squashed with everything under them) must import
each other without a cycle. Imports inside functions and under ``TYPE_CHECKING`` count: a cycle
hidden behind a late import is still a cycle.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
ROOT = Path(__file__).resolve().parents[3]


def package_cycles(graph: grimp.ImportGraph, root: str) -> list[list[str]]:
    """One cycle (as a path of sibling packages) per package whose sub-packages import each other
    in a circle."""
    cycles: list[list[str]] = []
    packages = [m for m in graph.modules if m == root or m.startswith(root + ".")]
    for package in sorted(packages):
        children = sorted(c for c in graph.find_children(package) if graph.find_children(c))
        if len(children) < 2:
            continue
        members = {c: {c} | graph.find_descendants(c) for c in children}
        edges = {a: {b for b in children if b != a and any(
            graph.direct_import_exists(importer=x, imported=y)
            for x in members[a] for y in members[b])} for a in children}
        cycle = find_cycle(edges)
        if cycle:
            cycles.append(cycle)
    return cycles


def find_cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle in the directed graph ``edges`` (node → nodes it points to), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_layer_contract_holds() -> None:
    """`lint-imports` (the contract in pyproject.toml) passes: layers one way, pure translate."""
    result = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_no_package_has_a_cycle() -> None:
    """No two sub-packages of any package import each other, directly or around a circle."""
    graph = grimp.build_graph("podway")
    assert package_cycles(graph, "podway") == []


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check itself fails on a cycle between sibling packages (it is not vacuous)."""
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.a.x", "p.b", "p.b.y", "p.c", "p.c.z"):
        graph.add_module(module)
    graph.add_import(importer="p.a.x", imported="p.b.y")
    graph.add_import(importer="p.b.y", imported="p.c.z")
    assert package_cycles(graph, "p") == []
    graph.add_import(importer="p.c.z", imported="p.a")
    assert package_cycles(graph, "p") == [["p.a", "p.b", "p.c", "p.a"]]
    assert find_cycle({"a": ["a"]}) == ["a", "a"]
