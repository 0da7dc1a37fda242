"""benchmarks/bench_objects365.py spreads the generator's 8 classes over Objects365's 365 deterministically."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("bench_objects365", REPO / "benchmarks" / "bench_objects365.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_one_of_the_365_classes_is_reached_and_the_map_is_a_function_of_image_and_class() -> None:
    mod = _script()
    from detcal.data.synthetic._common import COCO_SCALE_CATEGORIES

    index = {c: i for i, c in enumerate(sorted(COCO_SCALE_CATEGORIES))}
    rng = np.random.default_rng(0)
    img, cat = rng.integers(1, 20_000, 200_000), rng.choice(sorted(COCO_SCALE_CATEGORIES), 200_000)
    out = mod.spread(img, cat, index)
    assert out.min() == 1 and out.max() == 365 and len(np.unique(out)) == 365
    again = mod.spread(img[::-1].copy(), cat[::-1].copy(), index)[::-1]
    np.testing.assert_array_equal(out, again)  # the same (image, class) pair -> the same class, in any order
    assert len(np.unique(out[cat == 1])) == 46  # person spread over ceil(365 / 8) classes
