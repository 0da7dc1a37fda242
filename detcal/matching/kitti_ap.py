"""The KITTI object devkit's assignment, detection by detection, and KITTI AP.

The official devkit (``evaluate_object.cpp``, Geiger et al. 2012) evaluates
one class at a time (Car, Pedestrian, Cyclist; here any category) and one
difficulty at a time. Per image it prepares (``cleanData``):

* ground truth of the class (``ignored_gt = 0``, or ``1`` when outside the
  difficulty), of its neighbour class (Van for Car, Person_sitting for
  Pedestrian: ``ignored_gt = 1``); every other box is skipped (``-1``);
  DontCare boxes are kept apart as regions;
* detections: ``int(|y2 - y1|) < MIN_HEIGHT`` -> ``ignored_det = 1`` whatever
  their class (so a small detection of *another* class can be claimed too),
  else ``0`` for the class, ``-1`` for other classes.

``computeStatistics`` then walks the ground truth **in label-file order**
(rows of :class:`GroundTruth` in their order within an image) and gives each
box (ignored ones included) one still-free detection with ``ignored_det``
0 or 1, score not below the score threshold, and overlap ``> t`` (strict):

* PR pass (``compute_fp = true``, the per-detection outcome): the ``ignored_det
  == 0`` detection of highest overlap (first in results-file order on a tie);
  only when there is none, the *first* (file order) ``ignored_det == 1`` one;
* recall pass (``compute_fp = false``, used once by ``eval_class`` to pick the
  score thresholds of the PR curve): the candidate of highest score (first in
  file order on a tie), small detections included.

A detection taken by an ignored box, or a small one, is ignored; taken by a
valid box it is a TP; a free ``ignored_det == 0`` detection whose
intersection over its own area with a DontCare region exceeds ``t`` is
ignored; the rest are FP. Nothing depends on the scores except the score
threshold, so the outcome of a detection depends on which other detections
pass it: :func:`detcal.matching.match` (``mode="kitti"``) gives the outcome
at its ``score_threshold`` (default 0, the devkit's default ``thresh``).

Implementation: the walk is sequential within one (class, image) group
only, so every group advances in lockstep, one vectorised step per position
in the label file (at most the largest number of boxes of one class and its
neighbour in one image), for all IoU thresholds, or all score thresholds of
the PR curve, at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_DIFFICULTY, Detections, GroundTruth, KittiRules
from detcal.matching.blocks import dontcare_ioa, expand, factorize, paired_iou, segment_starts

NO_DETECTION: float = -10000000.0
"""The devkit's ``NO_DETECTION``: a score must exceed it in the recall pass."""

N_SAMPLE_PTS: int = 41
"""Recall sample points of the devkit's PR curve (0, 1/40, ..., 1)."""

_PAIR_CHUNK = 1 << 22  # (box, detection) pairs built per chunk


def detection_min_height_ignored(box: np.ndarray, min_height: float) -> np.ndarray:
    """The devkit's ``ignored_det = 1`` test: ``int(|y2 - y1|) < MIN_HEIGHT`` (height truncated to an int)."""
    return np.trunc(np.abs(box[:, 3] - box[:, 1])) < min_height


@dataclass
class _Walk:
    """(class, image) groups of a devkit walk: box slots, candidate slots and their overlapping pairs."""

    gt_row: np.ndarray  # [Gs] GroundTruth row of each box slot
    gt_ign: np.ndarray  # [Gs] ignored_gt == 1
    gt_cls: np.ndarray  # [Gs] index into classes
    cand_row: np.ndarray  # [Cs] Detections row of each candidate slot
    cand_small: np.ndarray  # [Cs] ignored_det == 1
    cand_own: np.ndarray  # [Cs] detection of the group's class
    cand_cls: np.ndarray  # [Cs]
    pair_gt: np.ndarray  # [P] box slot, pairs ordered (label position, box slot, candidate file order)
    pair_cand: np.ndarray  # [P]
    pair_iou: np.ndarray  # [P]
    step: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # [K+1] pair offsets per label position


def _build(
    dets: Detections,
    gt: GroundTruth,
    classes: np.ndarray,
    neighbours: dict[int, tuple[int, ...]],
    dontcare: int | None,
    gt_ignored: np.ndarray,
    cand_mask: np.ndarray,
    small: np.ndarray,
    min_thr: np.ndarray,
) -> _Walk:
    """Slots and pairs of the walk for ``classes`` (pairs with overlap ``<= min_thr`` of their class dropped)."""
    g_parts, c_parts = [], []
    for ci, c in enumerate(classes.tolist()):  # loop over classes
        own = gt.category == c
        nb = np.isin(gt.category, np.asarray(neighbours.get(c, ()), np.int64))
        keep = own | nb
        if dontcare is not None:
            keep &= gt.category != dontcare
        sel = np.flatnonzero(keep)
        g_parts.append((sel, nb[sel] | gt_ignored[sel], np.full(len(sel), ci, np.int64)))
        dsel = np.flatnonzero(cand_mask & ((dets.category == c) | small))
        c_parts.append((dsel, small[dsel], dets.category[dsel] == c, np.full(len(dsel), ci, np.int64)))
    gt_row, gt_ign, gt_cls = (
        np.concatenate([p[i] for p in g_parts]) if g_parts else np.zeros(0, np.int64) for i in range(3)
    )
    cand_row, cand_small, cand_own, cand_cls = (
        np.concatenate([p[i] for p in c_parts]) if c_parts else np.zeros(0, np.int64) for i in range(4)
    )
    gt_ign, cand_small, cand_own = gt_ign.astype(bool), cand_small.astype(bool), cand_own.astype(bool)

    img, n_img = factorize(np.concatenate([gt.image_id[gt_row], dets.image_id[cand_row]]))
    g_grp = gt_cls * max(n_img, 1) + img[: len(gt_row)]
    c_grp = cand_cls * max(n_img, 1) + img[len(gt_row) :]
    go = np.lexsort((gt_row, g_grp))  # group, then label-file order
    co = np.lexsort((cand_row, c_grp))  # group, then results-file order
    gt_row, gt_ign, gt_cls, g_grp = gt_row[go], gt_ign[go], gt_cls[go], g_grp[go]
    cand_row, cand_small, cand_own, cand_cls, c_grp = (
        cand_row[co],
        cand_small[co],
        cand_own[co],
        cand_cls[co],
        c_grp[co],
    )

    n_grp = int(max(g_grp.max(initial=-1), c_grp.max(initial=-1))) + 1
    ccount = np.bincount(c_grp, minlength=n_grp)
    cstart = np.cumsum(ccount) - ccount
    gstart = segment_starts(g_grp)
    pos = np.arange(len(g_grp), dtype=np.int64) - np.repeat(gstart, np.diff(np.append(gstart, len(g_grp))))

    cnt = ccount[g_grp] if len(g_grp) else np.zeros(0, np.int64)
    pg_parts, pc_parts, pi_parts = [], [], []
    csum = np.cumsum(cnt)
    lo = 0
    while lo < len(g_grp):  # chunks of boxes (bounded memory), not a loop over detections
        hi = int(np.searchsorted(csum, (csum[lo - 1] if lo else 0) + _PAIR_CHUNK, side="right"))
        hi = max(hi, lo + 1)
        gs = np.arange(lo, hi)
        pg = np.repeat(gs, cnt[gs])
        pc = expand(cstart[g_grp[gs]], cnt[gs])
        iou = paired_iou(dets.box[cand_row[pc]].T, gt.box[gt_row[pg]].T, np.zeros(len(pc), bool))
        k = iou > min_thr[gt_cls[pg]]
        pg_parts.append(pg[k])
        pc_parts.append(pc[k])
        pi_parts.append(iou[k])
        lo = hi
    pair_gt = np.concatenate(pg_parts) if pg_parts else np.zeros(0, np.int64)
    pair_cand = np.concatenate(pc_parts) if pc_parts else np.zeros(0, np.int64)
    pair_iou = np.concatenate(pi_parts) if pi_parts else np.zeros(0)
    order = np.argsort(pos[pair_gt], kind="stable")  # pairs are already (box slot, candidate order)
    pair_gt, pair_cand, pair_iou = pair_gt[order], pair_cand[order], pair_iou[order]
    n_steps = int(pos.max(initial=-1)) + 1
    step = np.searchsorted(pos[pair_gt], np.arange(n_steps + 1), side="left")
    return _Walk(gt_row, gt_ign, gt_cls, cand_row, cand_small, cand_own, cand_cls, pair_gt, pair_cand, pair_iou, step)


def _run(w: _Walk, thr_cls: np.ndarray, cand_ok: np.ndarray, by_score: np.ndarray | None = None) -> np.ndarray:
    """One devkit walk for R rows at once; returns the candidate slot each box slot took [R,Gs] (-1 none).

    ``thr_cls`` [R or 1, C]: IoU threshold per class; ``cand_ok`` [R or 1, Cs]:
    candidates that pass the score threshold. ``by_score`` None: PR pass
    (highest overlap among ``ignored_det == 0``, else the first small one);
    else the candidate scores [Cs] for the recall pass (highest score).
    """
    R = max(thr_cls.shape[0], cand_ok.shape[0])
    taken = np.zeros((R, len(w.cand_row)), bool)
    chosen = np.full((R, len(w.gt_row)), -1, np.int64)
    for k in range(len(w.step) - 1):  # label-file position: every (class, image) group in lockstep
        p0, p1 = int(w.step[k]), int(w.step[k + 1])
        if p0 == p1:
            continue
        g, c, iou = w.pair_gt[p0:p1], w.pair_cand[p0:p1], w.pair_iou[p0:p1]
        n = p1 - p0
        starts = segment_starts(g)
        seg = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
        idx = np.arange(n)
        ok = (iou > thr_cls[:, w.gt_cls[g]]) & cand_ok[:, c] & ~taken[:, c]
        if by_score is None:
            reg = ~w.cand_small[c]
            okr = ok & reg
            best = np.maximum.reduceat(np.where(okr, iou, -1.0), starts, axis=1)
            first_r = np.minimum.reduceat(np.where(okr & (iou == best[:, seg]), idx, n), starts, axis=1)
            first_s = np.minimum.reduceat(np.where(ok & ~reg, idx, n), starts, axis=1)
            pick = np.where(first_r < n, first_r, first_s)
        else:
            sc = by_score[c]
            oks = ok & (sc > NO_DETECTION)
            best = np.maximum.reduceat(np.where(oks, sc, -np.inf), starts, axis=1)
            pick = np.minimum.reduceat(np.where(oks & (sc == best[:, seg]), idx, n), starts, axis=1)
        ri, si = np.nonzero(pick < n)
        pc = c[pick[ri, si]]
        taken[ri, pc] = True
        chosen[ri, g[starts[si]]] = pc
    return chosen


def devkit_assign(
    dets: Detections,
    gt: GroundTruth,
    rules: KittiRules,
    thr_cls: np.ndarray,
    classes: np.ndarray,
    considered: np.ndarray,
    small: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-detection outcome of ``computeStatistics`` (PR pass) for the considered detections.

    ``thr_cls`` [T, C]: IoU threshold of each class of ``classes`` per row;
    ``considered`` [D]: detections passing the score threshold (and any
    max-detections cut); ``small`` [D]: ``ignored_det == 1``. GT is ignored
    when ``ignore | iscrowd`` (the KITTI loader sets ``ignore`` outside the
    difficulty) or of a neighbour class. Returns ``taken [T,D]`` (taken by a
    valid box: TP), ``by_ignored [T,D]`` (taken by an ignored box, or a small
    detection taken by any box) and ``gt_index [T,D]`` (the box, -1 none), in
    each detection's own class; DontCare regions are left to the caller.
    """
    T, D = thr_cls.shape[0], len(dets)
    w = _build(
        dets,
        gt,
        classes,
        dict(rules.neighbours),
        rules.dontcare_category,
        gt.ignore | gt.iscrowd,
        considered,
        small,
        thr_cls.min(axis=0),
    )
    chosen = _run(w, thr_cls, np.ones((1, len(w.cand_row)), bool))
    ri, gi = np.nonzero(chosen >= 0)
    cs = chosen[ri, gi]
    own = w.cand_own[cs]
    ri, gi, cs = ri[own], gi[own], cs[own]
    d = w.cand_row[cs]
    gt_index = np.full((T, D), -1, np.int64)
    gt_index[ri, d] = w.gt_row[gi]
    tp = np.zeros((T, D), bool)
    ign = np.zeros((T, D), bool)
    valid = ~w.gt_ign[gi] & ~w.cand_small[cs]
    tp[ri[valid], d[valid]] = True
    ign[ri[~valid], d[~valid]] = True
    return tp, ign, gt_index


# --------------------------------------------------------------------------- KITTI AP (eval_class)


@dataclass
class KittiAP:
    """AP of one class at one difficulty, as the devkit's ``eval_class`` computes it.

    ``precision [41]``: the devkit's precision, entry i at the i-th score
    threshold (picked near recall i/40), after its max-over-the-rest filter;
    0 beyond the last threshold. ``ap11`` = mean of ``precision[0::4]`` (11 points,
    the devkit before 2019), ``ap40`` = mean of ``precision[1:]`` (40 points,
    AP|R40), both in [0, 1] (the devkit prints them x100). ``score_thresholds
    [S]`` and ``tp/fp/fn [S]``: the PR curve's operating points; ``n_gt``:
    valid boxes (the recall denominator).
    """

    category: int
    difficulty: str
    iou_threshold: float
    ap11: float
    ap40: float
    precision: np.ndarray
    score_thresholds: np.ndarray
    tp: np.ndarray
    fp: np.ndarray
    fn: np.ndarray
    n_gt: int

    def to_dict(self) -> dict:
        """JSON-ready dict (arrays as lists)."""
        return {
            "category": int(self.category),
            "difficulty": self.difficulty,
            "iou_threshold": float(self.iou_threshold),
            "ap11": float(self.ap11),
            "ap40": float(self.ap40),
            "n_gt": int(self.n_gt),
            "precision": self.precision.tolist(),
            "score_thresholds": self.score_thresholds.tolist(),
            "tp": self.tp.tolist(),
            "fp": self.fp.tolist(),
            "fn": self.fn.tolist(),
        }


def score_thresholds(v: np.ndarray, n_gt: int) -> np.ndarray:
    """The devkit's ``getThresholds``: scores of the TPs at (about) linearly spaced recall 0, 1/40, ...

    Scores sorted descending; score i is skipped while the next one's recall
    ``(i+2)/n_gt`` is closer to the current recall step than its own
    ``(i+1)/n_gt``; the last score is always kept. Same float arithmetic as the
    devkit (the recall step is a running sum of 1/40). One vectorised search
    per kept threshold (at most 41).
    """
    v = np.sort(np.asarray(v, np.float64))[::-1]
    n = len(v)
    if n == 0 or n_gt <= 0:
        return np.zeros(0)
    i = np.arange(n, dtype=np.float64)
    l_recall = (i + 1.0) / float(n_gt)
    r_recall = np.append((i[:-1] + 2.0) / float(n_gt), l_recall[-1])
    out: list[int] = []
    current, start, step = 0.0, 0, 1.0 / (N_SAMPLE_PTS - 1.0)
    while start < n:
        keep = ~((r_recall[start:] - current) < (current - l_recall[start:]))
        keep[-1] = True  # the last score is never skipped
        j = start + int(np.argmax(keep))
        out.append(j)
        current += step
        start = j + 1
    return v[np.asarray(out, np.int64)]


def _filtered_precision(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """precision [41] as eval_class: tp/(tp+fp) per threshold (NaN for 0/0), then ``max_element`` over the rest."""
    p = np.zeros(N_SAMPLE_PTS)
    s = len(tp)
    with np.errstate(invalid="ignore", divide="ignore"):
        p[:s] = tp / (tp + fp).astype(np.float64)
    # std::max_element keeps a NaN first element and skips later NaNs
    suffix = np.fmax.accumulate(p[::-1])[::-1]
    out = p.copy()
    out[:s] = np.where(np.isnan(p[:s]), np.nan, suffix[:s])
    return out


def _class_ap(dets: Detections, gt: GroundTruth, c: int, difficulty: str, thr: float, rules: KittiRules) -> KittiAP:
    spec = KITTI_DIFFICULTY[difficulty]
    level, min_h = int(spec["level"]), float(spec["min_height"])
    small = detection_min_height_ignored(dets.box, min_h)
    gt_ign = (gt.difficulty < 0) | (gt.difficulty > level) | gt.iscrowd
    w = _build(
        dets,
        gt,
        np.array([c], np.int64),
        dict(rules.neighbours),
        rules.dontcare_category,
        gt_ign,
        np.ones(len(dets), bool),
        small,
        np.array([thr]),
    )
    thr_cls = np.array([[thr]])
    score = dets.score[w.cand_row]
    valid_gt = ~w.gt_ign
    n_gt = int(valid_gt.sum())
    # recall pass (compute_fp = false): the TPs' scores give the thresholds of the PR curve
    ch = _run(w, thr_cls, np.ones((1, len(w.cand_row)), bool), by_score=score)[0]
    tp_sel = valid_gt & (ch >= 0)
    tp_sel[tp_sel] = ~w.cand_small[ch[tp_sel]]
    thresholds = score_thresholds(score[ch[tp_sel]], n_gt)
    S = len(thresholds)
    # PR pass at every threshold at once (rows): ignored_threshold = score < threshold
    cand_ok = score[None, :] >= thresholds[:, None]
    ch = _run(w, thr_cls, cand_ok) if S else np.zeros((0, len(w.gt_row)), np.int64)
    got = ch >= 0
    small_pick = np.zeros_like(got)
    small_pick[got] = w.cand_small[ch[got]]
    tp = (got & ~small_pick & valid_gt[None, :]).sum(axis=1)
    fn = (~got & valid_gt[None, :]).sum(axis=1)
    taken = np.zeros((S, len(w.cand_row)), bool)
    ri, gi = np.nonzero(got)
    taken[ri, ch[ri, gi]] = True
    own_reg = w.cand_own & ~w.cand_small
    in_dc = np.zeros(len(w.cand_row), bool)
    if rules.dontcare_category is not None:
        idx = np.flatnonzero(own_reg)
        in_dc[idx] = dontcare_ioa(dets, gt, int(rules.dontcare_category), w.cand_row[idx]) > thr
    fp = (cand_ok & ~taken & (own_reg & ~in_dc)[None, :]).sum(axis=1)
    precision = _filtered_precision(tp, fp)
    ap11 = sum(float(x) for x in precision[0::4]) / 11.0
    ap40 = sum(float(x) for x in precision[1:]) / 40.0
    return KittiAP(
        int(c),
        difficulty,
        float(thr),
        ap11,
        ap40,
        precision,
        thresholds,
        tp.astype(np.int64),
        fp.astype(np.int64),
        fn.astype(np.int64),
        n_gt,
    )


def kitti_ap(
    dets: Detections,
    gt: GroundTruth,
    categories: Sequence[int] = (1, 4, 6),
    difficulties: Sequence[str] = ("easy", "moderate", "hard"),
    *,
    rules: KittiRules | None = None,
    iou_threshold: float | None = None,
) -> list[KittiAP]:
    """KITTI 2-D AP (11- and 40-point) per class and difficulty, equal to the devkit's ``eval_class``.

    ``categories``: KITTI category ids (default Car 1, Pedestrian 4, Cyclist
    6); ``difficulties``: any of easy/moderate/hard. A box is valid at a
    difficulty when ``gt.difficulty`` (set by the KITTI loader, devkit
    ``cleanData``) is at most that level and it is not crowd; detections lower
    than the difficulty's min height (``int(h) < 40/25/25``) are ignored. The
    walk is the devkit's (:func:`detcal.matching.match` ``mode="kitti"``):
    the recall pass picks up to 41 score thresholds from the TPs' scores, then
    the PR pass is re-run at each threshold (all at once). ``rules`` gives the
    neighbour classes, the DontCare category and the per-class thresholds
    (default :class:`KittiRules`; classes without one use 0.5);
    ``iou_threshold`` overrides them for every class. Every GT image counts
    (the devkit needs a result file per frame; an image without detections
    is one with an empty file).
    """
    rules = KittiRules() if rules is None else rules
    for d in difficulties:
        if d not in KITTI_DIFFICULTY:
            raise DetcalInputError(
                f"unknown difficulty {d!r}; expected one of {', '.join(KITTI_DIFFICULTY)}", field="difficulties"
            )
    if iou_threshold is not None and not (0.0 <= float(iou_threshold) <= 1.0):
        raise DetcalInputError(f"iou_threshold must lie in [0, 1], got {iou_threshold}", field="iou_threshold")
    if not np.isfinite(dets.score).all():
        raise DetcalInputError(
            "score is not finite",
            record=f"detection row {int(np.flatnonzero(~np.isfinite(dets.score))[0])}",
            field="score",
        )
    out = []
    for c in categories:  # loop over classes and difficulties
        thr = float(iou_threshold) if iou_threshold is not None else float(rules.class_thresholds.get(int(c), 0.5))
        for d in difficulties:
            out.append(_class_ap(dets, gt, int(c), d, thr, rules))
    return out
