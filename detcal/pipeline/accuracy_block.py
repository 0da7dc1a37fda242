"""Accuracy beside calibration: COCO AP/AR (pycocotools' summarize numbers) or KITTI AP
(the devkit's 11- and 40-point AP), and the localisation-aware measures of the 2024
benchmark (LRP with its components and optimal thresholds, LaECE, LaACE)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.results import AccuracyBlock, LocalisationBlock
from detcal.core.types import MetricResult, Skipped
from detcal.matching.engine import ExclusiveLayout, layout_and_match
from detcal.metrics.accuracy import IOU_THRESHOLDS, MAX_DETS, accumulate_order, coco_ap
from detcal.metrics.laece import describe_choices, laece_and_laace
from detcal.metrics.lrp import detection_outcomes, lrp_result, lrp_table, outcomes_from_match
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import EvaluationSpec

__all__ = ["accuracy_and_localisation", "accuracy_block", "localisation_block"]


def accuracy_and_localisation(
    spec: EvaluationSpec, data: LoadedData
) -> tuple[AccuracyBlock | Skipped, LocalisationBlock | Skipped]:
    """:func:`accuracy_block` and :func:`localisation_block`; where both run on COCO rules (COCO AP and
    LRP), the detections' accumulate order (by category, descending score, image) is sorted once for
    both (:func:`detcal.metrics.accuracy.accumulate_order`), and, with the same max-dets (100), COCO AP's
    matching layout and LRP's matching are made together (:func:`detcal.matching.engine.layout_and_match`:
    the groups, ranks and pairs once); only LRP's outcome row is kept while COCO AP runs."""
    order = coco_layout = lrp_match = None
    if _coco_ap_runs(spec, data) and _localisation_runs(spec, data):
        dets, tau = data.detections, float(spec.localisation.tau)
        order = accumulate_order(dets, sorted(data.dataset.categories))
        if spec.matching.max_dets == MAX_DETS[-1] and 0.0 <= tau < 1.0:
            thresholds = IOU_THRESHOLDS.tolist()
            coco_layout, m = layout_and_match(dets, data.dataset.gt, thresholds, (tau,), max_dets=MAX_DETS[-1])
            lrp_match = (tau, m.matched[0], m.ignored[0], m.gt_index[0], m.considered)
    acc = accuracy_block(spec, data, order, coco_layout)
    del coco_layout  # before LRP's tables
    return acc, localisation_block(spec, data, order, lrp_match)


def _coco_ap_runs(spec: EvaluationSpec, data: LoadedData) -> bool:
    """Whether :func:`accuracy_block` computes COCO AP."""
    return spec.accuracy.enabled and data.kitti is None and data.format not in ("voc", "lvis", "openimages")


def _localisation_runs(spec: EvaluationSpec, data: LoadedData) -> bool:
    """Whether :func:`localisation_block` computes LRP."""
    return spec.localisation.enabled and data.kitti is None and data.format not in ("lvis", "openimages")


def accuracy_block(
    spec: EvaluationSpec, data: LoadedData, order: np.ndarray | None = None, layout: ExclusiveLayout | None = None
) -> AccuracyBlock | Skipped:
    """COCO AP for COCO-format (and YOLO) data, KITTI AP for KITTI data, VOC AP for VOC data
    (docs/real_detectors.md, docs/matching.md, docs/formats.md). ``order``: the detections' accumulate
    order when known (:func:`detcal.metrics.accuracy.accumulate_order`); ``layout``: COCO AP's matching
    layout when already made (:func:`detcal.metrics.accuracy.coco_eval_arrays`)."""
    if not spec.accuracy.enabled:
        return Skipped("accuracy.enabled=false")
    ds, dets = data.dataset, data.detections
    if data.kitti is not None:
        from detcal.matching.kitti_ap import kitti_ap  # lazy: that format only

        cats = [c for c in (1, 4, 6) if c in ds.categories]
        rows = kitti_ap(dets, ds.gt, cats, rules=data.kitti)
        return AccuracyBlock(
            {
                "kitti_ap": [{"class": ds.categories.get(r.category, str(r.category)), **r.to_dict()} for r in rows],
                "definition": "KITTI devkit eval_class: 11- and 40-point interpolated AP per class and difficulty, "
                "per-class IoU 0.7/0.5/0.5, from the devkit's assignment (docs/matching.md)",
            }
        )
    if data.format == "voc":
        return _voc_block(data)
    if data.format == "lvis":
        return _lvis_block(data)
    if data.format == "openimages":
        return _openimages_block(data)

    area = ds.gt.area
    # the area ranges in processes where parallel.workers > 1
    res = coco_ap(dets, ds, gt_area=area, workers=spec.parallel.workers, order=order, layout=layout)
    out: dict[str, Any] = {k: _no_sentinel(r) for k, r in res.items()}
    out["_areas"] = (
        "the 'area' of each annotation (as pycocotools)"
        if area is not None
        else "box areas w*h (the ground truth gives no 'area'; pycocotools would use the annotation's)"
    )
    return AccuracyBlock(out)


def _no_sentinel(r: MetricResult) -> MetricResult:
    """pycocotools' -1 ("no ground truth to measure against") as undefined with its reason (:class:`Skipped`),
    so no -1 is ever read as a number (metrics.json, summary.md, the console)."""
    if r.value != -1.0:
        return r
    area = r.params.get("area", "all")
    where = "" if area == "all" else f" of the '{area}' area range"
    why = f"undefined: no non-crowd ground-truth box{where} in any category (pycocotools writes -1)"
    return dataclasses.replace(r, value=float("nan"), skipped=Skipped(why))


def _voc_block(data: LoadedData) -> AccuracyBlock:
    """VOC AP at IoU 0.5 (the devkit's matching), as VOC2007's 11-point and the area variant."""
    from detcal.matching.voc import match_voc  # lazy: that format only
    from detcal.metrics.voc_ap import VARIANTS, voc_ap  # lazy: as above

    ds, dets = data.dataset, data.detections
    mr = match_voc(dets, ds.gt, (0.5,), images=ds.images)
    cats = sorted(ds.categories)
    return AccuracyBlock(
        {
            "voc_ap": {v: voc_ap(dets, ds.gt, mr, cats, v)[0] for v in VARIANTS},
            "definition": "Pascal VOC devkit AP at IoU > 0.5 (difficult boxes ignored, no cap on detections): "
            "voc07_11pt (VOC2007 11-point) and area (VOC2010+) (docs/formats.md)",
        }
    )


def _openimages_block(data: LoadedData) -> AccuracyBlock:
    """Open Images AP per class and mAP at IoU 0.5 (the challenge's rules; docs/formats.md)."""
    from detcal.matching.openimages import match_openimages  # lazy: that format only
    from detcal.metrics.voc_ap import voc_ap  # lazy: as above

    ds, dets = data.dataset, data.detections
    mr = match_openimages(dets, ds.gt, (0.5,), data.protocol)
    return AccuracyBlock(
        {
            "openimages_ap": voc_ap(dets, ds.gt, mr, sorted(ds.categories), "area")[0],
            "definition": "Open Images V7 challenge AP at IoU 0.5: hierarchy-expanded boxes, group-of boxes found "
            "once, verified image-level labels; the area under the precision envelope (docs/formats.md)",
        }
    )


def _lvis_block(data: LoadedData) -> AccuracyBlock:
    """LVISEval's AP summary and the calibration of the LVIS sample per frequency group (docs/formats.md)."""
    from detcal.metrics.lvis_ap import lvis_ap, lvis_calibration_by_frequency  # lazy: that format only

    ds, dets, rules = data.dataset, data.detections, data.protocol
    return AccuracyBlock(
        {
            "lvis_ap": lvis_ap(dets, ds, rules),
            "calibration_by_frequency": lvis_calibration_by_frequency(dets, ds, rules),
            "definition": "lvis.LVISEval (bbox): 300 detections per image, federated ignores, APr/APc/APf over the "
            "rare/common/frequent categories; ECE, D-ECE and LaECE at IoU 0.5 of the LVIS sample (docs/formats.md)",
        }
    )


def localisation_block(
    spec: EvaluationSpec,
    data: LoadedData,
    order: np.ndarray | None = None,
    lrp_match: tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> LocalisationBlock | Skipped:
    """LRP (with components and LRP-optimal thresholds), LaECE and LaACE (docs/newest_measures.md).
    ``order``: the detections' accumulate order when known (:func:`detcal.metrics.accuracy.accumulate_order`);
    ``lrp_match``: the matching at ``localisation.tau`` with ``spec.matching.max_dets`` when already made
    (tau, matched, ignored, gt_index, considered: :func:`detcal.metrics.lrp.outcomes_from_match`)."""
    loc = spec.localisation
    if not loc.enabled:
        return Skipped("localisation.enabled=false")
    if data.kitti is not None:
        return Skipped("defined for COCO-style matching; not computed with KITTI rules")
    if data.format in ("lvis", "openimages"):
        return Skipped(
            f"defined for COCO-style matching; not computed under the {data.format} rules "
            "(docs/formats.md: the protocol's own numbers are under accuracy)"
        )

    ds, dets = data.dataset, data.detections
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if lrp_match is not None and lrp_match[0] == loc.tau:
            o = outcomes_from_match(dets, ds.gt, *lrp_match, max_dets=spec.matching.max_dets)
        else:
            o = detection_outcomes(dets, ds.gt, loc.tau, max_dets=spec.matching.max_dets)
        table = lrp_table(o, order)
        laece, laace = laece_and_laace(o, bins=loc.laece_bins, closed=loc.closed, variant=loc.variant)
        out: dict[str, Any] = {
            "lrp": lrp_result(table, max_dets=spec.matching.max_dets),
            "olrp": lrp_result(table, optimal=True, max_dets=spec.matching.max_dets),
            "laece": laece,
            "laace": laace,
        }
    thr = np.asarray(table.threshold, dtype=float)
    out["lrp_optimal_thresholds"] = {
        str(int(c)): (None if not np.isfinite(t) else float(t)) for c, t in zip(table.categories, thr)
    }
    out["choices"] = describe_choices()
    if loc.kde_ece:
        from detcal.metrics.kde_ece import detection_kde_ece  # lazy: scipy kept out of start-up (kde_ece)

        for key, link in (("kde_ece", "binary"), ("kde_ece_iou", "iou")):
            out[key] = detection_kde_ece(dets, ds.gt, link=link, max_dets=spec.matching.max_dets)
    if loc.pdq:
        from detcal.metrics.pdq import pdq  # lazy: scipy kept out of start-up (pdq)

        if dets.uncertainty_kind not in ("box_std", "box_cov", "corner_cov") and loc.pdq_fixed_cov is None:
            out["pdq"] = Skipped("the detections carry no box covariance: give localisation.pdq_fixed_cov")
        elif loc.pdq_variant == "detcal_continuous":
            r = pdq(ds, dets, variant="detcal_continuous", fixed_cov=loc.pdq_fixed_cov)
            out["pdq"] = {**r.to_dict(), "table": None}  # per-detection qualities stay out of metrics.json
        else:
            segs, scores, notes = _pdq_inputs(data, loc.pdq_gt_mask)
            mask = "segmentation" if segs is not None else "box"
            r = pdq(
                ds,
                dets,
                gt_mask=mask,
                segmentations=segs,
                class_scores=scores,
                fixed_cov=loc.pdq_fixed_cov,
                workers=spec.parallel.workers,
            )
            out["pdq"] = {**r.to_dict(), "table": None, "inputs": notes}
    return LocalisationBlock(out)


def _pdq_inputs(data: LoadedData, gt_mask: str) -> tuple[Any, Any, dict[str, str]]:
    """Segmentations (for ``gt_mask`` auto / segmentation) and class distributions read from the input files."""
    # lazy: the masks and class-score readers and the bundled sets only where PDQ runs (kept out of start-up)
    from detcal.data import bundled
    from detcal.data.coco_masks import load_class_scores, load_segmentations  # lazy: as above

    prov = data.provenance
    gt_file = res_file = None
    if prov.get("source") == "coco":
        gt_file, res_file = prov.get("gt"), prov.get("results")
    elif prov.get("source") == "bundled" and prov.get("bundle") == "coco_mini79":
        gt_file, res_file = bundled.path("coco_mini79"), bundled.path("coco_mini79", prov.get("detector"))
    notes: dict[str, str] = {}
    segs = None
    if gt_mask != "box":
        if gt_file is not None:
            segs = load_segmentations(gt_file, data.dataset)
            if any(s is None for s in segs):
                segs = None
        if segs is None and gt_mask == "segmentation":
            raise DetcalInputError(
                "localisation.pdq_gt_mask=segmentation: the ground truth has no segmentation for every annotation",
                field="localisation.pdq_gt_mask",
            )
        notes["gt_mask"] = "segmentations of the ground-truth file" if segs is not None else "boxes (no segmentations)"
    scores = None
    if res_file is not None and data.shard is None and not any(data.dropped.values()):
        scores = load_class_scores(res_file, len(data.detections))
    notes["label_quality"] = (
        "all_scores of the results file" if scores is not None else "score of the detection's own class (no all_scores)"
    )
    return segs, scores, notes
