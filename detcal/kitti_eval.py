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

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from detcal.errors import DetcalInputError
from detcal.match_blocks import _dontcare_ioa, _expand, _factorize, _pair_iou, _segment_starts
from detcal.types import KITTI_DIFFICULTY, Detections, GroundTruth, KittiRules

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
    gt_row, gt_ign, gt_cls = (np.concatenate([p[i] for p in g_parts]) if g_parts else np.zeros(0, np.int64) for i in range(3))
    cand_row, cand_small, cand_own, cand_cls = (np.concatenate([p[i] for p in c_parts]) if c_parts else np.zeros(0, np.int64) for i in range(4))
    gt_ign, cand_small, cand_own = gt_ign.astype(bool), cand_small.astype(bool), cand_own.astype(bool)

    img, n_img = _factorize(np.concatenate([gt.image_id[gt_row], dets.image_id[cand_row]]))
    g_grp = gt_cls * max(n_img, 1) + img[: len(gt_row)]
    c_grp = cand_cls * max(n_img, 1) + img[len(gt_row):]
    go = np.lexsort((gt_row, g_grp))  # group, then label-file order
    co = np.lexsort((cand_row, c_grp))  # group, then results-file order
    gt_row, gt_ign, gt_cls, g_grp = gt_row[go], gt_ign[go], gt_cls[go], g_grp[go]
    cand_row, cand_small, cand_own, cand_cls, c_grp = cand_row[co], cand_small[co], cand_own[co], cand_cls[co], c_grp[co]

    n_grp = int(max(g_grp.max(initial=-1), c_grp.max(initial=-1))) + 1
    ccount = np.bincount(c_grp, minlength=n_grp)
    cstart = np.cumsum(ccount) - ccount
    gstart = _segment_starts(g_grp)
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
        pc = _expand(cstart[g_grp[gs]], cnt[gs])
        iou = _pair_iou(dets.box[cand_row[pc]].T, gt.box[gt_row[pg]].T, np.zeros(len(pc), bool))
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
        starts = _segment_starts(g)
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
    w = _build(dets, gt, classes, dict(rules.neighbours), rules.dontcare_category, gt.ignore | gt.iscrowd,
               considered, small, thr_cls.min(axis=0))
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
