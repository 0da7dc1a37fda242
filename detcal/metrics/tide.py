"""TIDE error types (Bolya et al., "TIDE: A General Toolbox for Identifying Object Detection Errors", ECCV 2020).

Box mode, with the rules of the authors' package ``tidecv`` 1.0.1, which the
tests equal to 1e-9 (docs/metrics.md#tide):

1. Per image, the detections are sorted by descending score (ties in input
   order) and the first ``max_dets`` (100) are kept. Each, in that order,
   takes the not yet taken non-crowd ground truth of its class with the
   highest IoU (the first such box on ties) when that IoU is at least the
   foreground threshold ``pos`` (0.5): a true positive. An unmatched
   detection whose intersection over its own area with a crowd box of its
   class exceeds ``pos`` is ignored (not in the AP) but still gets an error.
2. Each unmatched detection gets one type, the first that applies:
   ``bkg`` when its image has no non-crowd ground truth; ``loc`` when its
   best same-class IoU lies in ``[bg, pos]``; ``cls`` when its best IoU with
   another class's box is at least ``pos``; ``dupe`` when its best IoU with a
   taken box of its class is at least ``pos``; ``bkg`` when its best IoU with
   any box is at most ``bg`` (0.1); ``both`` otherwise.
3. Each error type is fixed alone (the oracle of the paper): ``cls`` and
   ``loc`` errors whose target box is not taken become true positives (of
   the target's class), one per target box, the highest-scoring; the other
   ``cls``/``loc`` errors and all ``dupe``, ``bkg`` and ``both`` errors are
   removed; a ``miss`` (a non-crowd box neither taken nor the target of a
   ``cls``/``loc`` error) is removed from the ground-truth count. The dAP of a
   type is the mAP after its fix minus the mAP before, at least 0.
   Special errors: ``fp`` (every false positive scored 0, every true positive
   1) and ``fn`` (every missed box removed from the count), not clipped.
4. mAP is the mean over classes with a detection or a box of tidecv's AP:
   precision made non-increasing from the right, read at the 101 recalls
   0, 0.01, ..., 1 (the first point reaching each), times 100. A class with
   detections but no box counts with AP 0. Equal scores are ordered as
   tidecv orders them: by image, then rank, and in a fixed set the errors
   before the untouched true positives.

All vectorised: the greedy matching loops over the rank within an image
(at most ``max_dets`` passes), each pass over every image at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.core.types import Detections, GroundTruth, Images
from detcal.matching.blocks import box_areas
from detcal.metrics.narrow_ints import index_type, narrow_codes, radix_sort, small_sort
from detcal.metrics.score_order import descending_order

__all__ = [
    "ERROR_TYPES",
    "MAIN_ERRORS",
    "SPECIAL_ERRORS",
    "TideResult",
    "tide",
    "LABELS",
    "Scene",
    "scene",
    "scene_match",
]

MAIN_ERRORS: tuple[str, ...] = ("cls", "loc", "both", "dupe", "bkg", "miss")
"""tidecv's main error types, in its order (ClassError, BoxError, OtherError, DuplicateError, BackgroundError,
MissedError)."""
SPECIAL_ERRORS: tuple[str, ...] = ("fp", "fn")
"""tidecv's special error types (FalsePositiveError, FalseNegativeError)."""
ERROR_TYPES: tuple[str, ...] = ("cls", "loc", "both", "dupe", "bkg")
"""The error types a detection can carry (``miss`` belongs to ground truth)."""

# per-detection codes: -1 not evaluated (beyond max_dets or in an unknown image), 0 true positive, 1.. ERROR_TYPES
TP, CLS, LOC, BOTH, DUPE, BKG = 0, 1, 2, 3, 4, 5
LABELS: tuple[str, ...] = ("tp", *ERROR_TYPES)
"""Label of each non-negative per-detection code (``labels[code]``); code -1 is ``""`` (not evaluated)."""

_X = np.arange(101) / 100  # the recall points, as tidecv's x / 100


@dataclass
class TideResult:
    """TIDE at one foreground threshold.

    ``ap`` mAP (percent); ``main``/``special`` dAP per type (percentage points);
    ``counts`` number of errors per main type; ``code [D]`` per-detection code
    (-1 not evaluated, 0 true positive, 1..5 ``ERROR_TYPES``); ``ignored [D]`` unmatched detections inside
    a crowd box of their class; ``target [D]`` the GT row a ``cls``/``loc`` error points at (-1 else);
    ``missed [G]`` the ``miss`` boxes; ``matched_gt [D]`` GT row of each true positive (-1 else).
    """

    ap: float
    main: dict[str, float]
    special: dict[str, float]
    counts: dict[str, int]
    code: np.ndarray
    ignored: np.ndarray
    target: np.ndarray
    missed: np.ndarray
    matched_gt: np.ndarray
    params: dict[str, Any] = field(default_factory=dict)

    def labels(self) -> np.ndarray:
        """Per-detection label strings (``tp``, ``cls``, ..., ``""`` when not evaluated) [D]."""
        names = np.asarray(("", *LABELS), dtype=object)
        return names[self.code + 1]

    def to_dict(self) -> dict[str, Any]:
        """metrics.json ``diagnostics.tide`` (docs/metrics.md#tide)."""
        ev = self.code >= 0
        return {
            **self.params,
            "ap": float(self.ap),
            "dap": {k: float(v) for k, v in self.main.items()},
            "special_dap": {k: float(v) for k, v in self.special.items()},
            "counts": {k: int(v) for k, v in self.counts.items()},
            "n_true_positives": int((self.code == TP).sum()),
            "n_evaluated": int(ev.sum()),
            "n_ignored": int((self.ignored & ev).sum()),
        }


def _seg_argmax(
    val: np.ndarray, start: np.ndarray, count: np.ndarray, seg: np.ndarray | None = None, arg: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Per segment (``start``, ``count`` into ``val``; ``seg`` the segment of each value when known): the
    maximum (0 when empty) and the position of its first occurrence (-1 when empty)."""
    mx = np.zeros(len(start))
    out = np.full(len(start) if arg else 0, -1, np.int64)  # no positions asked: an empty array
    ne = count > 0
    if not ne.any() or len(val) == 0:
        return mx, out
    s = start[ne]
    mx[ne] = np.maximum.reduceat(val, s)
    if not arg:
        return mx, out
    if seg is None:
        seg = np.repeat(np.arange(len(start)), count)
    pos = np.where(val == mx[seg], np.arange(len(val)), len(val))
    out[ne] = np.minimum.reduceat(pos, s)
    return mx, out


def _rank_in_image(img: np.ndarray, desc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank [D] of each detection in its image (``img`` -1: none) by descending score, ties in input order,
    and the detections of known images by image, then rank; ``desc``: every detection by descending score,
    ties in input order."""
    bound = int(img.max()) + 1 if len(img) else 1
    img = narrow_codes(img, bound)  # gathered in score order below: the narrowest codes (same values) stay in cache
    order = desc[img[desc] >= 0] if len(img) and img.min() < 0 else desc  # the detections of known images
    si = img[order]
    order = order[small_sort(si, bound)].astype(index_type(len(img)), copy=False)
    rank = np.full(len(img), -1, order.dtype)  # ranks and rows as int32 when they fit (held with the scene)
    # the images in that order ascend: each image's detections are a run, their ranks 0, 1, ... (no gather of
    # the images in that order)
    counts = np.bincount(si, minlength=bound)
    del si
    rank[order] = np.arange(len(order)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank, order


@dataclass
class _Pairs:
    pd: np.ndarray  # pair -> kept-detection position
    pg: np.ndarray  # pair -> GT row
    start: np.ndarray  # kept detection -> first pair
    count: np.ndarray  # kept detection -> pairs
    iou: np.ndarray
    same: np.ndarray


def _subset(pr: _Pairs, keep: np.ndarray, n: int) -> _Pairs:
    """The pairs where ``keep`` holds, in the same order (``n`` kept detections)."""
    sel = np.flatnonzero(keep)
    pd = pr.pd[sel]
    count = np.bincount(pd, minlength=n) if len(pd) else np.zeros(n, np.int64)
    return _Pairs(pd, pr.pg[sel], np.cumsum(count) - count, count, pr.iou[sel], pr.same[sel])


def _greedy(kr: np.ndarray, pr: _Pairs, pos: float, n_gt: int, classwise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """tidecv's matching, one pass per rank (every image at once): ``kr`` the rank of each kept detection (any
    order), ``pr`` their pairs; ``classwise=False``: every pair counts as one of the same class. Returns GT row
    per kept detection (-1) and the taken flag per GT row.

    Within a pass each image has at most one detection, so the passes see the pairs of one rank each: the
    pairs that can be taken (of one class and reaching ``pos``; every pair when ``pos <= 0``) are put in rank
    order by one stable radix sort (each detection's run of pairs kept, in its order)."""
    used = np.zeros(n_gt, bool)
    got = np.full(len(kr), -1, index_type(n_gt + 1))  # int32 when the GT rows fit (the same values)
    if pos > 0:  # only the pairs of one class reaching pos can be taken (the first maximum stays the first)
        keep = pr.iou >= pos
        sel = np.flatnonzero(keep & pr.same if classwise else keep)
        same = None
    else:
        sel = np.arange(len(pr.pd))
        same = pr.same if classwise else None
    if not len(sel):
        return got, used
    # the candidate pairs taken in their order (a forward read), then put in rank order as compact columns
    pd, pg, iou = pr.pd[sel], pr.pg[sel], pr.iou[sel]
    ok = None if same is None else same[sel]
    del sel
    rk = kr[pd]
    n_rank = int(rk.max()) + 1
    by_rank = small_sort(rk, n_rank)
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rk, minlength=n_rank))])  # each rank's pairs
    del rk
    pd, pg, iou = pd[by_rank], pg[by_rank], iou[by_rank]
    ok = None if ok is None else ok[by_rank]
    del by_rank
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if a == b:
            continue
        d, g = pd[a:b], pg[a:b]
        new = np.concatenate([[True], d[1:] != d[:-1]])  # each detection's run of pairs starts here
        first = np.flatnonzero(new)
        ct = np.diff(np.append(first, b - a))
        free = ~used[g] if ok is None else ok[a:b] & ~used[g]
        val = np.where(free, iou[a:b], 0.0)
        mx, arg = _seg_argmax(val, first, ct, np.cumsum(new) - 1)
        hit = np.flatnonzero(mx >= pos)
        rows = g[arg[hit]]
        got[d[first[hit]]] = rows
        used[rows] = True
    return got, used


_CLASSIFY_BLOCK = 1 << 15
"""Kept detections classified at once by :func:`_classify` (their pairs' temporaries stay in the cache)."""


def _classify(
    pr: _Pairs, got: np.ndarray, used: np.ndarray, has_gt: np.ndarray, pos: float, bg: float,
    block: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Error code and target GT row (for ``cls``/``loc``) of each kept detection (code 0 for a true positive).

    Each detection's code reads only its own pairs (and the GTs' taken flags ``used``), so the detections are
    classified in blocks of ``block`` (:data:`_CLASSIFY_BLOCK`) with their runs of pairs: the same codes and
    targets as all at once."""
    n, block = len(got), block or _CLASSIFY_BLOCK
    code, target = np.empty(n, np.int8), np.empty(n, index_type(len(used) + 1))
    for a in range(0, n, block):
        b = min(a + block, n)
        p0, p1 = int(pr.start[a]), int(pr.start[b - 1] + pr.count[b - 1])  # the block's pairs: one run
        sub = _Pairs(pr.pd[p0:p1] - a, pr.pg[p0:p1], pr.start[a:b] - p0, pr.count[a:b], pr.iou[p0:p1], pr.same[p0:p1])
        code[a:b], target[a:b] = _classify_block(sub, got[a:b], used, has_gt[a:b], pos, bg)
    return code, target


def _classify_block(
    pr: _Pairs, got: np.ndarray, used: np.ndarray, has_gt: np.ndarray, pos: float, bg: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_classify` of one block of kept detections with their own pairs (positions from 0)."""
    if bg > 0 and pos > 0 and not np.isnan(pr.iou).any():
        return _classify_by_flags(pr, got, used, has_gt, pos, bg)
    return _classify_by_maxima(pr, got, used, has_gt, pos, bg)


def _classify_by_maxima(
    pr: _Pairs, got: np.ndarray, used: np.ndarray, has_gt: np.ndarray, pos: float, bg: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_classify_block` from each detection's best IoUs (segment maxima over its pairs)."""
    n = len(got)
    if bg > 0:  # every rule compares a best IoU with bg or pos >= bg: the pairs below bg change no decision
        pr = _subset(pr, pr.iou >= bg, n)
    iou, same = pr.iou, pr.same
    st, ct, sg = pr.start, pr.count, pr.pd
    cls_v, non_v = np.where(same, iou, 0.0), np.where(same, 0.0, iou)
    cls_mx, _ = _seg_argmax(cls_v, st, ct, sg, arg=False)
    non_mx, _ = _seg_argmax(non_v, st, ct, sg, arg=False)
    dup_mx, _ = _seg_argmax(np.where(same & used[pr.pg], iou, 0.0), st, ct, sg, arg=False)
    any_mx = np.maximum(cls_mx, non_mx)  # the best IoU with any box
    code = np.full(n, BOTH, np.int64)
    code[any_mx <= bg] = BKG
    code[dup_mx >= pos] = DUPE
    code[non_mx >= pos] = CLS
    code[(cls_mx >= bg) & (cls_mx <= pos)] = LOC
    code[~has_gt] = BKG
    code[got >= 0] = TP
    target = np.full(n, -1, np.int64)
    loc, cls = code == LOC, code == CLS
    target[loc] = pr.pg[_first_max(cls_v, cls_mx, pr, loc)]
    target[cls] = pr.pg[_first_max(non_v, non_mx, pr, cls)]
    return code, target


class _Flags:
    """Whether each detection has a pair where a condition holds: one cumulative count of the pairs that pass
    (a detection's pairs are one run), read at the ends of each detection's run."""

    def __init__(self, pr: _Pairs) -> None:
        self.start, self.end = pr.start, pr.start + pr.count
        self.count = np.zeros(len(pr.pd) + 1, index_type(len(pr.pd) + 1))

    def any(self, cond: np.ndarray) -> np.ndarray:
        """Per detection: some pair of it where ``cond [P]`` holds."""
        np.cumsum(cond, out=self.count[1:])
        return self.count[self.end] > self.count[self.start]


def _classify_by_flags(
    pr: _Pairs, got: np.ndarray, used: np.ndarray, has_gt: np.ndarray, pos: float, bg: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_classify_block` when ``bg > 0``, ``pos > 0`` and no IoU is NaN: each rule compares a best IoU
    (over the pairs reaching ``bg``, 0 when none) with a positive threshold, which is whether some such pair
    passes it: flags per detection instead of segment maxima, the same codes. The targets are the first
    maxima over the pairs of the ``loc``/``cls`` detections alone (a pair below ``bg`` is below their maximum,
    which reaches ``bg``: never the first maximum)."""
    n, iou, same = len(got), pr.iou, pr.same
    ge_bg = iou >= bg
    same_bg = same & ge_bg
    has = _Flags(pr).any
    code = np.full(n, BOTH, np.int8)  # the codes' own type (as _classify's): the same values, an eighth the writes
    code[~has(iou > bg)] = BKG  # best IoU with any box at most bg
    code[has(same_bg & (iou >= pos) & used[pr.pg])] = DUPE
    code[has(~same & ge_bg & (iou >= pos))] = CLS
    code[has(same_bg) & ~has(same_bg & (iou > pos))] = LOC  # best same-class IoU in [bg, pos]
    code[~has_gt] = BKG
    code[got >= 0] = TP
    target = np.full(n, -1, np.int64)
    for kind, want in ((LOC, True), (CLS, False)):
        rows = np.flatnonzero(code == kind)
        if not len(rows):
            continue
        ct = pr.count[rows]
        first = np.cumsum(ct) - ct
        sel = np.repeat(pr.start[rows] - first, ct) + np.arange(int(ct.sum()))  # their pairs, in order
        val = np.where((same[sel] == want) & ge_bg[sel], iou[sel], 0.0)
        mx = np.maximum.reduceat(val, first)
        hit = np.where(val == np.repeat(mx, ct), sel, len(iou))
        target[rows] = pr.pg[np.minimum.reduceat(hit, first)]
    return code, target


def _first_max(val: np.ndarray, mx: np.ndarray, pr: _Pairs, which: np.ndarray) -> np.ndarray:
    """Pair position of the first maximum ``mx`` of ``val`` over the pairs of each detection in ``which`` (each
    has a pair: its maximum is above 0), looked for among those detections' pairs only."""
    rows = np.flatnonzero(which)
    if not len(rows):
        return np.zeros(0, np.int64)
    ct = pr.count[rows]
    first = np.cumsum(ct) - ct
    sel = np.repeat(pr.start[rows] - first, ct) + np.arange(int(ct.sum()))  # their pairs, in order
    hit = np.where(val[sel] == np.repeat(mx[rows], ct), sel, len(val))
    return np.minimum.reduceat(hit, first)


def _class_order(cls: np.ndarray, n_cls: int) -> np.ndarray:
    """Stable order of the points by class (a radix sort on small codes)."""
    return small_sort(cls, n_cls)


def _ap(cls: np.ndarray, tp: np.ndarray, n_gt: np.ndarray, grouped: bool = False) -> float:
    """tidecv's mAP (percent) of points (class code, true positive) given in the order tidecv visits them
    within a class (descending score, then its tie order), with ``n_gt [C]`` positives per class; ``grouped``:
    the points are already ordered by class.

    Read from the true positives alone: the recall rises only at a true positive, so the first point that
    reaches a recall ``x_k > 0`` is one; and a false positive's precision is below its predecessor's in the
    class, so the largest precision from any such point (or from a class's first point) to the end of its
    class is a true positive's (0 when the class has none). The same precisions, compared, not combined."""
    n_cls = len(n_gt)
    npts = np.bincount(cls, minlength=n_cls)
    if grouped:
        t = np.flatnonzero(tp)
    else:
        order = _class_order(cls, n_cls)
        t = np.flatnonzero(tp[order])  # positions of the true positives among the points ordered by class
    c = (cls[t] if grouped else cls[order[t]]).astype(np.int64)
    return _ap_of_true_positives(t, c, npts, n_gt)


def _ap_kept(
    ends: np.ndarray, keep: np.ndarray, tp: np.ndarray, n_gt: np.ndarray, memo: dict[str, Any] | None = None
) -> float:
    """:func:`_ap` of the points ``keep`` of class-grouped points (``ends [C]`` the end of each class's points),
    true positives ``tp & keep``, without gathering them: a point's place among the kept ones is the count of
    kept points before it, and the true positives' classes are read from the class ends (the positions come in
    ascending order: a search of the ``C`` ends, not a gather of a class per true positive). ``memo``: shared by
    calls with the same ``tp`` (every one kept) and ``n_gt``, whose true positives, classes and recall side
    (:func:`_recall_side`) are then found once."""
    before = np.zeros(len(keep) + 1, index_type(len(keep) + 1))  # int32 when it fits: the same counts
    np.cumsum(keep, out=before[1:])
    if memo:
        ti, c, side = memo["ti"], memo["c"], memo["side"]
    else:
        ti = np.flatnonzero(tp & keep)
        bounds = np.concatenate([[0], ends])
        c = np.repeat(np.arange(len(ends), dtype=np.int64), np.diff(np.searchsorted(ti, bounds)))
        side = _recall_side(c, n_gt)
        if memo is not None:
            memo.update(ti=ti, c=c, side=side)
    t = before[ti]  # the kept points before each true positive: its position among them
    npts = np.diff(before[np.concatenate([[0], ends])])
    return _ap_of_true_positives(t, c, npts, n_gt, side)


def _class_counts(flag: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per class [C], the points where ``flag`` holds among class-grouped points (``ends [C]`` each class's end):
    one cumulative count read at the class ends (int64, the same integers as counting them)."""
    before = np.zeros(len(flag) + 1, np.int64)
    np.cumsum(flag, out=before[1:])
    return np.diff(before[np.concatenate([[0], ends])])


def _ap_true_positives_first(tp_cls: np.ndarray, fp_cls: np.ndarray, n_gt: np.ndarray) -> float:
    """:func:`_ap` of points whose true positives (classes ``tp_cls``) come before the false positives
    (``fp_cls``) in every class: the ``i``-th true positive of a class is its ``i``-th point (no sort)."""
    n_cls = len(n_gt)
    nt = np.bincount(tp_cls, minlength=n_cls)
    return _ap_true_positives_first_counts(nt, nt + np.bincount(fp_cls, minlength=n_cls), n_gt)


def _ap_true_positives_first_counts(nt: np.ndarray, npts: np.ndarray, n_gt: np.ndarray) -> float:
    """:func:`_ap_true_positives_first` from the true positives ``nt`` and the points ``npts`` of each class."""
    n_cls = len(n_gt)
    c = np.repeat(np.arange(n_cls), nt)
    t = (np.cumsum(npts) - npts)[c] + np.arange(len(c)) - (np.cumsum(nt) - nt)[c]
    return _ap_of_true_positives(t, c, npts, n_gt)


def _recall_side(c: np.ndarray, n_gt: np.ndarray) -> tuple[np.ndarray, ...]:
    """What :func:`_ap_of_true_positives` reads from the true positives' classes ``c`` and ``n_gt`` alone (not from
    their positions): per class its true positives and their start, each one's rank in its class, and the
    read points of the 101 recall levels (``idx``, the flat ``b`` and its ``empty`` pieces)."""
    n_cls = len(n_gt)
    nt = np.bincount(c, minlength=n_cls)  # true positives per class
    t_start = np.cumsum(nt) - nt
    rank = np.arange(len(c)) - t_start[c]  # the true positive's place among its class's true positives
    ngt_c = n_gt[c]
    rec = np.divide(rank + 1, ngt_c, out=np.zeros(len(c)), where=ngt_c > 0)
    j = np.searchsorted(_X, rec, "right")  # recall points at or below each true positive's recall
    hist = np.bincount(c * 102 + j, minlength=n_cls * 102).reshape(n_cls, 102)
    idx = np.cumsum(hist, axis=1)[:, :101]  # the true positive reaching x_k (k >= 1), counted in its class
    idx[:, 0] = 0  # x_0 = 0: from the class's first point, whose largest precision onwards is a true positive's
    b = (t_start[:, None] + idx).reshape(-1)
    empty = np.append(b[1:] == b[:-1], b[-1:] == len(c)) if len(b) else np.zeros(0, bool)
    return nt, t_start, rank, idx, b, empty


def _ap_of_true_positives(
    t: np.ndarray, c: np.ndarray, npts: np.ndarray, n_gt: np.ndarray, side: tuple[np.ndarray, ...] | None = None
) -> float:
    """:func:`_ap` from the positions ``t`` of the true positives among the points ordered by class (ascending),
    their classes ``c`` and the points per class ``npts``; ``side``: :func:`_recall_side` of ``c`` and ``n_gt``
    when known."""
    nt, t_start, rank, idx, b, empty = _recall_side(c, n_gt) if side is None else side
    n_cls = len(n_gt)
    start = np.cumsum(npts) - npts
    prec = (rank + 1) / (t - start[c] + 1)
    # precision made non-increasing from the right, read at those true positives: maxima of the pieces between
    # the read points, then a cumulative maximum over the pieces from the right (exact, no arithmetic)
    ext = np.append(prec, -np.inf)
    piece = np.maximum.reduceat(ext, b) if len(b) else np.zeros(0)
    piece = np.where(empty, -np.inf, piece).reshape(n_cls, 101)
    smooth = np.maximum.accumulate(piece[:, ::-1], axis=1)[:, ::-1]
    reached = idx < nt[:, None]
    reached[:, 0] = npts > 0
    y = np.where(reached, np.maximum(smooth, 0.0), 0.0)
    ap = np.where(n_gt > 0, y.sum(axis=1) / 101 * 100, 0.0)
    live = (npts > 0) | (n_gt > 0)
    return float(ap[live].mean()) if live.any() else 0.0  # nothing left to average (tidecv divides by 0)


_CHUNK = 1 << 17
"""Pairs examined at once in :func:`_kept_pairs` (their temporaries stay in the processor's cache)."""


@dataclass
class _Side:
    """One side of the pairs: ``box [N,4]`` (xyxy), ``wh`` (for :func:`~detcal.matching.blocks.box_areas`) and
    the dense class ``cat [N]``; the kept detections read their rows here block by block."""

    box: np.ndarray
    wh: np.ndarray | None
    cat: np.ndarray

    def columns(self, rows: np.ndarray | slice) -> tuple[np.ndarray, ...]:
        """x1, y1, x2, y2, area of ``rows`` (an index array or a slice: a run of rows read in place) as contiguous
        columns (area as ``box_areas``, row by row: the same values as over every row)."""
        if isinstance(rows, slice):
            b, wh = np.asarray(self.box[rows], np.float64), None if self.wh is None else self.wh[rows]
        else:  # take: far quicker than b[rows] on rows of 4
            b = np.asarray(np.take(self.box, rows, axis=0), np.float64)
            wh = None if self.wh is None else np.take(self.wh, rows, axis=0)
        area = box_areas(b, wh)
        return (*(np.ascontiguousarray(b[:, k]) for k in range(4)), area)


def _kept_pairs(
    kd: np.ndarray, img_k: np.ndarray, det: _Side, gsel: np.ndarray, gt_img: np.ndarray, gt: _Side, n_img: int,
    crowd: bool, overlap_only: bool,
) -> _Pairs:  # fmt: skip
    """Pairs of the kept detections ``kd`` (``img_k`` their images) with the selected GT rows ``gsel`` of their
    image (GT rows in input order within each detection's run) and their IoU, as pycocotools ``bbIou`` (crowd:
    over the detection's area). ``overlap_only``: only the pairs that overlap (exact whenever every rule needs an
    IoU above 0). The detections' boxes are read in blocks of whole kept detections with about :data:`_CHUNK`
    pairs each (each pair computed alone: the same values as all at once); when at most half the detections
    have a box in their image (crowd boxes), only those go through the blocks. Positions, rows and counts are
    int32 when they fit (the same values, half the memory held through the diagnostics)."""
    idx = index_type(max(len(kd), len(gt.cat)))
    gi = gt_img[gsel]
    g_rows = gsel[np.argsort(gi, kind="stable")].astype(idx)  # the selected boxes in image order
    gcount = np.bincount(gi, minlength=n_img)
    gstart = np.cumsum(gcount) - gcount
    n = gcount[img_k]
    some = np.flatnonzero(n) if 2 * np.count_nonzero(n) <= len(n) else None  # few with a box: those alone
    k_img, k_det = (img_k, kd) if some is None else (img_k[some], kd[some])
    if some is not None:
        n = n[some]
    gfirst = gstart[k_img]  # each kept detection's first box
    ends = np.cumsum(n)
    steps = np.arange(_CHUNK, int(ends[-1]) if len(ends) else 0, _CHUNK)
    cuts = np.concatenate([[0], np.searchsorted(ends, steps, "right"), [len(k_det)]])
    cuts = cuts[np.concatenate([[True], cuts[1:] > cuts[:-1]])]  # ascending already: drop the repeats
    gc = gt.columns(g_rows)
    gcat = gt.cat[g_rows]
    asc = len(k_det) < 2 or bool(np.all(k_det[1:] > k_det[:-1]))  # a block of consecutive rows: read in place
    parts = [
        _pair_block(k_det, a, b, n, ends, gfirst, det, gc, gcat, g_rows, crowd, overlap_only, asc)
        for a, b in zip(cuts, cuts[1:])
    ]
    # each column joined, then its blocks released (peak memory: the blocks and one joined column at a time)
    empty = [np.zeros(0, t) for t in (idx, idx, np.float64, np.bool_)]
    cols: list[list[np.ndarray] | None] = [list(c) for c in zip(*parts)] if parts else [[e] for e in empty]
    del parts
    pd, pg, iou, same = (_join(cols, k) for k in range(4))
    count = _join(cols, 4) if len(cols) > 4 else np.zeros(len(k_det), idx)
    if some is not None:  # back to the positions among every kept detection
        pd = some.astype(idx)[pd]
        count_all = np.zeros(len(kd), idx)
        count_all[some] = count
        count = count_all
    # offsets into every pair: int64, the pairs may outnumber the int32 rows and GT
    return _Pairs(pd, pg, np.cumsum(count, dtype=np.int64) - count, count, iou, same)


def _join(cols: list[list[np.ndarray] | None], k: int) -> np.ndarray:
    """The blocks of column ``k`` joined; the blocks released."""
    parts, cols[k] = cols[k], None
    assert parts is not None
    return np.concatenate(parts)


def _pair_block(
    kd: np.ndarray, a: int, b: int, n: np.ndarray, ends: np.ndarray, gfirst: np.ndarray, det: _Side,
    gc: tuple[np.ndarray, ...], gcat: np.ndarray, g_rows: np.ndarray, crowd: bool, overlap_only: bool,
    asc: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The pairs of kept detections ``a:b``: (kept-detection position, GT row, IoU, same class) and the number
    of pairs of each of those detections; ``asc``: ``kd`` strictly ascending (a block whose rows are consecutive
    is then read in place, every row of it, no gather)."""
    nb = n[a:b]
    p0 = int(ends[a - 1]) if a else 0
    total = int(ends[b - 1]) - p0 if b > a else 0
    rows: np.ndarray | slice
    if asc and b > a and int(kd[b - 1]) - int(kd[a]) == b - a - 1:  # the rows kd[a:b] are a run
        live, rows, nl = None, slice(int(kd[a]), int(kd[a]) + b - a), nb  # np.repeat skips the rows without a pair
    else:
        live = np.flatnonzero(nb)  # the block's detections with a pair (only their boxes are read)
        rows, nl = kd[a + live], nb[live]
    dc = det.columns(rows)
    pd = np.repeat(np.arange(len(nl)), nl)  # position among them
    # each pair's box: its image's first box plus the pair's place in the detection's run
    within = np.repeat(gfirst[a:b] - (ends[a:b] - nb), nb)
    within += np.arange(p0, p0 + total)
    iw = np.minimum(np.repeat(dc[2], nl), gc[2][within])  # np.repeat: dc[k][pd], without the gather
    iw -= np.maximum(np.repeat(dc[0], nl), gc[0][within])
    if overlap_only:  # the x overlap first: most pairs end here
        sel = np.flatnonzero(iw > 0)
        pd, within, iw = pd[sel], within[sel], iw[sel]
    ih = np.minimum(dc[3][pd], gc[3][within])
    ih -= np.maximum(dc[1][pd], gc[1][within])
    if overlap_only:  # the pairs left overlap in x: those that overlap in y too, and no mask below (the same values)
        sel = np.flatnonzero(ih > 0)
        pd, within, iw, ih = pd[sel], within[sel], iw[sel], ih[sel]
        inter = np.multiply(iw, ih, out=iw)
        da = dc[4][pd]
        iou = inter / (da if crowd else da + gc[4][within] - inter)
    else:
        ok = (iw > 0) & (ih > 0)
        inter = np.where(ok, iw * ih, 0.0)
        da = dc[4][pd]
        union = da if crowd else da + gc[4][within] - inter
        iou = np.zeros(len(inter))
        np.divide(inter, union, out=iou, where=ok)
    same = det.cat[rows][pd] == gcat[within]
    idx = g_rows.dtype  # the positions' and counts' integers (as the GT rows')
    if live is None:
        count = np.bincount(pd, minlength=b - a).astype(idx)
        return (pd + a).astype(idx), g_rows[within], iou, same, count
    count = np.zeros(b - a, idx)
    count[live] = np.bincount(pd, minlength=len(live))
    return (live + a).astype(idx)[pd], g_rows[within], iou, same, count


@dataclass
class Scene:
    """Detections paired with the boxes of their image, shared by :func:`tide` and the class-agnostic matching
    of :mod:`detcal.metrics.confusion`: ``rank [D]`` in the image (-1 in an unknown image), ``kd [K]`` the
    detections within ``max_dets``, by image then row; ``pr`` their pairs with non-crowd boxes and ``cr`` with
    crowd boxes (only overlapping pairs when ``overlap_only``); ``has_gt [K]`` the image has a non-crowd box;
    ``desc [D]`` every detection by descending score, ties in input order; ``rows_by_image``: the kept
    detections' rows run image after image in ``images`` order (a file written image after image), so equal
    scores in row order are in tidecv's (image, rank) order."""

    max_dets: int
    overlap_only: bool
    d_img: np.ndarray
    rank: np.ndarray
    kd: np.ndarray
    dcat: np.ndarray
    gcat: np.ndarray
    n_cls: int
    plain: np.ndarray
    pr: _Pairs
    cr: _Pairs
    has_gt: np.ndarray
    desc: np.ndarray
    score: np.ndarray
    by_image: np.ndarray
    released: bool = False
    all_kept: bool = False  # ``kd`` is every detection in row order (``arange(D)``: read and written as is)
    rows_by_image: bool = False  # the kept detections' rows run image after image (in ``images`` order)

    def spread(self, values: np.ndarray, fill: Any) -> np.ndarray:
        """``values [K]`` of the kept detections as a column over every detection [D] (``fill`` elsewhere; the
        dtype of ``values``); ``values`` itself when every detection is kept in row order (no scatter)."""
        if self.all_kept and len(values) == len(self.rank):
            return values
        out = np.full(len(self.rank), fill, values.dtype)
        out[self.kd] = values
        return out

    def of_kept(self, column: np.ndarray) -> np.ndarray:
        """``column [D]`` at the kept detections [K] (``column`` itself, read-only use, when every one is kept)."""
        return column if self.all_kept and len(column) == len(self.kd) else column[self.kd]

    def release_pairs(self) -> None:
        """Drop what only the matchings read (the pairs, ``kd``, ``rank``, ``d_img``, ``has_gt``): the memory
        goes back while the order columns stay for :func:`tide`'s AP; the scene can no longer be matched."""
        none = np.zeros(0, np.int32)
        self.pr = self.cr = _Pairs(none, none, none, none, np.zeros(0), np.zeros(0, bool))
        self.kd = self.rank = self.d_img = none
        self.has_gt = np.zeros(0, bool)
        self.released = True


def scene(
    images: Images, gt: GroundTruth, dets: Detections, max_dets: int = 100, overlap_only: bool = True,
    desc: np.ndarray | None = None,
) -> Scene:  # fmt: skip
    """The :class:`Scene` of ``dets`` against ``gt`` (images in ``images`` order); ``desc``: every detection by
    descending score, ties in input order (:func:`~detcal.metrics.score_order.descending_order`), when known."""
    n_img, nd = len(images), len(dets)
    d_img, g_img = narrow_codes(images.index_of(dets.image_id), n_img), images.index_of(gt.image_id)
    g_ok = g_img >= 0
    if desc is None:  # one sort of the scores, shared by every later order (and by OCE)
        desc = descending_order(dets.score)
    rank, by_image = _rank_in_image(d_img, desc)
    kd = np.flatnonzero((rank >= 0) & (rank < max_dets)).astype(rank.dtype, copy=False)
    every = len(kd) == nd  # ascending and every row: kd is arange(D), its gathers and scatters are the columns
    by_rows = True  # the kept rows already by image (a file written image after image)
    if len(kd):  # by image, then row: the boxes of each image read together (in row order for most files)
        ki = d_img if every else d_img[kd]
        if np.any(ki[1:] < ki[:-1]):  # not already by image
            kd, every, by_rows = kd[small_sort(ki, int(ki.max()) + 1)], False, False
        del ki
    cat_all, n_cls = _codes(dets.category, gt.category)
    dcat, gcat = narrow_codes(cat_all[:nd], n_cls), cat_all[nd:].copy()
    del cat_all
    crowd = np.asarray(gt.iscrowd, bool)
    plain = ~crowd & g_ok
    g_safe = np.where(g_ok, g_img, 0)
    det, gside = _Side(dets.box, dets.wh, dcat), _Side(gt.box, gt.wh, gcat)
    img_k = narrow_codes(d_img if every else d_img[kd], n_img)  # the kept detections' images (narrow, held)
    pr = _kept_pairs(kd, img_k, det, np.flatnonzero(plain), g_safe, gside, n_img, False, overlap_only)
    cr = _kept_pairs(kd, img_k, det, np.flatnonzero(crowd & g_ok), g_safe, gside, n_img, True, True)
    has_gt = np.bincount(g_img[plain], minlength=n_img)[img_k] > 0 if n_img else np.zeros(len(kd), bool)
    del img_k
    return Scene(
        int(max_dets),
        overlap_only,
        d_img,
        rank,
        kd,
        dcat,
        gcat,
        n_cls,
        plain,
        pr,
        cr,
        has_gt,
        desc,
        dets.score,
        by_image,
        all_kept=every,
        rows_by_image=by_rows,
    )


def scene_match(
    sc: Scene, iou: float, classwise: bool = True, best: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """tidecv's greedy matching at ``iou`` on a scene, per class or (``classwise=False``) across classes.
    Returns per kept detection (``sc.kd`` order): the GT row taken (-1), ignored (unmatched, over ``iou`` of
    its own area inside a crowd box, of its class when ``classwise``), and (``best``) its best IoU with any box
    (crowd boxes by intersection over the detection's area)."""
    if sc.released:
        raise ValueError("scene_match: the scene's pairs were released (Scene.release_pairs); build a new scene")
    got, _ = _greedy(sc.of_kept(sc.rank), sc.pr, iou, len(sc.gcat), classwise)
    ign = np.zeros(len(sc.kd), bool)
    hit = (sc.cr.same if classwise else True) & (sc.cr.iou > iou)
    ign[sc.cr.pd[hit]] = True
    ign &= got < 0
    if not best:
        return got, ign, None
    bp = _seg_max(sc.pr.iou, sc.pr.start, sc.pr.count)
    d = sc.cr.pd  # the few crowd pairs: their detections' maxima raised in place (a maximum is exact)
    if len(d):
        first = np.flatnonzero(np.concatenate([[True], d[1:] != d[:-1]]))  # each detection's run of pairs
        at = d[first]
        bp[at] = np.maximum(bp[at], np.maximum.reduceat(sc.cr.iou, first))
    return got, ign, bp


def _seg_max(val: np.ndarray, start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """:func:`_seg_argmax`'s maxima (0 when empty) of segments that tile ``val`` in order: one reduction over
    every segment up to the last with a value (the empty ones masked), no gather or scatter of the others."""
    mx = np.zeros(len(start))
    m = int(np.searchsorted(start, len(val), "left"))  # from here on every segment is empty
    if len(val) == 0 or m == 0:
        return mx
    np.maximum.reduceat(val, start[:m], out=mx[:m])
    mx[:m][count[:m] == 0] = 0.0  # an empty segment reads its successor's first value
    return mx


def tide(
    images: Images,
    gt: GroundTruth,
    dets: Detections,
    *,
    pos_threshold: float = 0.5,
    background_threshold: float = 0.1,
    max_dets: int = 100,
    paired: Scene | None = None,
    release: bool = False,
) -> TideResult:
    """TIDE error dAPs and per-detection error types of ``dets`` against ``gt`` (box mode, tidecv 1.0.1's rules;
    module docstring). Crowd boxes (``gt.iscrowd``) are tidecv's ignore regions; images are taken in
    ``images`` order. ``paired``: a :func:`scene` of the same inputs to reuse; ``release``: its pairs are
    released once matched (:meth:`Scene.release_pairs`; peak memory), when no later matching needs them.
    ``code`` is int8, ``target`` and ``matched_gt`` int32 when the GT rows fit (the same values)."""
    pos, bg = float(pos_threshold), float(background_threshold)
    sparse = bg > 0 and pos > 0  # no rule then looks at a pair without overlap
    sc = paired
    if sc is None or sc.max_dets != max_dets or (sc.overlap_only and not sparse):
        sc = scene(images, gt, dets, max_dets, overlap_only=sparse)
    nd, ng = len(dets), len(gt)
    got, ign_k, _ = scene_match(sc, pos, best=False)
    used = np.zeros(ng, bool)
    used[got[got >= 0]] = True
    code_k, target_k = _classify(sc.pr, got, used, sc.has_gt, pos, bg)
    gcat = sc.gcat
    code = sc.spread(code_k.astype(np.int8, copy=False), -1)  # the kept detections' columns over every detection
    g_idx = index_type(ng + 1)
    target, ignored = sc.spread(target_k.astype(g_idx, copy=False), -1), sc.spread(ign_k, False)
    matched = sc.spread(got.astype(g_idx, copy=False), -1)
    del code_k, target_k, ign_k, got  # the kept detections' copies (peak memory)
    # the oracle fixes: one cls/loc error per untaken target box, the highest-scoring (lowest rank) one
    err = np.flatnonzero(target >= 0)
    err = err[~used[target[err]]]
    err = err[np.lexsort((sc.rank[err], target[err]))]
    if release and sc is paired:
        sc.release_pairs()
    fixable = np.zeros(nd, bool)
    if len(err):
        first = np.concatenate([[True], target[err][1:] != target[err][:-1]])
        fixable[err[first]] = True
    usable = np.zeros(ng, bool)
    usable[target[err]] = True
    missed = sc.plain & ~used & ~usable
    fn = sc.plain & ~used
    n_gt = np.bincount(gcat[sc.plain], minlength=sc.n_cls)
    res = _fixes(sc, code, ignored, fixable, target, n_gt, missed, fn)
    counts = {name: int((code == i + 1).sum()) for i, name in enumerate(ERROR_TYPES)}
    counts["miss"] = int(missed.sum())
    params = {"pos_threshold": pos, "background_threshold": bg, "max_dets": int(max_dets)}
    return TideResult(res[0], res[1], res[2], counts, code, ignored, target, missed, matched, params)


def _codes(dcat: np.ndarray, gcat: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense class codes of detections then GT (in the order of the ids), and their number."""
    both = np.concatenate([np.asarray(dcat, np.int64), np.asarray(gcat, np.int64)])
    if len(both) and both.min() >= 0 and both.max() < 4 * len(both) + 100_000:  # small ids: a lookup table
        present = np.zeros(int(both.max()) + 1, np.int64)
        present[both] = 1
        table = np.cumsum(present) - 1
        return table[both], int(table[-1]) + 1
    uniq, inv = np.unique(both, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(uniq)


def grid_count(v: np.ndarray) -> np.ndarray:
    """Number of the points ``k / 100`` (k = 0..100) at or below each value (as ``searchsorted(..., "right")``
    on them, exact): the floor of ``100 v`` corrected by one comparison either side."""
    x = np.nan_to_num(v) * 100
    if x.dtype.kind == "f":  # floored and clipped in place (the same values)
        j0 = np.clip(np.floor(x, out=x), 0, 100, out=x).astype(np.int64)
    else:
        j0 = np.clip(np.floor(x), 0, 100).astype(np.int64)
    del x
    up = np.minimum(j0 + 1, 100)
    return j0 + (_X[j0] <= v) + ((j0 < 100) & (_X[up] <= v))


def _visit_order(
    sc: Scene, kept: np.ndarray, every: bool, by_score: np.ndarray, run: np.ndarray, n_run: int
) -> np.ndarray:
    """The kept detections ``by_score`` (descending score, ties in row order; ``run`` their score runs) with the
    ties in tidecv's visiting order: by image, then rank. The kept detections in that order (the scene's), stably
    sorted by their score run (16-bit radix passes: the runs come in image order, far from sorted; the same order
    as a stable sort of run * n_img + image), read in image order: its runs are again ``run``."""
    run_of = np.empty(len(kept), run.dtype)
    run_of[by_score] = run
    visit = sc.by_image if every and len(sc.by_image) == len(kept) else sc.by_image[kept[sc.by_image]]  # image, rank
    return visit[radix_sort(run_of[visit], n_run)]


def _fixes(
    sc: Scene, code: np.ndarray, ignored: np.ndarray, fixable: np.ndarray, target: np.ndarray, n_gt: np.ndarray,
    missed: np.ndarray, fn: np.ndarray,
) -> tuple[float, dict[str, float], dict[str, float]]:  # fmt: skip
    """The mAP, each main type's dAP (fixed alone, clipped at 0) and the special dAPs."""
    gcat, n_cls = sc.gcat, sc.n_cls
    tp = code == TP
    fp = (code > TP) & ~ignored  # false positives in the AP (ignored ones are not)
    kept = code >= 0
    every = bool(kept.all()) and len(sc.desc) == len(kept)  # every detection kept: the orders as they are
    by_score = (
        sc.desc if every else sc.desc[kept[sc.desc]]
    )  # descending score; ties in input order, made (image, rank) below
    sv = sc.score[by_score]
    run = np.cumsum(np.concatenate([[0], sv[1:] != sv[:-1]])) if len(sv) else np.zeros(0, np.int64)
    del sv
    n_run = int(run[-1]) + 1 if len(run) else 1
    # the columns gathered in score order, as the narrowest integers that hold them (the same values): the
    # gathers then read a quarter of the memory, which stays in the processor's cache on large sets
    dcat, code, run = narrow_codes(sc.dcat, n_cls), code.astype(np.int8, copy=False), narrow_codes(run, 2 * n_run)
    if not sc.rows_by_image:
        by_score = _visit_order(sc, kept, every, by_score, run, n_run)
    # else the kept rows run image after image, and an image's equal scores in rank order are in row order: the
    # rows of a score run by (image, rank) are in row order, as ``by_score`` has them (the same permutation)
    # in a fixed set the errors come before the untouched true positives of the same score
    fixed_order = by_score[small_sort(run * 2 + tp[by_score], 2 * n_run)]
    del run
    live = tp | fp
    rows = by_score[live[by_score]]
    del by_score, live
    ap = _ap(dcat[rows], tp[rows], n_gt)
    del rows
    f_cat = dcat[fixed_order]
    grouped = fixed_order[_class_order(f_cat, n_cls)]  # by class, each in tidecv's order
    n_of = np.bincount(f_cat, minlength=n_cls)
    del f_cat
    fixed_cls = dcat.copy()
    fixed_cls[fixable & (code == CLS)] = gcat[target[fixable & (code == CLS)]]  # a fixed cls error takes the box's
    # the grouped points' columns, taken once (each fix below reads them through a mask): their classes are the
    # classes in order, each repeated (read from the class ends ``g_ends``); the code and the three flags (codes
    # 0..5 for points that are kept) are packed in one byte and gathered once, then unpacked
    g_ends = np.cumsum(n_of)
    packed = code.view(np.uint8) | (tp.view(np.uint8) << 3) | (fp.view(np.uint8) << 4) | (fixable.view(np.uint8) << 5)
    g_packed = packed[grouped]
    del packed
    g_code, g_tp, g_fp, g_fix = g_packed & 7, (g_packed & 8) > 0, (g_packed & 16) > 0, (g_packed & 32) > 0
    del g_packed

    def fixed(kind: int | None, n_gt_fixed: np.ndarray) -> float:
        """mAP with the errors of ``kind`` fixed alone (tidecv's oracle)."""
        if kind == CLS:  # the fixed errors change class: group again
            now_tp = tp | ((code == kind) & fixable)
            keep = tp | (fp & (code != kind)) | now_tp
            r = fixed_order[keep[fixed_order]]
            return _ap(fixed_cls[r], now_tp[r], n_gt_fixed)
        if kind is None:
            return _ap_kept(g_ends, g_tp | g_fp, g_tp, n_gt_fixed)
        same = g_code == kind
        now = g_tp | (same & g_fix) if kind == LOC else g_tp
        # both, dupe, bkg: the same true positives (every one kept) and boxes: their side found once
        memo = shared if kind != LOC and n_gt_fixed is n_gt else None
        return _ap_kept(g_ends, now | (g_fp & ~same), now, n_gt_fixed, memo)

    shared: dict[str, Any] = {}

    main: dict[str, float] = {}
    for i, name in enumerate(ERROR_TYPES):
        main[name] = max(fixed(i + 1, n_gt) - ap, 0.0)
    shared.clear()  # the shared recall side released (peak memory)
    n_miss = np.bincount(gcat[missed], minlength=n_cls)
    main["miss"] = max(fixed(None, n_gt - n_miss) - ap, 0.0)
    # fp: every false positive scored 0 and every true positive 1: in each class its true positives come first
    # (all at precision 1, in any order), then its false positives
    # (each class's true and false positives counted from the class-grouped points: one cumulative count each)
    special = {
        "fp": _ap_true_positives_first_counts(_class_counts(g_tp, g_ends), _class_counts(g_tp | g_fp, g_ends), n_gt)
        - ap
    }
    special["fn"] = fixed(None, n_gt - np.bincount(gcat[fn], minlength=n_cls)) - ap
    return ap, main, special
