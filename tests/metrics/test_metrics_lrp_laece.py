"""LRP, LRP-optimal thresholds, LaECE / LaACE / D-ECE: hand-worked cases and pycocotools cross-checks."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth
from detcal.metrics.laece import bin_index, dece_kuzucu, laace, laece
from detcal.metrics.lrp import detection_outcomes, lrp, lrp_optimal_thresholds, lrp_table, threshold_mask


def _hand_case():
    # class 1: three GT; TPs of IoU 0.5 and 1.0, a far FP, and a duplicate of A (FP at tau 0.5); one GT missed
    gt = GroundTruth(
        image_id=[1, 1, 1, 1],
        box=[[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60], [0, 0, 5, 5]],
        category=[1, 1, 1, 2],
    )
    dets = Detections(
        image_id=[1, 1, 1, 1, 1],
        box=[[0, 0, 10, 5], [20, 20, 30, 30], [100, 100, 110, 110], [0, 0, 10, 8], [0, 0, 4, 4]],
        score=[0.9, 0.8, 0.7, 0.6, 0.5],
        category=[1, 1, 1, 1, 3],  # class 3 has no ground truth: left out of every average
    )
    return dets, gt


def test_lrp_hand_worked():
    dets, gt = _hand_case()
    t = lrp_table(detection_outcomes(dets, gt, 0.5))
    assert t.categories.tolist() == [1, 2]
    # class 1: TP IoU 0.5 and 1.0 -> loc sum 0.5, / (1 - 0.5) = 1; FP 2, FN 1 -> (1 + 2 + 1) / 5
    assert t.lrp[0] == pytest.approx(0.8)
    assert t.loc[0] == pytest.approx(0.25)
    assert t.fp[0] == pytest.approx(0.5)
    assert t.fn[0] == pytest.approx(1 / 3)
    # class 2: no detection -> LRP 1, FN 1, loc and FP undefined
    assert t.lrp[1] == 1.0 and t.fn[1] == 1.0 and np.isnan(t.loc[1]) and np.isnan(t.fp[1])
    # prefixes of class 1: 1 det (1 + 0 + 2)/3 = 1; 2 dets (1 + 0 + 1)/3; 3 dets 3/4; 4 dets 4/5
    assert t.olrp[0] == pytest.approx(2 / 3)
    assert t.threshold[0] == 0.8
    assert t.olrp_fn[0] == pytest.approx(1 / 3) and t.olrp_fp[0] == 0.0 and t.olrp_loc[0] == pytest.approx(0.25)
    assert np.isnan(t.threshold[1])
    r = lrp(dets, gt, 0.5)
    assert r.value == pytest.approx(0.9)
    assert r.extra["lrp_fn"] == pytest.approx((1 / 3 + 1) / 2)
    assert r.extra["lrp_loc"] == pytest.approx(0.25)
    assert lrp(dets, gt, 0.5, optimal=True).value == pytest.approx((2 / 3 + 1) / 2)


def test_lrp_tau_zero_follows_pycocotools():
    # at tau 0 pycocotools lets a detection take a free GT of IoU 0: the far box takes GT C with loc error 1
    dets, gt = _hand_case()
    t = lrp_table(detection_outcomes(dets, gt, 0.0))
    assert t.n_tp[0] == 3 and t.n_fp[0] == 1
    assert t.lrp[0] == pytest.approx((0.5 + 0 + 1 + 1 + 0) / 4)


def test_thresholds_and_mask():
    dets, gt = _hand_case()
    thr = lrp_optimal_thresholds(dets, gt, 0.5)
    assert thr[1] == 0.8 and np.isnan(thr[2])
    keep = threshold_mask(dets, thr)
    assert keep.tolist() == [True, True, False, False, True]  # class 3 has no threshold: kept
    t2 = lrp_table(detection_outcomes(dets.select(keep), gt, 0.5))
    assert t2.lrp[0] == pytest.approx(2 / 3)


def _random_case(seed, n_img=12, n_cls=3):
    rng = np.random.default_rng(seed)
    gi, gb, gc, di, db, ds, dc = [], [], [], [], [], [], []
    for im in range(1, n_img + 1):
        k = rng.integers(0, 5)
        xy = rng.uniform(0, 80, (k, 2))
        wh = rng.uniform(8, 30, (k, 2))
        boxes = np.hstack([xy, xy + wh])
        cls = rng.integers(1, n_cls + 1, k)
        gi += [im] * k
        gb += boxes.tolist()
        gc += cls.tolist()
        for b, c in zip(boxes, cls):
            for _ in range(rng.integers(0, 3)):
                j = b + rng.normal(0, 3, 4)
                j[2:] = np.maximum(j[2:], j[:2] + 1)
                di.append(im)
                db.append(j.tolist())
                ds.append(rng.uniform(0.05, 1))
                dc.append(int(c))
        for _ in range(rng.integers(0, 3)):
            xy = rng.uniform(0, 80, 2)
            di.append(im)
            db.append([*xy, *(xy + rng.uniform(5, 20, 2))])
            ds.append(rng.uniform(0.05, 1))
            dc.append(int(rng.integers(1, n_cls + 1)))
    gt = GroundTruth(image_id=gi, box=np.array(gb).reshape(-1, 4), category=gc)
    dets = Detections(image_id=di, box=np.array(db).reshape(-1, 4), score=np.round(ds, 6), category=dc)
    return dets, gt, n_img, n_cls


def _pycoco_outcomes(dets, gt, n_img, n_cls, tau):
    """TP / FP / IoU with the matched GT per detection, from pycocotools' own evaluateImg."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def xywh(b):
        return [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]

    anns = [
        {
            "id": i + 1,
            "image_id": int(gt.image_id[i]),
            "category_id": int(gt.category[i]),
            "bbox": xywh(gt.box[i]),
            "area": float((gt.box[i, 2] - gt.box[i, 0]) * (gt.box[i, 3] - gt.box[i, 1])),
            "iscrowd": 0,
        }
        for i in range(len(gt))
    ]
    coco = COCO()
    coco.dataset = {
        "images": [{"id": i, "width": 200, "height": 200} for i in range(1, n_img + 1)],
        "annotations": anns,
        "categories": [{"id": c} for c in range(1, n_cls + 1)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        res = coco.loadRes(
            [
                {
                    "image_id": int(dets.image_id[i]),
                    "category_id": int(dets.category[i]),
                    "bbox": xywh(dets.box[i]),
                    "score": float(dets.score[i]),
                }
                for i in range(len(dets))
            ]
        )
        ev = COCOeval(coco, res, "bbox")
        ev.params.iouThrs = np.array([tau])
        ev.params.areaRng = [ev.params.areaRng[0]]
        ev.params.areaRngLbl = ["all"]
        ev.params.maxDets = [100]
        ev.evaluate()
    out = {}  # det row -> (is_tp, iou)
    for e in ev.evalImgs:
        if e is None:
            continue
        for j, did in enumerate(e["dtIds"]):
            g = int(e["dtMatches"][0, j])
            row = did - 1
            if g > 0:
                gb = gt.box[g - 1]
                db = dets.box[row]
                iw = max(0, min(db[2], gb[2]) - max(db[0], gb[0]))
                ih = max(0, min(db[3], gb[3]) - max(db[1], gb[1]))
                u = (db[2] - db[0]) * (db[3] - db[1]) + (gb[2] - gb[0]) * (gb[3] - gb[1]) - iw * ih
                out[row] = (True, iw * ih / u, int(dets.category[row]))
            else:
                out[row] = (False, 0.0, int(dets.category[row]))
    n_gt = {c: int((gt.category == c).sum()) for c in range(1, n_cls + 1)}
    return out, n_gt


@pytest.mark.parametrize("seed,tau", [(0, 0.5), (1, 0.1), (2, 0.3)])
def test_lrp_laece_against_pycocotools_matching(seed, tau):
    dets, gt, n_img, n_cls = _random_case(seed)
    out, n_gt = _pycoco_outcomes(dets, gt, n_img, n_cls, tau)
    t = lrp_table(detection_outcomes(dets, gt, tau))
    la = laece(dets, gt, tau, bins=7)
    lrps, errs = [], []
    for k, c in enumerate(t.categories):
        rows = sorted((r for r, v in out.items() if v[2] == c), key=lambda r: -dets.score[r])
        tp = np.array([out[r][0] for r in rows], bool)
        iou = np.array([out[r][1] for r in rows])
        sc = dets.score[rows]
        ntp, nfp, nfn = tp.sum(), (~tp).sum(), n_gt[c] - tp.sum()
        ref = 1.0 if ntp == 0 else ((1 - iou[tp]).sum() / (1 - tau) + nfp + nfn) / (ntp + nfp + nfn)
        assert t.lrp[k] == pytest.approx(ref), c
        lrps.append(ref)
        # oLRP: the best LRP over all score thresholds
        best = 1.0
        for s in np.unique(sc):
            keep = sc >= s
            a, f = tp[keep].sum(), (~tp[keep]).sum()
            if a:
                best = min(best, ((1 - iou[keep & tp]).sum() / (1 - tau) + f + n_gt[c] - a) / (n_gt[c] + f))
        assert t.olrp[k] == pytest.approx(best), c
        if len(rows):
            e = 0.0
            for b in range(7):
                inb = (sc > b / 7) & (sc <= (b + 1) / 7) if b else (sc <= 1 / 7)
                if inb.any():
                    e += inb.sum() / len(rows) * abs(sc[inb].mean() - np.where(tp, iou, 0)[inb].mean())
            errs.append(e)
    assert lrp(dets, gt, tau).value == pytest.approx(np.mean(lrps))
    assert la.value == pytest.approx(np.mean(errs))


def test_laece_hand_worked():
    gt = GroundTruth(image_id=[1, 1], box=[[0, 0, 10, 10], [20, 20, 30, 30]], category=[1, 1])
    dets = Detections(
        image_id=[1, 1, 1],
        box=[[0, 0, 10, 5], [20, 20, 30, 30], [100, 100, 110, 110]],
        score=[0.9, 0.7, 0.3],
        category=[1, 1, 1],
    )
    # each detection alone in its bin: (|0.9 - 0.5| + |0.7 - 1| + |0.3 - 0|) / 3
    assert laece(dets, gt, 0.1).value == pytest.approx(1 / 3)
    assert laace(dets, gt, 0.1).value == pytest.approx(1 / 3)
    # one bin: |mean score 0.6333 - mean target 0.5|
    assert laece(dets, gt, 0.1, bins=1).value == pytest.approx(abs(1.9 / 3 - 0.5))
    # equal-count bins, 3 bins of one detection: same as per detection; 1 bin: as one equal-width bin
    assert laace(dets, gt, 0.1, bins=3).value == pytest.approx(1 / 3)
    assert laace(dets, gt, 0.1, bins=1).value == pytest.approx(abs(1.9 / 3 - 0.5))


def test_bins_closed_right_is_the_reference_convention():
    s = np.array([0.0, 0.04, 0.05, 1.0])
    assert bin_index(s, 25, "right").tolist() == [0, 0, 1, 24]
    assert bin_index(s, 25, "left").tolist() == [0, 1, 1, 24]
    gt = GroundTruth(image_id=[1], box=[[0, 0, 10, 10]], category=[1])
    dets = Detections(image_id=[1, 1], box=[[0, 0, 10, 10], [50, 50, 60, 60]], score=[0.04, 0.05], category=[1, 1])
    assert laece(dets, gt, 0.5).value == pytest.approx((0.96 + 0.05) / 2)
    assert laece(dets, gt, 0.5, closed="left").value == pytest.approx(abs(0.045 - 0.5))


def test_dece_hand_worked_and_variant():
    gt = GroundTruth(image_id=[1, 1], box=[[0, 0, 10, 10], [20, 20, 30, 30]], category=[1, 2])
    dets = Detections(
        image_id=[1, 1, 1],
        box=[[0, 0, 10, 10], [60, 60, 70, 70], [20, 20, 30, 30]],
        score=[0.9, 0.3, 0.85],
        category=[1, 1, 2],
    )
    # bin (0.8, 0.9]: conf 0.875, precision 1, weight 2/3; bin (0.2, 0.3]: conf 0.3, precision 0, weight 1/3
    assert dece_kuzucu(dets, gt).value == pytest.approx(2 / 3 * 0.125 + 1 / 3 * 0.3)
    # class 2 is perfectly calibrated at IoU 1 only if its score is 1: fiveai drops a zero-error class
    d2 = Detections(image_id=[1, 1], box=[[0, 0, 10, 10], [20, 20, 30, 30]], score=[0.9, 1.0], category=[1, 2])
    assert laece(d2, gt, 0.5).value == pytest.approx(0.05)
    assert laece(d2, gt, 0.5, variant="fiveai").value == pytest.approx(0.1)


def test_bad_input():
    dets, gt = _hand_case()
    with pytest.raises(DetcalInputError, match="tau"):
        lrp(dets, gt, 1.0)
    bad = Detections(image_id=[1], box=[[0, 0, 1, 1]], score=[1.5], category=[1])
    with pytest.raises(DetcalInputError, match="score"):
        laece(bad, gt)
    with pytest.raises(DetcalInputError, match="variant"):
        laece(dets, gt, variant="nope")


def test_laace_fiveai_keeps_crowd_matched_detections_with_iou_zero():
    # one regular box and one crowd box of class 1; the third detection lies inside the crowd region
    gt = GroundTruth(image_id=[1, 1], box=[[0, 0, 10, 10], [40, 40, 80, 80]], category=[1, 1], iscrowd=[False, True])
    dets = Detections(
        image_id=[1, 1, 1],
        box=[[0, 0, 10, 5], [50, 50, 60, 60], [200, 200, 210, 210]],
        score=[0.9, 0.6, 0.2],
        category=[1, 1, 1],
    )
    # kuzucu2024: the crowd-matched detection leaves the sample: (|0.9 - 0.5| + |0.2 - 0|) / 2
    assert laace(dets, gt, 0.1).value == pytest.approx(0.3)
    # fiveai (the reference's LaACE_0): it stays with target 0: (0.4 + 0.6 + 0.2) / 3
    r = laace(dets, gt, 0.1, variant="fiveai")
    assert r.value == pytest.approx(0.4) and r.extra["n_detections"] == 3
    # LaECE keeps leaving it out under both variants (the reference's bins hold TPs and FPs only)
    assert laece(dets, gt, 0.1, variant="fiveai").value == laece(dets, gt, 0.1).value
    # past the max-detections cut it leaves the sample under both variants
    assert laace(dets, gt, 0.1, variant="fiveai", max_dets=2).extra["n_detections"] == 2
