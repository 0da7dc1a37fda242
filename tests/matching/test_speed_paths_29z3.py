"""The ninth pass's short paths of the matching: the greedy walk's choice keys order pairs by (GT not
ignored, IoU) exactly, one float apart included; a second box area that differs at a few detections gives
the IoUs, best IoUs and best slots of its own full pass; a chunk's GT positions map to rows, -1 kept."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.matching.blocks import choice_keys, slot_iou_areas
from detcal.matching.chunks import rows_through


def test_choice_keys_order_as_flag_then_iou() -> None:
    rng = np.random.default_rng(4)
    base = np.concatenate([[0.0, 1.0, 0.5, 1.0 + 2**-52], rng.random(500), rng.choice([0.25, 0.5, 0.75], 100)])
    iou = np.concatenate([base, np.nextafter(base, 2.0), np.nextafter(base[base > 0], -1.0)])
    regular = rng.random(len(iou)) < 0.5
    key = choice_keys(iou, regular)
    assert key.dtype == np.int64 and (key >= 0).all()
    i, j = np.triu_indices(len(iou), 1)
    want = np.sign(np.where(regular[i] != regular[j], regular[i].astype(int) - regular[j], np.sign(iou[i] - iou[j])))
    np.testing.assert_array_equal(np.sign(key[i] - key[j]), want)


@pytest.mark.parametrize("n_differ", [0, 1, 7, 400])
def test_second_area_from_the_first_equals_its_own_pass(n_differ: int) -> None:
    rng = np.random.default_rng(n_differ)
    S, W = 400, 60
    cnt = np.sort(rng.integers(1, 9, S))[::-1]  # GT slots per detection, falling
    n_slot = np.searchsorted(-cnt, -np.arange(int(cnt[0])), side="left")
    g0 = rng.integers(0, W - 9, S)
    xy = rng.random((2, S)) * 10
    dcol = np.concatenate([xy, xy + rng.random((2, S)) * 5 + 0.01])
    gxy = rng.random((2, W)) * 10
    gcol = np.concatenate([gxy, gxy + rng.random((2, W)) * 5 + 0.01])
    crowd = rng.random(W) < 0.2
    corners = (dcol[2] - dcol[0]) * (dcol[3] - dcol[1])
    other = corners.copy()
    which = rng.choice(S, n_differ, replace=False)
    other[which] *= 1.5
    other[which[:1]] = np.nextafter(corners[which[:1]], 0.0)  # one a float below: the last bit alone
    off, (a, b) = slot_iou_areas(dcol, g0, n_slot, gcol, crowd, [corners, other])
    off_b, (b_alone,) = slot_iou_areas(dcol, g0, n_slot, gcol, crowd, [other])
    off_a, (a_alone,) = slot_iou_areas(dcol, g0, n_slot, gcol, crowd, [corners])
    assert np.array_equal(off, off_b) and np.array_equal(off, off_a)
    for got, want in ((a, a_alone), (b, b_alone)):
        for x, y in zip(got, want):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
    if n_differ > 1:
        assert not np.array_equal(a[0], b[0])  # the areas change some IoU: the check has teeth


def test_rows_through_keeps_none() -> None:
    index = np.array([[0, -1, 2], [-1, 1, 1]])
    rows = np.array([10, 20, 35])
    np.testing.assert_array_equal(rows_through(index, rows), [[10, -1, 35], [-1, 20, 20]])
