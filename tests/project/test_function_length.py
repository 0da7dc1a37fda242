"""No function in detcal is longer than about 80 lines of code (read with ast, nothing imported).

Length: the lines from ``def`` to the function's last line, its docstring excluded (a docstring is
documentation: ``matching.engine.match`` lists its parameters and numbered steps there). A function
that must be longer says why in a comment containing ``long function:`` on the lines just above its
``def`` (or its decorators).

"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "detcal"
SKIPPED: tuple[str, ...] = ()
MAX_LINES = 80
MARKER = "long function:"


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    n = fn.end_lineno - fn.lineno + 1  # type: ignore[operator]
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        n -= first.end_lineno - first.lineno + 1  # type: ignore[operator]
    return n


def _explained(lines: list[str], fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    top = min([fn.lineno] + [d.lineno for d in fn.decorator_list]) - 1  # 0-based line of the def/decorator
    k = top - 1
    while k >= 0 and lines[k].strip().startswith("#"):
        if MARKER in lines[k]:
            return True
        k -= 1
    return False


def _too_long(path: Path, label: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = _code_lines(node)
            if n > MAX_LINES and not _explained(lines, node):
                out.append(f"{label}:{node.lineno} {node.name}: {n} lines")
    return out


def test_the_test_measures_code_lines(tmp_path):
    at_limit = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))  # with the def line: exactly the limit
    over = at_limit + "\n    x = 0"
    doc = '    """' + "\n" * 30 + '    """\n'
    sample = tmp_path / "m.py"
    sample.write_text(
        f"def short():\n{doc}{over[:-10]}\n\ndef at_limit():\n{at_limit}\n\ndef long():\n{over}\n\n"
        f"# {MARKER} a table\ndef told():\n{over}\n"
    )
    assert [row.split()[1] for row in _too_long(sample, "m.py")] == ["long:"]


def test_no_function_over_80_lines():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in SKIPPED:
            continue
        problems += _too_long(path, str(path.relative_to(PACKAGE.parent)))
    assert not problems, "functions over 80 lines of code (split them, or say why above the def):\n" + "\n".join(
        problems
    )
