"""Accuracy beside calibration: COCO AP/AR (pycocotools' summarize numbers) or KITTI AP
(the devkit's 11- and 40-point AP), and the localisation-aware measures of the 2024
benchmark (LRP with its components and optimal thresholds, LaECE, LaACE)."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import EvaluationSpec

__all__ = ["accuracy_block", "localisation_block"]


def accuracy_block(spec: EvaluationSpec, data: LoadedData) -> dict[str, Any]:
    """COCO AP for COCO-format data, KITTI AP for KITTI data (docs/real_detectors.md, docs/matching.md)."""
    if not spec.accuracy.enabled:
        return {"_skipped": "accuracy.enabled=false"}
    ds, dets = data.dataset, data.detections
    if data.kitti is not None:
        from detcal.matching.kitti_ap import kitti_ap

        cats = [c for c in (1, 4, 6) if c in ds.categories]
        rows = kitti_ap(dets, ds.gt, cats, rules=data.kitti)
        return {"kitti_ap": [r.to_dict() for r in rows],
                "definition": "KITTI devkit eval_class: 11- and 40-point interpolated AP per class and difficulty, "
                              "per-class IoU 0.7/0.5/0.5, from the devkit's assignment (docs/matching.md)"}
    from detcal.metrics.accuracy import coco_ap

    area = ds.gt.area
    res = coco_ap(dets, ds, gt_area=area, workers=spec.parallel.workers)  # area ranges in processes
    out: dict[str, Any] = {k: r.to_dict() for k, r in res.items()}
    out["_areas"] = ("the 'area' of each annotation (as pycocotools)" if area is not None else
                     "box areas w*h (the ground truth gives no 'area'; pycocotools would use the annotation's)")
    return out


def localisation_block(spec: EvaluationSpec, data: LoadedData) -> dict[str, Any]:
    """LRP (with components and LRP-optimal thresholds), LaECE and LaACE (docs/newest_measures.md)."""
    loc = spec.localisation
    if not loc.enabled:
        return {"_skipped": "localisation.enabled=false"}
    if data.kitti is not None:
        return {"_skipped": "defined for COCO-style matching; not computed with KITTI rules"}
    from detcal.metrics.laece import describe_choices, laace_from_outcomes, laece_from_outcomes
    from detcal.metrics.lrp import detection_outcomes, lrp_result, lrp_table

    ds, dets = data.dataset, data.detections
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o = detection_outcomes(dets, ds.gt, loc.tau, max_dets=spec.matching.max_dets)
        table = lrp_table(o)
        out = {"lrp": lrp_result(table, max_dets=spec.matching.max_dets).to_dict(),
               "olrp": lrp_result(table, optimal=True, max_dets=spec.matching.max_dets).to_dict(),
               "laece": laece_from_outcomes(o, bins=loc.laece_bins, closed=loc.closed, variant=loc.variant).to_dict(),
               "laace": laace_from_outcomes(o, variant=loc.variant).to_dict()}
    thr = np.asarray(table.threshold, dtype=float)
    out["lrp_optimal_thresholds"] = {str(int(c)): (None if not np.isfinite(t) else float(t))
                                     for c, t in zip(table.categories, thr)}
    out["choices"] = describe_choices()
    if loc.pdq:
        from detcal.metrics.pdq import pdq

        if dets.uncertainty_kind not in ("box_std", "box_cov", "corner_cov") and loc.pdq_fixed_cov is None:
            out["pdq"] = {"_skipped": "the detections carry no box covariance: give localisation.pdq_fixed_cov"}
        else:
            r = pdq(ds, dets, fixed_cov=loc.pdq_fixed_cov)
            out["pdq"] = {**r.to_dict(), "table": None}  # per-detection qualities stay out of metrics.json
    return out
