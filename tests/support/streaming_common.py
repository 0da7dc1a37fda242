"""Shared helpers of the streaming-evaluator tests: metrics.json as (path -> leaf) and the comparison
used by the equality tests (integers, flags and text exactly; floats to 1e-12)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from detcal.reports import results_json

# the clock and the run time; under /data only the counts (the rest names where the data came from);
# /worst_detections: the report's example rows, with file names and boxes as the input wrote them and
# ties in input order (docs/metrics.md#worst-calibrated-detections), so they follow the input's form;
# /diagnostics: TIDE breaks tied scores in the order detections arrive, as tidecv does, and the label-error
# rows name detections by their input row and file name (docs/metrics.md#diagnostics)
SKIP = ("/created", "/timing_s", "/worst_detections", "/diagnostics")


def _flat(d: Any, p: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flat(v, f"{p}/{k}")
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _flat(v, f"{p}/{i}")
    else:
        yield p, d


def leaves(result: Any) -> dict[str, Any]:
    """The metrics.json content of ``result`` (strict JSON, as written) as {path: leaf}, provenance left out."""
    doc = json.loads(results_json.dumps(result.to_dict()))
    return {
        k: v
        for k, v in _flat(doc)
        if not k.startswith(SKIP) and (not k.startswith("/data/") or k.startswith("/data/counts/"))
    }


def text(result: Any) -> str:
    """metrics.json text without the provenance paths, clock and run time (for bitwise comparisons)."""
    return json.dumps(leaves(result), sort_keys=True)


def assert_same_numbers(a: Any, b: Any, tol: float = 1e-12) -> int:
    """Every leaf of ``a`` equals ``b``'s: the same keys; ints, bools, strings and nulls exactly; floats to
    ``tol`` (absolute, relative above 1). Returns how many numbers were compared."""
    la, lb = leaves(a), leaves(b)
    assert la.keys() == lb.keys(), sorted(la.keys() ^ lb.keys())[:10]
    n = 0
    for k, x in la.items():
        y = lb[k]
        if isinstance(x, float) or isinstance(y, float):
            assert isinstance(x, (int, float)) and isinstance(y, (int, float)), (k, x, y)
            assert not isinstance(x, bool) and not isinstance(y, bool), (k, x, y)
            assert math.isclose(x, y, rel_tol=tol, abs_tol=tol), (k, x, y)
            n += 1
        else:
            assert x == y and type(x) is type(y), (k, x, y)
            n += isinstance(x, int)
    return n
