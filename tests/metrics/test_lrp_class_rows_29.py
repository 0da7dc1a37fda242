"""LRP's class rows as narrow integers (issue 29, fourteenth pass): the same rows, classes and tables.

:func:`detcal.metrics.lrp._class_sorted` gathers each kept detection's class row from a column of the
narrowest integer type that holds the classes (int16 below 32,768 classes, int64 above). The rows, the class
of each and the start of each class run must be those of the int64 column, whether the detections' order is
given (COCO AP's accumulate order) or sorted here, and :func:`lrp_table` must give the same table either way.
"""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth
from detcal.metrics.accuracy import accumulate_order
from detcal.metrics.lrp import _class_sorted, detection_outcomes, lrp_table


def _scene(seed: int, n_cats: int, cat_step: int) -> tuple[Detections, GroundTruth, list[int]]:
    """Detections near ground-truth boxes (some far, some of a class without ground truth), ties in score;
    with many classes, every class but the last three has ground truth (so the class rows exceed int16)."""
    rng = np.random.default_rng(seed)
    n_img, n_gt = 40, max(300, n_cats - 3)
    cats = (np.arange(n_cats) * cat_step + 1).astype(np.int64)
    g_img = rng.integers(0, n_img, n_gt)
    with_gt = cats[: max(1, n_cats - 3)]  # the last classes: no ground truth
    g_cat = rng.choice(with_gt, n_gt) if n_gt > len(with_gt) else rng.permutation(with_gt)[:n_gt]
    xy = rng.uniform(0, 400, (n_gt, 2))
    wh = rng.uniform(8, 80, (n_gt, 2))
    gt = GroundTruth(image_id=g_img, box=np.hstack([xy, xy + wh]), category=g_cat)
    pick = rng.integers(0, n_gt, 900)
    jitter = rng.normal(0, 6, (900, 4))
    box = np.hstack([xy[pick], xy[pick] + wh[pick]]) + jitter
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    cat = np.where(rng.random(900) < 0.8, g_cat[pick], rng.choice(cats, 900))
    score = np.round(rng.random(900), 2)  # ties
    dets = Detections(image_id=g_img[pick], box=box, score=score, category=cat)
    return dets, gt, cats.tolist()


@pytest.mark.parametrize(
    ("n_cats", "cat_step", "narrow"), [(12, 1, np.int16), (40, 1000, np.int16), (33_000, 1, np.int64)]
)
@pytest.mark.parametrize("seed", [0, 1])
def test_class_rows_narrow_and_equal(n_cats: int, cat_step: int, narrow: type, seed: int) -> None:
    dets, gt, cats = _scene(seed, n_cats, cat_step)
    o = detection_outcomes(dets, gt, 0.5)
    ci = o.class_index()  # int64: the reference column
    keep = o.valid & (ci >= 0)
    order = accumulate_order(dets, cats)
    for given in (order, None):
        rows, cls, start = _class_sorted(o, given)
        assert cls.dtype == narrow
        assert np.array_equal(np.sort(rows), np.flatnonzero(keep))
        assert np.array_equal(cls.astype(np.int64), ci[rows])
        assert np.all(np.diff(cls.astype(np.int64)) >= 0)
        assert np.array_equal(start, np.searchsorted(ci[rows], np.arange(len(o.gt_categories))))
    with_order, without = lrp_table(o, order), lrp_table(o, None)
    for field in ("lrp", "loc", "fp", "fn", "n_tp", "n_fp", "olrp", "olrp_loc", "olrp_fp", "olrp_fn", "threshold"):
        a, b = getattr(with_order, field), getattr(without, field)
        assert np.array_equal(a, b, equal_nan=True), field
