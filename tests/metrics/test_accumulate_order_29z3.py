"""The accumulate order (category, descending score, image id, input order) with images in id order and not:
the short path for a file written image by image gives np.lexsort's order, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.boxes import check_boxes
from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections
from detcal.metrics.accuracy import accumulate_order


def _dets(image_id: np.ndarray, score: np.ndarray, category: np.ndarray) -> Detections:
    n = len(image_id)
    box = np.tile([0.0, 0.0, 1.0, 1.0], (n, 1))
    return Detections(image_id=image_id, box=box, score=score, category=category)


@pytest.mark.parametrize("sorted_images", [True, False])
def test_accumulate_order_is_lexsort(sorted_images: bool) -> None:
    rng = np.random.default_rng(3)
    n = 5000
    img = rng.integers(0, 300, n) * 7 + 1
    if sorted_images:
        img = np.sort(img)
    score = rng.choice([0.0, -0.0, 0.25, 0.5, 0.75, 1.0], n)  # many ties, signed zeros equal
    cat = rng.choice([1, 3, 90], n)
    cats = [1, 3, 90]
    got = accumulate_order(_dets(img, score, cat), cats)
    want = np.lexsort([np.arange(n), img, -(score + 0.0), np.searchsorted(cats, cat)])
    np.testing.assert_array_equal(got, want)


def test_check_boxes_still_names_the_row() -> None:
    box = np.tile([0.0, 0.0, 1.0, 1.0], (6, 1))
    check_boxes(box, "detection")
    box[4, 2] = np.inf
    with pytest.raises(DetcalInputError, match="detection row 4"):
        check_boxes(box, "detection")
    box[4, 2] = 1.0
    box[2, 3] = -1.0
    with pytest.raises(DetcalInputError, match="detection row 2"):
        check_boxes(box, "detection")
