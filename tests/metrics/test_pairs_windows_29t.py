"""overlap_pairs keeps each ground-truth row's window inside its own image (no image-id check of the candidates):
the pairs equal a brute-force search that compares the image ids, including at thresholds so low that the
unclipped window would reach the previous image's detections."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.metrics._pairs import BoxColumns, BoxRows, overlap_pairs, pair_iou


def _brute(gi: np.ndarray, gb: np.ndarray, di: np.ndarray, db: np.ndarray, rows: np.ndarray, t: float) -> list:
    out = []
    for g in rows:
        same = np.flatnonzero(di == gi[g])
        iou = pair_iou(np.repeat(gb[g][None], len(same), axis=0), db[same])
        out.extend((int(g), int(d)) for d in same[iou >= t])
    return out


@pytest.mark.parametrize("t", [0.01, 0.05, 0.2, 0.5, 0.9])
def test_windows_stay_in_their_image(t: float) -> None:
    rng = np.random.default_rng(29)
    n_g, n_d = 120, 900
    # consecutive image ids (adjacent key ranges) and boxes as wide as the whole coordinate span
    gi, di = rng.integers(0, 12, n_g), rng.integers(0, 12, n_d)
    xy = rng.uniform(0, 100, (n_g, 2))
    gb = np.hstack([xy, xy + rng.uniform(1, 400, (n_g, 2))])
    near = rng.integers(0, n_g, n_d)
    db = gb[near] * rng.uniform(0.2, 1.8, (n_d, 4))
    db[:, 2:] = np.maximum(db[:, 2:], db[:, :2] + 0.5)
    di[:300] = gi[near[:300]]  # many same-image overlaps
    db[:60] = gb[near[:60]] * rng.uniform(0.97, 1.03, (60, 4))  # and some near copies
    rows = np.flatnonzero(rng.uniform(size=n_g) < 0.9)
    want = _brute(gi, gb, di, db, rows, t)
    for dcols in (BoxColumns(db), BoxRows(db)):
        got = [
            (int(g), int(d))
            for G, D, _ in overlap_pairs(di, dcols, gi, BoxColumns(gb), t, rows, 64)
            for g, d in zip(G, D)
        ]
        assert got == want
    assert len(want) > 10  # the case is not empty
