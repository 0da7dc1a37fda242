"""Small COCO annotation records for the instances readers' tests: boxes of mixed scales, ``area`` in two
records of three, a crowd in one of four, and (``nested``) values detcal skips that hold ``"},"`` inside a
record."""

from __future__ import annotations

import numpy as np


def annotations(n: int, seed: int = 0, nested: bool = False) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        x, y, w, h = (float(v) for v in rng.uniform(0, 300, 4) / rng.choice([1, 3, 7]))
        rec: dict = {"id": k + 1, "image_id": 1 + k % 5, "category_id": 1 + k % 2, "bbox": [x, y, w, h]}
        if k % 3:
            rec["area"] = w * h
        if k % 4 == 1:
            rec["iscrowd"] = 1
        if nested:  # values detcal skips, holding "}," inside a record
            rec["segmentation"] = {"size": [480, 640], "counts": "ab}c,d"}
            rec["attributes"] = [{"a": 1}, {"b": [2, {"c": 3}]}, {}]
        out.append(rec)
    return out
