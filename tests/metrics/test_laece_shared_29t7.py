"""LaECE and LaACE from one checked sample (:func:`detcal.metrics.laece.laece_and_laace`, the tenth pass):
the same results as the two calls on their own, field for field, for both variants (``"fiveai"``'s LaACE
keeps the ignored detections: its own sample), every ``closed`` and several bin counts."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth
from detcal.metrics.laece import laace_from_outcomes, laece_and_laace, laece_from_outcomes
from detcal.metrics.lrp import detection_outcomes


def _outcomes(seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    n_gt, n_det = 300, 1500
    g_xy = rng.random((n_gt, 2)) * 60
    g_box = np.concatenate([g_xy, g_xy + rng.random((n_gt, 2)) * 20 + 1], axis=1)
    gt = GroundTruth(
        image_id=rng.integers(0, 30, n_gt),
        box=g_box,
        category=rng.integers(1, 5, n_gt),
        iscrowd=rng.random(n_gt) < 0.1,
    )
    src = rng.integers(0, n_gt, n_det)
    box = g_box[src] + rng.normal(0, 3, (n_det, 4))
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 0.5)
    dets = Detections(
        image_id=gt.image_id[src],
        box=box,
        score=np.round(rng.random(n_det), 3),
        category=np.where(rng.random(n_det) < 0.8, gt.category[src], rng.integers(1, 7, n_det)),
    )
    return detection_outcomes(dets, gt, 0.1 * seed, max_dets=20)


def _same(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.name == b.name and a.variant == b.variant and a.params == b.params
    assert np.asarray(a.value).tobytes() == np.asarray(b.value).tobytes()
    for part in ("table", "extra"):
        x, y = getattr(a, part), getattr(b, part)
        assert x.keys() == y.keys()
        for k in x:
            assert np.asarray(x[k]).tobytes() == np.asarray(y[k]).tobytes(), (part, k)


@pytest.mark.parametrize("variant", ["kuzucu2024", "fiveai"])
@pytest.mark.parametrize(("bins", "closed"), [(25, "right"), (10, "left"), (1, "right")])
def test_laece_and_laace_equal_the_two_calls(variant: str, bins: int, closed: str) -> None:
    for seed in (0, 3):
        o = _outcomes(seed)
        laece, laace = laece_and_laace(o, bins=bins, closed=closed, variant=variant)
        _same(laece, laece_from_outcomes(o, bins=bins, closed=closed, variant=variant))
        _same(laace, laace_from_outcomes(o, variant=variant))
    assert np.isfinite(laece.value) and np.isfinite(laace.value)
