"""Issue 29, eleventh pass (29u3): the matcher's ranks only where they are read.

* the walk's ranks made only for the detections whose group has a ground truth (the others' are never
  read) give :func:`match` the same arrays, also where a group holds more than ``max_dets`` detections
  (every rank is then made, for the cut);
* sparse (image, category) codes are compacted (the same order, fewer codes);
* a chunk's bounds are found with integer needles (the same bounds).
"""

from __future__ import annotations

import numpy as np
import pytest

import detcal.matching.engine as engine
from detcal.core.types import Detections, GroundTruth
from detcal.matching.blocks import group_codes
from detcal.matching.chunks import image_chunks
from detcal.matching.engine import match


def _scene(seed: int, n_img: int = 30, big_group: bool = False) -> tuple[Detections, GroundTruth]:
    rng = np.random.default_rng(seed)
    n_gt, n_det = 5 * n_img, 25 * n_img
    g_xy = rng.random((n_gt, 2)) * 80
    g_box = np.concatenate([g_xy, g_xy + rng.random((n_gt, 2)) * 30 + 1], axis=1)
    gt = GroundTruth(
        image_id=rng.integers(0, n_img, n_gt),
        box=g_box,
        category=rng.integers(1, 5, n_gt),
        iscrowd=rng.random(n_gt) < 0.1,
    )
    src = rng.integers(0, n_gt, n_det)
    box = g_box[src] + rng.normal(0, 3, (n_det, 4))
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 0.5)
    img = np.where(rng.random(n_det) < 0.7, gt.image_id[src], rng.integers(0, n_img, n_det))
    cat = np.where(rng.random(n_det) < 0.7, gt.category[src], rng.integers(1, 7, n_det))  # 5, 6: no GT
    if big_group:  # one (image, category) group of 40 detections
        img[:40], cat[:40] = gt.image_id[0], gt.category[0]
    score = np.round(rng.random(n_det), 1)  # ties
    return Detections(image_id=img, box=box, score=score, category=cat), gt


@pytest.mark.parametrize("big_group", [False, True])
@pytest.mark.parametrize("kw", [{}, {"max_dets": 30}, {"class_agnostic": True, "max_dets": 100}])
def test_ranks_only_where_read(big_group: bool, kw: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    dets, gt = _scene(3, big_group=big_group)
    thr = (0.0, 0.3, 0.5, 0.75)
    got = match(dets, gt, thr, **kw)
    seen: list[bool] = []
    real = engine._rank_detections

    def full(*a, **k):  # type: ignore[no-untyped-def]
        seen.append(len(a) > 6 and a[6] is not None)
        return real(*a[:6])

    monkeypatch.setattr(engine, "_rank_detections", full)
    want = match(dets, gt, thr, **kw)
    assert seen and all(seen)
    for name in ("matched", "ignored", "gt_index", "iou", "considered"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
    assert got.matched.any()


def test_partial_ranks() -> None:
    """Only the rows asked for are ranked when no group exceeds max-dets; else every rank is made."""
    dets, gt = _scene(5, big_group=True)
    det_grp = group_codes(dets.image_id, dets.category, gt.image_id, gt.category, False)[0]
    needed = np.isin(dets.category, [1, 2])  # whole groups
    full = engine._rank_detections(dets, det_grp, 0.0, 100, False, None)
    part = engine._rank_detections(dets, det_grp, 0.0, 100, False, None, needed)
    assert np.array_equal(part[0][needed], full[0][needed]) and (part[0][~needed] == -1).all()
    assert np.array_equal(part[1], full[1])
    cut = engine._rank_detections(dets, det_grp, 0.0, 30, False, None, needed)  # the group of 40: every rank
    want = engine._rank_detections(dets, det_grp, 0.0, 30, False, None)
    assert np.array_equal(cut[0], want[0]) and np.array_equal(cut[1], want[1]) and not cut[1].all()


def test_sparse_group_codes_are_compacted() -> None:
    rng = np.random.default_rng(0)
    d_img, d_cat = rng.integers(0, 500, 300), rng.integers(0, 400, 300)
    g_img, g_cat = rng.integers(0, 500, 50), rng.integers(0, 400, 50)
    det, gtc, n = group_codes(d_img, d_cat, g_img, g_cat, False)
    raw = np.concatenate([d_img, g_img]) * 400 + np.concatenate([d_cat, g_cat])  # the product codes' order
    code = np.concatenate([det, gtc])
    assert n == len(np.unique(raw)) and code.max() == n - 1
    assert np.array_equal(np.argsort(code, kind="stable"), np.argsort(raw, kind="stable"))
    assert np.array_equal(code[:, None] == code[None, :], raw[:, None] == raw[None, :])


def test_chunk_bounds() -> None:
    rng = np.random.default_rng(1)
    img = np.sort(rng.integers(0, 50, 400))
    chunks = image_chunks(img, rng.integers(0, 50, 80), 37)
    rows = np.concatenate([np.arange(len(img))[c.det] for c in chunks])
    assert np.array_equal(rows, np.arange(len(img)))
    assert all(isinstance(c.det, slice) for c in chunks)
    for c in chunks:  # whole images, ascending, none split
        assert not set(img[c.det]) & set(img[: c.det.start]) | set(img[c.det.stop :]) & set(img[c.det])
