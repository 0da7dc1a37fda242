"""The greedy walk's choice keys: integers that order pairs by (GT not ignored, IoU) exactly, one float
apart included, so the walk's best pair is the one the IoU comparison picks."""

from __future__ import annotations

import numpy as np

from detcal.matching.blocks import choice_keys


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
