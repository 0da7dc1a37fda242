"""Write-back of recalibrated box uncertainty into the detections' own fields, and the
calibrated results file in the input's format.

Every box-uncertainty calibrator scales sigma per detection and coordinate,
``r = sigma' / sigma``, and may shift the mean, ``dm = mu' - mu``: delta
records ``delta_std *= r``; ``box_std *= r``; ``bbox_covar`` C (x, y, w, h) ->
``A C A^T`` with ``A = J^-1 diag(r) J`` (J the Jacobian of (x, y, w, h) ->
(cx, cy, w, h)); ``covars`` (corners) are scaled by r^2 when r is the same for
all coordinates, otherwise converted to the equivalent ``bbox_covar``
(recorded). A mean shift moves the box: ``decode(P, mu')`` (delta space, delta
records), ``decode(B, dm)`` (deltas w.r.t. the box), or ``(cx, cy, w, h) = mu'``
(pixel space); delta records then get ``delta_mean = encode(P, box')``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from detcal.calibration.base import RegressionCalibrator
from detcal.core.boxes import cxcywh_to_xyxy, decode_deltas, encode_deltas
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, MatchResult
from detcal.data.formats import get_format
from detcal.metrics.spaces import J_CORNERS_TO_CXCYWH, J_XYWH_TO_CXCYWH, regression_sample
from detcal.utils.fresh_dir import fresh_dir

__all__ = ["space_predictions", "apply_regression_calibrator", "write_calibrated"]


def space_predictions(dets: Detections, space: str) -> tuple[np.ndarray, np.ndarray]:
    """Predicted ``(mu [D,K], sigma [D,K])`` of EVERY detection in ``space``.

    Uses :func:`detcal.metrics.spaces.regression_sample` (one source of truth
    for the propagation) with each detection matched to a stand-in GT equal to
    its own box (a unit box where the box is degenerate); the targets y of
    that sample are meaningless and dropped.
    """
    d = len(dets)
    box = dets.box.copy()
    bad = ~np.all(np.isfinite(box), axis=1) | (box[:, 2] <= box[:, 0]) | (box[:, 3] <= box[:, 1])
    box[bad] = [0.0, 0.0, 1.0, 1.0]
    gt = GroundTruth(image_id=dets.image_id, box=box, category=dets.category)
    mr = MatchResult(
        iou_thresholds=np.array([0.5]),
        matched=np.ones((1, d), bool),
        ignored=np.zeros((1, d), bool),
        gt_index=np.arange(d, dtype=np.int64)[None, :],
        iou=np.ones(d),
        considered=np.ones(d, bool),
    )
    s = regression_sample(dets, gt, mr, iou_threshold=0.5, space=space)
    return s.mu, s.sigma


def _write_corner_cov(dets: Detections, r: np.ndarray, moved: bool, kw: dict[str, Any], notes: dict[str, Any]) -> None:
    """Corner covariances scaled by ``r``: kept as corners when the scaling is the same for every coordinate of a
    detection, else converted to a 4x4 box covariance (a per-coordinate scaling couples the corners)."""
    assert dets.corner_cov is not None
    uniform = np.all(np.isclose(r, r[:, :1], rtol=1e-12, atol=0.0)) if r.size else True
    if uniform:
        kw["corner_cov"] = dets.corner_cov * (r[:, :1] ** 2)[:, :, None, None]
        notes["fields"] = ["corner_cov"] + (["box"] if moved else [])
    else:
        block = np.zeros((len(dets), 4, 4))
        block[:, :2, :2] = dets.corner_cov[:, 0]
        block[:, 2:, 2:] = dets.corner_cov[:, 1]
        cov_c = np.einsum("ij,djk,lk->dil", J_CORNERS_TO_CXCYWH, block, J_CORNERS_TO_CXCYWH)
        cov_c = cov_c * r[:, :, None] * r[:, None, :]
        j_inv = np.linalg.inv(J_XYWH_TO_CXCYWH)
        kw["box_cov"] = np.einsum("ij,djk,lk->dil", j_inv, cov_c, j_inv)
        kw["corner_cov"] = None
        notes["fields"] = ["box_cov (converted from corner covariances)"] + (["box"] if moved else [])
        notes["converted"] = (
            "covars (corner 2x2) -> bbox_covar (4x4 in x, y, w, h): a per-coordinate "
            "scaling does not keep the corners independent"
        )


def apply_regression_calibrator(
    dets: Detections, calibrator: RegressionCalibrator, space: str
) -> tuple[Detections, dict[str, Any]]:
    """Detections with the recalibrated uncertainty written into their own fields.

    ``(mu', sigma') = calibrator.transform(mu, sigma)`` in ``space`` for every
    detection; ``r = sigma'/sigma``, ``dm = mu' - mu`` are written back as the
    module docstring describes. Returns the new record and notes (fields
    changed, corner covariances converted, boxes moved).
    """
    kind = dets.uncertainty_kind
    if kind is None:
        raise DetcalInputError("the detections carry no box uncertainty to recalibrate", field="delta_std")
    mu, sigma = space_predictions(dets, space)
    grouped = bool(getattr(calibrator, "uses_groups", False))  # Mondrian conformal: per category
    cal: Any = calibrator
    mu2, sg2 = cal.transform(mu, sigma, groups=dets.category) if grouped else cal.transform(mu, sigma)
    r = sg2 / sigma
    shift = mu2 - mu
    moved = bool(np.any(shift != 0.0))
    notes: dict[str, Any] = {
        "space": space,
        "uncertainty_kind": kind,
        "mean_shifted": moved,
        "scale_ratio": {"min": float(r.min()) if r.size else None, "max": float(r.max()) if r.size else None},
    }
    kw: dict[str, Any] = {}
    box = dets.box
    proposal: Any = dets.proposal  # set for delta records
    if moved:
        if space == "pixel":
            box = cxcywh_to_xyxy(mu2)
        elif space == "delta" and kind == "delta":
            box = decode_deltas(proposal, mu2)
        else:  # deltas w.r.t. the final box B: mu = 0, mu' = dm
            box = decode_deltas(dets.box, mu2)
        kw["box"] = box
        notes["box_update"] = {
            "pixel": "(cx, cy, w, h) = mu'",
            "delta": "decode(P, mu')" if kind == "delta" else "decode(B, dm)",
            "box": "decode(B, dm)",
        }[space]
    if kind == "delta":
        kw["delta_std"] = dets.delta_std * r
        if moved:
            kw["delta_mean"] = mu2.copy() if space == "delta" else encode_deltas(proposal, box)
        notes["fields"] = ["delta_std"] + (["delta_mean", "box"] if moved else [])
    elif kind == "box_std":
        kw["box_std"] = dets.box_std * r
        notes["fields"] = ["box_std"] + (["box"] if moved else [])
    elif kind == "box_cov":
        j_inv = np.linalg.inv(J_XYWH_TO_CXCYWH)
        a = np.einsum("ij,dj,jk->dik", j_inv, r, J_XYWH_TO_CXCYWH)
        assert dets.box_cov is not None
        kw["box_cov"] = np.einsum("dij,djk,dlk->dil", a, dets.box_cov, a)
        notes["fields"] = ["box_cov"] + (["box"] if moved else [])
    else:  # corner_cov
        _write_corner_cov(dets, r, moved, kw, notes)
    new = dataclasses.replace(dets, **kw)
    mu_w, sg_w = space_predictions(new, space)
    if not (space == "pixel" or (space == "delta" and kind == "delta")):
        mu_w = encode_deltas(dets.box, new.box)  # the reference box itself carries the mean: compare the shift
    with np.errstate(invalid="ignore", divide="ignore"):
        dev_s = float(np.max(np.abs(sg_w / sg2 - 1.0))) if sg2.size else 0.0
        dev_m = float(np.max(np.abs(mu_w - mu2) / sg2)) if sg2.size else 0.0
    notes["writeback"] = {
        "max_rel_sigma_deviation": dev_s,
        "max_mean_deviation_in_sigmas": dev_m,
        "note": "written record fields re-read in the space vs the calibrator's output",
    }
    return new, notes


def write_calibrated(out_dir: Path, fmt: str, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
    """Write the calibrated evaluation detections in format ``fmt`` under ``out_dir``, by that
    format's adapter (:mod:`detcal.data.formats`; e.g. COCO ``detections.json`` + ``instances.json``,
    KITTI ``results/`` + ``label_2/`` and ``sizes.txt``; the ground truth only when ``write_gt``).
    The files are written into a fresh directory that then replaces ``out_dir``
    whole, so that nothing of an earlier run is left beside them.
    Returns the written paths by role.
    """
    adapter = get_format(fmt)
    final = Path(out_dir)
    with fresh_dir(final) as out_dir:
        paths: dict[str, str] = {"format": fmt, **adapter.write(out_dir, dets, dataset, write_gt)}
    return {k: v.replace(str(out_dir), str(final)) for k, v in paths.items()}
