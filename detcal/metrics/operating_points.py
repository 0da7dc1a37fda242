"""Operating points: precision, recall and F1 against the score threshold (docs/metrics.md#operating-points).

On the confidence sample at one IoU threshold (non-ignored detections within
``max_dets``; a true positive is a matched one), keeping the detections with
``score >= s``:

    precision(s) = TP(s) / (TP(s) + FP(s))      (None when nothing is kept)
    recall(s)    = TP(s) / N_GT
    F1(s)        = 2 TP(s) / (TP(s) + FP(s) + N_GT)

per class (``N_GT`` its non-crowd boxes) and overall (all classes pooled,
one threshold), on the grid ``s = 0, 0.01, ..., 1``. The F1-optimal threshold
is the score of the last detection kept by the best cut of the descending
scores (cuts only between different scores; the highest threshold on ties);
the LRP-optimal thresholds are those of :func:`detcal.metrics.lrp.lrp_table`
(given, e.g. the run's ``localisation`` record at its own TP IoU, or computed
at TP IoU ``tau`` = the sample's IoU). The ECE of the detections each rule keeps
tells how calibrated the detector is where it would be deployed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from detcal.core.types import MetricResult
from detcal.matching.blocks import segment_starts
from detcal.metrics.confidence import ConfidenceMetric
from detcal.metrics.lrp import DetectionOutcomes, lrp_table
from detcal.metrics.narrow_ints import sort_code_type
from detcal.metrics.tide import grid_count

__all__ = ["GRID", "pr_curves", "f1_optimal", "operating_points", "class_blocks"]

GRID: np.ndarray = np.arange(101) / 100
"""Score thresholds of the curves."""
_ECE_RULES = ("all", "f1_optimal_pooled", "f1_optimal_per_class", "lrp_optimal_per_class")


def _counts(
    score: np.ndarray | None, tp: np.ndarray, code: np.ndarray | None, n_cls: int, j: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Kept and true-positive counts [n_cls, len(GRID)] for ``score >= GRID[k]`` (exact: each detection is kept
    at the grid points at or below its score); ``code`` None: one class; ``j``: ``grid_count(score)`` when
    known (``score`` is then not read). The true positives are counted as integers (the same float counts as
    summing their flags)."""
    if j is None:
        assert score is not None
        j = grid_count(score)  # kept at GRID[:j]
    m = len(GRID) + 1
    key = j if code is None else code * m + j  # one key per detection, read by both counts
    kept = np.bincount(key, minlength=n_cls * m).reshape(n_cls, m)
    if tp.dtype == np.bool_:
        counted: np.ndarray = np.bincount(key[tp], minlength=n_cls * m).astype(np.float64)
    else:
        counted = np.bincount(key, weights=tp.astype(np.float64), minlength=n_cls * m)
    tps = counted.reshape(n_cls, m)
    del key
    rev = np.cumsum(kept[:, ::-1], axis=1)[:, ::-1]  # rev[k] = detections with j >= k
    rtp = np.cumsum(tps[:, ::-1], axis=1)[:, ::-1]
    return rev[:, 1:], rtp[:, 1:]  # threshold k kept when j >= k + 1


def pr_curves(kept: np.ndarray, tps: np.ndarray, n_gt: int) -> dict[str, list]:
    """Precision, recall and F1 rows [len(GRID)] from the counts of :func:`_counts` (one class or pooled)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(kept > 0, tps / np.maximum(kept, 1), np.nan)
        rec = tps / n_gt if n_gt > 0 else np.full(len(kept), np.nan)
        f1 = 2 * tps / (kept + n_gt) if n_gt > 0 else np.full(len(kept), np.nan)
    return {"precision": prec.tolist(), "recall": rec.tolist(), "f1": f1.tolist()}


def f1_optimal(
    score: np.ndarray, tp: np.ndarray, n_gt: int, by_score: np.ndarray | None = None
) -> tuple[float, float, float, float]:
    """(threshold, F1, precision, recall) of the best cut of one pool (NaN threshold: nothing to keep);
    ``by_score``: the points in descending score order, when known."""
    if n_gt <= 0 or len(score) == 0:
        return float("nan"), float("nan"), float("nan"), float("nan")
    o = np.argsort(-score, kind="stable") if by_score is None else by_score
    return _f1_optimal_sorted(score[o], tp[o], n_gt)


def _f1_optimal_sorted(s: np.ndarray, tp: np.ndarray, n_gt: int) -> tuple[float, float, float, float]:
    """:func:`f1_optimal` of points given in descending score order."""
    if n_gt <= 0 or len(s) == 0:
        return float("nan"), float("nan"), float("nan"), float("nan")
    t = np.cumsum(tp)
    cut = np.flatnonzero(np.concatenate([s[1:] != s[:-1], [True]]))  # the last position of each score run
    f1 = 2 * t[cut] / (cut + 1 + n_gt)
    b = int(np.argmax(f1))
    k = int(cut[b])
    return float(s[k]), float(f1[b]), float(t[k] / (k + 1)), float(t[k] / n_gt)


_CLASS_BLOCK = 1 << 16
"""Points handled at once by :func:`_class_f1` (whole classes; the temporaries stay small and in cache)."""


def _class_f1(
    score: np.ndarray, tp: np.ndarray, code: np.ndarray, n_gt: np.ndarray, by_score: np.ndarray
) -> np.ndarray:
    """F1-optimal threshold, F1, precision, recall per class [C, 4] (vectorised over classes); ``by_score``:
    the points in descending score order (:func:`_class_f1_sorted` of the points gathered in that order)."""
    c = len(n_gt)
    code = code.astype(sort_code_type(c), copy=False)
    return _class_f1_sorted(score[by_score], tp[by_score], code[by_score], n_gt)


def _class_f1_sorted(s: np.ndarray, tp: np.ndarray, code: np.ndarray, n_gt: np.ndarray) -> np.ndarray:
    """:func:`_class_f1` of points given in descending score order (scores ``s``, true positives ``tp``, classes
    ``code``). The classes are taken in blocks of whole classes with about :data:`_CLASS_BLOCK` points (each
    class computed alone: the same values as all at once); a block's points are gathered from the sorted
    columns, where each class's points lie in ascending positions (a forward read, not one at random)."""
    c = len(n_gt)
    out = np.full((c, 4), np.nan)
    if len(s) == 0:
        return out
    cells = _class_f1_cells(s, tp, code, n_gt)
    if cells is not None:
        return cells
    code = code.astype(sort_code_type(c), copy=False)  # narrow: the radix sort (cache)
    o = np.argsort(code, kind="stable")  # by class, each in descending score order
    n_of = np.bincount(code, minlength=c)
    ends = np.cumsum(n_of)
    for a, b in class_blocks(ends, _CLASS_BLOCK):
        lo = int(ends[a - 1]) if a else 0
        sc = np.repeat(np.arange(a, b, dtype=code.dtype), n_of[a:b])  # the block's classes: ``code[o]``, no gather
        _class_f1_block(s, tp, sc, n_of[a:b], n_gt, o[lo : int(ends[b - 1])], a, b, out)
    return out


def _class_f1_cells(s: np.ndarray, tp: np.ndarray, code: np.ndarray, n_gt: np.ndarray) -> np.ndarray | None:
    """:func:`_class_f1_sorted` when the scores take few values (e.g. written with three decimals): a class's cuts
    are its score runs, and its counts at a cut are the counts of its (class, score run) cells at or above it, so
    the points are counted per cell (no sort by class) and each class's cells accumulated in descending score.
    The same integers, the same arithmetic on them, and the same first maximum (the highest threshold on ties):
    the same values. None (the sorted path) when the cells would outnumber half the points, the flags are not
    booleans, or a score run holds both 0.0 and -0.0 (the threshold is then the last point's own zero)."""
    c, n = len(n_gt), len(s)
    if tp.dtype != np.bool_:
        return None
    key = np.zeros(n, np.int64)
    np.cumsum(s[1:] != s[:-1], out=key[1:])  # each point's score run (the points descend: equal scores adjacent)
    n_run = int(key[-1]) + 1
    if 2 * c * n_run > n:
        return None
    zero = s == 0
    if zero.any():
        neg = np.signbit(s[zero])
        if neg.any() and not neg.all():
            return None
    del zero
    first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))  # each run's first point (its score)
    key += code.astype(np.int64) * n_run  # the (class, run) cell
    count = np.bincount(key, minlength=c * n_run).reshape(c, n_run)
    tpc = np.bincount(key[tp], minlength=c * n_run).reshape(c, n_run)
    del key
    pos1 = np.cumsum(count, axis=1)  # the class's points at or above each run: the position + 1 of its last one
    np.cumsum(tpc, axis=1, out=tpc)  # its true positives there
    g = n_gt.astype(np.float64)[:, None]
    f1 = np.where((count > 0) & (g > 0), 2 * tpc / (pos1 + g), -1.0)
    del count
    best = np.argmax(f1, axis=1)  # the first maximum: the highest threshold on ties
    cls = np.flatnonzero(f1[np.arange(c), best] >= 0)
    b = best[cls]
    out = np.full((c, 4), np.nan)
    out[cls, 0], out[cls, 1] = s[first[b]], f1[cls, b]
    t, k = tpc[cls, b], pos1[cls, b]
    out[cls, 2], out[cls, 3] = t / k, t / g[cls, 0]
    return out


def class_blocks(ends: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Ranges ``(a, b)`` of whole classes, in order, covering every class, each with about ``size`` points
    (a larger class alone); ``ends``: the cumulative point count per class."""
    if not len(ends):
        return []
    steps = np.arange(size, int(ends[-1]), size)
    cuts = np.concatenate([[0], np.searchsorted(ends, steps, "right"), [len(ends)]])
    cuts = cuts[segment_starts(cuts)]  # ascending already: drop the repeats (np.unique's first call imports
    # numpy.ma, ~8 ms, for its masked-array check)
    return [(int(a), int(b)) for a, b in zip(cuts, cuts[1:])]


def _class_f1_block(
    score: np.ndarray, tp: np.ndarray, sc: np.ndarray, n: np.ndarray, n_gt: np.ndarray, o: np.ndarray, a: int,
    b: int, out: np.ndarray,
) -> None:  # fmt: skip
    """:func:`_class_f1` for the classes ``a:b``, whose points ``o`` are grouped by class (``sc`` their classes,
    ``n`` the points of each class), into ``out``."""
    if not len(o):
        return
    s, t = score[o], tp[o].astype(np.int64)
    start = np.cumsum(n) - n
    first_of = start[sc - a]
    ctp = np.cumsum(t)
    tpc = ctp - (ctp[first_of] - t[first_of])
    pos = np.arange(len(s)) - first_of
    last = np.concatenate([(s[1:] != s[:-1]) | (sc[1:] != sc[:-1]), [True]])
    g = n_gt[sc].astype(np.float64)
    f1 = np.where(last & (g > 0), 2 * tpc / (pos + 1 + g), -1.0)
    # per class: the highest F1, the first (highest threshold) on ties
    best = np.maximum.reduceat(f1, start[n > 0])
    bf = np.full(b - a, -1.0)
    bf[n > 0] = best
    hit = np.flatnonzero((f1 == bf[sc - a]) & (f1 >= 0))
    first = hit[np.concatenate([[True], sc[hit][1:] != sc[hit][:-1]])] if len(hit) else hit
    cls = sc[first]
    out[cls, 0], out[cls, 1] = s[first], f1[first]
    out[cls, 2], out[cls, 3] = tpc[first] / (pos[first] + 1), tpc[first] / g[first]


def _nan(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def _ece_kept(
    ece: Callable[[np.ndarray, np.ndarray], MetricResult], p: np.ndarray, y: np.ndarray, keep: np.ndarray | None
) -> dict[str, Any]:
    """ECE of the kept detections (None when none is kept; ``keep`` None: all), with their number."""
    n = len(p) if keep is None else int(keep.sum())
    if keep is not None and n < len(p):
        p, y = p[keep], y[keep]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few kept detections: the run's ECE warnings already say so
        return {"n": n, "ece": float(ece(p, y).value) if n else None}


def _ece_kept_all(
    ece: Callable[[np.ndarray, np.ndarray], MetricResult], p: np.ndarray, y: np.ndarray,
    keeps: list[np.ndarray | None],
) -> list[dict[str, Any]]:  # fmt: skip
    """:func:`_ece_kept` of each of ``keeps``. With a :class:`ConfidenceMetric` on confidence alone, the cell
    statistics are computed in one pass, grouped by which rules keep each detection, and each rule's are the
    sum of its groups: exact integer sums (:class:`~detcal.binning.cells.CellStats`), the same values as one
    pass per rule."""
    given = [k for k in keeps if k is not None]
    if not isinstance(ece, ConfidenceMetric) or ece.use_features or not ece.binned or len(given) > 8:
        return [_ece_kept(ece, p, y, k) for k in keeps]
    group = np.zeros(len(p), np.uint8)
    for bit, rule in enumerate(given):  # bit b: the b-th rule keeps the detection
        group |= np.asarray(rule, np.uint8) << np.uint8(bit)
    n_groups = 1 << len(given)
    stats = ece.stats(p, y, groups=group, n_groups=n_groups)
    del group
    out, bit = [], 0
    for k in keeps:
        if k is None:
            member = np.ones(n_groups, bool)
        else:
            member = (np.arange(n_groups) >> bit & 1).astype(bool)
            bit += 1
        part = stats.take_groups(member).sum_groups()
        n = int(part.n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few kept detections: the run's ECE warnings already say so
            out.append({"n": n, "ece": float(ece.result(part).value) if n else None})
    return out


def operating_points(
    o: DetectionOutcomes,
    names: dict[int, str],
    ece: Callable[[np.ndarray, np.ndarray], MetricResult],
    top_classes: list[int],
    lrp: tuple[dict[int, Any], dict[int, Any], float] | None = None,
    desc: np.ndarray | None = None,
) -> dict[str, Any]:
    """Curves (pooled, and per class for ``top_classes``), F1- and LRP-optimal thresholds per class and pooled,
    and the ECE of the detections kept at each. ``o``: the sample's outcomes (``tau`` its IoU); ``ece``:
    ``(p, y) -> MetricResult`` with the run's ECE settings; ``lrp``: (LRP-optimal threshold per class id, oLRP
    per class id, their TP IoU) to use instead of computing them at ``o.tau``; ``desc``: every detection by
    descending score, ties in input order, when known."""
    cats = o.gt_categories
    ci = o.class_index()
    valid = o.valid
    keep_cls = valid & (ci >= 0)
    y, code = o.tp[keep_cls], ci[keep_cls]  # (their scores are not read: their grid counts are the pooled ones')
    c = len(cats)
    pooled_s, pooled_y = o.score[valid], o.tp[valid]
    # each pooled detection's class (-1: a class without boxes), kept through as the narrowest integers
    ci_n = ci.astype(sort_code_type(c))
    ci_v = ci_n[valid]
    has_class = ci_v >= 0
    j = grid_count(pooled_s)  # the grid points each pooled detection is kept at, shared with the classes
    kept, tps = _counts(None, y, code, c, j[has_class])
    n_gt = o.n_gt.astype(np.int64)
    pk, pt = _counts(pooled_s, pooled_y, None, 1, j)
    del j  # the full-size temporaries released as soon as they are used (the diagnostics' peak memory)
    pooled = pr_curves(pk[0], pt[0], int(n_gt.sum()))
    # the pooled points in descending score order, gathered once: the pooled F1 reads them, and the points
    # with a class are these in the same order (a compress, not a second gather at random)
    if desc is None:
        order = np.argsort(-pooled_s, kind="stable")
        s_desc, y_desc, c_desc = pooled_s[order], pooled_y[order], ci_v[order]
    else:  # the same points from the detections' order, gathered from the full columns (no positions among them)
        order = desc[valid[desc]]
        s_desc, y_desc, c_desc = o.score[order], o.tp[order], ci_n[order]
    thr, f1, prec, rec = _f1_optimal_sorted(s_desc, y_desc, int(n_gt.sum()))
    has_cls = c_desc >= 0
    c_desc = c_desc[has_cls]
    del order, has_class, y, code, ci_n
    per = _class_f1_sorted(s_desc[has_cls], y_desc[has_cls], c_desc, n_gt)
    del s_desc, y_desc, has_cls, c_desc
    if lrp is None:
        table = lrp_table(o)
        lrp_thr, olrp, lrp_tau = np.asarray(table.threshold, float), np.asarray(table.olrp, float), o.tau
    else:
        lrp_thr = np.asarray([_nan(lrp[0].get(int(k))) for k in cats.tolist()], float)
        olrp, lrp_tau = np.asarray([_nan(lrp[1].get(int(k))) for k in cats.tolist()], float), lrp[2]
    f1_keep = pooled_s >= thr if np.isfinite(thr) else None
    cls_thr = per[:, 0]

    def class_keep(th: np.ndarray) -> np.ndarray:
        """Pooled detections at or above their class's threshold (all of a class with NaN or without GT)."""
        t = np.where(ci_v >= 0, th[np.maximum(ci_v, 0)], np.nan) if c else np.full(len(ci_v), np.nan)
        return ~np.isfinite(t) | (pooled_s >= t)

    keeps = [None, f1_keep, class_keep(cls_thr), class_keep(lrp_thr)]
    index = {int(k): i for i, k in enumerate(cats.tolist())}
    curves = {str(k): pr_curves(kept[index[k]], tps[index[k]], int(n_gt[index[k]])) for k in top_classes if k in index}
    return {
        "iou": float(o.tau),
        "grid": GRID.tolist(),
        "lrp_tau": float(lrp_tau),
        "pooled": {**pooled, "f1_optimal": {"threshold": thr, "f1": f1, "precision": prec, "recall": rec}},
        "per_class_curves": curves,
        "per_class": {
            "category": cats.tolist(),
            "name": [names.get(int(k), str(int(k))) for k in cats.tolist()],
            "n_gt": n_gt.tolist(),
            "f1_threshold": per[:, 0].tolist(),
            "f1": per[:, 1].tolist(),
            "precision_at_f1": per[:, 2].tolist(),
            "recall_at_f1": per[:, 3].tolist(),
            "lrp_threshold": lrp_thr.tolist(),
            "olrp": olrp.tolist(),
        },
        "ece_kept": dict(zip(_ECE_RULES, _ece_kept_all(ece, pooled_s, pooled_y, keeps))),
    }
