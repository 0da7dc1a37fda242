"""Localisation-aware calibration errors: LaECE, LaACE and the benchmark's D-ECE.

Kuzucu, Oksuz, Sadeghi, Dokania, "On Calibration of Object Detectors:
Pitfalls, Evaluation and Baselines" (ECCV 2024); Oksuz et al., "Towards
building self-aware object detectors via reliable uncertainty quantification
and calibration" (CVPR 2023).

The target of a detection is its IoU with the ground-truth box it took at
the TP-validation IoU ``tau`` (pycocotools greedy matching, per class), and
0 for a false positive; ignored detections (crowd / ignored GT) and those
past the ``max_dets`` cut leave the sample, and so do detections of classes
without non-ignored ground truth (as in the reference). See
:mod:`detcal.metrics.lrp` for the matching.

LaECE (``bins`` equal-width bins over [0, 1], per class ``c`` with ``N_c``
detections)::

    LaECE_c = sum_b  N_cb / N_c * | mean score in b  -  sum_{TP in b} IoU / N_cb |
    LaECE   = mean over classes with N_c > 0

Bins are closed on the right as in the reference library: the first bin is
``[0, 1/B]``, the others ``(e_b, e_{b+1}]`` (``closed="right"``);
``closed="left"`` gives ``[e_b, e_{b+1})`` with the last bin ``[.., 1]``, the
convention of detcal's other binned errors.

LaACE: ``bins=None`` (the reference's ``LaACE_0``) puts every detection in its
own bin, so ``LaACE_c = mean_i |score_i - target_i|``; an integer ``bins``
gives equal-count (adaptive) bins per class, ``floor(rank * B / N_c)`` in
ascending score order.

D-ECE as the benchmark reports it: class-agnostic pooling of the per-class
matched detections at ``tau = 0.5``, binary targets (TP 1, FP 0), 10 bins
closed on the right, ``sum_b N_b / N | precision_b - mean score_b |``.

Variants: ``"kuzucu2024"`` (default) averages over every class with at least
one detection; ``"fiveai"`` also drops classes whose error is exactly 0
(the reference library's ``bin_sum[bin_sum == 0] = nan``), and in LaACE keeps
the detections matched to crowd (or ignored) ground truth with target 0, as
the reference's LaACE_0 does: it selects a class's detections with a scalar
``tps.sum() or fps.sum()``, which keeps every detection past the
max-detections cut, and their IoU is 0 because they are not true positives.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MetricResult
from detcal.metrics.lrp import DEFAULT_TAU, DetectionOutcomes, detection_outcomes

LAECE_BINS: int = 25
"""Bins of the reference's LaECE."""
DECE_BINS: int = 10
"""Bins of the reference's D-ECE."""
DECE_TAU: float = 0.5
"""TP-validation IoU of the reference's D-ECE."""
VARIANTS: tuple[str, ...] = ("kuzucu2024", "fiveai")


def bin_index(score: np.ndarray, bins: int, closed: str = "right") -> np.ndarray:
    """Equal-width bin [S] of every score in [0, 1]; see the module docstring for ``closed``."""
    if closed not in ("right", "left"):
        raise DetcalInputError(f"closed must be 'right' or 'left', got {closed!r}", field="closed")
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    side: Literal["left", "right"] = "left" if closed == "right" else "right"
    return np.clip(_edges_below(edges, np.asarray(score, np.float64), side) - 1, 0, bins - 1)


def _edges_below(edges: np.ndarray, score: np.ndarray, side: Literal["left", "right"]) -> np.ndarray:
    """``np.searchsorted(edges, score, side)`` for the equal-width ``edges`` over [0, 1], without a
    binary search a score: a guess from ``score * bins``, then moved while an edge says it is wrong
    (the same comparisons as the search, so the same integers)."""
    n = len(edges) - 1
    if not len(score) or n < 1 or not np.isfinite(score).all():
        return np.searchsorted(edges, score, side=side)
    cnt = np.multiply(score, n)
    np.clip(cnt, -1.0, n + 1.0, out=cnt)
    cnt = np.floor(cnt, out=cnt).astype(np.int64) + 1
    np.clip(cnt, 0, n + 1, out=cnt)
    pad = np.concatenate([[-np.inf], edges, [np.inf]])  # pad[c] = edges[c - 1]: the edge below count c
    while True:  # right: the edge below the count must be < score (left) or <= (right)
        too_high = (pad[cnt] >= score) if side == "left" else (pad[cnt] > score)
        if not too_high.any():
            break
        cnt -= too_high
    while True:  # the next edge must not be < score (left) or <= (right)
        too_low = (pad[cnt + 1] < score) if side == "left" else (pad[cnt + 1] <= score)
        if not too_low.any():
            break
        cnt += too_low
    return cnt


def _check(o: DetectionOutcomes, score: np.ndarray | None, bins: int | None, variant: str) -> np.ndarray:
    s = o.score if score is None else np.asarray(score, dtype=np.float64).reshape(-1)
    if len(s) != len(o.score):
        raise DetcalInputError(f"score has {len(s)} rows, the outcomes {len(o.score)}", field="score")
    if len(s) and not (float(s.min()) >= 0.0 and float(s.max()) <= 1.0):  # the extremes first (NaN fails too)
        i = int(np.flatnonzero(~np.isfinite(s) | (s < 0) | (s > 1))[0])
        raise DetcalInputError(f"score {s[i]} is outside [0, 1]", record=f"detection row {i}", field="score")
    if bins is not None and (isinstance(bins, bool) or int(bins) != bins or bins < 1):
        raise DetcalInputError(f"bins must be a positive int, got {bins!r}", field="bins")
    if variant not in VARIANTS:
        raise DetcalInputError(f"unknown variant {variant!r}; choose one of {VARIANTS}", field="variant")
    return s


def _class_errors(
    cls: np.ndarray, b: np.ndarray, s: np.ndarray, target: np.ndarray, C: int, B: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (class, bin): count, mean score, mean target [C,B]; per-class weighted error [C] (NaN: no detection).
    A row of class ``C`` (:class:`_Sample`: outside the sample) is counted in a class of its own, dropped."""
    key = cls * B + b
    size = (C + 1) * B
    n = np.bincount(key, minlength=size)[: C * B].reshape(C, B).astype(np.float64)
    ss = np.bincount(key, weights=s, minlength=size)[: C * B].reshape(C, B)
    st = np.bincount(key, weights=target, minlength=size)[: C * B].reshape(C, B)
    with np.errstate(divide="ignore", invalid="ignore"):
        conf = ss / n
        acc = st / n
        n_c = n.sum(axis=1)
        err = np.nansum(n / n_c[:, None] * np.abs(conf - acc), axis=1)
    err[n_c == 0] = np.nan
    return n, conf, acc, err


def _average(err: np.ndarray, variant: str) -> float:
    e = err.copy()
    if variant == "fiveai":
        e[e == 0] = np.nan
    return float(np.nanmean(e)) if np.isfinite(e).any() else float("nan")


class _Sample(NamedTuple):
    """The sample of detections a measure averages over, kept over every detection row in input order
    (no gathers): ``cls`` [D] the row of its class in ``gt_categories``, or ``C`` (one past the last
    class) for a row outside the sample (not valid, or of a class without ground truth); ``s`` [D] the
    scores; ``target`` [D] the IoU of a true positive, else 0; ``n`` the rows in the sample; ``C``. A sum
    over the sample's rows of a class (``np.bincount`` with weights) adds the same values in the same order
    as over the sample's rows gathered in ascending order: the same doubles."""

    cls: np.ndarray
    s: np.ndarray
    target: np.ndarray
    n: int
    C: int

    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The sample's rows (ascending) and their ``cls``, ``s`` and ``target``."""
        rows = np.flatnonzero(self.cls < self.C)
        return rows, self.cls[rows], self.s[rows], self.target[rows]


def _sample(o: DetectionOutcomes, s: np.ndarray, keep_ignored: bool = False) -> _Sample:
    ci = o.class_index()
    pool = o.considered if keep_ignored and o.considered is not None else o.valid
    inside = pool & (ci >= 0)
    C = len(o.gt_categories)
    return _Sample(np.where(inside, ci, C), s, np.where(o.tp, o.iou, 0.0), int(inside.sum()), C)


def laece_from_outcomes(
    o: DetectionOutcomes,
    score: np.ndarray | None = None,
    *,
    bins: int = LAECE_BINS,
    closed: str = "right",
    variant: str = "kuzucu2024",
) -> MetricResult:
    """LaECE of matched detections ``o`` (``score`` [D] replaces ``o.score``, e.g. calibrated).

    Definition: :func:`detcal.metrics.reference.laece`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    s = _check(o, score, bins, variant)
    return _laece(o, _sample(o, s), bins, closed, variant)


def laece_and_laace(
    o: DetectionOutcomes, *, bins: int = LAECE_BINS, closed: str = "right", variant: str = "kuzucu2024"
) -> tuple[MetricResult, MetricResult]:
    """``laece_from_outcomes(o, bins=bins, closed=closed, variant=variant)`` and
    ``laace_from_outcomes(o, variant=variant)``, the scores checked and the sample taken once (the
    same sample where the variant gives both the same: not ``"fiveai"``, whose LaACE keeps ignored
    detections)."""
    s = _check(o, None, bins, variant)
    sample = _sample(o, s)
    laece = _laece(o, sample, bins, closed, variant)
    return laece, _laace(o, sample if variant != "fiveai" else _sample(o, s, keep_ignored=True), None, variant)


def _laece(o: DetectionOutcomes, sample: _Sample, bins: int, closed: str, variant: str) -> MetricResult:
    """:func:`laece_from_outcomes` of its checked scores' ``sample`` (:func:`_sample`)."""
    C = len(o.gt_categories)
    cls, sv, tgt = sample.cls, sample.s, sample.target
    n, conf, acc, err = _class_errors(cls, bin_index(sv, bins, closed), sv, tgt, C, bins)
    return MetricResult(
        name="laece",
        value=_average(err, variant),
        variant=variant,
        params={
            "tau": o.tau,
            "bins": int(bins),
            "closed": closed,
            "binning": "equal_width",
            "max_dets": o.max_dets,
            "target": "IoU with the matched GT, 0 for a false positive",
            "average": "mean over classes",
        },
        table={"category": o.gt_categories, "class_error": err, "class_count": n.sum(axis=1)},
        extra={
            "n_detections": sample.n,
            "n_classes": int(np.isfinite(err).sum()),
            "bin_count": n.sum(axis=0),
            "bin_confidence": _nanmean_cols(conf),
            "bin_iou": _nanmean_cols(acc),
        },
    )


def _nanmean_cols(a: np.ndarray) -> np.ndarray:
    ok = np.isfinite(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, a, 0.0).sum(axis=0) / ok.sum(axis=0)


def laace_from_outcomes(
    o: DetectionOutcomes, score: np.ndarray | None = None, *, bins: int | None = None, variant: str = "kuzucu2024"
) -> MetricResult:
    """LaACE: per-detection bins (``bins=None``, the reference's LaACE_0) or ``bins`` equal-count bins per class.

    Definition: :func:`detcal.metrics.reference.laace`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    s = _check(o, score, bins, variant)
    return _laace(o, _sample(o, s, keep_ignored=variant == "fiveai"), bins, variant)


def _laace(o: DetectionOutcomes, sample: _Sample, bins: int | None, variant: str) -> MetricResult:
    """:func:`laace_from_outcomes` of its checked scores' ``sample`` (:func:`_sample`, with the ignored
    detections for ``"fiveai"``)."""
    C = len(o.gt_categories)
    if bins is None:  # over every row, those outside the sample in class C (dropped)
        cls = sample.cls
        cnt = np.bincount(cls, minlength=C + 1)[:C].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            err = np.bincount(cls, weights=np.abs(sample.s - sample.target), minlength=C + 1)[:C] / cnt
        B = 0
    else:
        _, cls, sv, tgt = sample.rows()
        order = np.lexsort((sv, cls))
        start = np.searchsorted(cls[order], np.arange(C))
        cnt = np.bincount(cls, minlength=C)  # type: ignore[assignment]
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order)) - start[cls[order]]
        b = (rank * bins) // np.maximum(cnt[cls], 1)
        _, _, _, err = _class_errors(cls, b, sv, tgt, C, int(bins))
        cnt = cnt.astype(np.float64)
        B = int(bins)
    return MetricResult(
        name="laace",
        value=_average(err, variant),
        variant=variant,
        params={
            "tau": o.tau,
            "bins": "per_detection" if bins is None else B,
            "binning": "equal_count",
            "max_dets": o.max_dets,
            "target": "IoU with the matched GT, 0 for a false positive",
            "average": "mean over classes",
            "crowd_matched": "kept, target 0" if variant == "fiveai" else "left out",
        },
        table={"category": o.gt_categories, "class_error": err, "class_count": cnt},
        extra={"n_detections": sample.n, "n_classes": int(np.isfinite(err).sum())},
    )


def dece_from_outcomes(
    o: DetectionOutcomes, score: np.ndarray | None = None, *, bins: int = DECE_BINS, closed: str = "right"
) -> MetricResult:
    """Class-agnostic D-ECE of the benchmark (binary TP targets, pooled over classes).

    Definition: :func:`detcal.metrics.reference.dece_pooled`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    s = _check(o, score, bins, "kuzucu2024")
    rows, _, sv, _ = _sample(o, s).rows()
    y = o.tp[rows].astype(np.float64)
    n, conf, acc, err = _class_errors(np.zeros(len(rows), np.int64), bin_index(sv, bins, closed), sv, y, 1, bins)
    return MetricResult(
        name="dece",
        value=float(err[0]),
        variant="class_agnostic",
        params={
            "tau": o.tau,
            "bins": int(bins),
            "closed": closed,
            "binning": "equal_width",
            "max_dets": o.max_dets,
            "target": "TP 1 / FP 0",
            "features": "confidence only",
        },
        table={"count": n[0], "confidence": conf[0], "precision": acc[0]},
        extra={"n_detections": int(len(rows))},
    )


def laece(
    dets: Detections,
    gt: GroundTruth,
    tau: float = DEFAULT_TAU,
    *,
    bins: int = LAECE_BINS,
    closed: str = "right",
    variant: str = "kuzucu2024",
    max_dets: int | None = 100,
) -> MetricResult:
    """LaECE of ``dets`` against ``gt`` (matching at ``tau``); see the module docstring."""
    return laece_from_outcomes(
        detection_outcomes(dets, gt, tau, max_dets=max_dets), bins=bins, closed=closed, variant=variant
    )


def laace(
    dets: Detections,
    gt: GroundTruth,
    tau: float = DEFAULT_TAU,
    *,
    bins: int | None = None,
    variant: str = "kuzucu2024",
    max_dets: int | None = 100,
) -> MetricResult:
    """LaACE of ``dets`` against ``gt``; ``bins=None`` is the reference's per-detection LaACE_0."""
    return laace_from_outcomes(detection_outcomes(dets, gt, tau, max_dets=max_dets), bins=bins, variant=variant)


def dece_kuzucu(
    dets: Detections,
    gt: GroundTruth,
    tau: float = DECE_TAU,
    *,
    bins: int = DECE_BINS,
    closed: str = "right",
    max_dets: int | None = 100,
) -> MetricResult:
    """Kuzucu et al. 2024's class-agnostic D-ECE: 10 right-closed confidence bins, matching at tau 0.5,
    binary TP targets pooled over classes (not :func:`detcal.metrics.confidence.dece_kueppers`, the D-ECE
    over confidence and box features)."""
    return dece_from_outcomes(detection_outcomes(dets, gt, tau, max_dets=max_dets), bins=bins, closed=closed)


def describe_choices() -> dict[str, Any]:
    """The defaults, for a metrics.json ``choices`` block."""
    return {
        "laece": {"bins": LAECE_BINS, "closed": "right", "tau": DEFAULT_TAU, "variant": "kuzucu2024"},
        "laace": {"bins": "per_detection", "tau": DEFAULT_TAU},
        "dece": {"bins": DECE_BINS, "tau": DECE_TAU, "closed": "right", "pooling": "class_agnostic"},
    }
