"""The calibration protocol of Kuzucu, Oksuz, Sadeghi, Dokania (ECCV 2024) as one function.

"On Calibration of Object Detectors: Pitfalls, Evaluation and Baselines":
a detector is used at an operating threshold, so calibration is fitted and
measured on thresholded detections.

Protocol (:func:`run`), on a dataset and the detections of one detector:

1. split the images at random (``seed``) into a calibration half A and a
   test half B (``fraction`` of the images in A);
2. *with thresholding* (the benchmark's protocol): on A, the LRP-optimal
   threshold of every class (``thr0``) at the TP-validation IoU ``tau``;
   keep ``score >= thr0``; match again; fit one calibrator per class on the
   kept, matched detections with targets IoU (TP) / 0 (FP); calibrate the
   kept A detections and take the LRP-optimal thresholds again (``thr1``,
   the operating thresholds). On B: keep ``>= thr0``, calibrate, keep
   ``>= thr1``, evaluate;
3. *without thresholding*: fit on every matched A detection, calibrate every
   B detection, evaluate;
4. evaluate on B: LRP (and its components), LaECE (25 bins, right-closed),
   LaACE_0 (per detection), all at ``tau``; the class-agnostic D-ECE (10
   bins, tau 0.5, binary targets); COCO AP (pycocotools, 0.50:0.95).

Calibrators: ``identity``, ``temperature``, ``platt``, ``linear_regression``,
``isotonic`` (:mod:`detcal.calibration.iou_regression`).
A class without ground truth in A keeps every detection (NaN threshold) and
stays uncalibrated.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from detcal.calibration.iou_regression import PerClassCalibrator
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth
from detcal.metrics.laece import (
    DECE_BINS,
    DECE_TAU,
    LAECE_BINS,
    dece_from_outcomes,
    laace_from_outcomes,
    laece_from_outcomes,
)
from detcal.metrics.lrp import (
    DEFAULT_TAU,
    DetectionOutcomes,
    detection_outcomes,
    lrp_optimal_thresholds,
    lrp_table,
    threshold_mask,
)

CALIBRATORS: tuple[str, ...] = ("identity", "temperature", "platt", "linear_regression", "isotonic")


def coco_ap(gt: GroundTruth, dets: Detections, image_ids: np.ndarray, categories: dict[int, str]) -> float:
    """COCO bbox AP@[0.50:0.95] by pycocotools on in-memory records (area range all, 100 detections)."""
    from pycocotools.coco import COCO  # lazy: pycocotools only for the COCO reference evaluation, kept out of start-up
    from pycocotools.cocoeval import (
        COCOeval,  # lazy: pycocotools only for the COCO reference evaluation, kept out of start-up
    )

    if len(dets) == 0:
        return 0.0
    g = gt.box
    anns = [
        {
            "id": int(i) + 1,
            "image_id": int(im),
            "category_id": int(c),
            "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])],
            "area": float((b[2] - b[0]) * (b[3] - b[1])),
            "iscrowd": int(cr),
            "ignore": int(ig),
        }
        for i, (im, c, b, cr, ig) in enumerate(zip(gt.image_id, gt.category, g, gt.iscrowd, gt.ignore))
    ]
    coco = COCO()
    coco.dataset = {
        "images": [{"id": int(i)} for i in image_ids],
        "annotations": anns,
        "categories": [{"id": int(k), "name": v} for k, v in categories.items()],
    }
    d = dets.box
    res = [
        {
            "image_id": int(im),
            "category_id": int(c),
            "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])],
            "score": float(s),
        }
        for im, c, b, s in zip(dets.image_id, dets.category, d, dets.score)
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(res), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0])


def _with_scores(dets: Detections, score: np.ndarray) -> Detections:
    out = dets.select(np.arange(len(dets)))
    out.score = np.asarray(score, dtype=np.float64)
    return out


def _targets(o: DetectionOutcomes) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(o.valid)
    return rows, np.where(o.tp[rows], o.iou[rows], 0.0)


def _fit(method: str, dets: Detections, gt: GroundTruth, tau: float, max_dets: int | None) -> PerClassCalibrator:
    o = detection_outcomes(dets, gt, tau, max_dets=max_dets)
    rows, t = _targets(o)
    return PerClassCalibrator(method).fit(dets.score[rows], t, dets.category[rows])


def evaluate(
    dets: Detections,
    gt: GroundTruth,
    *,
    tau: float = DEFAULT_TAU,
    max_dets: int | None = 100,
    bins: int = LAECE_BINS,
    dece_bins: int = DECE_BINS,
    dece_tau: float = DECE_TAU,
    ap: Callable[[Detections], float] | None = None,
) -> dict[str, Any]:
    """LRP (+ components), LaECE, LaACE_0, D-ECE and (if ``ap`` is given) AP of ``dets``."""
    o = detection_outcomes(dets, gt, tau, max_dets=max_dets)
    means = lrp_table(o).means()
    out: dict[str, Any] = {
        "lrp": means["lrp"],
        "lrp_loc": means["loc"],
        "lrp_fp": means["fp"],
        "lrp_fn": means["fn"],
        "laece": laece_from_outcomes(o, bins=bins).value,
        "laace": laace_from_outcomes(o).value,
        "dece": dece_from_outcomes(detection_outcomes(dets, gt, dece_tau, max_dets=max_dets), bins=dece_bins).value,
        "n_detections": int(len(dets)),
    }
    out["ap"] = float(ap(dets)) if ap is not None else float("nan")
    return out


def _split_images(image_ids: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The seeded image split: calibration half A (``fraction`` of the images) and test half B, each sorted."""
    ids = np.sort(image_ids)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(ids))
    n_a = int(round(fraction * len(ids)))
    ids_a, ids_b = np.sort(ids[perm[:n_a]]), np.sort(ids[perm[n_a:]])
    if len(ids_a) == 0 or len(ids_b) == 0:
        raise DetcalInputError(f"{len(ids)} images cannot be split into two non-empty halves", field="images")
    return ids_a, ids_b


def _calibrated_rows(
    calibrators: Sequence[str],
    d_a: Detections,
    gt_a: GroundTruth,
    d_b: Detections,
    gt_b: GroundTruth,
    tau: float,
    max_dets: int | None,
    ev: dict[str, Any],
) -> list[dict[str, Any]]:
    """Per calibrator, the measures on half B with LRP-optimal thresholding (the benchmark's protocol) and without."""
    rows: list[dict[str, Any]] = []
    thr0 = lrp_optimal_thresholds(d_a, gt_a, tau, max_dets=max_dets)
    a0 = d_a.select(threshold_mask(d_a, thr0))
    b0 = d_b.select(threshold_mask(d_b, thr0))
    for method in calibrators:  # loop over calibrators
        # with thresholding (the benchmark's protocol)
        cal = _fit(method, a0, gt_a, tau, max_dets)
        a1 = _with_scores(a0, cal.transform(a0.score, a0.category))
        thr1 = lrp_optimal_thresholds(a1, gt_a, tau, max_dets=max_dets)
        b1 = _with_scores(b0, cal.transform(b0.score, b0.category))
        b1 = b1.select(threshold_mask(b1, thr1))
        rows.append(
            {
                "calibrator": method,
                "thresholded": True,
                **evaluate(b1, gt_b, **ev),
                "thr0": thr0,
                "thr1": thr1,
                "n_classes_fitted": len(cal.calibrators_),
            }
        )
        # without thresholding
        cal_all = _fit(method, d_a, gt_a, tau, max_dets)
        b_all = _with_scores(d_b, cal_all.transform(d_b.score, d_b.category))
        rows.append(
            {
                "calibrator": method,
                "thresholded": False,
                **evaluate(b_all, gt_b, **ev),
                "n_classes_fitted": len(cal_all.calibrators_),
            }
        )
    return rows


def run(
    dataset: Dataset,
    dets: Detections,
    *,
    calibrators: Sequence[str] = CALIBRATORS,
    tau: float = DEFAULT_TAU,
    fraction: float = 0.5,
    seed: int = 0,
    max_dets: int | None = 100,
    bins: int = LAECE_BINS,
    dece_bins: int = DECE_BINS,
    dece_tau: float = DECE_TAU,
    with_ap: bool = True,
    name: str = "",
) -> dict[str, Any]:
    """Run the protocol (module docstring); returns ``{"choices", "split", "rows", "markdown"}``.

    Every row: ``calibrator``, ``thresholded`` (bool), the measures of
    :func:`evaluate` on half B, and for thresholded rows the per-class
    thresholds ``thr0`` (before calibration) and ``thr1`` (operating).
    """
    unknown = [c for c in calibrators if c not in CALIBRATORS]
    if unknown:
        raise DetcalInputError(f"unknown calibrator(s) {unknown}; choose from {CALIBRATORS}", field="calibrators")
    if not 0.0 < fraction < 1.0:
        raise DetcalInputError(f"fraction must lie in (0, 1), got {fraction}", field="fraction")
    ids_a, ids_b = _split_images(dataset.images.id, fraction, seed)
    gt = dataset.gt
    gt_a, gt_b = gt.select(np.isin(gt.image_id, ids_a)), gt.select(np.isin(gt.image_id, ids_b))
    d_a, d_b = dets.select(np.isin(dets.image_id, ids_a)), dets.select(np.isin(dets.image_id, ids_b))
    ap = (lambda d: coco_ap(gt_b, d, ids_b, dataset.categories)) if with_ap else None
    ev: dict[str, Any] = dict(tau=tau, max_dets=max_dets, bins=bins, dece_bins=dece_bins, dece_tau=dece_tau, ap=ap)

    rows = _calibrated_rows(calibrators, d_a, gt_a, d_b, gt_b, tau, max_dets, ev)
    choices = {
        "tau": tau,
        "max_dets": max_dets,
        "matching": "pycocotools greedy per class",
        "laece": {
            "bins": bins,
            "binning": "equal_width",
            "closed": "right",
            "average": "mean over classes with detections",
        },
        "laace": {"bins": "per_detection"},
        "dece": {"bins": dece_bins, "tau": dece_tau, "pooling": "class_agnostic", "target": "TP 1 / FP 0"},
        "lrp": {
            "average": "nanmean over classes with ground truth",
            "thresholds": "LRP-optimal per class, score >= threshold kept",
        },
        "calibrators": {"fit": "per class on IoU targets (FP 0)", "methods": list(calibrators)},
        "ap": "pycocotools bbox AP@[0.50:0.95]" if with_ap else None,
    }
    split = {
        "seed": seed,
        "fraction": fraction,
        "n_images_calibration": int(len(ids_a)),
        "n_images_test": int(len(ids_b)),
        "n_detections_calibration": int(len(d_a)),
        "n_detections_test": int(len(d_b)),
    }
    return {"name": name, "choices": choices, "split": split, "rows": rows, "markdown": markdown_table(rows, name)}


def markdown_table(rows: Sequence[dict[str, Any]], title: str = "") -> str:
    """The rows as a Markdown table (percentages, one decimal)."""
    head = "| calibrator | thresholded | LRP | LRP loc | LRP FP | LRP FN | LaECE | LaACE | D-ECE | AP | detections |"
    lines = ([f"**{title}**", ""] if title else []) + [head, "|" + "---|" * 11]
    for r in rows:
        vals = " | ".join(
            f"{100 * r[k]:.1f}" for k in ("lrp", "lrp_loc", "lrp_fp", "lrp_fn", "laece", "laace", "dece", "ap")
        )
        lines.append(f"| {r['calibrator']} | {'yes' if r['thresholded'] else 'no'} | {vals} | {r['n_detections']} |")
    return "\n".join(lines) + "\n"
