"""benchmarks/bench_objects365.py spreads the generator's 8 classes over Objects365's 365 deterministically."""

from __future__ import annotations

from typing import Any

import numpy as np
from support.scripts import load_script


def _script() -> Any:
    return load_script("benchmarks/bench_objects365.py")


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
