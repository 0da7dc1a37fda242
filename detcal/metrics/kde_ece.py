"""Detection calibration error by kernel density estimation (Popordanoska, Tiulpin, Blaschko, WACV 2024).

"Beyond Classification: Definition and Density-Based Estimation of Calibration
in Object Detection"; official code: the public repository
tpopordanoska/calibration-object-detection (``code/losses/ece_kde.py``,
``code/evaluation.py``).

Definition. A detector's confidence ``S`` of a detection and its target ``Y``
(``link="binary"``: 1 when it is matched to an object at IoU threshold ``t``,
else 0; ``link="iou"``: the IoU with the object it is matched to, 0 when
unmatched) are calibrated when ``E[Y | S] = S``; the ``L_p`` calibration error
is ``E |E[Y | S] - S|^p`` (reported, as their code does, without the ``1/p``
root; ``p = 1`` in their evaluation, where the two agree).

Estimator. ``E[Y | S = s_i]`` by a leave-one-out Nadaraya-Watson ratio with
Beta kernels::

    K_b(s; s_j) = Beta(s; s_j / b + 1, (1 - s_j) / b + 1)        (a density in s)
    r_i = sum_{j != i} K_b(s_i; s_j) y_j / sum_{j != i} K_b(s_i; s_j)
    CE_p = mean_i |r_i - s_i|^p

Bandwidth: the code's rule, the ``b`` of the grid ``10^{-3, -2.5, -2, -1.5, -1}``
and ``{0.2, 0.4, 0.6, 0.8, 1}`` maximising
``sum_i [log sum_{j != i} K_b(s_i; s_j) - log((n - 1) b)]`` (the first maximum
in grid order); a number fixes it.

Detections (:func:`detection_kde_ece`): matched per class with pycocotools'
rule at each IoU threshold; detections matched to crowd / ignored objects leave
the sample (their ``dtIgnore``); one error per (class, threshold), averaged.
``ECE`` of their evaluation: binary link, thresholds 0.50:0.05:0.95; their
IoU link ("id") at threshold 0.5.

Variants (where the evaluation script departs from the definition above):

* ``"popordanoska2024_code"`` as their ``evaluation.py`` computes it: a class
  with more than 5,000 detections is split in halves (recursively, in the
  order image id, then descending score) and the errors of the pieces are
  averaged; a class without any detection counts as error 0 in the average;
  with the IoU link only the first ``G`` detections of an image and class
  (``G`` its objects, crowd included; detections in descending score, those
  matched to crowd regions included) carry an IoU, later ones 0, and that IoU
  is read at the matched object's position among pycocotools' ``gtIds``
  (crowd last) counted in file order (:func:`_code_iou`); a class with one
  detection has error ``|1[y > 0] - s|^p`` (:func:`_code_error`). Equal to
  the figures their code prints (tests/data/kde_reference).
* ``"popordanoska2024"`` the definition as stated: every detection in one
  sample per class, every match's IoU, classes without detections left out
  of the average.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MetricResult
from detcal.matching.engine import match
from detcal.metrics.lrp import paired_iou

BANDWIDTH_GRID: np.ndarray = np.concatenate([np.logspace(-3, -1, 5), np.linspace(0.2, 1.0, 5)])
"""The bandwidths their code chooses from."""
SPLIT_AT: int = 5000
"""Their evaluation splits a class's sample above this many detections (``MAX_LEN_SCORES``)."""
SCORE_EPS: float = 1e-7
"""Scores are clipped into ``[eps, 1 - eps]`` so that the Beta kernels stay finite at 0 and 1."""
VARIANTS: tuple[str, ...] = ("popordanoska2024", "popordanoska2024_code")
COCO_THRESHOLDS: np.ndarray = np.round(np.arange(0.5, 0.951, 0.05), 2)
_ROWS = 1024  # rows of the kernel matrix at a time


def _log_kernel_rows(s_rows: np.ndarray, s: np.ndarray, b: float, rows: slice) -> np.ndarray:
    """``log K_b(s_i; s_j)`` for evaluation points ``s_rows`` (rows) and centres ``s`` (columns), diagonal excluded."""
    a = s / b + 1.0
    c = (1.0 - s) / b + 1.0
    log_beta = gammaln(a) + gammaln(c) - gammaln(a + c)
    lk = np.stack([np.log(s_rows), np.log1p(-s_rows)], axis=1) @ np.stack([a - 1.0, c - 1.0])
    lk -= log_beta[None, :]
    idx = np.arange(rows.start, rows.stop)
    lk[idx - rows.start, idx] = -np.inf
    return lk


def _lse(x: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp (``-inf`` for a row of ``-inf``); overwrites ``x``."""
    m = x.max(axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    x -= m[:, None]
    np.exp(x, out=x)
    with np.errstate(divide="ignore"):
        return np.log(x.sum(axis=1)) + m


def _check_scores(scores: ArrayLike, targets: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(targets, dtype=np.float64).reshape(-1)
    if len(s) != len(y):
        raise DetcalInputError(f"scores has {len(s)} rows, targets {len(y)}", field="targets")
    for name, v in (("score", s), ("target", y)):
        bad = ~np.isfinite(v) | (v < 0) | (v > 1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DetcalInputError(f"{name} {v[i]} is outside [0, 1]", record=f"row {i}", field=name)
    return np.clip(s, SCORE_EPS, 1.0 - SCORE_EPS), y


def loo_bandwidth(scores: ArrayLike, grid: np.ndarray = BANDWIDTH_GRID) -> float:
    """The bandwidth their code picks (module docstring): leave-one-out log likelihood over ``grid``."""
    s, _ = _check_scores(scores, np.zeros(np.size(scores)))
    n = len(s)
    if n < 2:
        raise DetcalInputError("the bandwidth needs at least two scores", field="scores")
    best, best_l = float(grid[0]), -np.inf
    for b in grid:  # ten candidate bandwidths
        tot = 0.0
        for start in range(0, n, _ROWS):  # blocks of kernel rows
            rows = slice(start, min(n, start + _ROWS))
            tot += float(_lse(_log_kernel_rows(s[rows], s, float(b), rows)).sum())
        ll = tot - n * np.log((n - 1) * float(b))
        if ll > best_l:
            best, best_l = float(b), ll
    return best


def kde_ratio(scores: ArrayLike, targets: ArrayLike, bandwidth: float) -> np.ndarray:
    """Leave-one-out estimates ``r_i`` of ``E[Y | S = s_i]`` [n] (module docstring)."""
    s, y = _check_scores(scores, targets)
    n = len(s)
    out = np.empty(n)
    with np.errstate(divide="ignore"):
        logy = np.log(y)
    for start in range(0, n, _ROWS):  # blocks of kernel rows
        rows = slice(start, min(n, start + _ROWS))
        lk = _log_kernel_rows(s[rows], s, float(bandwidth), rows)
        num = _lse(lk + logy[None, :])
        den = _lse(lk)
        out[rows] = np.exp(num - den)
    return out


def kde_ece(scores: ArrayLike, targets: ArrayLike, *, bandwidth: float | str = "loo", p: int = 1) -> MetricResult:
    """KDE estimate of ``E |E[Y | S] - S|^p`` from scores and targets in [0, 1] (``bandwidth``: "loo" or a number)."""
    s, y = _check_scores(scores, targets)
    if len(s) < 2:
        return MetricResult(
            name="kde_ece", value=float("nan"), variant="popordanoska2024", params={"p": p, "n": len(s)}
        )
    b = loo_bandwidth(s) if bandwidth == "loo" else float(bandwidth)
    if not b > 0:
        raise DetcalInputError(f"bandwidth must be positive, got {bandwidth!r}", field="bandwidth")
    r = kde_ratio(s, y, b)
    return MetricResult(
        name="kde_ece",
        value=float(np.mean(np.abs(r - s) ** p)),
        variant="popordanoska2024",
        params={
            "p": int(p),
            "bandwidth": b,
            "bandwidth_rule": "loo grid (their code)" if bandwidth == "loo" else "given",
            "kernel": "Beta(s_j / b + 1, (1 - s_j) / b + 1), leave one out",
            "score_clip": SCORE_EPS,
            "n": len(s),
        },
    )


def _code_error(s: np.ndarray, y: np.ndarray, p: int) -> float:
    """One piece's error as their ``get_ece_kde``.

    With one detection the code's leave-one-out sums hold only the diagonal term, which it sets to
    ``log K + finfo(float32).min`` (finite, about -3.4e38) instead of excluding it; in floating point
    ``log K + log y`` vanishes beside that number, so the ratio is ``exp(0) = 1`` for any target
    ``y > 0`` and 0 for ``y = 0``: the error is ``|1[y > 0] - s|^p`` (``|y - s|^p`` with the binary link).
    """
    if len(s) == 1:
        return float(abs(float(y[0] > 0) - float(s[0])) ** p)
    return kde_ece(s, y, p=p).value


def _split_errors(s: np.ndarray, y: np.ndarray, p: int) -> list[float]:
    """Their ``evaluate_split``: halves (first half the shorter) until at most SPLIT_AT, one error per piece."""
    if len(s) <= SPLIT_AT:
        return [_code_error(s, y, p)]
    h = len(s) // 2
    return _split_errors(s[:h], y[:h], p) + _split_errors(s[h:], y[h:], p)


def _code_iou(dets: Detections, gt: GroundTruth, d_rows: np.ndarray, g_rows: np.ndarray) -> np.ndarray:
    """The IoU their ``get_matched_ious`` reads for detections ``d_rows`` matched to (non-crowd) GTs ``g_rows``.

    pycocotools' ``evaluateImg`` lists an image's objects of a class with the crowd ones last (``gtIds``);
    the code takes a match's position in that list and reads that column of ``coco_eval.ious``, whose
    columns are the objects in the file's order. The IoU read is therefore the one with the object at
    that position in file order (crowd included; a crowd object's IoU is intersection over the
    detection's area). With no crowd object before a matched one the two orders agree.
    """
    key = gt.image_id * 1_000_003 + gt.category
    order = np.lexsort((np.arange(len(gt)), key))  # file order within (image, class)
    k = key[order]
    start = np.searchsorted(k, k, side="left")
    crowd = gt.iscrowd[order].astype(np.int64)
    nc_before = np.cumsum(1 - crowd) - (1 - crowd)  # non-crowd objects before each, over the sorted list
    nc_rank_sorted = nc_before - nc_before[start]  # ... within its group
    pos_in_sorted = np.empty(len(gt), np.int64)
    pos_in_sorted[order] = np.arange(len(gt))
    p = pos_in_sorted[g_rows]
    target = order[start[p] + nc_rank_sorted[p]]
    if len(d_rows) == 0:
        return np.zeros(0)
    a, b = dets.box[d_rows], gt.box[target]
    # row-paired IoU with pycocotools' crowd rule (union = the detection's area for a crowd object)
    iw = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]), 0, None)
    inter = iw * ih
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    union = np.where(gt.iscrowd[target], area_a, area_a + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter)
    out = np.zeros(len(inter))
    np.divide(inter, union, out=out, where=inter > 0)
    return out


def _iou_link_targets(
    dets: Detections, gt: GroundTruth, rows: np.ndarray, iou: np.ndarray, considered: np.ndarray
) -> np.ndarray:
    """The code's IoU-link truncation: per image and class, a detection ranked (by score, among all the
    image's considered detections of the class, those matched to crowd objects included) at or past the
    number of objects (crowd included) gets 0."""
    allr = np.flatnonzero(considered)
    key_all = dets.image_id[allr] * 1_000_003 + dets.category[allr]
    order = np.lexsort((allr, -dets.score[allr], key_all))
    k = key_all[order]
    start = np.searchsorted(k, k, side="left")
    rank_all = np.empty(len(allr), np.int64)
    rank_all[order] = np.arange(len(allr)) - start
    rank = rank_all[np.searchsorted(allr, rows)]
    key = dets.image_id[rows] * 1_000_003 + dets.category[rows]
    gk, gcount = np.unique(gt.image_id * 1_000_003 + gt.category, return_counts=True)
    pos = np.clip(np.searchsorted(gk, key), 0, max(len(gk) - 1, 0))
    n_obj = np.where((len(gk) > 0) & (gk[pos] == key), gcount[pos], 0) if len(gk) else np.zeros(len(rows), np.int64)
    return np.where(rank < n_obj, iou, 0.0)


def detection_kde_ece(
    dets: Detections,
    gt: GroundTruth,
    *,
    link: str = "binary",
    iou_thresholds: ArrayLike | None = None,
    variant: str = "popordanoska2024_code",
    p: int = 1,
    max_dets: int | None = 100,
) -> MetricResult:
    """Detection calibration error (module docstring), mean over classes and IoU thresholds.

    ``iou_thresholds``: default 0.50:0.05:0.95 for the binary link, 0.5 for the IoU link (their ECE and ECE-id)."""
    if variant not in VARIANTS:
        raise DetcalInputError(f"unknown variant {variant!r}; choose one of {VARIANTS}", field="variant")
    if link not in ("binary", "iou"):
        raise DetcalInputError(f"link must be 'binary' or 'iou', got {link!r}", field="link")
    ts = np.atleast_1d(
        np.asarray(
            COCO_THRESHOLDS
            if iou_thresholds is None and link == "binary"
            else (0.5 if iou_thresholds is None else iou_thresholds),
            dtype=np.float64,
        )
    )
    m = match(dets, gt, tuple(ts.tolist()), mode="exclusive", max_dets=max_dets)
    code = variant == "popordanoska2024_code"
    cats = np.union1d(np.unique(gt.category), np.unique(dets.category[m.considered]))
    err = np.full((len(cats), len(ts)), np.nan)
    n = np.zeros((len(cats), len(ts)), np.int64)
    for t in range(len(ts)):  # per IoU threshold
        keep = m.considered & ~m.ignored[t]
        rows = np.flatnonzero(keep)
        y = m.matched[t, rows].astype(np.float64)
        if link == "iou":
            iou = np.zeros(len(rows))
            hit = np.flatnonzero(m.matched[t, rows])
            if code:
                iou[hit] = _code_iou(dets, gt, rows[hit], m.gt_index[t, rows[hit]])
                y = _iou_link_targets(dets, gt, rows, iou, m.considered)
            else:
                iou[hit] = paired_iou(dets.box[rows[hit]], gt.box[m.gt_index[t, rows[hit]]])
                y = iou
        order = np.lexsort((-dets.score[rows], dets.image_id[rows], dets.category[rows]))
        rows, y = rows[order], y[order]
        ci = np.searchsorted(cats, dets.category[rows])
        start = np.searchsorted(ci, np.arange(len(cats) + 1))
        for c in range(len(cats)):  # per class: one kernel estimate
            s_c, y_c = dets.score[rows[start[c] : start[c + 1]]], y[start[c] : start[c + 1]]
            n[c, t] = len(s_c)
            if len(s_c) == 0:
                err[c, t] = 0.0 if code else np.nan
            elif code:
                err[c, t] = float(np.mean(_split_errors(s_c, y_c, p)))
            else:
                err[c, t] = kde_ece(s_c, y_c, p=p).value
    value = float(np.nanmean(err)) if np.isfinite(err).any() else float("nan")
    return MetricResult(
        name="kde_ece",
        value=value,
        variant=variant,
        params={
            "link": link,
            "iou_thresholds": ts.tolist(),
            "p": int(p),
            "max_dets": max_dets,
            "bandwidth_rule": "loo grid (their code)",
            "average": "mean over classes and thresholds",
            "split_at": SPLIT_AT if code else None,
            "empty_class": "error 0" if code else "left out",
        },
        table={"category": cats, "class_error": _row_mean(err), "class_count": n.max(axis=1)},
        extra={"per_threshold": {f"{t:.2f}": float(np.nanmean(err[:, i])) for i, t in enumerate(ts)}},
    )


def _row_mean(err: np.ndarray) -> np.ndarray:
    ok = np.isfinite(err)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, err, 0.0).sum(axis=1) / ok.sum(axis=1)
