"""No module in ``src/podway`` is over 500 lines and no function over 60 (issue 22).

The rule, precisely:

* A module's length is its number of lines (``wc -l``), whatever they hold.
* A function's length (every ``def`` and ``async def``: functions, methods, nested functions)
  runs from its ``def`` line to its last line; decorators are not counted.
* A typer command's signature is its option list, so it is not counted: a function with at least
  one parameter declared as a typer option or argument — ``Annotated[..., typer.Option(...)]``
  or ``typer.Argument(...)`` in its annotation or default — is measured from its first body
  statement (its docstring, if any) to its last line. Its body still has 60 lines at most.

A module or function that grows past a limit fails here; split it by concern (STYLE.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src" / "podway"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
_TYPER_PARAMETERS = frozenset({"Option", "Argument"})


def _is_typer_parameter(node: ast.expr | None) -> bool:
    """Whether an annotation or default holds a ``typer.Option``/``typer.Argument`` call."""
    if node is None:
        return False
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _TYPER_PARAMETERS \
                and isinstance(func.value, ast.Name) and func.value.id == "typer":
            return True
        if isinstance(func, ast.Name) and func.id in _TYPER_PARAMETERS:
            return True
    return False


def is_typer_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = node.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    defaults = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    return (any(_is_typer_parameter(p.annotation) for p in params)
            or any(_is_typer_parameter(d) for d in defaults))


def function_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines counted for ``node`` under the rule of the module docstring."""
    assert node.end_lineno is not None
    first = node.body[0].lineno if is_typer_command(node) else node.lineno
    return node.end_lineno - first + 1


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> Iterator[tuple[str, int]]:
    """(qualified name, length) of each function of ``source`` over ``limit`` lines."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                length = function_length(child)
                if length > limit:
                    yield name, length
                yield from visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(ast.parse(source), "")


def modules() -> list[Path]:
    found = sorted(SRC.rglob("*.py"))
    assert len(found) > 100, f"no source under {SRC}?"
    return found


def test_no_module_is_over_500_lines() -> None:
    """Every module of src/podway has at most 500 lines."""
    over = {str(p.relative_to(SRC)): n for p in modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert over == {}, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"


def test_no_function_is_over_60_lines() -> None:
    """Every function of src/podway has at most 60 lines (a typer command: its body)."""
    over = {f"{p.relative_to(SRC)}:{name}": n for p in modules()
            for name, n in long_functions(p.read_text(encoding="utf-8"))}
    assert over == {}, f"functions over {MAX_FUNCTION_LINES} lines (split them into named " \
                       f"helpers): {over}"


def _function(lines: int, *, indent: str = "") -> str:
    """A function of exactly ``lines`` lines."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def f() -> int:\n{body}{indent}    return 0\n"


def test_the_function_rule_counts_def_to_last_line() -> None:
    """A 60-line function passes, 61 lines fail — also as a method or nested, decorated or not."""
    assert list(long_functions(_function(60))) == []
    assert list(long_functions(_function(61))) == [("f", 61)]
    method = "class C:\n    @property\n" + _function(61, indent="    ")
    assert list(long_functions(method)) == [("C.f", 61)]
    nested = "def outer() -> None:\n" + _function(61, indent="    ")
    assert [name for name, _ in long_functions(nested)] == ["outer", "outer.f"]


def test_a_typer_command_s_option_list_is_not_counted() -> None:
    """A command with a long option list passes while its body fits; a long body fails."""
    options = "".join(f"    o{i}: Annotated[int, typer.Option(help='{i}')] = {i},\n"
                      for i in range(80))
    short = f"def cmd(\n{options}) -> None:\n    '''Doc.'''\n    run()\n"
    assert list(long_functions(short)) == []
    body = "".join(f"    step{i}()\n" for i in range(60))
    long = f"def cmd(\n{options}) -> None:\n    '''Doc.'''\n{body}"
    assert list(long_functions(long)) == [("cmd", 61)]
    plain = f"def helper(\n{options.replace('typer.Option', 'other.Option')}) -> None:\n    run()\n"
    assert [name for name, _ in long_functions(plain)] == ["helper"]  # not a typer option
