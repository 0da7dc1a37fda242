"""Every public function and method of detcal carries type hints (read with ast, nothing imported).

Public: a module-level function or a method of a module-level class whose own name, and whose class's
and module's names, do not start with ``_`` (dunder methods such as ``__init__`` and ``__call__``
count as public). Every parameter but ``self``/``cls`` needs an annotation, and the function a return
annotation.

"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "detcal"
SKIPPED: tuple[str, ...] = ()


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _missing(fn: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> list[str]:
    args = fn.args
    params = args.posonlyargs + args.args + args.kwonlyargs
    if is_method and params and params[0].arg in ("self", "cls", "mcs"):
        params = params[1:]
    missing = [p.arg for p in params if p.annotation is None]
    missing += [f"*{a.arg}" for a in (args.vararg, args.kwarg) if a is not None and a.annotation is None]
    if fn.returns is None:
        missing.append("return")
    return missing


def _unannotated(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
            if miss := _missing(node, False):
                out.append(f"{node.name}: {', '.join(miss)}")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(item.name):
                    if miss := _missing(item, True):
                        out.append(f"{node.name}.{item.name}: {', '.join(miss)}")
    return out


def _modules() -> list[Path]:
    paths = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in SKIPPED or any(part.startswith("_") and part != "__init__.py" for part in rel.parts):
            continue
        paths.append(path)
    return paths


def test_the_test_finds_modules_and_missing_hints(tmp_path):
    assert len(_modules()) > 50
    sample = tmp_path / "m.py"
    sample.write_text(
        "def f(a, b: int):\n    pass\n\nclass C:\n    def g(self) -> None: ...\n    def h(self, x): ...\n"
    )
    assert _unannotated(sample) == ["f: a, return", "C.h: x, return"]


def test_public_functions_are_annotated():
    problems = [f"{p.relative_to(PACKAGE.parent)}: {m}" for p in _modules() for m in _unannotated(p)]
    assert not problems, "public functions without type hints:\n" + "\n".join(problems)
