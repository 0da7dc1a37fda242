"""The Kuzucu et al. (2024) protocol on a generated over-confident detector."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.metrics.laece import laece
from detcal.metrics.lrp import lrp
from detcal.studies.kuzucu2024 import coco_ap, markdown_table, run


def _dataset(seed=0, n_img=60):
    rng = np.random.default_rng(seed)
    gi, gb, gc, di, db, ds, dc = [], [], [], [], [], [], []
    for im in range(1, n_img + 1):
        for _ in range(rng.integers(1, 4)):
            xy = rng.uniform(0, 150, 2)
            wh = rng.uniform(20, 50, 2)
            b = np.r_[xy, xy + wh]
            c = int(rng.integers(1, 3))
            gi.append(im)
            gb.append(b)
            gc.append(c)
            if rng.uniform() < 0.85:  # a detection shifted by a fraction of its size: IoU about 0.5 to 0.9
                sh = rng.uniform(0.02, 0.2) * wh[0]
                di.append(im)
                db.append(b + [sh, 0, sh, 0])
                ds.append(rng.uniform(0.9, 1.0))
                dc.append(c)
        for _ in range(rng.integers(0, 3)):  # confident false positives far away
            xy = rng.uniform(300, 400, 2)
            di.append(im)
            db.append(np.r_[xy, xy + 20])
            ds.append(rng.uniform(0.5, 0.95))
            dc.append(int(rng.integers(1, 3)))
    images = Images(id=np.arange(1, n_img + 1), width=np.full(n_img, 500.0), height=np.full(n_img, 500.0))
    gt = GroundTruth(image_id=gi, box=np.array(gb), category=gc)
    dets = Detections(image_id=di, box=np.array(db), score=np.array(ds), category=dc)
    return Dataset(images=images, gt=gt, categories={1: "a", 2: "b"}), dets


def test_protocol_rows_and_consistency():
    ds, dets = _dataset()
    out = run(ds, dets, tau=0.1, with_ap=False, seed=3)
    sp = out["split"]
    assert sp["n_images_calibration"] + sp["n_images_test"] == 60 and sp["n_images_calibration"] == 30
    rows = {(r["calibrator"], r["thresholded"]): r for r in out["rows"]}
    assert len(rows) == 10
    ident = rows[("identity", True)]
    assert ident["thr1"] == ident["thr0"]  # identity leaves the operating thresholds where they were
    # the unthresholded identity row is the plain measure on the test half
    rng = np.random.default_rng(3)
    perm = rng.permutation(60)
    ids_b = np.sort(np.arange(1, 61)[perm[30:]])
    gt_b = ds.gt.select(np.isin(ds.gt.image_id, ids_b))
    d_b = dets.select(np.isin(dets.image_id, ids_b))
    assert rows[("identity", False)]["lrp"] == pytest.approx(lrp(d_b, gt_b, 0.1).value)
    assert rows[("identity", False)]["laece"] == pytest.approx(laece(d_b, gt_b, 0.1).value)
    # the detector says ~0.95 for boxes of IoU ~0.75: every calibrator fitted on IoU targets lowers LaECE a lot
    before = rows[("identity", True)]["laece"]
    assert before > 0.15
    for m in ("temperature", "platt", "linear_regression", "isotonic"):
        assert rows[(m, True)]["laece"] < 0.6 * before, m
        assert rows[(m, False)]["laece"] < rows[("identity", False)]["laece"], m
    # thresholding removes the confident far-away FPs the LRP-optimal thresholds can see
    assert rows[("identity", True)]["lrp_fp"] <= rows[("identity", False)]["lrp_fp"]
    assert "| identity | yes |" in out["markdown"]
    assert out["choices"]["laece"]["bins"] == 25 and out["choices"]["dece"]["tau"] == 0.5


def test_coco_ap_perfect_and_half():
    ds, _ = _dataset(1, 10)
    gt = ds.gt
    perfect = Detections(image_id=gt.image_id, box=gt.box, score=np.linspace(0.9, 0.5, len(gt)), category=gt.category)
    assert coco_ap(gt, perfect, ds.images.id, ds.categories) == pytest.approx(1.0)
    # one class detected perfectly, the other not at all: AP 0.5
    keep = gt.category == 1
    assert coco_ap(gt, perfect.select(keep), ds.images.id, ds.categories) == pytest.approx(0.5)


def test_bad_arguments():
    ds, dets = _dataset(2, 4)
    with pytest.raises(DetcalInputError, match="calibrator"):
        run(ds, dets, calibrators=["nope"], with_ap=False)
    with pytest.raises(DetcalInputError, match="fraction"):
        run(ds, dets, fraction=1.0, with_ap=False)
    assert markdown_table([], "t").startswith("**t**")
