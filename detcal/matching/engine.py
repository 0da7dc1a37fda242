"""Exact box matching: detections -> precision targets (docs/matching.md).

Per image and per category (or per image, class-agnostic), at every IoU
threshold ``t`` of ``T``, each detection gets::

    matched  [T,D] bool   true positive at t
    ignored  [T,D] bool   neither true nor false positive at t (leaves the sample)
    gt_index [T,D] int64  row into GroundTruth of the GT it took (-1 none)
    iou      [D]   float  best IoU with a GT of its group (crowd: over det area)
    considered [D] bool   passed the score threshold and the max-dets cut

in the input order of the detections. A detection that is not considered is
neither matched nor ignored.

Modes
-----
``exclusive`` (default) -- the rule of pycocotools ``COCOeval.evaluateImg``
(bbox, area range "all"), copied exactly:

1. per group, detections by descending score, *stable* (ties keep the
   results-file order; class-agnostic: ties keep category, then file order,
   as pycocotools with ``useCats=0``); only the first ``max_dets`` are kept;
2. GT ordered non-ignored first, then file order; a GT is *ignored* when
   ``gt.iscrowd`` (``gt_ignore="pycocotools"``, default: pycocotools 2.0.x
   overwrites an annotation's ``ignore`` key with ``iscrowd``), or when
   ``gt.ignore | gt.iscrowd`` (``gt_ignore="ignore_or_crowd"``, and always
   with KITTI rules, where ``ignore`` marks boxes outside the difficulty);
3. IoU as maskApi ``bbIou``: ``inter / (area_d + area_g - inter)``, and for a
   crowd GT ``inter / area_d``; areas are ``w * h`` of the input's width and
   height where the records keep them (``wh``, COCO loader), as pycocotools
   takes them, else from the corners (:func:`detcal.matching.blocks.box_areas`);
4. each detection, in score order, takes among the GTs still free (crowd GTs
   are always free) with ``IoU >= min(t, 1 - 1e-10)`` the one with the highest
   IoU; on an exact tie the *later* GT in the order of 2 wins;
5. a free non-ignored GT always wins over an ignored one, even with a lower
   IoU (pycocotools' ``break``);
6. a detection that took an ignored GT is ``ignored``.

Implementation (no Python loop over detections):

* one stable radix sort (16-bit LSD passes) orders detections by (group,
  descending score, file order) and gives each its rank in its group;
* IoU is computed once per (detection, GT of its group) pair, for all
  thresholds, looping over *GT slots* (the largest group's GT count):
  detections sorted by their group's GT count make every slot a slice;
* pairs below every threshold are dropped (they can never be taken);
* the greedy pass is sequential within a group only, so all groups run in
  lockstep: one vectorised step per detection *rank* (at most ``max_dets``
  steps) over the kept pairs sorted rank-major, with segment reductions
  (``np.maximum.reduceat``) in place of evaluateImg's loop over GTs, for
  all T thresholds at once.

``max`` -- netcal's example / Thetis "max": a detection is matched when the GT
of its group with the highest IoU has ``IoU >= t`` and is not ignored; it is
ignored when that GT is ignored/crowd. Several detections may match one GT.
On an IoU tie the first GT in the order of 2 (non-ignored first) is taken.

``kitti`` -- the official KITTI devkit's assignment (``computeStatistics``,
:mod:`detcal.matching.kitti_ap`), per detection: the ground-truth boxes of an image
are walked in label-file order (row order of the GroundTruth within an
image), each taking the still-free detection of its class with the highest
overlap ``> t``, whatever the scores (first in results-file order on a tie;
only when there is none, the first free detection under the min height, of
any class); ignored boxes (outside the difficulty, neighbour class) take
theirs too, which become ignored. The outcome depends on which detections
pass ``score_threshold`` (default 0, the devkit's ``thresh``; its PR curve
re-runs this walk per threshold). Needs ``kitti=KittiRules(...)``; not
class-agnostic; set ``max_dets=None`` for devkit parity (a cut detection is
not considered, like one under the score threshold).

KITTI rules (``kitti=KittiRules(...)``, Geiger et al. 2012, devkit
``evaluate_object.cpp``), in every mode
---------------------------------------------------------------------
* overlap test strict, ``IoU > t`` (``KittiRules.strict``; ``kitti`` mode
  requires it);
* GT with ``ignore`` (outside the difficulty, set by the adapter) are ignored
  GTs; GT of a neighbour class (Van for Car, Person_sitting for Pedestrian,
  ``KittiRules.neighbours``) are added to the evaluated class as ignored GTs
  (a detection matched to one is ignored);
* detections lower than ``min_height`` px are ignored at every threshold
  (devkit: ``int(|y2 - y1|) < MIN_HEIGHT``, height truncated to an int); in
  ``exclusive``/``max`` they take part in no assignment, in ``kitti`` they
  are the devkit's fallback candidates (``gt_index`` names the box that took
  one);
* DontCare boxes (``dontcare_category``) are never matched; a considered
  detection left unmatched and not ignored whose intersection over its own
  area with a DontCare box of its image exceeds ``t`` (strict) is ignored;
* ``iou_thresholds="kitti"`` gives one threshold row where every detection
  uses its own class's threshold from ``KittiRules.class_thresholds`` (Car
  0.7, Pedestrian/Cyclist 0.5); classes without one use
  ``KITTI_DEFAULT_THRESHOLD`` (0.5). The row's ``iou_thresholds`` entry is
  NaN and ``params["class_thresholds"]`` records the map.

``exclusive`` (or ``max``) with KITTI rules is the score-ordered option: the
COCO walk (detections by descending score, a free non-ignored box preferred)
under the devkit's rules above. It differs from the devkit on crowded scenes
(docs/matching.md).

References: pycocotools 2.0.11 ``cocoeval.py`` / ``maskApi.c``; netcal 1.4.0
examples; KITTI object devkit ``evaluate_object.cpp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, NamedTuple

import numpy as np

from detcal.core.boxes import check_boxes
from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, Images, KittiRules, MatchResult
from detcal.matching.blocks import (
    box_areas,
    dontcare_ioa,
    expand,
    factorize,
    float_key,
    greedy_walk,
    group_codes,
    is_member,
    segment_starts,
    slot_iou_areas,
    stable_argsort,
)
from detcal.matching.chunks import ImageChunk, image_chunks, layout_chunk_size, row_numbers, rows_through

MODES: tuple[str, ...] = ("exclusive", "max", "kitti")
"""Matching modes (docs/matching.md)."""

GT_IGNORE: tuple[str, ...] = ("pycocotools", "ignore_or_crowd")
"""Readings of ``GroundTruth.ignore`` without KITTI rules (see :func:`match`)."""

KITTI_DEFAULT_THRESHOLD: float = 0.5
"""Threshold of ``iou_thresholds="kitti"`` for classes missing from ``class_thresholds``."""

_COCO_MAX_THR: float = 1.0 - 1e-10  # pycocotools: iou = min([t, 1 - 1e-10])


# --------------------------------------------------------------------------- validation


def _validate(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] | str,
    mode: str,
    score_threshold: float,
    max_dets: int | None,
    kitti: KittiRules | None,
    images: Images | None,
    class_agnostic: bool = False,
) -> tuple[np.ndarray, bool]:
    """Check every argument; returns (thresholds [T], per_class_flag)."""
    if not isinstance(dets, Detections):
        raise DetcalInputError(f"dets must be Detections, got {type(dets).__name__}", field="dets")
    if not isinstance(gt, GroundTruth):
        raise DetcalInputError(f"gt must be GroundTruth, got {type(gt).__name__}", field="gt")
    if mode not in MODES:
        raise DetcalInputError(f"unknown matching mode {mode!r}; choose one of {MODES}", field="mode")
    thr, per_class = _parse_thresholds(iou_thresholds, kitti)
    if not np.isfinite(score_threshold):
        raise DetcalInputError(f"score_threshold must be finite, got {score_threshold}", field="score_threshold")
    if max_dets is not None and (isinstance(max_dets, bool) or int(max_dets) != max_dets or max_dets < 1):
        raise DetcalInputError(f"max_dets must be a positive int or None, got {max_dets!r}", field="max_dets")
    if kitti is not None and not isinstance(kitti, KittiRules):
        raise DetcalInputError(f"kitti must be KittiRules, got {type(kitti).__name__}", field="kitti")
    if mode == "kitti":
        if kitti is None:
            raise DetcalInputError(
                "mode='kitti' needs kitti=KittiRules(...) (detcal.data.kitti.kitti_rules)", field="kitti"
            )
        if class_agnostic:
            raise DetcalInputError(
                "mode='kitti' evaluates one class at a time, as the devkit; class_agnostic must be False",
                field="class_agnostic",
            )
        if not kitti.strict:
            raise DetcalInputError(
                "mode='kitti' is the devkit's strict overlap test; strict=False exists for exclusive/max only",
                field="kitti.strict",
            )
    check_boxes(dets.box, "detection")
    check_boxes(gt.box, "ground truth")
    if not np.isfinite(dets.score).all():
        raise DetcalInputError(
            "score is not finite",
            record=f"detection row {int(np.flatnonzero(~np.isfinite(dets.score))[0])}",
            field="score",
        )
    if images is not None:
        for what, ids in (("detection", dets.image_id), ("ground truth", gt.image_id)):
            missing = ~is_member(np.asarray(ids, np.int64), images.id)  # a membership test: no row lookup needed
            if missing.any():
                i = int(np.flatnonzero(missing)[0])
                raise DetcalInputError(
                    f"image_id {int(ids[i])} is not among the dataset's images",
                    record=f"{what} row {i}",
                    field="image_id",
                )
    return thr, per_class


def _parse_thresholds(iou_thresholds: Sequence[float] | str, kitti: KittiRules | None) -> tuple[np.ndarray, bool]:
    """The checked thresholds [T] (NaN for ``"kitti"``) and whether they are KITTI's per-class ones."""
    per_class = isinstance(iou_thresholds, str)
    if per_class:
        if iou_thresholds != "kitti":
            raise DetcalInputError(
                f"iou_thresholds string must be 'kitti', got {iou_thresholds!r}", field="iou_thresholds"
            )
        if kitti is None:
            raise DetcalInputError("iou_thresholds='kitti' needs kitti=KittiRules(...)", field="iou_thresholds")
        thr = np.array([np.nan])
    else:
        thr = np.asarray(iou_thresholds, dtype=np.float64).reshape(-1)
        if thr.size == 0:
            raise DetcalInputError("iou_thresholds is empty", field="iou_thresholds")
        if not (np.isfinite(thr).all() and (thr >= 0).all() and (thr <= 1).all()):
            raise DetcalInputError(f"IoU thresholds must lie in [0, 1], got {thr.tolist()}", field="iou_thresholds")
    return thr, per_class


def _working_gt(
    gt: GroundTruth, kitti: KittiRules | None, class_agnostic: bool, gt_ignore: str = "ignore_or_crowd"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GT rows that take part in matching: (row [W], category [W], ignored [W], crowd [W]).

    KITTI: DontCare rows leave, neighbour-class rows are added a second time
    under the evaluated class as ignored GTs (not when class-agnostic, where
    every class already meets every GT).
    """
    rows = np.arange(len(gt), dtype=np.int64)
    cat = gt.category
    ign = gt.iscrowd.copy() if (gt_ignore == "pycocotools" and kitti is None) else gt.ignore | gt.iscrowd
    crowd = gt.iscrowd
    if kitti is None:
        return rows, cat, ign, crowd
    keep = np.ones(len(gt), bool) if kitti.dontcare_category is None else cat != kitti.dontcare_category
    parts = [(rows[keep], cat[keep], ign[keep], crowd[keep])]
    for evaluated, neighbours in [] if class_agnostic else sorted(kitti.neighbours.items()):
        sel = np.isin(cat, np.asarray(neighbours, np.int64)) & keep
        parts.append(
            (rows[sel], np.full(int(sel.sum()), evaluated, np.int64), np.ones(int(sel.sum()), bool), crowd[sel])
        )
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))  # type: ignore[return-value]


# --------------------------------------------------------------------------- public API


def match(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] | str = (0.5,),
    *,
    mode: str = "exclusive",
    class_agnostic: bool = False,
    score_threshold: float = 0.0,
    max_dets: int | None = 100,
    kitti: KittiRules | None = None,
    images: Images | None = None,
    gt_ignore: str = "pycocotools",
) -> MatchResult:
    """Match detections to ground truth at every IoU threshold (docs/matching.md).

    Parameters
    ----------
    dets, gt:
        Columnar records (``detcal.core.types``); boxes ``xyxy``.
    iou_thresholds:
        ``T`` thresholds in [0, 1], or ``"kitti"`` (one row, per-class
        thresholds of ``kitti.class_thresholds``; needs ``kitti``).
    mode:
        ``"exclusive"`` (pycocotools ``evaluateImg``), ``"max"`` (netcal) or
        ``"kitti"`` (the KITTI devkit's label-order walk; needs ``kitti``).
    class_agnostic:
        Group per image only (categories ignored), as pycocotools ``useCats=0``.
    score_threshold:
        Detections with ``score < score_threshold`` are not considered (in
        ``kitti`` mode the devkit's ``thresh``: the outcome depends on it).
    max_dets:
        Keep the ``max_dets`` best-scored detections per (image, category)
        (per image when class-agnostic), as pycocotools ``maxDets``; ``None``
        keeps all.
    kitti:
        KITTI devkit rules (strict overlap, neighbour classes, DontCare,
        min height); see the module docstring.
    images:
        When given, every detection and GT image id must be one of them.
    gt_ignore:
        Which GTs are ignored without KITTI rules: ``"pycocotools"``
        (default) only crowd ones, as pycocotools 2.0.x, which overwrites an
        annotation's ``ignore`` key with ``iscrowd``; ``"ignore_or_crowd"``
        also those with ``GroundTruth.ignore`` (detcal's earlier reading,
        e.g. for data that mark ignored boxes). With ``kitti`` rules the
        ``ignore`` flags (outside the difficulty) always count.

    Steps (one private function each, in this order)
    -----------------------------------------------
    1. check every argument; the threshold of each detection, ``[T,1]`` or
       ``[1,D]`` with per-class KITTI thresholds (:func:`_threshold_rows`);
    2. group the detections by (image[, category]), rank them by descending
       score in their group (stable), cut at ``score_threshold`` and
       ``max_dets``; KITTI: mark the detections under the min height
       (:func:`_rank_detections`);
    3. order the GTs of each group: non-ignored first, then file order
       (:func:`_order_gt`);
    4. the IoU of every (detection, GT of its group) pair, once for all
       thresholds, and each detection's best IoU (:func:`_pair_ious`);
    5. assign, per mode: the greedy walk of ``exclusive``
       (:func:`_exclusive_layout`, :func:`exclusive_walk`), the best GT of ``max``
       (:func:`_assign_max`), or the devkit's label-order walk of ``kitti``
       (:func:`_assign_kitti`);
    6. KITTI rules: small detections and detections inside DontCare regions
       are ignored (:func:`_kitti_ignores`);
    7. record the rules applied in ``params`` (:func:`_match_params`).

    Returns
    -------
    MatchResult
        ``matched/ignored/gt_index [T,D]``, ``iou [D]``, ``considered [D]``
        in the detections' input order. ``iou`` is the best IoU over the GTs
        of the detection's group (ignored, crowd and KITTI neighbour GTs
        included; crowd as intersection over detection area), 0 without one,
        for every detection (considered or not).
    """
    # 1. arguments and per-detection thresholds
    thr, per_class = _validate(dets, gt, iou_thresholds, mode, score_threshold, max_dets, kitti, images, class_agnostic)
    if gt_ignore not in GT_IGNORE:
        raise DetcalInputError(f"unknown gt_ignore {gt_ignore!r}; choose one of {GT_IGNORE}", field="gt_ignore")
    strict = bool(kitti.strict) if kitti is not None else False
    rules = _Rules(thr, per_class, mode, class_agnostic, score_threshold, max_dets, kitti, gt_ignore, strict)
    # 2.-6. per image chunk (every rule without KITTI's looks at one image at a time: the same outcome)
    chunks = image_chunks(dets.image_id, gt.image_id) if kitti is None else []
    if len(chunks) > 1:
        matched, ignored, gt_index, iou, considered = _match_chunks(dets, gt, rules, chunks)
    else:
        matched, ignored, gt_index, iou, considered = _match_steps(dets, gt, rules)
    # 7. the rules applied
    return MatchResult(
        iou_thresholds=thr,
        matched=matched,
        ignored=ignored,
        gt_index=gt_index,
        iou=iou,
        considered=considered,
        mode=mode,
        class_agnostic=bool(class_agnostic),
        score_threshold=float(score_threshold),
        max_dets=None if max_dets is None else int(max_dets),
        params=_match_params(mode, strict, gt_ignore, kitti, per_class),
    )


class _Rules(NamedTuple):
    """The checked arguments of :func:`match` that steps 2-6 read."""

    thr: np.ndarray
    per_class: bool
    mode: str
    class_agnostic: bool
    score_threshold: float
    max_dets: int | None
    kitti: KittiRules | None
    gt_ignore: str
    strict: bool


_Outcome = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""matched, ignored, gt_index [T,D]; iou, considered [D]."""


def _match_steps(dets: Detections, gt: GroundTruth, r: _Rules) -> _Outcome:
    """Steps 2-6 of :func:`match` on checked arguments: (matched, ignored, gt_index, iou, considered)."""
    kitti = r.kitti
    thr_det = _threshold_rows(dets, r.thr, kitti if r.per_class else None)
    thr_eff = thr_det if r.strict else np.minimum(thr_det, _COCO_MAX_THR)
    # 2. groups, ranks, considered
    w_row, w_cat, w_ign, w_crowd = _working_gt(gt, kitti, r.class_agnostic, r.gt_ignore)
    det_grp, gt_grp, n_grp = group_codes(dets.image_id, dets.category, gt.image_id[w_row], w_cat, r.class_agnostic)
    # 3. GT order within groups
    gts = _order_gt(w_row, w_cat, w_ign, w_crowd, gt_grp, n_grp, r.class_agnostic)
    # the ranks the walk reads: those of the detections whose group has a GT (the others' are never read)
    needed = gts.count[det_grp] > 0 if r.mode == "exclusive" else None
    rank, considered, small = _rank_detections(
        dets, det_grp, r.score_threshold, r.max_dets, r.class_agnostic, kitti, needed
    )
    # 4. (detection, GT) pairs: IoU once for all thresholds
    pairs = _pair_ious(dets, gt, det_grp, gts)
    # 5. assignment
    T, D = len(r.thr), len(dets)
    iou = np.zeros(D)
    iou[pairs.seg_det] = pairs.best
    if r.mode == "kitti":
        assert kitti is not None
        matched, ignored, gt_index = _assign_kitti(dets, gt, kitti, r.thr, r.per_class, considered, small)
    else:
        greedy = considered & ~small
        thr_seg = thr_eff[:, pairs.seg_det] if r.per_class else thr_eff  # [T,S] or [T,1]
        if r.mode == "exclusive":
            own = kitti is None  # walked once, under its own flags, every considered detection walking
            layout = _exclusive_layout(pairs, gts, greedy, rank, thr_seg, r.per_class, r.strict, considered, own)
            chosen, cols = exclusive_walk(layout), layout.k_det
        else:
            chosen, cols = _assign_max(pairs, greedy, thr_seg, r.strict), pairs.seg_det
        matched, ignored, gt_index = _outcome(chosen, cols, gts, T, D)
    # 6. KITTI: small detections and DontCare regions
    if kitti is not None:
        _kitti_ignores(dets, gt, kitti, considered, small, thr_det, r.per_class, matched, ignored)
    return matched, ignored, gt_index, iou, considered


def _match_chunks(dets: Detections, gt: GroundTruth, r: _Rules, chunks: list[ImageChunk]) -> _Outcome:
    """Steps 2-6 chunk by chunk (:func:`detcal.matching.chunks.image_chunks`), each chunk's outcome put
    at its rows (its GT rows mapped back to the whole ground truth's): the same arrays as one pass."""
    T, D = len(r.thr), len(dets)
    matched = np.zeros((T, D), bool)
    ignored = np.zeros((T, D), bool)
    gt_index = np.full((T, D), -1, np.int64)
    iou = np.zeros(D)
    considered = np.zeros(D, bool)
    for c in chunks:
        g_rows = row_numbers(c.gt, len(gt))
        m, ig, gi, io, co = _match_steps(dets.select(c.det), gt.select(c.gt), r)
        gi = rows_through(gi, g_rows)
        matched[:, c.det], ignored[:, c.det], gt_index[:, c.det] = m, ig, gi
        iou[c.det], considered[c.det] = io, co
    return matched, ignored, gt_index, iou, considered


def exclusive_layout(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float],
    *,
    max_dets: int | None = 100,
    score_threshold: float = 0.0,
    images: Images | None = None,
) -> ExclusiveLayout:
    """Steps 1-4 of :func:`match` (``exclusive``, per (image, category), no KITTI rules) and the pairs
    the greedy walk may take: everything of the matching that does not depend on which GTs are ignored.

    :func:`exclusive_outcome` then walks it under any GT ignore flags, each time equal to
    :func:`match` with ``gt_ignore="ignore_or_crowd"`` and those flags as ``GroundTruth.ignore``
    (docs/matching.md): COCO AP matches once per area range this way (:mod:`detcal.metrics.accuracy`).
    """
    thr, _ = _validate(dets, gt, iou_thresholds, "exclusive", score_threshold, max_dets, None, images)
    chunks = image_chunks(dets.image_id, gt.image_id, layout_chunk_size())
    if len(chunks) == 1:
        return _layout_steps(dets, gt, thr, max_dets, score_threshold)
    parts = [  # whole images a chunk (the walk never looks across images), joined in walk order
        (
            row_numbers(c.det, len(dets)),
            row_numbers(c.gt, len(gt)),
            _layout_steps(dets.select(c.det), gt.select(c.gt), thr, max_dets, score_threshold),
        )
        for c in chunks
    ]
    return join_layouts(parts, len(dets))


class ExclusiveMatch(NamedTuple):
    """:func:`match`'s arrays that :func:`layout_and_match` gives: ``matched``, ``ignored``, ``gt_index``
    [T,D] and ``considered`` [D]."""

    matched: np.ndarray
    ignored: np.ndarray
    gt_index: np.ndarray
    considered: np.ndarray


def layout_and_match(
    dets: Detections,
    gt: GroundTruth,
    layout_thresholds: Sequence[float],
    match_thresholds: Sequence[float],
    *,
    max_dets: int | None = 100,
    score_threshold: float = 0.0,
) -> tuple[ExclusiveLayout, ExclusiveMatch]:
    """:func:`exclusive_layout` of ``dets`` without their ``wh`` (areas from the box corners) at
    ``layout_thresholds``, and :func:`match` (``exclusive``, per (image, category), ``gt_ignore=
    "pycocotools"``, the input's ``w * h`` areas) at ``match_thresholds``, the steps they share done
    once per image chunk: the groups, ranks, GT order, the (detection, GT) pairs and their
    intersections (the IoU of each area in the same arithmetic). Equal to those two calls array for
    array (e.g. COCO AP's layout at ten thresholds and LRP's matching at one,
    :mod:`detcal.pipeline.accuracy_block`); ``match``'s ``iou`` is not made."""
    thr_l = _validate(dets, gt, layout_thresholds, "exclusive", score_threshold, max_dets, None, None)[0]
    thr_m = _parse_thresholds(match_thresholds, None)[0]
    T, D = len(thr_m), len(dets)
    out = ExclusiveMatch(
        np.zeros((T, D), bool), np.zeros((T, D), bool), np.full((T, D), -1, np.int64), np.zeros(D, bool)
    )
    parts: list[tuple[np.ndarray, np.ndarray, ExclusiveLayout]] = []
    for c in image_chunks(dets.image_id, gt.image_id, layout_chunk_size()):  # whole images: see _shared_chunk
        parts.append(_shared_chunk(dets, gt, c, thr_l, thr_m, out, max_dets, score_threshold))
    return (parts[0][2] if len(parts) == 1 else join_layouts(parts, D)), out


def _shared_chunk(
    dets: Detections,
    gt: GroundTruth,
    c: ImageChunk,
    thr_l: np.ndarray,
    thr_m: np.ndarray,
    out: ExclusiveMatch,
    max_dets: int | None,
    score_threshold: float,
) -> tuple[np.ndarray, np.ndarray, ExclusiveLayout]:
    """One image chunk of :func:`layout_and_match` (whole images: the walk never looks across images):
    its match written into ``out`` at its rows (its GT rows mapped back, as :func:`match` does chunk by
    chunk), and its layout with its detection and GT rows; the chunk's match layout is released here."""
    d_rows, g_rows = row_numbers(c.det, len(dets)), row_numbers(c.gt, len(gt))
    lay, lay_m = _layouts_steps(
        dets.select(c.det), gt.select(c.gt), [thr_l, thr_m], [False, True], max_dets, score_threshold, [False, True]
    )
    m, ig, gi = layout_match(lay_m)
    gi = rows_through(gi, g_rows)
    out.matched[:, c.det], out.ignored[:, c.det], out.gt_index[:, c.det] = m, ig, gi
    out.considered[c.det] = lay_m.considered
    return d_rows, g_rows, lay


def _layout_steps(
    dets: Detections, gt: GroundTruth, thr: np.ndarray, max_dets: int | None, score_threshold: float
) -> ExclusiveLayout:
    """:func:`exclusive_layout` on checked arguments, in one piece."""
    return _layouts_steps(dets, gt, [thr], [dets.wh is not None], max_dets, score_threshold)[0]


def _layouts_steps(
    dets: Detections,
    gt: GroundTruth,
    thrs: Sequence[np.ndarray],
    wh: Sequence[bool],
    max_dets: int | None,
    score_threshold: float,
    own_flags: Sequence[bool] | None = None,
) -> list[ExclusiveLayout]:
    """:func:`exclusive_layouts` on checked arguments, in one piece: one layout per (thresholds, wh);
    ``own_flags``: per layout, whether it is walked under its own GT flags only (:func:`_exclusive_layout`)."""
    w_row, w_cat, w_ign, w_crowd = _working_gt(gt, None, False, "pycocotools")
    det_grp, gt_grp, n_grp = group_codes(dets.image_id, dets.category, gt.image_id[w_row], w_cat, False)
    rank, considered, _ = _rank_detections(dets, det_grp, score_threshold, max_dets, False, None)
    gts = _order_gt(w_row, w_cat, w_ign, w_crowd, gt_grp, n_grp, False)
    corners = box_areas(dets.box)
    with_wh = box_areas(dets.box, dets.wh) if any(wh) else corners
    # one set of pairs per distinct area (one when the input's w * h equal the corners' areas everywhere)
    kinds = sorted(set(wh)) if with_wh is not corners and not np.array_equal(with_wh, corners) else [False]
    pairs = dict(zip(kinds, _pair_ious_areas(dets, gt, det_grp, gts, [with_wh if k else corners for k in kinds])))
    return [
        _exclusive_layout(
            pairs[w if w in pairs else False],
            gts,
            considered,
            rank,
            np.minimum(thr[:, None], _COCO_MAX_THR),
            False,
            False,
            considered,
            own,
        )
        for thr, w, own in zip(thrs, wh, [False] * len(thrs) if own_flags is None else own_flags)
    ]


def join_layouts(parts: list[tuple[np.ndarray, np.ndarray, ExclusiveLayout]], n_det: int) -> ExclusiveLayout:
    """One :class:`ExclusiveLayout` over ``n_det`` detections from the layouts of disjoint sets of whole
    images, each given with its detection rows and ground-truth rows (ascending) in the whole input.

    Walking it is walking each part: the parts' GTs are placed one after the other (their tie ranks and
    groups offset, so they never meet), and the segments of all parts are put in one walk order, step by
    step (in a step the one-pair segments first, as :func:`greedy_walk` reads them); within a step the
    segments are of different groups, whose walks are independent, so their order among themselves
    does not change the outcome.

    ``parts`` is emptied: the joined arrays are made one at a time, each written into its place part by
    part, and each part's array is released once written, so the parts and the joined layout are never
    held together in full (the caller keeps no other reference to the parts' layouts).
    """
    rows = [(d, g) for d, g, _ in parts]
    ls = [lay._asdict() for _, _, lay in parts]
    parts.clear()
    w_off = np.cumsum([0] + [len(lay["gt_row"]) for lay in ls])
    g_off = np.cumsum([0] + [(int(lay["gt_grp"][-1]) + 1 if len(lay["gt_grp"]) else 0) for lay in ls])
    p_off = np.cumsum([0] + [len(lay["pair_iou"]) for lay in ls])
    k_off = np.cumsum([0] + [len(lay["k_det"]) for lay in ls])
    n_keys = 2 * max(len(lay["step_multi"]) for lay in ls)
    narrow = np.uint16 if n_keys <= 1 << 16 else np.int64  # the keys as 2-byte integers where they fit
    code = np.concatenate([_step_codes(lay.pop("step_seg"), lay.pop("step_multi"), narrow) for lay in ls])
    # the stable order of the keys (numpy's radix sort of 2-byte keys: the same permutation as any stable sort)
    so = np.argsort(code, kind="stable") if narrow is np.uint16 else stable_argsort([code])
    # the joined steps' bounds: the segments before each key, every key counted
    bounds = np.zeros(n_keys + 1, np.int64)
    np.cumsum(np.bincount(code, minlength=n_keys), out=bounds[1:])
    n_steps = int(code.max()) // 2 + 1 if len(code) else 0
    step_seg, step_multi = bounds[0 : 2 * n_steps + 1 : 2].copy(), bounds[1 : 2 * n_steps : 2].copy()
    del code
    # each part's segments' starts and pair counts, then the joined order's counts and starts
    starts = [lay.pop("seg_start") for lay in ls]
    part_counts = [np.diff(np.append(st, len(lay["pair_iou"]))) for st, lay in zip(starts, ls)]
    seg_to = np.empty(len(so), np.int64)  # each segment's place in the joined walk order
    seg_to[so] = np.arange(len(so), dtype=np.int64)
    counts = np.concatenate(part_counts)[so]
    del so
    new_start = np.cumsum(counts) - counts
    # each pair's place: its segment's new start plus its place in the segment, made part by part
    pair_to = np.empty(int(p_off[-1]), np.int64)
    for i, (st, c) in enumerate(zip(starts, part_counts)):
        at = pair_to[int(p_off[i]) : int(p_off[i + 1])]
        at[:] = np.repeat(new_start[seg_to[int(k_off[i]) : int(k_off[i + 1])]] - st, c)
        at += np.arange(len(at), dtype=np.int64)
    del starts, part_counts
    fill = _Filler(ls)
    pairs_at, segs_at = fill.ranges(p_off, pair_to), fill.ranges(k_off, seg_to)
    gts_at = [slice(int(w_off[i]), int(w_off[i + 1])) for i in range(len(ls))]
    gt_rows = [g for _, g in rows]
    det_rows = [d for d, _ in rows]
    joined = {
        "pair_iou": fill("pair_iou", pairs_at),
        "pair_g": fill("pair_g", pairs_at, w_off),
        "pair_tie": fill("pair_tie", pairs_at, w_off),
        "k_det": fill("k_det", segs_at, rows=det_rows),
        "k_grp": fill("k_grp", segs_at, g_off),
        "gt_row": fill("gt_row", gts_at, rows=gt_rows),
        "gt_ign": fill("gt_ign", gts_at),
        "gt_crowd": fill("gt_crowd", gts_at),
        "g_of_tie": fill("g_of_tie", gts_at, w_off),
        "gt_grp": fill("gt_grp", gts_at, g_off),
        "rank": fill("rank", det_rows, size=n_det, init=-1),
        "considered": fill("considered", det_rows, size=n_det, init=False),
    }
    del pair_to, seg_to
    return ExclusiveLayout(
        n_det=n_det,
        pair_seg=np.repeat(np.arange(len(counts), dtype=np.int64), counts),
        seg_start=new_start,
        step_seg=step_seg,
        step_multi=step_multi,
        thr=ls[0]["thr"],
        strict=ls[0]["strict"],
        **joined,
    )


class _Filler:
    """The joined arrays of :func:`join_layouts`: each written part by part into its places, each part's
    array released (popped from its field dict) as soon as it is written."""

    def __init__(self, ls: list[dict[str, Any]]) -> None:
        self.ls = ls

    @staticmethod
    def ranges(offsets: np.ndarray, places: np.ndarray) -> list[np.ndarray]:
        """Each part's share of ``places`` (views), its rows ``offsets[i]:offsets[i + 1]``."""
        return [places[int(offsets[i]) : int(offsets[i + 1])] for i in range(len(offsets) - 1)]

    def __call__(
        self,
        name: str,
        at: Sequence[np.ndarray | slice],
        offsets: np.ndarray | None = None,
        rows: Sequence[np.ndarray] | None = None,
        size: int | None = None,
        init: Any = None,
    ) -> np.ndarray:
        """The joined ``name``: part ``i``'s array (plus ``offsets[i]``; or read through ``rows[i]``) at ``at[i]``;
        ``size`` rows (default: every part's rows), each first ``init`` when given (rows no part writes)."""
        vals = [lay[name] for lay in self.ls]
        dtype = np.result_type(*(v if rows is None else rows[i] for i, v in enumerate(vals)))
        n = sum(len(v) for v in vals) if size is None else size
        del vals
        out = np.empty(n, dtype) if init is None else np.full(n, init, dtype)
        for i, lay in enumerate(self.ls):
            v = lay.pop(name)
            if offsets is not None:
                v = v + offsets[i]
            out[at[i]] = v if rows is None else rows[i][v]
        return out


def _step_codes(step_seg: np.ndarray, step_multi: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    """Each segment's walk key [K] of a layout with these ``step_seg``/``step_multi``: 2 * step + (1 when it
    has several pairs), as :func:`_exclusive_layout` sorts them (as ``dtype``, which must hold 2 * steps)."""
    n_steps = len(step_multi)
    bounds = np.empty(2 * n_steps + 1, np.int64)
    bounds[0::2], bounds[1::2] = step_seg, step_multi
    return np.repeat(np.arange(2 * n_steps, dtype=dtype), np.diff(bounds))


def layout_match(layout: ExclusiveLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``matched``, ``ignored`` and ``gt_index`` [T,D] of the walk of ``layout`` under its own GT flags:
    :func:`match`'s arrays (``exclusive``, ``gt_ignore="pycocotools"``) for the detections, ground truth,
    thresholds and areas the layout was made from (:func:`exclusive_layout`, :func:`exclusive_layouts`)."""
    chosen = exclusive_walk(layout)
    T, D = chosen.shape[0], layout.n_det
    matched = np.zeros((T, D), bool)
    ignored = np.zeros((T, D), bool)
    gt_index = np.full((T, D), -1, np.int64)
    ti, si = np.nonzero(chosen >= 0)
    gpos = chosen[ti, si]
    drow = layout.k_det[si]
    gt_index[ti, drow] = layout.gt_row[gpos]
    ignored[ti, drow] = layout.gt_ign[gpos]
    matched[ti, drow] = ~layout.gt_ign[gpos]
    return matched, ignored, gt_index


def exclusive_outcome(
    layout: ExclusiveLayout, gt_ignored: np.ndarray, reference: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``matched`` and ``ignored`` [T,D] of the walk of ``layout`` with the GTs ``gt_ignored`` [G] (by GT
    row; crowd GTs stay reusable whatever their flag) ignored: :func:`match`'s ``matched``/``ignored``
    with these flags as ``GroundTruth.ignore`` and ``gt_ignore="ignore_or_crowd"`` (give crowd GTs
    ``True`` for that reading). ``reference``: ``exclusive_walk(layout)``, to walk again only the groups
    whose flags change it (:func:`exclusive_walk`)."""
    ign_w = np.asarray(gt_ignored, bool)[layout.gt_row]
    chosen = exclusive_walk(layout, ign_w, reference)
    hit = chosen >= 0
    on_ign = ign_w[chosen]  # -1 (none) reads the last GT: masked by hit below
    on_ign &= hit
    T, D = chosen.shape[0], layout.n_det
    matched = np.zeros((T, D), bool)
    ignored = np.zeros((T, D), bool)
    np.greater(hit, on_ign, out=hit)  # hit & ~on_ign, in place
    matched[:, layout.k_det] = hit
    ignored[:, layout.k_det] = on_ign
    return matched, ignored


# --------------------------------------------------------------------------- the steps of match


class _GtOrder(NamedTuple):
    """Working GTs ordered by (group, non-ignored first[, category], file order) [W]; group starts/counts [G].

    ``tie [W]``: the rank of each position in the same order without the ignore flag (group[, category],
    file order); ``g_of_tie [W]`` its inverse. pycocotools' exact-tie rule takes the later GT of its order;
    the candidates of one step all share an ignore flag (a free non-ignored GT excludes the ignored ones),
    so among them the order is the tie rank's, whatever the flags: the walk reads ties by it.
    """

    row: np.ndarray
    ign: np.ndarray
    crowd: np.ndarray
    start: np.ndarray
    count: np.ndarray  # type: ignore[assignment]  # shadows tuple.count, as intended
    tie: np.ndarray
    g_of_tie: np.ndarray


class _Pairs(NamedTuple):
    """Every (detection, GT of its group) pair, laid out by GT slot (:func:`detcal.matching.blocks.slot_iou`).

    ``seg_det [S]`` the detections meeting at least one GT, by GT count descending, ``cnt [S]`` that count
    (their slots); ``g0 [S]`` the first GT
    of their group in :class:`_GtOrder`; ``n_slot [J]`` the detections having a j-th GT; ``pair_iou [P]``
    and ``off [J]`` the pair IoUs slot by slot; ``best``/``arg [S]`` each detection's best IoU and its slot.
    """

    seg_det: np.ndarray
    cnt: np.ndarray
    g0: np.ndarray
    n_slot: np.ndarray
    pair_iou: np.ndarray
    off: np.ndarray
    best: np.ndarray
    arg: np.ndarray


def _threshold_rows(dets: Detections, thr: np.ndarray, per_class_rules: KittiRules | None) -> np.ndarray:
    """Step 1: the thresholds [T,1], or [1,D] with each detection's class threshold (``iou_thresholds="kitti"``)."""
    if per_class_rules is None:
        return thr[:, None]
    thr_det = np.full((1, len(dets)), KITTI_DEFAULT_THRESHOLD)
    for c, v in _class_thresholds(per_class_rules).items():
        thr_det[0, dets.category == c] = v
    return thr_det


def _class_thresholds(kitti: KittiRules) -> dict[int, float]:
    return {int(k): float(v) for k, v in kitti.class_thresholds.items()}


def _rank_detections(
    dets: Detections,
    det_grp: np.ndarray,
    score_threshold: float,
    max_dets: int | None,
    class_agnostic: bool,
    kitti: KittiRules | None,
    needed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 2: rank [D] in the group (-1 under the score threshold), considered [D], small [D] (KITTI min height).

    Stable order by (group, descending score[, category when agnostic], file order). ``needed`` [D]: the
    rows whose rank is read (whole groups); when no group holds more than ``max_dets`` detections over the
    score threshold (every one of them is considered), only those rows are ranked, the others get -1.
    """
    D = len(dets)
    score_ok = dets.score >= score_threshold
    considered = score_ok.copy()
    cut = max_dets is not None
    if needed is not None and (not cut or _largest_group(det_grp, score_ok) <= int(max_dets)):  # type: ignore[arg-type]
        sc, cut = np.flatnonzero(score_ok & needed), False  # a group's rows are all needed or none
    else:
        sc = np.flatnonzero(score_ok)
    keys = [float_key(dets.score[sc], descending=True), det_grp[sc]]
    if class_agnostic:
        keys.insert(0, factorize(dets.category[sc])[0])
    order = sc[stable_argsort(keys)]
    starts = segment_starts(det_grp[order])
    rank_sorted = np.arange(len(order), dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    if cut:
        considered[order[rank_sorted >= max_dets]] = False
    rank = np.full(D, -1, np.int64)
    rank[order] = rank_sorted
    small = np.zeros(D, bool)
    if kitti is not None:
        from detcal.matching.kitti_ap import detection_min_height_ignored  # lazy: KITTI runs only

        small = considered & detection_min_height_ignored(dets.box, kitti.min_height)
    return rank, considered, small


def _largest_group(det_grp: np.ndarray, rows: np.ndarray) -> int:
    """The most detections ``rows`` [D] (a mask) holds in one group of ``det_grp`` [D]."""
    grp = det_grp if bool(rows.all()) else det_grp[rows]
    return int(np.bincount(grp).max(initial=0)) if len(grp) else 0


def _order_gt(
    w_row: np.ndarray,
    w_cat: np.ndarray,
    w_ign: np.ndarray,
    w_crowd: np.ndarray,
    gt_grp: np.ndarray,
    n_grp: int,
    class_agnostic: bool,
) -> _GtOrder:
    """Step 3: GT order within groups: group, non-ignored first, (category when agnostic), file order."""
    # radix orders (as np.lexsort: least significant key first); categories by order-preserving codes
    # (the rows in ascending order, as they come without KITTI's added rows, are the order so far: a stable
    # sort by them is no sort)
    rest = [] if bool((w_row[1:] >= w_row[:-1]).all()) else [w_row]
    if class_agnostic:
        rest.append(factorize(w_cat)[0])
    gord = stable_argsort([*rest, w_ign, gt_grp])
    tord = stable_argsort([*rest, gt_grp])
    gcount = np.bincount(gt_grp, minlength=n_grp)  # (counts need no order)
    W = len(gord)
    pos_of = np.empty(W, np.int64)
    pos_of[gord] = np.arange(W, dtype=np.int64)
    g_of_tie = pos_of[tord]  # the position of the tie-rank-th GT
    tie = np.empty(W, np.int64)
    tie[g_of_tie] = np.arange(W, dtype=np.int64)
    return _GtOrder(w_row[gord], w_ign[gord], w_crowd[gord], np.cumsum(gcount) - gcount, gcount, tie, g_of_tie)


def _pair_ious(dets: Detections, gt: GroundTruth, det_grp: np.ndarray, gts: _GtOrder) -> _Pairs:
    """Step 4: every detection against the GTs of its group, IoU once for all thresholds (by GT slot)."""
    return _pair_ious_areas(dets, gt, det_grp, gts, [box_areas(dets.box, dets.wh)])[0]


def _pair_ious_areas(
    dets: Detections, gt: GroundTruth, det_grp: np.ndarray, gts: _GtOrder, areas: Sequence[np.ndarray]
) -> list[_Pairs]:
    """:func:`_pair_ious` with each of the detection areas ``areas`` ([D] each): the pairs and their
    intersections once, one :class:`_Pairs` per area (:func:`detcal.matching.blocks.slot_iou_areas`)."""
    seg_cnt = gts.count[det_grp]
    seg_det = np.flatnonzero(seg_cnt > 0)  # detections meeting at least one GT ("segments")
    seg_cnt = seg_cnt[seg_det]
    so = stable_argsort([int(seg_cnt.max(initial=0)) - seg_cnt])  # by GT count, descending
    seg_det, seg_cnt = seg_det[so], seg_cnt[so]
    n_slot = np.searchsorted(-seg_cnt, -np.arange(int(seg_cnt.max(initial=0))), side="left")
    g0 = gts.start[det_grp[seg_det]]
    off, res = slot_iou_areas(
        np.take(dets.box.T, seg_det, axis=1),
        g0,
        n_slot,
        np.take(gt.box.T, gts.row, axis=1),
        gts.crowd,
        [a[seg_det] for a in areas],
        box_areas(gt.box, gt.wh)[gts.row],
    )
    return [_Pairs(seg_det, seg_cnt, g0, n_slot, pair_iou, off, best, arg) for pair_iou, best, arg in res]


class ExclusiveLayout(NamedTuple):
    """The part of the ``exclusive`` walk that does not depend on which GTs are ignored
    (:func:`exclusive_layout`): the kept pairs in walk order, with everything needed to walk them
    under any GT flags (:func:`exclusive_walk`).

    ``n_det``: D; ``k_det [K]`` the detections with a kept pair ("segments", step-major: by rank);
    ``pair_iou``/``pair_g``/``pair_tie``/``pair_seg [P]`` the kept pairs (IoU, GT position, tie
    rank of the GT, segment), ``seg_start [K]``; ``step_seg [steps + 1]`` and ``step_multi [steps]``
    the segments of each step, the one-pair segments first; ``thr`` ``[T,1]`` or ``[T,P]``;
    ``gt_row``/``gt_ign``/``gt_crowd`` ``[W]`` the working GTs in the engine's order; ``g_of_tie [W]``
    the GT position of each tie rank; ``considered [D]``; ``rank [D]`` each detection's rank in its
    group by descending score, ties in input order (-1 under the score threshold); ``strict``;
    ``k_grp [K]`` and ``gt_grp [W]`` the group of each segment and of each GT position, the groups
    with a GT numbered in order from 0.
    """

    n_det: int
    k_det: np.ndarray
    pair_iou: np.ndarray
    pair_g: np.ndarray
    pair_tie: np.ndarray
    pair_seg: np.ndarray
    seg_start: np.ndarray
    step_seg: np.ndarray
    step_multi: np.ndarray
    thr: np.ndarray
    gt_row: np.ndarray
    gt_ign: np.ndarray
    gt_crowd: np.ndarray
    g_of_tie: np.ndarray
    considered: np.ndarray
    rank: np.ndarray
    strict: bool
    k_grp: np.ndarray
    gt_grp: np.ndarray


def _kept_pairs(
    pairs: _Pairs, greedy: np.ndarray, lowest: np.ndarray, per_class: bool, strict: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs the walk may take [P] (at or above the lowest threshold, of a detection that walks and
    reaches it) and their count per segment [S], slot by slot (each slot a slice of segments)."""
    seg_ok = greedy[pairs.seg_det]
    seg_ok &= (pairs.best > lowest) if strict else (pairs.best >= lowest)
    keep = np.empty(len(pairs.pair_iou), bool)
    n_kept = np.zeros(len(pairs.seg_det), np.int64)
    for j, n in enumerate(pairs.n_slot.tolist()):
        k = keep[int(pairs.off[j]) : int(pairs.off[j]) + n]
        x = pairs.pair_iou[int(pairs.off[j]) : int(pairs.off[j]) + n]
        low = lowest[:n] if per_class else lowest
        (np.greater if strict else np.greater_equal)(x, low, out=k)
        k &= seg_ok[:n]
        n_kept[:n] += k
    return keep, n_kept


def _drop_taken_regular(
    pairs: _Pairs, gts: _GtOrder, greedy: np.ndarray, rank: np.ndarray, keep: np.ndarray, n_kept: np.ndarray
) -> None:
    """At threshold 0 (not strict: every pair is valid), in place: drop each walking detection's pairs with
    the regular (not ignored) GTs of its group when its rank is at least their number ``R``.

    Every pair then reaches the threshold, so at each step before ``R`` the group's detection of that rank
    (every considered rank walks: ``greedy`` is ``considered``, ranks 0, 1, ... in each group) takes a free
    regular GT (a free regular GT always wins), and regular GTs are never crowd (crowd GTs are ignored):
    from step ``R`` on none is free, so those pairs are never candidates and the walk's outcome is the
    same without them (LRP's matching at ``tau`` 0 pairs every detection with every GT of its group). Only
    when every walking detection's pairs were all kept (otherwise nothing is dropped)."""
    seg_ok = greedy[pairs.seg_det]
    if not np.array_equal(n_kept[seg_ok], pairs.cnt[seg_ok]):
        return  # some valid pair was not kept: the count of earlier takes is not known
    regular = np.zeros(len(gts.ign) + 1, np.int64)  # regular GTs before each GT position
    np.cumsum(~gts.ign, out=regular[1:])
    n_reg = regular[pairs.g0 + pairs.cnt]
    n_reg -= regular[pairs.g0]  # regular GTs of each segment's group: its slots 0..n_reg-1 (non-ignored first)
    late = rank[pairs.seg_det] >= n_reg
    late &= seg_ok
    if not late.any():
        return
    for j, n in enumerate(pairs.n_slot.tolist()):
        k = keep[int(pairs.off[j]) : int(pairs.off[j]) + n]
        drop = late[:n] & (n_reg[:n] > j)
        n_kept[:n] -= drop
        k &= ~drop


def _walk_order_pairs(
    keep: np.ndarray, off: np.ndarray, n_slot: np.ndarray, k_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kept pairs (``keep`` [P], slot-major: slot ``j`` at ``off[j]:off[j] + n_slot[j]``, one per
    segment) in walk order: by the place of their segment in ``k_ids`` (the segments with a kept pair,
    in walk order), then by slot. Returns each one's pair index, segment and slot.

    The kept pairs are listed in slot-major order and sorted stably by their segment's place, so each
    segment's pairs stay in slot order: only the kept pairs are touched (at threshold 0, a fifth of the
    slots of these segments once :func:`_drop_taken_regular` has run)."""
    kp = np.flatnonzero(keep)
    slot_end = off + n_slot
    kj = np.searchsorted(slot_end, kp, side="right")  # the slot of each: the first slot ending after it
    ki = kp - off[kj]
    place = np.empty(int(n_slot[0]) if len(n_slot) else 0, np.int64)  # every segment meets slot 0
    place[k_ids] = np.arange(len(k_ids), dtype=np.int64)
    so = stable_argsort([place[ki]])
    return kp[so], ki[so], kj[so]


def _exclusive_layout(
    pairs: _Pairs,
    gts: _GtOrder,
    greedy: np.ndarray,
    rank: np.ndarray,
    thr_seg: np.ndarray,
    per_class: bool,
    strict: bool,
    considered: np.ndarray,
    own_flags: bool = False,
) -> ExclusiveLayout:
    """Step 5, ``exclusive``, first half: the pairs the greedy walk may take, in walk order.

    Pairs below every threshold can never be taken and are dropped before the sequential pass; the kept pairs
    are laid out segments rank-major, then GT order (slot) within each segment. None of it reads the GT
    ignore flags, so one layout serves every set of flags (e.g. COCO's area ranges). ``own_flags``: the
    layout is walked under its own GT flags only (``greedy`` must then be every considered detection), so
    at threshold 0 the pairs no walk can take are dropped too (:func:`_drop_taken_regular`).
    """
    seg_det, pair_iou, off = pairs.seg_det, pairs.pair_iou, pairs.off
    keep, n_kept = _kept_pairs(pairs, greedy, thr_seg.min(axis=0), per_class, strict)
    if own_flags and not strict and not per_class and float(thr_seg.max(initial=0.0)) <= 0.0:
        _drop_taken_regular(pairs, gts, greedy, rank, keep, n_kept)
    # the walk order: steps (ranks) in turn; in a step the one-pair segments first (greedy_walk's short
    # path), then segment index; within a segment, GT order (slot). One sort of the segments (not of the
    # pairs), then each segment's pairs in slot order
    k_ids = np.flatnonzero(n_kept > 0)
    multi = n_kept[k_ids] > 1  # segments with several pairs to choose from
    step_code = 2 * rank[seg_det[k_ids]] + multi
    so = stable_argsort([step_code])
    k_ids, step_code = k_ids[so], step_code[so]
    kp, ki, kj = _walk_order_pairs(keep, off, pairs.n_slot, k_ids)
    k_start = np.cumsum(n_kept[k_ids]) - n_kept[k_ids]
    k_pair_seg = np.repeat(np.arange(len(k_ids), dtype=np.int64), n_kept[k_ids])
    n_steps = int(step_code[-1]) // 2 + 1 if len(step_code) else 0
    pair_g = pairs.g0[ki] + kj
    has_gt = gts.count[gts.count > 0]  # the groups with a GT, in order: numbered 0.. (not by group code)
    gt_grp = np.repeat(np.arange(len(has_gt), dtype=np.int64), has_gt)
    return ExclusiveLayout(
        n_det=len(considered),
        k_det=seg_det[k_ids],
        pair_iou=pair_iou[kp],
        pair_g=pair_g,
        pair_tie=gts.tie[pair_g],
        pair_seg=k_pair_seg,
        seg_start=k_start,
        step_seg=np.searchsorted(step_code, 2 * np.arange(n_steps + 1)),
        step_multi=np.searchsorted(step_code, 2 * np.arange(n_steps) + 1),
        thr=thr_seg[:, ki] if per_class else thr_seg,
        gt_row=gts.row,
        gt_ign=gts.ign,
        gt_crowd=gts.crowd,
        g_of_tie=gts.g_of_tie,
        considered=considered,
        rank=rank,
        strict=strict,
        k_grp=gt_grp[pairs.g0[k_ids]],
        gt_grp=gt_grp,
    )


def exclusive_walk(
    layout: ExclusiveLayout,
    ign_w: np.ndarray | None = None,
    reference: np.ndarray | None = None,
) -> np.ndarray:
    """Step 5, ``exclusive``, second half: the chosen GT position [T,K] (-1 none) of each segment
    (``layout.k_det``), pycocotools' greedy walk (:func:`greedy_walk`) with the working GTs' flags
    ``ign_w`` [W] (by position in ``layout.gt_row``; None: the layout's own).

    ``reference``: this function's result under the layout's own flags. Groups are walked apart (their
    GTs are disjoint), and a group walks as under the layout's flags where its flags are the same, or
    where no segment of it has pairs whose GTs' flags differ under either set (a segment's candidates
    then share a flag, and ties go by the tie rank, so the walk reads no flag; :func:`_changed_groups`):
    only the other groups are walked again.
    """
    if reference is None or ign_w is None:
        return _greedy(layout, ign_w)
    keep_k, sub = changed_walk(layout, ign_w)
    chosen = reference.copy()
    if len(keep_k):
        chosen[:, keep_k] = sub
    return chosen


def changed_walk(layout: ExclusiveLayout, ign_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The part of :func:`exclusive_walk` with a ``reference`` that walks again: the segments (by index
    into ``layout.k_det``, ascending) of the groups whose walk may differ from the one under the layout's
    own flags, and their chosen GT positions [T, n] under ``ign_w``; every other segment keeps the
    reference's choice."""
    keep_k = _changed_groups(layout, ign_w)[layout.k_grp]
    idx = np.flatnonzero(keep_k)
    if not len(idx):
        return idx, np.zeros((layout.thr.shape[0], 0), np.int32)
    return idx, _greedy(_sub_walk(layout, keep_k), ign_w)


def _greedy(w: ExclusiveLayout, ign_w: np.ndarray | None) -> np.ndarray:
    return greedy_walk(
        w.pair_iou,
        w.pair_g,
        w.pair_seg,
        w.seg_start,
        w.step_seg,
        w.thr,
        w.strict,
        w.gt_ign if ign_w is None else ign_w,
        w.gt_crowd,
        len(w.gt_row),
        w.pair_tie,
        w.g_of_tie,
        w.step_multi,
    )


def _changed_groups(layout: ExclusiveLayout, ign_w: np.ndarray) -> np.ndarray:
    """[groups] whether a group's walk may differ from the one under the layout's flags (:func:`exclusive_walk`).

    The walk reads the flags only to choose among a segment's pairs (a free regular GT wins): a segment of
    one pair takes its GT or nothing whatever the flags, and one whose pairs' GTs share a flag (under each
    set of flags) chooses by IoU and tie rank alone. So a group walks as under the layout's flags unless
    the flags differ in it and one of its segments has pairs whose GTs' flags differ under either set."""
    n_grp = len(layout.gt_grp) and int(layout.gt_grp[-1]) + 1  # the groups with a GT (at most W)
    diff = np.bincount(layout.gt_grp, layout.gt_ign != ign_w, n_grp) > 0
    counts = np.diff(layout.seg_start, append=len(layout.pair_iou))
    multi = np.flatnonzero(counts > 1)  # the segments with a choice to make
    if not len(multi) or not diff.any():
        return np.zeros(n_grp, bool)
    cnt = counts[multi]
    bounds = np.cumsum(cnt) - cnt
    g = layout.pair_g[expand(layout.seg_start[multi], cnt)]
    mixed = np.zeros(len(multi), bool)
    for flags in (layout.gt_ign, ign_w):
        f = flags[g].view(np.uint8)
        mixed |= np.minimum.reduceat(f, bounds) != np.maximum.reduceat(f, bounds)
    changed = np.zeros(n_grp, bool)
    changed[layout.k_grp[multi[mixed]]] = True
    changed &= diff
    return changed


def _sub_walk(layout: ExclusiveLayout, keep_k: np.ndarray | None) -> ExclusiveLayout:
    """The layout restricted to the kept segments ``keep_k`` [K] (None: all), in the same walk order."""
    if keep_k is None:
        return layout
    kk = np.flatnonzero(keep_k)
    counts = np.diff(np.append(layout.seg_start, len(layout.pair_iou)))
    sub_counts = counts[kk]
    pair_keep = np.repeat(keep_k, counts)
    return layout._replace(
        k_det=layout.k_det[kk],
        pair_iou=layout.pair_iou[pair_keep],
        pair_g=layout.pair_g[pair_keep],
        pair_tie=layout.pair_tie[pair_keep],
        pair_seg=np.repeat(np.arange(len(kk), dtype=np.int64), sub_counts),
        seg_start=np.cumsum(sub_counts) - sub_counts,
        step_seg=np.searchsorted(kk, layout.step_seg),
        step_multi=np.searchsorted(kk, layout.step_multi),
        thr=layout.thr[:, pair_keep] if layout.thr.shape[1] > 1 else layout.thr,
    )


def _assign_max(pairs: _Pairs, greedy: np.ndarray, thr_seg: np.ndarray, strict: bool) -> np.ndarray:
    """Step 5, ``max``: the first GT reaching the best IoU (non-ignored come first in the group) [T,S]."""
    ok = (pairs.best[None, :] > thr_seg) if strict else (pairs.best[None, :] >= thr_seg)
    return np.where(ok & greedy[pairs.seg_det][None, :], (pairs.g0 + pairs.arg)[None, :], -1)


def _outcome(
    chosen: np.ndarray,
    seg_det: np.ndarray,
    gts: _GtOrder,
    T: int,
    D: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """matched, ignored, gt_index [T,D] from the chosen GT position of each segment (ignored GT: ignored)."""
    matched = np.zeros((T, D), bool)
    ignored = np.zeros((T, D), bool)
    gt_index = np.full((T, D), -1, np.int64)
    ti, si = np.nonzero(chosen >= 0)
    gpos = chosen[ti, si]
    drow = seg_det[si]
    gt_index[ti, drow] = gts.row[gpos]
    ignored[ti, drow] = gts.ign[gpos]
    matched[ti, drow] = ~gts.ign[gpos]
    return matched, ignored, gt_index


def _assign_kitti(
    dets: Detections,
    gt: GroundTruth,
    kitti: KittiRules,
    thr: np.ndarray,
    per_class: bool,
    considered: np.ndarray,
    small: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 5, ``kitti``: the devkit's label-order walk per evaluated class (:func:`devkit_assign`)."""
    from detcal.matching.kitti_ap import devkit_assign  # lazy: KITTI runs only

    classes = np.unique(dets.category[considered])
    if per_class:
        cls_thr = _class_thresholds(kitti)
        thr_cls = np.array([[cls_thr.get(int(c), KITTI_DEFAULT_THRESHOLD) for c in classes.tolist()]]).reshape(1, -1)
    else:
        thr_cls = np.repeat(thr[:, None], len(classes), axis=1)
    return devkit_assign(dets, gt, kitti, thr_cls, classes, considered, small)


def _kitti_ignores(
    dets: Detections,
    gt: GroundTruth,
    kitti: KittiRules,
    considered: np.ndarray,
    small: np.ndarray,
    thr_det: np.ndarray,
    per_class: bool,
    matched: np.ndarray,
    ignored: np.ndarray,
) -> None:
    """Step 6 (in place): small detections are ignored; so is a free considered one inside a DontCare box."""
    ignored[:, small] = True
    if kitti.dontcare_category is not None:
        cand = np.flatnonzero(considered & ~small)
        ioa = dontcare_ioa(dets, gt, int(kitti.dontcare_category), cand)
        thr_c = thr_det[:, cand] if per_class else thr_det
        free = ~matched[:, cand] & ~ignored[:, cand]
        ignored[:, cand] |= free & (ioa[None, :] > thr_c)


def _match_params(mode: str, strict: bool, gt_ignore: str, kitti: KittiRules | None, per_class: bool) -> dict[str, Any]:
    """Step 7: the rules applied, for ``MatchResult.params``."""
    params: dict[str, Any] = {
        "iou_rule": ">" if strict else ">= min(t, 1-1e-10)",
        "gt_ignored": "iscrowd (pycocotools)" if (gt_ignore == "pycocotools" and kitti is None) else "ignore | iscrowd",
        "box_area": "w*h of the input's width/height where given, else corners",
        "tie_break": {
            "exclusive": "later GT",
            "max": "first GT (non-ignored first)",
            "kitti": "first detection in file order",
        }[mode],
    }
    if mode == "kitti":
        params["assignment"] = (
            "devkit: boxes in label-file order (ignored ones too) take the free detection of highest overlap"
        )
    if kitti is not None:
        params["kitti"] = {
            k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()}) for k, v in asdict(kitti).items()
        }
    if per_class:
        assert kitti is not None
        params["class_thresholds"] = {str(k): float(v) for k, v in kitti.class_thresholds.items()}
        params["default_threshold"] = KITTI_DEFAULT_THRESHOLD
        params["iou_thresholds"] = "kitti"
    return params
