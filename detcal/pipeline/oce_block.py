"""Object-level calibration in detcal-evaluate: OCE (every aggregation), what OCE does not see,
the per-image reliability (contrastive confidence against the per-image OCE), and the uq_detr
variants of D-ECE / LaECE / LRP (docs/newest_measures.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from detcal.core.results import OCEBlock, UQDetrBlock
from detcal.core.types import Skipped
from detcal.metrics.image_reliability import LAMBDA_GRID, fit_lambda, pearson, per_image_oce, split_and_kept
from detcal.metrics.oce import ObjectScores, object_scores_of_sets, oce_from_scores
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import EvaluationSpec

__all__ = ["oce_block", "uq_detr_block", "per_image_rows"]


def _categories(data: LoadedData) -> list[int] | None:
    """The class_probs columns: the ground-truth file's category ids, ascending."""
    return sorted(int(c) for c in data.dataset.categories) if data.detections.class_probs is not None else None


def _not_seen(s: ObjectScores, n_det: int) -> dict[str, Any]:
    """Detections that overlap no object at each threshold: OCE never scores them."""
    counts = {f"iou={t:.2f}": int(np.sum(s.det_max_iou < t)) for t in s.iou_thresholds}
    return {
        "note": "detections overlapping no object at IoU >= tau never enter OCE; their share is here, and "
        "detection-level measures (D-ECE, LaECE, LRP's FP component) score them",
        "n_detections": int(n_det),
        "n_overlapping_no_object": counts,
        "fraction_overlapping_no_object": {k: (v / n_det if n_det else None) for k, v in counts.items()},
    }


def _reliability(
    spec: EvaluationSpec,
    data: LoadedData,
    images: np.ndarray,
    split: tuple[np.ndarray, np.ndarray, np.ndarray],
    s: ObjectScores,
) -> dict[str, Any]:
    """Contrastive confidence per image, lambda fitted on a seeded half, correlation on the other; ``split``:
    (Conf+, Conf-, kept) of :func:`split_and_kept`, ``s`` the per-object scores of the kept detections."""

    o = spec.oce
    pos, neg, _ = split
    rel = -per_image_oce(s, images)
    # the validation half is chosen by image id (not by position), so it does not depend on the image order
    by_id = np.empty(len(images), np.int64)
    by_id[np.argsort(images, kind="stable")] = np.arange(len(images))
    val = np.random.default_rng(o.reliability_seed).permutation(len(images))[by_id] < len(images) // 2
    out: dict[str, Any] = {
        "name": "contrastive_conf",
        "method": o.reliability_method,
        "param": o.reliability_param,
        "reliability": "minus the per-image OCE of the kept detections (images without objects left out)",
        "lambda_grid": list(LAMBDA_GRID),
        "split": f"seeded half of the images (seed {o.reliability_seed}) fits lambda",
        "n_images": int(len(images)),
        "n_images_with_objects": int(np.sum(~np.isnan(rel))),
    }
    try:
        lam, r_val, _ = fit_lambda(pos[val], neg[val], rel[val])
    except Exception as e:  # too few images with objects in the validation half
        return {**out, "lambda": None, "skipped": {"lambda": str(e)}}
    test = ~val & ~np.isnan(rel)
    r_test = float(pearson((pos - lam * neg)[test][None, :], rel[test])[0]) if test.sum() >= 3 else None
    out.update(
        {
            "lambda": lam,
            "pearson_validation": r_val,
            "pearson_test": r_test,
            "n_validation": int(np.sum(val & ~np.isnan(rel))),
            "n_test": int(test.sum()),
        }
    )
    if not np.any(neg > 0):
        out["warning"] = (
            "no discarded prediction in any image: the results look cut at a score threshold; "
            "contrastive confidence needs the detector's raw outputs (docs/newest_measures.md)"
        )
    out["_per_image"] = {
        "image_id": images,
        "oce": -rel,
        "conf_pos": pos,
        "conf_neg": neg,
        "contrastive_conf": pos - lam * neg,
        "validation": val,
    }
    return out


def oce_block(spec: EvaluationSpec, data: LoadedData) -> OCEBlock | Skipped:
    """The ``oce`` key of metrics.json."""
    o = spec.oce
    if not o.enabled:
        return Skipped("oce.enabled=false")
    if data.kitti is not None:
        return Skipped("defined for COCO-style ground truth; not computed with KITTI rules")

    ds, dets = data.dataset, data.detections
    images = np.sort(np.asarray(ds.images.id))
    aggs = ("mean", "max_iou", "iou_weighted")
    sets: list[tuple[np.ndarray | None, tuple[str, ...]]] = [(None, aggs)]
    if o.reliability:  # the post-processing split, and the kept detections' per-object scores from the same pairs
        split = split_and_kept(dets.image_id, dets.score, images, o.reliability_method, o.reliability_param, dets.box)
        if not split[2].all():
            sets.append((split[2], (o.aggregation,)))
    scored = object_scores_of_sets(  # the kept detections' scores are read per object only (per_image_oce)
        dets, ds.gt, o.iou_thresholds, sets, brier=o.brier, variant=o.variant, categories=_categories(data),
        selected_max_iou=False,
    )  # fmt: skip
    by_agg = scored[0]
    out: dict[str, Any] = {
        "oce": oce_from_scores(by_agg[o.aggregation]),
        "by_aggregation": {k: oce_from_scores(v) for k, v in by_agg.items()},
        "not_seen": _not_seen(by_agg["mean"], len(dets)),
    }
    if o.reliability:  # nothing discarded: the per-object scores of every detection
        kept_scores = scored[1][o.aggregation] if len(scored) > 1 else by_agg[o.aggregation]
        out["image_reliability"] = _reliability(spec, data, images, split, kept_scores)
    return OCEBlock(out)


def per_image_rows(block: OCEBlock | Skipped) -> dict[str, np.ndarray] | None:
    """Columns of oce_per_image.csv (popped from the block so they stay out of metrics.json)."""
    if isinstance(block, Skipped):
        return None
    rel = block.get("image_reliability") or {}
    return rel.pop("_per_image", None)


def uq_detr_block(spec: EvaluationSpec, data: LoadedData) -> UQDetrBlock | Skipped:
    """The ``uq_detr`` key: D-ECE, LaECE and LRP with uq-detr 0.1.1's conventions (when enabled)."""
    u = spec.uq_detr
    if not u.enabled:
        return Skipped("uq_detr.enabled=false")
    from detcal.metrics.uq_detr import uq_detr_suite  # lazy: only when enabled (off by default)

    res = uq_detr_suite(
        data.detections, data.dataset.gt, u.tau, bins=u.bins, tp_criterion=u.tp_criterion, crowd=u.crowd
    )
    # the leaves as metrics.json writes them: their per-bin tables stay out (``"table": null``)
    return UQDetrBlock({k: {**r.to_dict(), "table": None} for k, r in res.items()})
