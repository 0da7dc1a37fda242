"""D-ECE, LaECE and LRP with the conventions of uq-detr 0.1.1 (the ``uq_detr`` variants).

uq-detr (Park, Sobolewski and Azizan, IEEE TPAMI 2026) computes the three
detection-level measures beside its OCE (:mod:`detcal.metrics.oce`). Its
numbers differ from detcal's defaults (:mod:`detcal.metrics.laece`,
:mod:`detcal.metrics.lrp`, :func:`detcal.metrics.confidence.dece_kueppers`) by
conventions, each reproduced here and named in docs/newest_measures.md:

* **bins** span the lowest to the highest confidence present (per class for
  LaECE), not [0, 1]: edges ``lo + k (hi - lo) / B`` (``numpy.linspace``),
  the first bin ``[e_0, e_1]`` and the others ``(e_k, e_k+1]``;
* **no class filter**: a detection of a class without ground truth in the
  set is a false positive and its class enters LaECE's average;
* **LaECE** averages over the classes that have at least one detection;
* **LRP** is pooled over all classes (one ratio of sums), without components
  and without a score threshold;
* **true positives**: ``tp_criterion="greedy"`` matches each image's
  detections in descending score order to the unmatched ground-truth box of
  their class with the highest IoU, if that IoU is ``>= tau``
  (pycocotools' rule with every box plain and no max-detections cut; equal
  IoUs: the first box), computed on the same-class candidate pairs by
  :func:`_greedy`; ``"independent"`` makes a detection a
  true positive when any box of its class has IoU strictly ``> tau``
  (several detections may take one box), with target the best such IoU;
* **crowd** boxes do not exist for it: every ground-truth box is a plain
  object (``crowd="object"``; ``crowd="drop"`` removes crowd boxes first);
* **defaults**: ``tau = 0.5`` for all three (detcal's LaECE default is 0),
  25 bins for D-ECE and LaECE.

IoUs come from the ``xyxy`` corners. ``tau`` must be > 0: at 0 uq-detr's
greedy rule pairs a detection with a box of another class (its IoU mask
is 0, and ``0 >= 0``), which is not a definition detcal reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MetricResult
from detcal.metrics._pairs import BoxColumns, overlap_pairs

UQ_TAU: float = 0.5
"""uq-detr's default TP IoU threshold for D-ECE, LaECE and LRP."""
UQ_BINS: int = 25
"""uq-detr's default number of bins for D-ECE and LaECE."""
TP_CRITERIA: tuple[str, ...] = ("greedy", "independent")
CROWD: tuple[str, ...] = ("object", "drop")


@dataclass
class UqOutcomes:
    """Per-detection outcome under uq-detr's rules: ``tp [D]``, ``target [D]`` (IoU of a true
    positive, else 0), ``score [D]``, ``category [D]``; ``n_gt`` objects and ``n_matched`` objects
    taken (greedy) or true positives (independent); ``tau``, ``tp_criterion``, ``crowd``."""

    tp: np.ndarray
    target: np.ndarray
    score: np.ndarray
    category: np.ndarray
    n_gt: int
    tau: float
    tp_criterion: str
    crowd: str

    @property
    def params(self) -> dict:
        return {
            "tau": self.tau,
            "tp_criterion": self.tp_criterion,
            "crowd": self.crowd,
            "iou_rule": ">= tau" if self.tp_criterion == "greedy" else "> tau",
            "max_dets": None,
        }


def _plain(dets: Detections, gt: GroundTruth, crowd: str) -> tuple[Detections, GroundTruth]:
    """The records uq-detr sees: every box a plain object (``object``), or the crowd boxes removed
    (``drop``); only ``image_id``, ``box``, ``category`` and ``score`` are read, and no flag."""
    if crowd not in CROWD:
        raise DetcalInputError(f"unknown crowd handling {crowd!r}; choose one of {CROWD}", field="crowd")
    if crowd == "object":
        return dets, gt
    keep = ~gt.iscrowd
    return dets, GroundTruth(image_id=gt.image_id[keep], box=gt.box[keep], category=gt.category[keep])


def uq_outcomes(
    dets: Detections, gt: GroundTruth, tau: float = UQ_TAU, *, tp_criterion: str = "greedy", crowd: str = "object"
) -> UqOutcomes:
    """True positives and targets of every detection under uq-detr's rules (module docstring)."""
    tau = float(tau)
    if not (np.isfinite(tau) and 0.0 < tau < 1.0):
        raise DetcalInputError(f"the uq_detr variants need a TP IoU threshold in (0, 1), got {tau}", field="tau")
    if tp_criterion not in TP_CRITERIA:
        raise DetcalInputError(
            f"unknown tp_criterion {tp_criterion!r}; choose one of {TP_CRITERIA}", field="tp_criterion"
        )
    d, g = _plain(dets, gt, crowd)
    gi, di, iou = _class_pairs(d, g, tau)
    target = np.zeros(len(d))
    if tp_criterion == "greedy":
        pair = _greedy(d.score, d.image_id, d.category, gi, di, iou, len(g))
        tp = pair >= 0
        target[tp] = iou[pair[tp]]
    else:
        strict = iou > tau
        best = np.zeros(len(d))
        np.maximum.at(best, di[strict], iou[strict])
        tp = best > tau
        target[tp] = best[tp]
    return UqOutcomes(
        tp=tp,
        target=target,
        score=d.score.copy(),
        category=d.category.copy(),
        n_gt=len(g),
        tau=tau,
        tp_criterion=tp_criterion,
        crowd=crowd,
    )


def _class_pairs(d: Detections, g: GroundTruth, tau: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(box row, detection row, IoU) of every same-image, same-class pair with IoU >= ``tau``, ordered by
    box row and then detection row; the IoU with uq-detr's arithmetic (areas from the corners)."""
    ids = np.concatenate([d.image_id, g.image_id])
    cats = np.concatenate([d.category, g.category])
    if len(ids) and ids.min() >= 0 and cats.min() >= 0 and (int(ids.max()) + 1) * (int(cats.max()) + 1) < 2**62:
        key = ids * (int(cats.max()) + 1) + cats  # one code per (image, class)
    else:
        img = np.unique(ids, return_inverse=True)[1].reshape(-1)
        cat = np.unique(cats, return_inverse=True)[1].reshape(-1)
        key = img * (int(cat.max()) + 1 if len(cat) else 1) + cat
    dk, gk = key[: len(d)], key[len(d) :]
    parts = list(overlap_pairs(dk, BoxColumns(d.box), gk, BoxColumns(g.box), tau))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]


def _greedy(
    score: np.ndarray,
    image: np.ndarray,
    category: np.ndarray,
    gi: np.ndarray,
    di: np.ndarray,
    iou: np.ndarray,
    n_gt: int,
) -> np.ndarray:
    """uq-detr's greedy rule on the candidate pairs: the pair each detection takes [D] (-1: none).

    Per image and class, detections in descending score order (ties: the results' order) take the
    untaken box with the highest IoU (ties: the first box). Only detections with a candidate pair can
    take a box, so the others are skipped. Detections of equal rank within their (image, class) group
    meet disjoint boxes, so each rank is one vectorised step over all groups (the loop runs over ranks,
    at most the largest group's number of candidate detections)."""
    out = np.full(len(score), -1, np.int64)
    if len(di) == 0:
        return out
    # a pair whose detection and box meet no other candidate is taken as it is
    alone = (np.bincount(di, minlength=len(score))[di] == 1) & (np.bincount(gi, minlength=n_gt)[gi] == 1)
    out[di[alone]] = np.flatnonzero(alone)
    rest = np.flatnonzero(~alone)
    if len(rest) == 0:
        return out
    p_index, gi, di, iou = rest, gi[rest], di[rest], iou[rest]
    cand = np.unique(di)
    order = np.lexsort((cand, -score[cand], category[cand], image[cand]))
    c = cand[order]
    new_group = np.ones(len(c), bool)
    new_group[1:] = (image[c][1:] != image[c][:-1]) | (category[c][1:] != category[c][:-1])
    start = np.maximum.accumulate(np.where(new_group, np.arange(len(c)), 0))
    rank = np.empty(len(score), np.int64)
    rank[c] = np.arange(len(c)) - start
    p_order = np.lexsort((gi, di, rank[di]))
    gi, di, iou, pr = gi[p_order], di[p_order], iou[p_order], rank[di[p_order]]
    bounds = np.searchsorted(pr, np.arange(int(pr.max()) + 2))
    taken = np.zeros(n_gt, bool)
    for r in range(len(bounds) - 1):
        p0, p1 = int(bounds[r]), int(bounds[r + 1])
        g, d, u = gi[p0:p1], di[p0:p1], iou[p0:p1]
        head = np.ones(len(d), bool)
        head[1:] = d[1:] != d[:-1]
        starts = np.flatnonzero(head)
        key = np.where(taken[g], -1.0, u)
        best = np.maximum.reduceat(key, starts)
        hit = (key == best[np.cumsum(head) - 1]) & (key >= 0)
        pos = np.where(hit, np.arange(p1 - p0), p1 - p0)
        pick = np.minimum.reduceat(pos, starts)
        ok = pick < p1 - p0
        taken[g[pick[ok]]] = True
        out[d[pick[ok]]] = p_index[p_order[p0 + pick[ok]]]
    return out


def range_bins(x: np.ndarray, group: np.ndarray, n_groups: int, bins: int) -> np.ndarray:
    """Bin [S] of every value among ``bins`` equal-width bins spanning its group's min to max.

    Edges as ``numpy.linspace(min, max, bins + 1)`` computes them; a value's bin is the number of
    edges strictly below it, minus one, clipped to [0, bins - 1] (``numpy.digitize(..., right=True)``).
    """
    lo = np.full(n_groups, np.inf)
    hi = np.full(n_groups, -np.inf)
    np.minimum.at(lo, group, x)
    np.maximum.at(hi, group, x)
    with np.errstate(invalid="ignore"):  # empty groups (inf - inf) are never looked up
        step = (hi - lo) / bins
    lo_x, hi_x, step_x = lo[group], hi[group], step[group]

    def edge(k: np.ndarray) -> np.ndarray:  # linspace's arithmetic: k * step + lo, the last edge hi
        return np.where(k >= bins, hi_x, k * step_x + lo_x)

    flat = step_x > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        guess = np.where(flat, np.ceil((x - lo_x) / np.where(flat, step_x, 1.0)), 0.0)
    out = np.clip(guess, 0, bins + 1)  # the number of edges below x, up to rounding of the guess
    for _ in range(2):  # exact against the edges themselves (the guess is off by at most one)
        out -= (out > 0) & (edge(np.maximum(out - 1, 0)) >= x)
        out += (out <= bins) & (edge(np.minimum(out, bins)) < x)
    out = out.astype(np.int64)
    return np.clip(out, 1, bins) - 1


def _binned_errors(x: np.ndarray, y: np.ndarray, group: np.ndarray, n_groups: int, bins: int) -> np.ndarray:
    """Per group: sum over bins of count / N * |mean x - mean y| [n_groups] (NaN: empty group)."""
    b = range_bins(x, group, n_groups, bins)
    key = group * bins + b
    n = np.bincount(key, minlength=n_groups * bins).reshape(n_groups, bins).astype(np.float64)
    sx = np.bincount(key, weights=x, minlength=n_groups * bins).reshape(n_groups, bins)
    sy = np.bincount(key, weights=y, minlength=n_groups * bins).reshape(n_groups, bins)
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(n > 0, np.abs(sx / n - sy / n), 0.0)
        total = n.sum(axis=1)
        return np.where(total > 0, (n / total[:, None] * gap).sum(axis=1), np.nan)


def _check_bins(bins: int) -> int:
    if isinstance(bins, bool) or int(bins) != bins or bins < 1:
        raise DetcalInputError(f"bins must be a positive int, got {bins!r}", field="bins")
    return int(bins)


def dece_uq_detr_from_outcomes(o: UqOutcomes, *, bins: int = UQ_BINS) -> MetricResult:
    """uq-detr's D-ECE: all detections pooled, binary targets, bins over the confidence range."""
    bins = _check_bins(bins)
    err = _binned_errors(o.score, o.tp.astype(np.float64), np.zeros(len(o.score), np.int64), 1, bins)
    value = float(err[0]) if len(o.score) else 0.0
    return MetricResult(
        name="dece",
        value=value,
        variant="uq_detr",
        params={
            **o.params,
            "bins": bins,
            "binning": "equal_width over [min, max] of the scores",
            "closed": "right",
            "pooling": "all detections, every class",
            "target": "TP 1 / FP 0",
        },
        extra={"n_detections": int(len(o.score))},
    )


def laece_uq_detr_from_outcomes(o: UqOutcomes, *, bins: int = UQ_BINS) -> MetricResult:
    """uq-detr's LaECE: per detected class, IoU targets, bins over the class's confidence range."""
    bins = _check_bins(bins)
    cats, cls = np.unique(o.category, return_inverse=True)
    err = _binned_errors(o.score, o.target, cls.reshape(-1), len(cats), bins)
    value = float(np.mean(err)) if len(cats) else 0.0
    return MetricResult(
        name="laece",
        value=value,
        variant="uq_detr",
        params={
            **o.params,
            "bins": bins,
            "binning": "equal_width over [min, max] of the class's scores",
            "closed": "right",
            "target": "IoU of a true positive, 0 otherwise",
            "average": "mean over every class with a detection",
        },
        table={"category": cats, "class_error": err},
        extra={"n_detections": int(len(o.score)), "n_classes": int(len(cats))},
    )


def lrp_uq_detr_from_outcomes(o: UqOutcomes) -> MetricResult:
    """uq-detr's LRP: one pooled ratio over every class, ``(FP + FN + sum (1 - IoU) / (1 - tau)) / (TP + FP + FN)``."""
    n_tp = int(o.tp.sum())
    n_fp = len(o.tp) - n_tp
    n_fn = o.n_gt - n_tp
    loc = float(np.sum((1.0 - o.target[o.tp]) / (1.0 - o.tau)))
    denom = n_tp + n_fp + n_fn
    value = (n_fp + n_fn + loc) / denom if denom else 0.0
    return MetricResult(
        name="lrp",
        value=float(value),
        variant="uq_detr",
        params={**o.params, "pooling": "all classes pooled", "score_threshold": None},
        extra={"n_tp": n_tp, "n_fp": n_fp, "n_fn": n_fn, "n_gt": o.n_gt},
    )


def uq_detr_suite(
    dets: Detections,
    gt: GroundTruth,
    tau: float = UQ_TAU,
    *,
    bins: int = UQ_BINS,
    tp_criterion: str = "greedy",
    crowd: str = "object",
) -> dict[str, MetricResult]:
    """D-ECE, LaECE and LRP (uq_detr variants) from one matching; LRP always uses the greedy rule."""
    o = uq_outcomes(dets, gt, tau, tp_criterion=tp_criterion, crowd=crowd)
    og = o if tp_criterion == "greedy" else uq_outcomes(dets, gt, tau, tp_criterion="greedy", crowd=crowd)
    return {
        "dece": dece_uq_detr_from_outcomes(o, bins=bins),
        "laece": laece_uq_detr_from_outcomes(o, bins=bins),
        "lrp": lrp_uq_detr_from_outcomes(og),
    }
