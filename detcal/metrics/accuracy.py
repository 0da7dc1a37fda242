"""COCO detection accuracy (AP / AR) from detcal's own matching.

``coco_ap(dets, dataset)`` returns the twelve numbers of pycocotools
``COCOeval.summarize()`` for bounding boxes, computed with
:func:`detcal.matching.match` (exclusive, pycocotools' ``evaluateImg``
rules) and pycocotools' ``accumulate`` rules:

* IoU thresholds ``0.50:0.05:0.95`` (10), recall thresholds ``0:0.01:1``
  (101), max detections per image and category 1 / 10 / 100;
* area ranges all ``[0, 1e10]``, small ``[0, 32^2]``, medium ``[32^2,
  96^2]``, large ``[96^2, 1e10]`` (bounds inclusive): a GT outside the range
  is ignored, and a detection left unmatched outside the range (its box
  area ``w * h``) is ignored. The IoUs and the pairs the greedy walk may
  take do not depend on the ignore flags: they are computed once
  (:func:`detcal.matching.engine.exclusive_layout`), walked once under the
  crowd flags, and each area range walks again only the (image, category)
  groups whose flags change the walk (a detection choosing among GTs of
  different flags: a few thousand of the 460k walked detections at 20k
  images);
* per category, area range and max-dets: the kept detections of all images
  sorted by descending score (stable: image id, then the image's score
  order), ``tp`` / ``fp`` cumulative sums, ``recall = tp / n_gt``,
  ``precision = tp / (tp + fp + eps)`` made non-increasing from the right,
  read at the recall thresholds (0 beyond the last recall);
* AP is the mean of that precision over thresholds, recall points and the
  categories that have a non-ignored GT; AR the mean of the final recall.

The GT area is ``dataset`` GT box area unless ``gt_area`` (COCO ``area``,
e.g. mask areas) is given. No Python loop over detections or categories:
only the detections with a pair the walk may take ("segments", about a third
on COCO-shaped data) can be matched, so the outcome of an area range is kept
for them alone, in accumulate order (one int8 code per threshold: unmatched,
true positive, matched to an ignored GT); every other detection is counted by
its area alone, one cumulative count per max-dets shared by the thresholds.
Each (area range, max-dets, IoU threshold) reads the counts at the true
positives only, every category at once (:func:`_accumulate`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, MetricResult
from detcal.matching.blocks import factorize, float_key, is_member, stable_argsort
from detcal.matching.engine import ExclusiveLayout, changed_walk, exclusive_layout, exclusive_walk
from detcal.utils.processes import map_in_processes

IOU_THRESHOLDS: np.ndarray = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
"""pycocotools ``iouThrs`` (the same float values)."""
RECALL_THRESHOLDS: np.ndarray = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
"""pycocotools ``recThrs``."""
AREA_RANGES: dict[str, tuple[float, float]] = {
    "all": (0.0, 1e5**2),
    "small": (0.0, 32.0**2),
    "medium": (32.0**2, 96.0**2),
    "large": (96.0**2, 1e5**2),
}
"""pycocotools ``areaRng`` by ``areaRngLbl``."""
MAX_DETS: tuple[int, int, int] = (1, 10, 100)

SUMMARY: tuple[tuple[str, str, float | None, str, int], ...] = (
    ("AP", "ap", None, "all", 100),
    ("AP50", "ap", 0.5, "all", 100),
    ("AP75", "ap", 0.75, "all", 100),
    ("AP_small", "ap", None, "small", 100),
    ("AP_medium", "ap", None, "medium", 100),
    ("AP_large", "ap", None, "large", 100),
    ("AR1", "ar", None, "all", 1),
    ("AR10", "ar", None, "all", 10),
    ("AR100", "ar", None, "all", 100),
    ("AR_small", "ar", None, "small", 100),
    ("AR_medium", "ar", None, "medium", 100),
    ("AR_large", "ar", None, "large", 100),
)
"""The twelve lines of ``COCOeval.summarize()``: (name, kind, IoU, area, max dets)."""


def _box_area(box: np.ndarray) -> np.ndarray:
    return (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])


def accumulate_order(dets: Detections, categories: ArrayLike) -> np.ndarray:
    """pycocotools' accumulate order of the detections [D]: by category (its position in the sorted
    ``categories``), descending score, image id, then input order (stable)."""
    return _accumulate_order(dets, category_positions(np.asarray(categories, np.int64), dets.category))


def category_positions(cats: np.ndarray, category: np.ndarray) -> np.ndarray:
    """``np.searchsorted(cats, category)`` (``cats`` sorted) [D]: with small non-negative ids, one lookup
    in a table of that search over every id up to the largest (the same values, no binary search a row)."""
    return _positions(cats, category, _table_top(cats, category))


def _positions(cats: np.ndarray, category: np.ndarray, hi: int | None) -> np.ndarray:
    """:func:`category_positions` with :func:`_table_top`'s ``hi`` made already."""
    if hi is not None:
        return np.searchsorted(cats, np.arange(hi + 1, dtype=np.int64))[category]
    return np.searchsorted(cats, category)


def _table_top(cats: np.ndarray, category: np.ndarray) -> int | None:
    """The largest id when ``category`` and ``cats`` (sorted) hold small non-negative ids (tables over
    every id up to it are worth their size), else None."""
    if len(category) and len(cats) and int(cats[0]) >= 0 and int(category.min()) >= 0:
        hi = max(int(cats[-1]), int(category.max()))
        if hi < 4 * len(category) + 2_000_000:
            return hi
    return None


def _positions_known(cats: np.ndarray, category: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`category_positions` [D] and whether each ``category`` is among ``cats`` [D] (bool; with
    small ids a byte gather from a table, not a compare of the categories at the positions)."""
    hi = _table_top(cats, category)
    k = _positions(cats, category, hi)
    K = len(cats)
    if hi is not None:
        hit = np.zeros(hi + 1, bool)
        hit[cats] = True
        return k, hit[category]
    return k, ((k < K) & (cats[np.minimum(k, K - 1)] == category) if K else k < 0)


def _accumulate_order(dets: Detections, det_cat_k: np.ndarray) -> np.ndarray:
    """:func:`accumulate_order` from each detection's category position ``det_cat_k`` [D]."""
    if len(dets) == 0:
        return np.zeros(0, np.int64)
    img = dets.image_id
    if bool((img[1:] >= img[:-1]).all()):  # images in id order already (a file written image by image):
        # the input order is the image order, which the stable sort keeps among equal (category, score)
        return stable_argsort([float_key(dets.score, descending=True), det_cat_k])
    return stable_argsort([factorize(img)[0], float_key(dets.score, descending=True), det_cat_k])


def coco_eval_arrays(
    dets: Detections,
    dataset: Dataset,
    *,
    gt_area: ArrayLike | None = None,
    workers: int = 1,
    order: np.ndarray | None = None,
    layout: ExclusiveLayout | None = None,
) -> dict[str, np.ndarray]:
    """pycocotools ``COCOeval.eval`` arrays: ``precision [T,R,K,A,M]`` and ``recall [T,K,A,M]``.

    ``K`` runs over ``sorted(dataset.categories)``, ``A`` over
    :data:`AREA_RANGES`, ``M`` over :data:`MAX_DETS`; -1 where a category has
    no non-ignored GT (as pycocotools). ``workers`` > 1: the area ranges are
    evaluated in that many forked processes (each range whole by one: the
    same arrays). ``order``: :func:`accumulate_order` of ``dets`` when already known. ``layout``: the
    matching's layout of ``dets`` at :data:`IOU_THRESHOLDS` with areas from the box corners and
    ``max_dets`` 100 when already made (:func:`detcal.matching.engine.exclusive_layouts`, e.g. shared
    with LRP's).
    """
    if not isinstance(dets, Detections) or not isinstance(dataset, Dataset):
        raise DetcalInputError("coco_ap needs Detections and a Dataset", field="dets")
    gt = dataset.gt
    area = _box_area(gt.box) if gt_area is None else np.asarray(gt_area, np.float64).reshape(-1)
    if area.shape != (len(gt),) or not np.isfinite(area).all():
        raise DetcalInputError(f"gt_area must hold {len(gt)} finite numbers", field="gt_area")
    unknown = ~is_member(dets.image_id, dataset.images.id)  # a membership test: no row lookup needed
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise DetcalInputError(
            f"image_id {int(dets.image_id[i])} is not among the dataset's images",
            record=f"detection row {i}",
            field="image_id",
        )
    cats = np.array(sorted(dataset.categories), np.int64)
    K = len(cats)
    # pycocotools' accumulate order: by category, descending score (stable: images by id, then the
    # input order, which is the image's own score order among equal scores). Every later pass reads
    # the detections in that order; the matching runs on the input order (it ranks each (image,
    # category) by score, ties in input order, which the accumulate order keeps: the same outcome)
    # and its outcome is read straight in accumulate order.
    # with whether the category is evaluated, by input row (read in accumulate order as bytes, below)
    det_cat_k, known = _positions_known(cats, dets.category)
    if order is None or len(order) != len(dets):
        order = _accumulate_order(dets, det_cat_k)
    # the positions in accumulate order, which sorts by them: each position repeated its count times (the
    # same array as ``det_cat_k[order]``, written in order instead of gathered at random)
    det_cat_k = np.repeat(np.arange(K + 1, dtype=det_cat_k.dtype), np.bincount(det_cat_k, minlength=K + 1))
    # one bit per area range (in AREA_RANGES' order): a GT ignored there (pycocotools overwrites a GT
    # 'ignore' key with iscrowd; out-of-range boxes are ignored per range), a detection's area in range
    # (made by input row, then read in accumulate order: one byte a detection, not its area's eight)
    base_ignore = gt.iscrowd.astype(bool) if gt.iscrowd is not None else np.zeros(len(gt), bool)
    gt_bits = _range_bits([base_ignore | _outside(area, b) for b in AREA_RANGES.values()])
    det_area = _box_area(dets.box)
    det_bits = _range_bits([~_outside(det_area, b) for b in AREA_RANGES.values()])  # by input row, gathered below
    del det_area
    # the IoUs and the pairs the walk may take, once: each area range walks them under its GT flags
    # (the detections' areas from their corners, as this module always took them: no ``wh``)
    if layout is None:
        plain = Detections(image_id=dets.image_id, box=dets.box, score=dets.score, category=dets.category)
        layout = exclusive_layout(plain, gt, IOU_THRESHOLDS.tolist(), max_dets=MAX_DETS[-1])
    elif layout.n_det != len(dets) or layout.thr.shape != (len(IOU_THRESHOLDS), 1):
        raise DetcalInputError("the layout is not one of these detections at the COCO thresholds", field="layout")
    walk = _range_walk(layout, order, gt_bits)
    # the rank in the (image, category) group, for the max-dets cuts: the matching's own (the same
    # order: descending score, ties in input order); the area bits, whether the detection is kept and
    # where its rank stands against the max-dets read in accumulate order as one byte (one gather)
    det_bits = _pack_cuts(det_bits, known & layout.considered, layout.rank)[order]
    del known
    keep = (det_bits & _KEPT_BIT) > 0
    kept = _max_dets_orders(_rank_class(det_bits), keep, det_cat_k, K, walk.seg_pos)
    del keep, det_cat_k
    # each max-dets' selected segments renumbered once, read by every area range
    places = [None if k.seg_sel is None else _places(k.seg_sel, len(walk.seg)) for k in kept]
    ctx = (gt_bits, det_bits, kept, np.searchsorted(cats, gt.category), K, walk, places)
    A = len(AREA_RANGES)
    if workers > 1:
        parts = map_in_processes(_area_arrays, list(range(A)), ctx, workers)
        precision, recall = np.stack([p for p, _ in parts], axis=3), np.stack([r for _, r in parts], axis=2)
    else:  # each range written in place (no [T,R,K,M] array a range, no stacked copy of them)
        precision = np.empty((len(IOU_THRESHOLDS), len(RECALL_THRESHOLDS), K, A, len(MAX_DETS)))
        recall = np.empty((len(IOU_THRESHOLDS), K, A, len(MAX_DETS)))
        for r in range(A):
            _area_arrays(r, *ctx, into=(precision[:, :, :, r], recall[:, :, r]))
    del ctx, places
    return {"precision": precision, "recall": recall, "categories": cats}


_KEPT_BIT = np.uint8(1 << len(AREA_RANGES))
"""The bit of :func:`_pack_cuts`'s byte above the area-range bits: the detection is evaluated and considered."""


def _pack_cuts(area_bits: np.ndarray, keep: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """[D] uint8: the area-range bits (:func:`_range_bits`), :data:`_KEPT_BIT` where ``keep``, and one bit
    for each max-dets ``md`` of :data:`MAX_DETS` where ``rank < md`` (the bits above, largest max-dets
    first; ``rank`` -1, under the score threshold, is never kept)."""
    out = area_bits | (keep.view(np.uint8) << np.uint8(len(AREA_RANGES)))
    for i, md in enumerate(reversed(MAX_DETS)):
        out |= (rank < md).view(np.uint8) << np.uint8(len(AREA_RANGES) + 1 + i)
    return out


def _rank_class(packed: np.ndarray) -> np.ndarray:
    """[D] int8 ranks standing where the ranks stand against each max-dets, from :func:`_pack_cuts`' bits
    (0 below the smallest, then each max-dets below the next, the largest when past all of them): every
    comparison ``rank < md`` / ``rank >= md`` with an ``md`` of :data:`MAX_DETS` is the rank's own.

    The standing depends on the max-dets bits only: each of their combinations is stood once (the
    loop of :func:`_standing`) and the bytes read it from that table (one shift and one gather, not a
    masked write a max-dets)."""
    shift = np.uint8(len(AREA_RANGES) + 1)
    table = _standing(np.arange(1 << len(MAX_DETS), dtype=np.uint8) << shift)
    return np.take(table, packed >> shift)


def _standing(packed: np.ndarray) -> np.ndarray:
    """:func:`_rank_class` of ``packed``, one max-dets bit at a time."""
    out = np.full(len(packed), MAX_DETS[-1], np.int8)
    lower = (0, *MAX_DETS[:-1])  # the standing of a rank below each max-dets: the max-dets below it (0: none)
    for i in range(len(MAX_DETS)):  # below 100, then below 10, then below 1 (the bits of _pack_cuts)
        below = (packed & np.uint8(1 << (len(AREA_RANGES) + 1 + i))) > 0
        out[below] = lower[len(MAX_DETS) - 1 - i]
    return out


def _range_bits(flags: list[np.ndarray]) -> np.ndarray:
    """[N] uint8, bit ``r`` set where ``flags[r]`` [N] is."""
    out = np.zeros(len(flags[0]), np.uint8)
    for r, f in enumerate(flags):
        out |= f.view(np.uint8) << np.uint8(r)
    return out


class _RangeWalk(NamedTuple):
    """The matching every area range starts from: the layout, its segments (the detections with a pair
    the walk may take) in accumulate order (``seg`` [S]: indices into ``layout.k_det``; ``seg_pos`` [S]
    their positions in accumulate order, ascending), and the reference walk's chosen GT at each, as the
    GT's range bits (:func:`_range_bits`; :data:`_NO_GT` none), in that order (``reference`` [T,S] uint8)."""

    layout: ExclusiveLayout
    seg: np.ndarray
    seg_pos: np.ndarray
    reference: np.ndarray
    gt_bits_w: np.ndarray


_NO_GT = 1 << len(AREA_RANGES)
"""The reference's code of a segment that took no GT (above every set of range bits)."""


def _range_walk(layout: ExclusiveLayout, order: np.ndarray, gt_bits: np.ndarray) -> _RangeWalk:
    """:class:`_RangeWalk` of ``layout`` (detections by input row) for the accumulate ``order``: the walk
    under the layout's own flags (crowd GTs ignored); a range walks again only the groups whose flags
    change it (groups with GTs of several ranges, :func:`_segment_outcome`)."""
    at = np.empty(len(order), np.int64)
    at[order] = np.arange(len(order), dtype=np.int64)  # accumulate position of each input row
    pos = at[layout.k_det]
    del at
    seg = _position_order(pos, len(order))
    gt_bits_w = gt_bits[layout.gt_row]
    lut = np.empty(len(gt_bits_w) + 1, np.uint8)  # by GT position; -1 (no GT) reads the last entry
    lut[:-1] = gt_bits_w
    lut[-1] = _NO_GT
    chosen = exclusive_walk(layout)
    # row by row (a take with the [T,K] int32 positions whole would first copy them all as int64): each
    # row's codes in walk order first, then the one-byte codes put in accumulate order (not the positions)
    reference = np.empty((chosen.shape[0], len(seg)), np.uint8)
    codes = np.empty(chosen.shape[1], np.uint8)
    for t in range(chosen.shape[0]):
        np.take(lut, chosen[t], out=codes)
        np.take(codes, seg, out=reference[t])
    return _RangeWalk(layout, seg, pos[seg], reference, gt_bits_w)


def _take_rows(table: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``np.take(table, index)`` for a 2-D ``index`` of narrow integers, one row at a time: the same
    array, without first copying the whole ``index`` as 8-byte positions (np.take's conversion)."""
    out = np.empty(index.shape, table.dtype)
    for t in range(index.shape[0]):
        np.take(table, index[t], out=out[t])
    return out


class _Kept(NamedTuple):
    """The detections one max-dets keeps, in accumulate order: ``rows`` [n] (None: all), their category
    blocks ``cat_bounds`` [K+1]; the segments among them, ``seg_sel`` [s] (indices into the position-ordered
    segments; None: all), their positions among the kept ``seg_pos`` [s] (ascending) and ``seg_bounds``
    [K+1], the number of them before each category bound."""

    rows: np.ndarray | None
    cat_bounds: np.ndarray
    seg_sel: np.ndarray | None
    seg_pos: np.ndarray
    seg_bounds: np.ndarray


def _position_order(positions: np.ndarray, n: int) -> np.ndarray:
    """The indices that put the distinct ``positions`` [S] (each in ``[0, n)``) in ascending order (by
    counting: a mark per position, no sort)."""
    slot = np.full(n, -1, np.int64)
    slot[positions] = np.arange(len(positions), dtype=np.int64)
    return slot[slot >= 0]


def _outside(area: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Outside the area range ``[lo, hi]`` (bounds inclusive, as pycocotools)."""
    return (area < bounds[0]) | (area > bounds[1])


_EPS = float(np.spacing(1))


def _recall_steps(npig_k: np.ndarray) -> np.ndarray:
    """``C[k, r]``: the least true-positive count ``c >= 1`` whose recall ``c / npig_k`` reaches
    ``RECALL_THRESHOLDS[r]``, with pycocotools' float division (``[K, R]``; categories without a
    non-ignored GT get 1, they are not read)."""
    npig = np.maximum(npig_k, 1).astype(np.float64)[:, None]
    thr = RECALL_THRESHOLDS[None, :]
    c = np.maximum(np.ceil(thr * npig), 1.0)
    # the product and the division round: step down, then up, while the float recall says so
    while (down := (c > 1) & ((c - 1) / npig >= thr)).any():
        c -= down
    while (up := c / npig < thr).any():
        c += up
    return c.astype(np.int64)


def _row_segments(code: np.ndarray, out: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per IoU threshold, the segments (ascending) of the true positives and of the matches to an ignored
    GT whose area is in range, from the outcome ``code`` [T,s] (:func:`_segment_outcome`) and ``out`` [s]."""
    inside = ~out
    rows = []
    for t in range(len(code)):  # one IoU threshold at a time: the temporaries of one row stay small
        row = code[t]
        ign = row == 2
        ign &= inside
        rows.append((np.flatnonzero(row == 1), np.flatnonzero(ign)))
    return rows


def _select_rows(
    rows: list[tuple[np.ndarray, np.ndarray]], sel: np.ndarray, n: int, place: np.ndarray | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`_row_segments` of the segments ``sel`` (ascending, of ``n``) from those of all ``n``: each
    list kept where its segment is selected, renumbered by its place in ``sel`` (still ascending).
    ``place``: :func:`_places` of ``sel`` when made already (every area range reads the same)."""
    if place is None:
        place = _places(sel, n)
    out = []
    for wi, ign in rows:
        a, b = place[wi], place[ign]
        out.append((a[a >= 0].astype(np.int64, copy=False), b[b >= 0].astype(np.int64, copy=False)))
    return out


def _places(sel: np.ndarray, n: int) -> np.ndarray:
    """[n] the place of each of ``n`` segments among the selected ``sel`` (ascending), -1 where not selected."""
    place = np.full(n, -1, np.int32 if n < 2**31 else np.int64)
    place[sel] = np.arange(len(sel), dtype=place.dtype)
    return place


def _accumulate(
    code_rows: list[tuple[np.ndarray, np.ndarray]],
    out: np.ndarray,
    base_cum: np.ndarray,
    kept: _Kept,
    npig_k: np.ndarray,
    steps: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """pycocotools ``accumulate`` of one area range and max-dets: ``precision [T,R,K]``, ``recall [T,K]``.

    The kept detections (``kept``) in accumulate order, category blocks ``kept.cat_bounds``; a
    detection is counted (not ignored) by its area, ``base_cum`` [n+1] the cumulative count of that,
    except at the segments ``kept.seg_pos``, whose outcome (0 unmatched, 1 true positive, 2 matched
    to an ignored GT; ``code_rows``: per threshold the segments of the true positives and of the
    matches to an ignored GT in range, :func:`_row_segments`) depends on the threshold: a match counts
    whatever the area, a match to an ignored GT never (``out`` [s]: the segment's area is out of
    range). So the count
    differs from the area's by +1 at a true positive out of range and by -1 at a match to an ignored
    GT in range. Only the true positives are visited: recall rises at them only, so the first position
    reaching a recall threshold is the ``steps``-th true positive of its (threshold, category) group,
    and the interpolated precision (the maximum to the right) is the maximum over that true positive
    and the later ones, as precision falls between them. The precision at the ``c``-th true positive is
    ``c / (fp + c + eps)`` with ``fp`` the counted detections before it that are not true positives:
    pycocotools' cumulative sums, read where they matter, the same floats.
    """
    T, K = len(code_rows), len(npig_k)
    precision = np.empty((T, len(RECALL_THRESHOLDS), K))
    recall = np.empty((T, K))
    for t, (wi, ign) in enumerate(code_rows):
        precision[t], recall[t] = _accumulate_row(wi, ign, out, base_cum, kept, npig_k, steps)
    missing = npig_k == 0
    precision[:, :, missing], recall[:, missing] = -1.0, -1.0
    return precision, recall


def _accumulate_row(
    wi: np.ndarray,
    ign: np.ndarray,
    out: np.ndarray,
    base_cum: np.ndarray,
    kept: _Kept,
    npig_k: np.ndarray,
    steps: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_accumulate` at one IoU threshold: ``precision [R,K]``, ``recall [K]`` (``wi``, ``ign``: the
    segments, ascending, of the true positives and of the matches to an ignored GT in range; ``out`` [s]).

    The count's change from the area's up to a segment (itself included) is the true positives out of
    range up to it less the in-range matches to an ignored GT up to it: counted at the true positives
    and at the category bounds only (integers, exact)."""
    K, cat_bounds = len(npig_k), kept.cat_bounds
    w = kept.seg_pos[wi]  # the true positives by position in accumulate order
    dt = base_cum.dtype
    plus = np.zeros(len(wi) + 1, dt)  # the true positives out of range before each true positive, and all
    np.cumsum(out[wi], dtype=dt, out=plus[1:])
    tp_bounds = np.searchsorted(w, cat_bounds)  # the true positives before each category bound
    first = tp_bounds[:K]
    n_tp = np.diff(tp_bounds)
    # the counted detections up to each true positive (itself included) from its category's start: the
    # true positives c and the false positives fp before it, fp + c (integers, exact)
    upto = base_cum[1:][w]
    upto += plus[1:]
    if len(ign):
        upto -= _counts_below(ign, wi, dt)
    bound = kept.seg_bounds[:K]  # the segments before each category's start
    # the true positives before a category's start segment are those before its start position (the
    # segments' positions ascend): ``np.searchsorted(wi, bound)`` is ``first``
    before = base_cum[cat_bounds[:K]] + plus[first]
    if len(ign):
        before -= np.searchsorted(ign, bound).astype(dt, copy=False)
    upto -= np.repeat(before, n_tp)
    # c, the how-manieth true positive of its category, as a float (exact: an integer below 2**53)
    c = np.arange(1, len(w) + 1, dtype=np.float64)
    c -= np.repeat(first, n_tp)
    pr = np.empty(len(w) + 1)
    den = upto.astype(np.float64)
    den += _EPS
    np.divide(c, den, out=pr[:-1])
    pr[-1] = 0.0  # read by empty categories at the end only (masked below)
    at = np.empty((K, steps.shape[1] + 1), np.int64)
    at[:, 0] = first
    at[:, 1:] = first[:, None] + np.minimum(steps - 1, np.maximum(n_tp - 1, 0)[:, None])
    seg = np.maximum.reduceat(pr, at.ravel()).reshape(at.shape)
    interp = np.maximum.accumulate(seg[:, ::-1], axis=1)[:, -2::-1]
    precision = np.where(steps <= n_tp[:, None], interp, 0.0).T
    return precision, n_tp / np.maximum(npig_k, 1)


def _counts_below(few: np.ndarray, many: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``np.searchsorted(few, many)`` [len(many)] for two ascending lists of distinct values that share none
    (a segment is a true positive or a match to an ignored GT, not both): each of ``few`` is placed among
    ``many`` by one binary search and the places are counted up (the same integers; ``few`` is the short
    list, so the searches are its own, not one a true positive)."""
    marks = np.bincount(np.searchsorted(many, few), minlength=len(many) + 1)  # (np.add.at: twice slower)
    return np.cumsum(marks[:-1], dtype=dtype)


def _area_arrays(
    r: int,
    gt_bits: np.ndarray,
    det_bits: np.ndarray,
    kepts: list[_Kept],
    gt_k: np.ndarray,
    K: int,
    walk: _RangeWalk,
    places: list[np.ndarray | None] | None = None,
    into: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``precision [T,R,K,M]`` and ``recall [T,K,M]`` of the ``r``-th area range (bit ``r`` of ``gt_bits``
    [G]: the GT is ignored there; of ``det_bits`` [D], in accumulate order: the detection's area is in it).

    ``kepts[m]``: the kept detections of max-dets ``MAX_DETS[m]`` (the detections are in accumulate
    order; :func:`_max_dets_orders`, the same objects where two max-dets keep the same). ``places[m]``:
    :func:`_places` of ``kepts[m]``'s selected segments when made already (the same for every range).
    ``into``: the two arrays to write (e.g. views of the whole result), else new ones.
    """
    T, R, M = len(IOU_THRESHOLDS), len(RECALL_THRESHOLDS), len(MAX_DETS)
    precision, recall = into if into is not None else (np.empty((T, R, K, M)), np.empty((T, K, M)))
    bit = np.uint8(1 << r)
    gt_ignore = (gt_bits & bit) > 0
    in_range = (det_bits & bit) > 0  # ~dtIg of an unmatched detection
    out = ~in_range[walk.seg_pos]  # a segment's area out of the range
    code_rows = _row_segments(_segment_outcome(walk, r), out)
    npig_k = np.bincount(gt_k[~gt_ignore], minlength=K)[:K] if len(gt_bits) else np.zeros(K, np.int64)
    steps = _recall_steps(npig_k)
    done: dict[int, int] = {}
    for mi, kept in enumerate(kepts):
        prev = done.get(id(kept))
        if prev is not None:  # the same detections as a larger max-dets: the same arrays
            precision[..., mi], recall[..., mi] = precision[..., prev], recall[..., prev]
            continue
        done[id(kept)] = mi
        counted = in_range if kept.rows is None else in_range[kept.rows]
        base_cum = np.zeros(len(counted) + 1, np.int32 if len(counted) < 2**31 else np.int64)
        np.cumsum(counted, dtype=base_cum.dtype, out=base_cum[1:])
        sel = kept.seg_sel
        # the segments of each threshold's outcomes, listed once over every segment: a max-dets keeping
        # some takes its share of the lists (no second scan of the outcome rows)
        rows_m, out_m = (
            (code_rows, out)
            if sel is None
            else (_select_rows(code_rows, sel, len(out), None if places is None else places[mi]), out[sel])
        )
        precision[..., mi], recall[..., mi] = _accumulate(rows_m, out_m, base_cum, kept, npig_k, steps)
    return precision, recall


def _segment_outcome(walk: _RangeWalk, r: int) -> np.ndarray:
    """The walk under the ``r``-th area range's GT flags at the segments, in accumulate order: [T,S] int8,
    0 unmatched, 1 a true positive (pycocotools' ``dtm & ~dtIg``), 2 matched to an ignored GT."""
    bit = np.uint8(1 << r)
    by_bits = np.zeros(_NO_GT + 1, np.int8)  # the reference's codes: 1 + the GT's flag, 0 for no GT
    by_bits[:_NO_GT] = 1 + ((np.arange(_NO_GT, dtype=np.uint8) & bit) > 0)
    code = _take_rows(by_bits, walk.reference)
    ign_w = (walk.gt_bits_w & bit) > 0
    idx, sub = changed_walk(walk.layout, ign_w)
    if len(idx):  # the groups walked again, put at their segments' places in accumulate order
        slot = np.empty(len(walk.seg), np.int64)
        slot[walk.seg] = np.arange(len(walk.seg), dtype=np.int64)
        lut = np.empty(len(ign_w) + 1, np.int8)  # by GT position plus one
        lut[0] = 0
        lut[1:] = ign_w
        lut[1:] += 1
        sub += 1
        code[:, slot[idx]] = _take_rows(lut, sub)
    return code


def _max_dets_orders(
    rank: np.ndarray, keep: np.ndarray, det_cat_k: np.ndarray, K: int, seg_pos: np.ndarray
) -> list[_Kept]:
    """Per max-dets, the kept detections (``keep`` and ``rank`` below it) and their category blocks, with
    the segments (``seg_pos`` [S], their positions, ascending) among them; a max-dets that keeps what the
    next larger one keeps shares its object."""
    out: list[_Kept] = []
    all_bounds = np.searchsorted(det_cat_k, np.arange(K + 1))  # the category blocks of every detection
    for md in reversed(MAX_DETS):
        if out and not (keep & (rank >= md)).any():
            out.append(out[-1])
            continue
        keep = keep & (rank < md)
        if keep.all():
            out.append(_Kept(None, all_bounds, None, seg_pos, np.searchsorted(seg_pos, all_bounds)))
            continue
        rows = np.flatnonzero(keep)
        place = np.zeros(len(keep) + 1, np.int64)  # the kept detections before each position
        np.cumsum(keep, dtype=np.int64, out=place[1:])
        cat_bounds = place[all_bounds]  # the kept ones' category blocks (det_cat_k is in category order)
        sel = np.flatnonzero(keep[seg_pos])
        pos = place[seg_pos[sel] + 1]
        del place
        pos -= 1
        out.append(_Kept(rows, cat_bounds, sel, pos, np.searchsorted(pos, cat_bounds)))
    return out[::-1]


def _summarize(
    arrays: dict[str, np.ndarray], kind: str, iou: float | None, area: str, max_dets: int, k: slice | int = slice(None)
) -> float:
    a = list(AREA_RANGES).index(area)
    mi = MAX_DETS.index(max_dets)
    if kind == "ap":
        s = arrays["precision"][:, :, k, a, mi]
        if iou is not None:
            s = s[np.flatnonzero(IOU_THRESHOLDS == iou)]
    else:
        s = arrays["recall"][:, k, a, mi]
        if iou is not None:
            s = s[np.flatnonzero(IOU_THRESHOLDS == iou)]
    s = s[s > -1]
    return float(np.mean(s)) if s.size else -1.0


def _class_means(arrays: dict[str, np.ndarray], iou: float | None) -> np.ndarray:
    """``[_summarize(arrays, "ap", iou, "all", 100, k) for k in categories]`` [K], every category at once.

    A category's precision is either -1 throughout (no non-ignored GT) or >= 0 throughout; its values are
    laid out as one C-ordered row (threshold, then recall point: the order of the one-category slice), so
    each row's sum is the same pairwise sum of the same values as that slice's mean, divided by the same
    count. A category with a mix (never made here) takes :func:`_summarize` itself."""
    p = arrays["precision"][:, :, :, list(AREA_RANGES).index("all"), MAX_DETS.index(100)]
    if iou is not None:
        p = p[np.flatnonzero(IOU_THRESHOLDS == iou)]
    K = p.shape[2]
    rows = np.ascontiguousarray(np.moveaxis(p, 2, 0)).reshape(K, p.shape[0] * p.shape[1])
    valid = rows > -1
    n_valid = valid.sum(axis=1)
    out = np.full(K, -1.0)
    full = n_valid == rows.shape[1]
    if rows.shape[1]:
        out[full] = np.add.reduce(rows[full], axis=1) / rows.shape[1]
    for k in np.flatnonzero((n_valid > 0) & ~full).tolist():
        out[k] = _summarize(arrays, "ap", iou, "all", 100, k)
    return out


def coco_summary(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """The twelve ``summarize()`` numbers (:data:`SUMMARY`) of :func:`coco_eval_arrays` output."""
    return {name: _summarize(arrays, kind, iou, area, md) for name, kind, iou, area, md in SUMMARY}


def coco_ap(
    dets: Detections,
    dataset: Dataset,
    *,
    gt_area: ArrayLike | None = None,
    workers: int = 1,
    order: np.ndarray | None = None,
    layout: ExclusiveLayout | None = None,
) -> dict[str, MetricResult]:
    """COCO AP, AP50, AP75, AP_small/medium/large, AR1/10/100, AR_small/medium/large.

    Equal to pycocotools ``COCOeval(..., "bbox").summarize()`` (``stats``
    in that order). Each :class:`MetricResult` has ``params`` with the
    area range, max-dets and IoU; the ``AP`` result carries the per-class
    table (``table["category"]``, ``table["ap"]``, ``table["ap50"]``,
    ``table["n_gt"]``). ``workers``, ``order``, ``layout``: :func:`coco_eval_arrays`.
    """
    arrays = coco_eval_arrays(dets, dataset, gt_area=gt_area, workers=workers, order=order, layout=layout)
    out: dict[str, MetricResult] = {}
    for name, kind, iou, area, md in SUMMARY:
        out[name] = MetricResult(
            name=name,
            value=_summarize(arrays, kind, iou, area, md),
            variant="coco",
            params={"kind": kind, "iou": "0.50:0.95" if iou is None else iou, "area": area, "max_dets": md},
        )
    cats = arrays["categories"]
    per_ap = _class_means(arrays, None)
    per_ap50 = _class_means(arrays, 0.5)
    out["AP"].table = {
        "category": cats,
        "ap": np.where(per_ap < 0, np.nan, per_ap),
        "ap50": np.where(per_ap50 < 0, np.nan, per_ap50),
    }
    return out


def per_class_ap(dets: Detections, dataset: Dataset, *, gt_area: ArrayLike | None = None) -> dict[str, np.ndarray]:
    """Per-category COCO AP and AP50 (NaN for a category without non-ignored GT)."""
    return coco_ap(dets, dataset, gt_area=gt_area)["AP"].table


__all__ = [
    "AREA_RANGES",
    "IOU_THRESHOLDS",
    "MAX_DETS",
    "RECALL_THRESHOLDS",
    "SUMMARY",
    "accumulate_order",
    "category_positions",
    "coco_ap",
    "coco_eval_arrays",
    "coco_summary",
    "per_class_ap",
]
