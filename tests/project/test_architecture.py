"""The package's architecture, enforced: layers import downwards only, and no module imports itself back.

The imports are read from the source with ``ast`` (module level, inside functions and under
``TYPE_CHECKING`` alike), so a lazy import inside a function counts as much as one at the top.
docs/architecture.md draws the layers; their order is written here, once.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "detcal"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "core", "utils", "types", "errors"),  # records, boxes, errors; types/errors: public aliases
    ("data",),
    ("matching",),
    ("binning",),
    ("metrics",),
    ("calibration",),
    ("reports",),
    ("models",),
    ("pipeline",),
    ("integrations",),
    ("training",),
    ("studies",),
    ("apps",),
)
"""Lowest first. A module may import from its own layer and the ones before it, never from a later one.
The package root (``detcal/__init__.py``, the lazy public API) sits above all of them."""

RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
TORCH_FREE_BELOW = RANK["models"]  # the evaluation core never imports torch at module level
HYDRA_FREE_BELOW = RANK["apps"]  # nothing below the commands imports Hydra at module level


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_package: bool) -> list[str]:
    """Absolute names an import statement brings in (modules, or ``module.attribute``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    return [origin] + [f"{origin}.{a.name}" for a in node.names]


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported detcal module, line, at module level) for every import statement of ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    for n in tree.body:  # module-level code under if/try (e.g. TYPE_CHECKING) counts as module level too
        if isinstance(n, (ast.If, ast.Try)):
            top.update(id(c) for c in ast.walk(n) if isinstance(c, (ast.Import, ast.ImportFrom)))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for t in _targets(module, node, path.name == "__init__.py"):
                if t.split(".")[0] == "detcal" or id(node) in top:
                    out.append((t, node.lineno, id(node) in top))
    return out


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)  # the package root: the public API, above everything
    return RANK[parts[1]]


EDGES: dict[str, set[str]] = {m: {t for t, _, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}


def test_every_top_level_name_has_a_layer():
    names = {m.split(".")[1] for m in MODULES if "." in m} - {"_configs"}
    assert names <= set(RANK), f"give {sorted(names - set(RANK))} a layer in LAYERS"


def test_no_upward_imports():
    bad = []
    for m in MODULES:
        for t, line, _ in _imports(m):
            if t in MODULES and t.split(".")[0] == "detcal" and _layer(t) > _layer(m):
                bad.append(f"{MODULES[m].relative_to(PACKAGE.parent)}:{line} imports {t}")
    assert not bad, "imports from a higher layer:\n" + "\n".join(sorted(set(bad)))


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_circles():
    circles = _circles(EDGES)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_circle_finder_finds_a_planted_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize(
    "heavy, below", [("torch", TORCH_FREE_BELOW), ("hydra", HYDRA_FREE_BELOW), ("omegaconf", HYDRA_FREE_BELOW)]
)
def test_core_layers_do_not_import_heavy_frameworks_at_module_level(heavy, below):
    bad = [
        f"{m}:{line}"
        for m in MODULES
        if _layer(m) < below
        for t, line, top in _imports(m)
        if top and t.split(".")[0] == heavy
    ]
    assert not bad, f"{heavy} imported at module level in a layer below {LAYERS[below][0]}: {bad}"
