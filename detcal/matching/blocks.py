"""Building blocks of the matchers (:mod:`detcal.matching.engine`, :mod:`detcal.matching.kitti_ap`).

Dense codes, stable radix ordering, segment helpers and box IoU in the exact
arithmetic of the reference tools (docs/matching.md, "IoU arithmetic"). All
vectorised; no loop over detections.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from detcal.core.types import Detections, GroundTruth


def factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes 0..K-1 of integer ``values`` (order-preserving) and K.

    A lookup table when the values are small non-negative ints (no sort),
    ``np.unique`` otherwise.
    """
    if len(values) == 0:
        return np.zeros(0, np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if lo >= 0 and hi < 4 * len(values) + 2_000_000:
        present = np.zeros(hi + 1, np.int64)
        present[values] = 1
        table = np.cumsum(present) - 1
        return table[values], int(table[-1]) + 1
    uniq, inv = np.unique(values, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(uniq)


def is_member(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``np.isin(values, ids)`` [N] for integer arrays: with small non-negative integers, one lookup in a
    table of flags (numpy's own table method shifts and compares every value first), else ``np.isin``."""
    v, ids = np.asarray(values), np.asarray(ids)
    if len(v) and len(ids) and v.dtype.kind in "iu" and ids.dtype.kind in "iu":
        lo, hi = min(int(v.min()), int(ids.min())), max(int(v.max()), int(ids.max()))
        if lo >= 0 and hi < 4 * len(v) + 2_000_000:
            table = np.zeros(hi + 1, bool)
            table[ids] = True
            return table[v]
    return np.isin(v, ids)


def group_codes(
    det_img: np.ndarray, det_cat: np.ndarray, gt_img: np.ndarray, gt_cat: np.ndarray, class_agnostic: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """Group id per detection and per GT, (image) or (image, category), and the id bound."""
    nd = len(det_img)
    img, n_img = factorize(np.concatenate([det_img, gt_img]))
    if class_agnostic:
        code, n = img, n_img
    else:
        cat, n_cat = factorize(np.concatenate([det_cat, gt_cat]))
        code, n = img * n_cat + cat, n_img * n_cat
        if n > 2 * len(code):  # sparse product space: compact it
            code, n = factorize(code)
    return code[:nd], code[nd:], n


_ALL_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def float_key(x: np.ndarray, descending: bool = False) -> np.ndarray:
    """Order-preserving map float64 -> uint64 (IEEE-754 bit trick; -0.0 counts as 0.0); ``descending``:
    order-reversing (``~float_key(x)``).

    A negative number has all its bits flipped, a positive one its sign bit: one XOR with a mask made
    from the sign, in place (two arrays, where ``np.where`` made five).
    """
    b = np.array(x, dtype=np.float64)  # a copy, worked in place
    b += 0.0  # -0.0 -> +0.0
    u = b.view(np.uint64)
    mask = u >> np.uint64(63)  # 1 for a negative number
    mask *= np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    mask |= np.uint64(1 << 63)  # negative: every bit; else the sign bit
    if descending:
        mask ^= _ALL_ONES
    u ^= mask
    return u


_CACHE_ROWS = 1 << 17
"""Rows a radix pass sorts in one piece: its arrays (a few bytes a row) stay in the processor cache."""


def stable_argsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """Stable lexicographic order of non-negative integer keys, least significant first (as ``np.lexsort``).

    LSD radix sort on 16-bit digits: numpy's stable sort of ``uint16`` is a
    radix sort, so each pass is linear; digits that are constant are skipped.
    More rows than :data:`_CACHE_ROWS`: one stable pass first puts the rows in
    buckets of the top bits of the most significant key (about that many rows
    each), then each bucket is sorted by itself. The order is the same; the
    passes of a bucket stay in the cache, where those over all rows would read
    at random from arrays larger than it (time growing faster than the rows).
    """
    n = len(keys[0])
    if n <= 2 * _CACHE_ROWS:
        return _radix_argsort(keys)
    top = np.asarray(keys[-1]).astype(np.uint64)
    hi = int(top.max())
    shift = max(0, hi.bit_length() - min(16, max(1, (n // _CACHE_ROWS).bit_length())))
    bucket = (top >> np.uint64(shift)).astype(np.uint16)
    outer = np.argsort(bucket, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(bucket, minlength=int(bucket.max()) + 1))])
    out = np.empty(n, np.int64)
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if e > s:
            rows = outer[s:e]
            out[s:e] = rows[_radix_argsort([np.asarray(k)[rows] for k in keys])]
    return out


def _radix_argsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`stable_argsort` in one piece (LSD radix passes over every row); the keys are non-negative
    integers (every caller's are: ranks, codes, indices).

    The first key is read as it is (the order so far is the identity: no gather), a key of one digit is
    cast to 2 bytes without shifting, and a key's digits are carried along only while another digit of
    it is still to sort."""
    n = len(keys[0])
    perm = np.arange(n, dtype=np.int64)
    if n == 0:
        return perm
    moved = False  # whether perm is still the identity
    for key in keys:
        k = np.asarray(key)
        top = int(k.max())
        if top < 1 << 16:  # one digit: cast to 2 bytes, then read in the order so far
            d = k.astype(np.uint16)
            if moved:
                d = d[perm]
            if d.min() != d.max():
                perm, moved = perm[np.argsort(d, kind="stable")], True
            continue
        k = k.astype(np.uint64)
        if moved:
            k = k[perm]
        sh = 0
        while True:
            d = ((k >> np.uint64(sh)) & np.uint64(0xFFFF)).astype(np.uint16)
            sh += 16
            last = sh >= 64 or (top >> sh) == 0
            if d.min() != d.max():
                p = np.argsort(d, kind="stable")
                perm, moved = perm[p], True
                if not last:
                    k = k[p]
            if last:
                break
    return perm


def segment_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Start positions of the runs of equal values in a sorted array."""
    if len(sorted_keys) == 0:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]]))


def paired_iou(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU [P] of paired boxes ``d`` [4,P] (detection) and ``g`` [4,P] (GT), xyxy rows, as maskApi ``bbIou``.

    ``iou = i / (a_d + a_g - i)`` with ``i`` the intersection, or ``i / a_d``
    for a crowd GT; 0 without overlap.
    """
    iw = np.minimum(d[2], g[2])
    iw -= np.maximum(d[0], g[0])
    ih = np.minimum(d[3], g[3])
    ih -= np.maximum(d[1], g[1])
    da = (d[2] - d[0]) * (d[3] - d[1])
    ga = (g[2] - g[0]) * (g[3] - g[1])
    np.maximum(iw, 0.0, out=iw)
    np.maximum(ih, 0.0, out=ih)
    inter = np.multiply(iw, ih, out=iw)
    union = da + ga
    union -= inter
    union = np.where(crowd, da, union)
    out = np.zeros_like(inter)
    np.divide(inter, union, out=out, where=inter > 0)
    return out


def box_areas(box: np.ndarray, wh: np.ndarray | None = None) -> np.ndarray:
    """Areas [N] of ``xyxy`` boxes [N,4] in the arithmetic of pycocotools.

    pycocotools keeps COCO ``[x, y, w, h]`` and takes ``w * h`` (maskApi
    ``bbIou``); ``(x2 - x1) * (y2 - y1)`` from the corners can differ in the
    last bit (``x2 = x + w`` is rounded). With ``wh`` (the input's width and
    height, ``GroundTruth.wh`` / ``Detections.wh``) a box's area is
    ``w * h`` where ``x1 + w == x2`` and ``y1 + h == y2`` hold exactly (so a
    ``wh`` left behind by a changed box is never used), else from corners.
    """
    box = np.asarray(box, np.float64)
    a = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
    if wh is None or len(box) == 0:
        return a
    same = (box[:, 0] + wh[:, 0] == box[:, 2]) & (box[:, 1] + wh[:, 1] == box[:, 3])
    return np.where(same, wh[:, 0] * wh[:, 1], a)


def slot_iou(
    dcol: np.ndarray,
    g0: np.ndarray,
    n_slot: np.ndarray,
    gcol: np.ndarray,
    crowd: np.ndarray,
    da: np.ndarray | None = None,
    ga: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """IoU of every detection with every GT of its group, in slot-major layout.

    The S detections (``dcol`` [4,S] xyxy) are sorted by their group's GT
    count, descending; detection i meets the GTs ``g0[i] + j`` (columns of
    ``gcol`` [4,W]) for slots ``j < count_i``, and slot j holds the first
    ``n_slot[j]`` detections. So the detection side of a slot is a slice (no
    gather) and the loop runs over GT slots (the largest group size), never
    over detections.

    Returns ``iou`` [P] (slot j at ``off[j]:off[j] + n_slot[j]``), ``off``
    [J], the best IoU per detection [S] and the first slot reaching it [S].
    IoU as maskApi ``bbIou``: ``i / (a_d + a_g - i)``, crowd ``i / a_d``.
    """
    if da is None:
        da = (dcol[2] - dcol[0]) * (dcol[3] - dcol[1])
    off, ((out, best, arg),) = slot_iou_areas(dcol, g0, n_slot, gcol, crowd, [da], ga)
    return out, off, best, arg


def slot_iou_areas(
    dcol: np.ndarray,
    g0: np.ndarray,
    n_slot: np.ndarray,
    gcol: np.ndarray,
    crowd: np.ndarray,
    das: Sequence[np.ndarray],
    ga: np.ndarray | None = None,
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """:func:`slot_iou` with each of several detection areas ``das`` ([S] each, e.g. ``w * h`` of the
    input and from the corners): the intersections once, then each IoU in the same arithmetic as
    :func:`slot_iou` with that area (the same doubles). Returns ``off`` and (iou, best, arg) per area.

    An area that differs from the first at few detections (the input's ``w * h`` and the corners' areas
    usually differ at a handful) is done as the first's results, with the pairs of those detections
    computed again with it (the same operations on the same values: the same doubles)."""
    if ga is None:
        ga = (gcol[2] - gcol[0]) * (gcol[3] - gcol[1])
    S = dcol.shape[1]
    differ = [np.flatnonzero(a != das[0]) for a in das[1:]]
    if len(das) == 1 or any(4 * len(d) > S for d in differ):
        return _slot_iou_joint(dcol, g0, n_slot, gcol, crowd, das, ga)
    off, (first,) = _slot_iou_joint(dcol, g0, n_slot, gcol, crowd, das[:1], ga)
    res = [first]
    for a, idx in zip(das[1:], differ):
        iou, best, arg = (x.copy() for x in first)
        if len(idx):  # idx ascending: their slot counts fall, as the detections' do
            cnt = np.searchsorted(-n_slot, -idx, side="left")  # the slots of each (n_slot falls)
            n_sub = np.searchsorted(-cnt, -np.arange(int(cnt[0])), side="left")
            off_s, ((iou_s, best_s, arg_s),) = _slot_iou_joint(dcol[:, idx], g0[idx], n_sub, gcol, crowd, [a[idx]], ga)
            slot_of = np.repeat(np.arange(len(n_sub)), n_sub)
            iou[off[slot_of] + idx[np.arange(len(iou_s)) - off_s[slot_of]]] = iou_s
            best[idx], arg[idx] = best_s, arg_s
        res.append((iou, best, arg))
    return off, res


def _slot_iou_joint(
    dcol: np.ndarray,
    g0: np.ndarray,
    n_slot: np.ndarray,
    gcol: np.ndarray,
    crowd: np.ndarray,
    das: Sequence[np.ndarray],
    ga: np.ndarray,
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """:func:`slot_iou_areas` over every pair, for every area in the same pass."""
    S = dcol.shape[1]
    off = np.cumsum(n_slot) - n_slot
    res = [(np.zeros(int(n_slot.sum())), np.full(S, -1.0), np.zeros(S, np.int64)) for _ in das]
    any_crowd = bool(crowd.any())
    gpack = np.concatenate([gcol, ga[None, :], crowd[None, :].astype(np.float64)])  # one take per slot
    for j in range(len(n_slot)):
        n = int(n_slot[j])
        gx1, gy1, gx2, gy2, g_area, g_crowd = np.take(gpack, g0[:n] + j, axis=1)  # fresh rows: work in place
        iw = np.minimum(gx2, dcol[2, :n], out=gx2)
        iw -= np.maximum(gx1, dcol[0, :n], out=gx1)
        ih = np.minimum(gy2, dcol[3, :n], out=gy2)
        ih -= np.maximum(gy1, dcol[1, :n], out=gy1)
        np.maximum(iw, 0.0, out=iw)
        np.maximum(ih, 0.0, out=ih)
        inter = np.multiply(iw, ih, out=iw)
        c = np.flatnonzero(g_crowd) if any_crowd else None
        for v, (da, (out, best, arg)) in enumerate(zip(das, res)):
            union = g_area if v == len(das) - 1 else g_area.copy()
            union += da[:n]  # (a_g + a_d) - i, in maskApi's order of operations
            union -= inter
            if c is not None:
                union[c] = da[c]
            x = out[off[j] : off[j] + n]
            np.divide(inter, union, out=x, where=inter > 0)  # no overlap: stays 0 (union may be 0 there)
            np.copyto(arg[:n], j, where=x > best[:n])  # strict: the first slot reaching the best is kept
            np.maximum(best[:n], x, out=best[:n])
    return off, res


def expand(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (s, c), vectorised."""
    total = int(counts.sum())
    offs = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(offs - starts, counts)


def dontcare_ioa(dets: Detections, gt: GroundTruth, dc_cat: int, rows: np.ndarray) -> np.ndarray:
    """Max over DontCare boxes of the same image of intersection / detection area, for ``rows``."""
    out = np.zeros(len(rows))
    dc = np.flatnonzero(gt.category == dc_cat)
    if len(dc) == 0 or len(rows) == 0:
        return out
    dc = dc[np.argsort(gt.image_id[dc], kind="stable")]
    dc_img = gt.image_id[dc]
    lo = np.searchsorted(dc_img, dets.image_id[rows], "left")
    hi = np.searchsorted(dc_img, dets.image_id[rows], "right")
    cnt = hi - lo
    has = np.flatnonzero(cnt > 0)
    if len(has) == 0:
        return out
    pg = dc[expand(lo[has], cnt[has])]
    pd = np.repeat(rows[has], cnt[has])
    ioa = paired_iou(dets.box[pd].T, gt.box[pg].T, np.ones(len(pd), bool))
    seg = np.cumsum(cnt[has]) - cnt[has]
    out[has] = np.maximum.reduceat(ioa, seg)
    return out


def greedy_walk(
    pair_iou: np.ndarray,
    pair_g: np.ndarray,
    pair_seg: np.ndarray,
    seg_start: np.ndarray,
    step_seg: np.ndarray,
    thr_pair: np.ndarray,
    strict: bool,
    ign_g: np.ndarray,
    crowd_g: np.ndarray,
    n_gt: int,
    pair_tie: np.ndarray | None = None,
    g_of_tie: np.ndarray | None = None,
    step_multi: np.ndarray | None = None,
) -> np.ndarray:
    """COCO greedy assignment, all groups in lockstep; returns the chosen GT per segment [T,S] (-1 none; int32
    when the GT positions fit).

    Segments are detections (runs of pairs, one per GT of the group), ordered
    rank-major: ``step_seg[r]:step_seg[r+1]`` are the rank-r detections, one
    per group, so their GTs are disjoint and one step is a vectorised
    evaluateImg inner loop for all of them. An exact IoU tie goes to the later
    pair of the segment, or with ``pair_tie`` [P] (a rank per GT, the GT of rank
    ``k`` being ``g_of_tie[k]``) to the GT of the highest rank. With
    ``step_multi`` [steps], the segments ``step_seg[r]:step_multi[r]`` of a step
    hold one pair each: such a detection takes its GT when it reaches the
    threshold and the GT is free (no choice to make), without the reductions.
    """
    T = thr_pair.shape[0]
    S = len(seg_start)
    chosen = np.full((T, S), -1, np.int32 if n_gt < 2**31 - 1 else np.int64)  # GT positions
    taken = np.zeros((n_gt, T), bool)  # by GT, then threshold: a step's GTs are rows (one gather each)
    per_pair_thr = thr_pair.shape[1] > 1
    seg_end = np.append(seg_start[1:], len(pair_iou))
    # per pair, once: its GT is crowd (stays free; None: no pair's is), and its choice key: the IoU's bits
    # (a non-negative double's bits order as its value) with bit 62 set for a regular (not ignored) GT, so
    # the largest key of a segment is its best regular pair where it has one, else its best ignored one
    pair_crowd = crowd_g[pair_g] if crowd_g.any() else None
    pair_key = choice_keys(pair_iou, ~ign_g[pair_g])
    for r in range(len(step_seg) - 1):
        s0, s1 = int(step_seg[r]), int(step_seg[r + 1])
        if step_multi is not None:
            sm = int(step_multi[r])
            if sm > s0:
                _single_pair_step(
                    pair_iou, pair_g, thr_pair, strict, pair_crowd, int(seg_start[s0]), s0, sm, taken, chosen
                )
            s0 = sm
        if s0 == s1:
            continue
        p0, p1 = int(seg_start[s0]), int(seg_end[s1 - 1])
        g = pair_g[p0:p1]
        iou = pair_iou[p0:p1]
        thr = thr_pair[:, p0:p1] if per_pair_thr else thr_pair
        seg = pair_seg[p0:p1] - s0
        starts = seg_start[s0:s1] - p0
        valid = (iou > thr) if strict else (iou >= thr)
        free = ~taken[g].T  # [T, p]
        if pair_crowd is not None:
            free |= pair_crowd[p0:p1]
        valid &= free
        # the candidates: the valid pairs of regular GTs where a segment has one, else its valid pairs; the
        # best of them: the largest key (the valid pairs' keys are >= 0, the others' -1)
        key = np.where(valid, pair_key[p0:p1], -1)
        best = np.maximum.reduceat(key, starts, axis=1)
        at_best = key == best[:, seg]
        at_best &= valid  # a segment without a valid pair has best -1: none of its pairs
        pos = np.where(at_best, np.arange(p1 - p0) if pair_tie is None else pair_tie[p0:p1], -1)
        last = np.maximum.reduceat(pos, starts, axis=1)  # exact tie -> later GT
        ti, si = np.nonzero(last >= 0)
        gi = g[last[ti, si]] if g_of_tie is None else g_of_tie[last[ti, si]]
        taken[gi, ti] = True
        chosen[ti, s0 + si] = gi
    return chosen


def choice_keys(iou: np.ndarray, regular: np.ndarray) -> np.ndarray:
    """[P] int64 keys ordering (not ignored, IoU) of pairs with IoU ``iou`` >= 0 (no -0.0): the IoU's bits,
    which order as the IoUs do, plus 2**62 where ``regular``; exact (no rounding), and >= 0."""
    key = np.asarray(iou, np.float64).view(np.int64).copy()
    key[regular] += np.int64(1 << 62)
    return key


def _single_pair_step(
    pair_iou: np.ndarray,
    pair_g: np.ndarray,
    thr_pair: np.ndarray,
    strict: bool,
    pair_crowd: np.ndarray | None,
    p0: int,
    s0: int,
    s1: int,
    taken: np.ndarray,
    chosen: np.ndarray,
) -> None:
    """:func:`greedy_walk`'s step for the segments ``s0:s1`` of one pair each (pairs from ``p0``), in place.

    The segments are of different groups, so their GTs ``g`` are distinct: the step is written through
    the mask itself (``chosen``'s columns ``s0:s1``, ``taken``'s rows ``g``, [GT, T]), without the
    (threshold, segment) index pairs of its true entries (up to T * n of them, 16 bytes each).
    ``pair_crowd``: whether each pair's GT is crowd (None: none is)."""
    p1 = p0 + (s1 - s0)
    g = pair_g[p0:p1]
    iou = pair_iou[p0:p1]
    thr = thr_pair[:, p0:p1] if thr_pair.shape[1] > 1 else thr_pair
    ok = (iou > thr) if strict else (iou >= thr)
    was = taken[g]  # [n, T], one gather: read for the free GTs, then written back with this step's takes
    free = ~was.T
    if pair_crowd is not None:
        free |= pair_crowd[p0:p1]
    ok &= free
    was |= ok.T
    taken[g] = was
    np.copyto(chosen[:, s0:s1], g, where=ok)
