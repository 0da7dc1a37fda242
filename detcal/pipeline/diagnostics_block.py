"""Why a detector is miscalibrated: TIDE error types, calibration error by type, confusion matrix, likely label
errors and operating points (docs/metrics.md#diagnostics), recorded under ``diagnostics`` in metrics.json.

Calibration by error type: on the confidence sample of the first evaluated IoU threshold, each detection
is a true positive (``tp``, matched there) or carries its TIDE error type (``cls``, ``loc``, ``both``,
``dupe``, ``bkg``); a false positive TIDE counts as a true positive or does not evaluate (its rules differ:
``max_dets`` per image, IoU >= instead of the sample's threshold) is ``other``. ECE and D-ECE are sums of
per-detection contributions ``sign(conf(c) - prec(c)) (p_i - y_i) / N'`` over their cells (the
worst-detections table's definition, :func:`detcal.reports.html.worst.cell_contributions`); their sums
by group split the ECE and the D-ECE exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from detcal.binning.edges import BinGrid, cell_index_columns
from detcal.core.results import ConfidenceBlock, DiagnosticsBlock, LocalisationBlock
from detcal.core.types import MatchResult, Skipped
from detcal.metrics.confidence import ConfidenceMetric
from detcal.metrics.confusion import agnostic_match, confusion_matrix, label_errors
from detcal.metrics.lrp import DetectionOutcomes, paired_iou
from detcal.metrics.operating_points import operating_points
from detcal.metrics.score_order import descending_order
from detcal.metrics.tide import Scene, scene, tide
from detcal.pipeline.confidence_block import grid_bins, kept_sample_cells, sample_feature_columns, threshold_label
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import DiagnosticsSpec, EvaluationSpec
from detcal.reports.diagnosis_facts import miscalibration_sentence, tide_sentence
from detcal.reports.html.worst import GridCells, cell_contributions

__all__ = ["diagnostics_block", "GROUPS"]

GROUPS: tuple[str, ...] = ("tp", "cls", "loc", "both", "dupe", "bkg", "other")
"""Groups of the calibration split: true positives, TIDE's error types, other false positives."""


def diagnostics_block(
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    feats: np.ndarray | Callable[[], np.ndarray],
    conf: dict[str, ConfidenceBlock | Skipped],
    loc: LocalisationBlock | Skipped | None = None,
    keep: dict[str, GridCells] | None = None,
    kept: Mapping[Any, np.ndarray] | None = None,
) -> tuple[DiagnosticsBlock | Skipped, dict[str, np.ndarray]]:
    """The ``diagnostics`` record and the per-detection columns it adds to detections.csv; ``loc``: the run's
    ``localisation`` record, whose LRP-optimal thresholds the operating points reuse; ``feats``: the relative
    box features, or a function that makes them (called after TIDE's scene is released, when they are read);
    ``keep``: when given, the D-ECE cells of the calibration split are left in ``keep["dece"]`` for the
    worst-detections table (the same sample and grid: :func:`detcal.pipeline.report_data.worst_block`);
    ``kept``: the cells the confidence block left (:func:`detcal.pipeline.confidence_block.confidence_blocks`),
    read by the calibration split instead of binning the sample again (then it reads no box feature)."""
    d = spec.diagnostics
    if data.kitti is not None:
        return Skipped("defined for COCO-style data; not computed with KITTI rules"), {}
    if data.shard is not None:
        return Skipped("not computed in a sharded (distributed) read"), {}
    if data.format in ("lvis", "openimages"):
        return Skipped(
            f"TIDE's rules are COCO's; not computed under the {data.format} rules "
            "(their ignored detections and group-of boxes have no TIDE error type)"
        ), {}
    ds, dets = data.dataset, data.detections
    out: dict[str, Any] = {}
    cols: dict[str, np.ndarray] = {}

    max_dets = spec.matching.max_dets or max(len(dets), 1)
    label = _first_label(conf)
    # each part computed where the least is held (the operating points before the scene, the confusion matrix
    # before TIDE, which releases the scene's pairs once matched; the scene released before the calibration
    # split); the record keeps its order
    ops, desc = None, None
    if d.operating_points and label is not None:
        desc = descending_order(dets.score) if d.tide or d.confusion else None  # as the scene's order before
        ops = _operating(spec, data, mr, label, _lrp_of(loc), desc)
    r, conf_rec = None, {}
    if d.tide or d.confusion:  # the scene (pairs of detections and boxes) is shared by TIDE and the confusion matrix
        sc = scene(ds.images, ds.gt, dets, max_dets, overlap_only=d.tide_background > 0, desc=desc)
        del desc
        if d.confusion:
            conf_rec = _confusion(d, data, max_dets, sc)
        if d.tide:
            r = tide(ds.images, ds.gt, dets, pos_threshold=d.tide_foreground, background_threshold=d.tide_background,
                     max_dets=max_dets, paired=sc, release=True)  # fmt: skip
        del sc
    if r is not None:
        out["tide"] = {**r.to_dict(), "reference": "tidecv 1.0.1 (Bolya et al., ECCV 2020), box mode"}
        code = r.code
        del r
        by_type = _by_type(spec, data, mr, feats, conf, code, keep, kept)
        if by_type:
            out["calibration_by_error_type"] = by_type
        cols["tide_error"] = code.astype(np.int64)  # the column made once the split is done (peak memory)
    if ops is not None:
        out["operating_points"] = ops
    out.update(conf_rec)
    out["findings"] = findings(out)
    return DiagnosticsBlock(out), cols


def _confusion(d: DiagnosticsSpec, data: LoadedData, max_dets: int, sc: Scene) -> dict[str, Any]:
    """The ``confusion`` and ``label_errors`` records, from the class-agnostic matching on the scene ``sc``."""
    ds, dets = data.dataset, data.detections
    am = agnostic_match(dets, ds.gt, d.confusion_iou, max_dets, paired=sc)
    out = {"confusion": confusion_matrix(am, dets, ds.gt, list(ds.categories), d.confusion_score)}
    out["label_errors"] = label_errors(am, dets, ds.gt, ds.categories, min_score=d.label_error_score,
                                       min_iou=d.label_error_iou, top=d.label_error_top)  # fmt: skip
    _add_files(out["label_errors"], data)
    return out


def _first_label(conf: dict[str, ConfidenceBlock | Skipped]) -> str | None:
    labels = [lbl for lbl, blk in conf.items() if not isinstance(blk, Skipped)]
    return labels[0] if labels else None


def _add_files(rec: dict[str, Any], data: LoadedData) -> None:
    """The image file name and size of each listed detection (thumbnails)."""
    im = data.dataset.images
    for key in ("unannotated", "class_disagreement"):
        for row in rec[key]:
            r = int(im.index_of(np.asarray([row["image_id"]]))[0])
            row["file_name"] = im.file_name[r] if r >= 0 and im.file_name is not None else ""
            row["image_size"] = [float(im.width[r]), float(im.height[r])] if r >= 0 else [float("nan")] * 2


def _sample_index(mr: MatchResult, label: str) -> int:
    return next(k for k, t in enumerate(mr.iou_thresholds) if threshold_label(float(t)) == label)


def _sample(mr: MatchResult, label: str) -> tuple[int, np.ndarray]:
    i = _sample_index(mr, label)
    return i, np.flatnonzero(mr.considered & ~mr.ignored[i])


def _contributions(
    p: np.ndarray,
    y: np.ndarray,
    grid: list[np.ndarray],
    params: dict[str, Any],
    fallback: Any,
    keep: dict[str, GridCells] | None = None,
    cell: np.ndarray | None = None,
) -> np.ndarray | None:
    """Per-detection contributions to a binned calibration error over the columns ``grid`` (confidence,
    then features) whose ``params`` (bins, edges, sample_threshold, policy) metrics.json records; None when
    the grid does not fit. ``grid`` is emptied once the cells are known (its columns freed, peak memory).
    ``keep``: when given, the cells and their statistics are left in ``keep["dece"]``; ``cell``: the samples'
    cells on this grid when already known (``grid`` is then only counted, never read)."""

    bins = grid_bins(params, fallback, len(grid))
    if len(bins) != len(grid):
        return None
    b = BinGrid.of(tuple(bins), len(grid))
    if cell is None:
        cell = cell_index_columns([np.asarray(c, np.float64) for c in grid], b, str(params.get("edges") or "floor"))
    grid.clear()
    st, policy, edges = (
        int(params.get("sample_threshold") or 1),
        str(params.get("policy") or "drop"),
        str(params.get("edges") or "floor"),
    )
    stats = cell_contributions(p, y, cell, int(np.prod(b)), st, policy)
    if keep is not None:
        keep["dece"] = GridCells((tuple(bins), edges, st, policy, len(p)), cell, stats)
    return stats["contribution"] if stats["kept"].any() else None


def _kept_cell(
    kept: Mapping[Any, np.ndarray] | None, mr: MatchResult, i: int, params: dict[str, Any], fallback: Any, n: int
) -> np.ndarray | None:
    """The sample's cells on the ``n``-dimensional grid of ``params`` from the confidence block's, when kept."""
    bins = grid_bins(params, fallback, n)
    if len(bins) != n or not kept:
        return None
    return kept_sample_cells(kept, mr, i, bins, str(params.get("edges") or "floor"), n > 1)


def _by_type(
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    feats: np.ndarray | Callable[[], np.ndarray],
    conf: dict[str, ConfidenceBlock | Skipped],
    code: np.ndarray,
    keep: dict[str, GridCells] | None = None,
    kept: Mapping[Any, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Count, mean confidence, accuracy and the share of ECE and D-ECE of each group (module docstring); the
    D-ECE cells left in ``keep`` when given (:func:`_contributions`); ``kept``: the confidence block's cells,
    read instead of binning again (no feature read then)."""
    label = _first_label(conf)
    if label is None:
        return {}
    i, rows = _sample(mr, label)
    p, y = data.detections.score[rows], mr.matched[i, rows]
    c = code[rows]
    # tp, the TIDE type, or other; as the platform's integers once (every bincount below reads them as such)
    group = np.where(y, 0, np.where(c >= 1, c, len(GROUPS) - 1)).astype(np.intp)
    del c
    blk = conf[label]
    assert isinstance(blk, ConfidenceBlock)  # _first_label: a computed threshold
    b = spec.dece_binning
    ece, dece = blk.metric("ece"), blk.metric("dece")
    n_g = np.bincount(group, minlength=len(GROUPS))
    sum_p = np.bincount(group, weights=p, minlength=len(GROUPS))
    sum_y = np.zeros(len(GROUPS))  # the true positives are the group tp: its count (the sum of its ones, exact)
    sum_y[0] = n_g[0]
    e_params = ece.params if ece else {}
    ece_c = _contributions(p, y, [p], e_params, [b.ece_bins], cell=_kept_cell(kept, mr, i, e_params, [b.ece_bins], 1))
    ece_g = np.bincount(group, weights=ece_c, minlength=len(GROUPS)) if ece_c is not None else None
    ece_total = None if ece_c is None else float(ece_c.sum())
    del ece_c
    n_f = len(b.features)
    fb = [b.bins] * (1 + n_f) if isinstance(b.bins, int) else list(b.bins)
    d_params = dece.params if dece is not None else {}
    d_cell = _kept_cell(kept, mr, i, d_params, fb, 1 + n_f) if dece is not None and n_f else None
    n_rows = len(rows)
    dece_c = None
    if d_cell is not None:  # the confidence block's cells (its features were checked finite there)
        dece_c = _contributions(p, y, [p] * (1 + n_f), d_params, fb, keep, d_cell)
    else:
        f = sample_feature_columns(spec, feats() if callable(feats) else feats, rows)
        if f is not None and all(np.isfinite(col).all() for col in f) and dece is not None:
            grid, f = [p, *f], None  # the list alone holds the columns: _contributions frees them
            dece_c = _contributions(p, y, grid, dece.params, fb, keep)
        del f
    del rows, d_cell  # not read again (peak memory)
    dece_g = np.bincount(group, weights=dece_c, minlength=len(GROUPS)) if dece_c is not None else None
    ece_v = None if ece is None else float(ece.value)
    dece_v = None if dece is None else float(dece.value)
    types: dict[str, Any] = {}
    for k, name in enumerate(GROUPS):
        n = int(n_g[k])
        types[name] = {
            "n": n,
            "mean_confidence": float(sum_p[k] / n) if n else None,
            "accuracy": float(sum_y[k] / n) if n else None,
            "ece_contribution": None if ece_g is None else float(ece_g[k]),
            "ece_share": _share(ece_g, k),
            "dece_contribution": None if dece_g is None else float(dece_g[k]),
            "dece_share": _share(dece_g, k),
        }
    return {
        "iou": label,
        "n": int(n_rows),
        "ece": ece_v,
        "dece": dece_v,
        "ece_from_contributions": ece_total,
        "dece_from_contributions": None if dece_c is None else float(dece_c.sum()),
        "types": types,
    }


def _share(g: np.ndarray | None, k: int) -> float | None:
    if g is None:
        return None
    tot = float(g.sum())
    return float(g[k] / tot) if tot > 0 else None


def _lrp_of(loc: LocalisationBlock | Skipped | None) -> tuple[dict[int, Any], dict[int, Any], float] | None:
    """(LRP-optimal threshold per class, oLRP per class, TP IoU) of the localisation block, when it has them."""
    if not isinstance(loc, LocalisationBlock):
        return None
    m, thresholds = loc.metric("olrp"), loc.get("lrp_optimal_thresholds")
    if m is None or not thresholds or "category" not in m.table or "olrp" not in m.table:
        return None
    thr = {int(k): v for k, v in thresholds.items()}
    tab = m.table
    olrp = {int(c): (None if v is None or v != v else float(v)) for c, v in zip(tab["category"], tab["olrp"])}
    return thr, olrp, float(m.params.get("tau", 0.0))


def _operating(
    spec: EvaluationSpec, data: LoadedData, mr: MatchResult, label: str, lrp: Any = None, desc: Any = None
) -> dict[str, Any]:
    """Operating points on the confidence sample of ``label`` (docs/metrics.md#operating-points)."""

    ds, dets = data.dataset, data.detections
    i = _sample_index(mr, label)
    valid = mr.considered & ~mr.ignored[i]  # the sample (as _sample's rows), as flags
    tp = valid & mr.matched[i]
    if lrp is None:  # the IoUs of the true positives: read by the LRP table alone
        iou = np.zeros(len(dets))
        t_rows = np.flatnonzero(tp)
        # np.take: the same rows as box[t_rows], gathered far quicker
        iou[t_rows] = paired_iou(np.take(dets.box, t_rows, axis=0), np.take(ds.gt.box, mr.gt_index[i, t_rows], axis=0))
        del t_rows
    else:  # the LRP-optimal thresholds are given: nothing reads the IoUs (a read-only view of one zero)
        iou = np.broadcast_to(np.float64(0.0), (len(dets),))
    real = ~(ds.gt.ignore | ds.gt.iscrowd)
    cats, counts = np.unique(ds.gt.category[real], return_counts=True)
    tau = float(mr.iou_thresholds[i])
    o = DetectionOutcomes(tau=min(tau, 1 - 1e-12), score=dets.score, category=dets.category, image_id=dets.image_id,
                          valid=valid, tp=tp, iou=iou, gt_categories=cats.astype(np.int64),
                          n_gt=counts.astype(np.int64), max_dets=spec.matching.max_dets)  # fmt: skip
    b = spec.dece_binning
    # the metric itself (as confidence.ece with these settings): operating_points shares its cell statistics
    fn = ConfidenceMetric("ece", b.ece_bins, policy=b.policy, edge_rule=spec.confidence.edges)
    order = np.argsort(-counts, kind="stable")[: spec.confidence.per_class_top_n]
    out = operating_points(o, ds.categories, fn, [int(cats[k]) for k in order], lrp, desc)
    out["iou"] = label
    return out


def findings(diag: dict[str, Any]) -> list[str]:
    """Plain sentences: the error type that costs most AP, the one that carries most of the miscalibration,
    and what the operating points and label errors say."""
    out = [s for s in (tide_sentence(diag), miscalibration_sentence(diag)) if s]
    op = diag.get("operating_points")
    if op and op["pooled"]["f1_optimal"]["threshold"] == op["pooled"]["f1_optimal"]["threshold"]:
        f1 = op["pooled"]["f1_optimal"]
        e = op["ece_kept"]
        out.append(
            f"Operating point: one score threshold of {f1['threshold']:.3f} maximises F1 ({f1['f1']:.3f}); "
            f"the ECE of the detections it keeps is {_fmt(e['f1_optimal_pooled']['ece'])} "
            f"(all detections: {_fmt(e['all']['ece'])})."
        )
    le = diag.get("label_errors")
    if le and (le["n_unannotated"] or le["n_class_disagreement"]):
        out.append(
            f"Label check: {le['n_unannotated']} confident detections overlap no box at all and "
            f"{le['n_class_disagreement']} near-identical boxes disagree in class; some may be annotation errors."
        )
    return out


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.4f}"
