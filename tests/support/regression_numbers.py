"""Flatten the numbers of a metrics.json for the regression tests (tests/pipeline/test_regression_numbers.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any


def numbers(node: Any, prefix: str = "") -> Iterator[tuple[str, float | None]]:
    """(path, value) for every number (NaN and null as None) under ``node``; skips provenance and timing."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("timing_s", "_null", "created", "run_dir", "config", "paths", "provenance", "writeback"):
                continue
            yield from numbers(v, f"{prefix}/{k}" if prefix else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from numbers(v, f"{prefix}[{i}]")
    elif node is None:
        yield prefix, None
    elif isinstance(node, bool):
        return
    elif isinstance(node, (int, float)):
        v = float(node)
        yield prefix, (v if math.isfinite(v) else None)


def load_numbers(path: str, sections: tuple[str, ...]) -> dict[str, float | None]:
    with open(path, encoding="utf-8") as fh:
        doc = json.loads(fh.read())
    out: dict[str, float | None] = {}
    for s in sections:
        out.update(numbers(doc.get(s), s))
    return out
