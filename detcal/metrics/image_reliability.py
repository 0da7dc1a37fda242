"""Image-level reliability without ground truth: the contrastive confidence of Park et al. (TPAMI 2026).

A detector's raw output for an image (every query / candidate box, before any
score threshold, top-k or NMS) is split into the *kept* predictions (what
post-processing would keep) and the *discarded* ones. With ``s`` the top
class probability of a prediction::

    Conf+(x) = mean s over the kept predictions      (0 when none is kept)
    Conf-(x) = mean s over the discarded ones         (0 when none)
    ContrastiveConf(x) = Conf+(x) - lambda * Conf-(x)

When nothing is kept, ``Conf-`` is the mean over *all* predictions.
Post-processing (``method``, ``param``), as uq-detr 0.1.1 does it:

``threshold``  kept: ``s > param``; discarded: ``s <= param``;
``topk``       kept: the ``int(param)`` highest scores; discarded: the rest;
``nms``        kept: class-agnostic greedy NMS at IoU ``param`` (a box is
               suppressed by a kept higher-scored box with IoU ``> param``);
               discarded: every prediction outside the ``n_kept`` highest
               scores (uq-detr's rule; the NMS-suppressed boxes themselves
               are not used).

``lambda`` is fitted on a validation split (:func:`fit_lambda`): the value of
a grid that maximises the Pearson correlation between ContrastiveConf and a
per-image reliability computed with ground truth, e.g. minus the image's OCE
(:func:`per_image_oce`) or the image's AP. Images with a NaN reliability
(e.g. no object) are left out of the correlation.

The bundled detections are cut at score 0.3, which removes the discarded set;
a user must export the detector's raw outputs (every query with its box and
top score, or its class distribution) to use this measure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.metrics.narrow_ints import sort_code_type
from detcal.metrics.oce import ObjectScores
from detcal.metrics.score_order import descending_order

METHODS: tuple[str, ...] = ("threshold", "topk", "nms")
LAMBDA_GRID: tuple[float, ...] = (0, 0.25, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20)
"""uq-detr's default grid of lambda values."""
TIE_TOL: float = 1e-12
"""Correlations this close to the best count as a tie in :func:`fit_lambda`."""
NMS_BLOCK: int = 8_000_000
"""Largest padded IoU block (images x queries x queries) built at once by the NMS."""


def _nms_keep(box: np.ndarray, score: np.ndarray, img: np.ndarray, n_img: int, iou_thr: float) -> np.ndarray:
    """Class-agnostic greedy NMS of every image at once [D] (rows sorted by image, then descending score).

    The loop runs over rank positions (at most the largest image's size), each step over all images."""
    counts = np.bincount(img, minlength=n_img)
    start = np.cumsum(counts) - counts
    rank = np.arange(len(img)) - start[img]
    keep = np.zeros(len(img), bool)
    q = int(counts.max()) if len(counts) else 0
    per_block = max(1, NMS_BLOCK // max(q * q, 1))
    for lo in range(0, n_img, per_block):
        hi = min(n_img, lo + per_block)
        rows = np.flatnonzero((img >= lo) & (img < hi))
        if len(rows) == 0:
            continue
        qb = int(counts[lo:hi].max())
        b = np.zeros((hi - lo, qb, 4))
        valid = np.zeros((hi - lo, qb), bool)
        b[img[rows] - lo, rank[rows]] = box[rows]
        valid[img[rows] - lo, rank[rows]] = True
        area = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
        iw = np.maximum(
            0.0, np.minimum(b[:, :, None, 2], b[:, None, :, 2]) - np.maximum(b[:, :, None, 0], b[:, None, :, 0])
        )
        ih = np.maximum(
            0.0, np.minimum(b[:, :, None, 3], b[:, None, :, 3]) - np.maximum(b[:, :, None, 1], b[:, None, :, 1])
        )
        inter = iw * ih
        union = area[:, :, None] + area[:, None, :] - inter
        iou = np.zeros_like(inter)
        np.divide(inter, union, out=iou, where=union > 0)
        over = iou > iou_thr
        suppressed = ~valid
        kept = np.zeros_like(valid)
        for r in range(qb):
            alive = ~suppressed[:, r]
            kept[:, r] = alive
            suppressed |= alive[:, None] & over[:, r, :]
        keep[rows] = kept[img[rows] - lo, rank[rows]]
    return keep


def _image_rows(ids: np.ndarray, images: np.ndarray) -> np.ndarray:
    """Row in ``images`` [D] of each id (the first of equal ids); an unknown id is an input error. A lookup
    table when the ids are distinct small non-negative integers (no binary search), else a binary search."""
    order_img = np.argsort(images, kind="stable")
    sorted_ids = images[order_img]
    small = bool(len(ids) and len(images)) and sorted_ids[0] >= 0 and sorted_ids[-1] < 4 * len(ids) + 100_000
    if small and np.all(sorted_ids[1:] > sorted_ids[:-1]):
        table = np.full(int(sorted_ids[-1]) + 1, -1, np.int64)
        table[sorted_ids] = order_img
        if len(ids) and int(ids.min()) >= 0 and int(ids.max()) < len(table):  # every id inside: one gather
            img = table[ids]
        else:
            inside = (ids >= 0) & (ids < len(table))
            img = np.where(inside, table[np.where(inside, ids, 0)], -1)
        known = img >= 0
    else:
        pos = np.clip(np.searchsorted(sorted_ids, ids), 0, max(len(images) - 1, 0))
        known = (sorted_ids[pos] == ids) if len(images) else np.zeros(len(ids), bool)
        img = order_img[pos] if len(images) else np.zeros(len(ids), np.int64)
    if not np.all(known):
        raise DetcalInputError(f"prediction for unknown image id {int(ids[~known][0])}", field="image_id")
    return img


def _sorted_split(
    image_id: np.ndarray, score: np.ndarray, images: np.ndarray, method: str, param: float, box: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """(order [D], image row [D], score [D], kept [D], rank [D], N), rows sorted by image then descending score;
    the ranks in the image only where the method reads them (``topk``, ``nms``; else an empty array)."""
    if method not in METHODS:
        raise DetcalInputError(f"unknown post-processing {method!r}; choose one of {METHODS}", field="method")
    images = np.asarray(images, dtype=np.int64).reshape(-1)
    score = np.asarray(score, dtype=np.float64).reshape(-1)
    ids = np.asarray(image_id, dtype=np.int64).reshape(-1)
    if len(ids) != len(score):
        raise DetcalInputError(f"image_id has {len(ids)} rows, score {len(score)}", field="score")
    if not np.all(np.isfinite(score)):
        bad = int(np.flatnonzero(~np.isfinite(score))[0])
        raise DetcalInputError("scores must be finite", record=f"prediction row {bad}", field="score")
    img = _image_rows(ids, images)
    # by image, then descending score, ties in input order (as lexsort((-score, img))): a stable sort of the
    # scores, then a stable radix sort of the image rows (gathered as 16-bit codes when they fit: less memory
    # read in score order, the same values)
    img = img.astype(sort_code_type(len(images)))
    order = descending_order(score)  # the sort TIDE's scene made of the same scores, checked and reused
    order = order[np.argsort(img[order], kind="stable")]
    img, s = img[order].astype(np.int64), score[order]
    n_img = len(images)
    rank = np.zeros(0, np.int64)  # not read by the threshold rule
    if method != "threshold":
        counts = np.bincount(img, minlength=n_img)
        rank = np.arange(len(img)) - (np.cumsum(counts) - counts)[img]
    if method == "threshold":
        kept = s > param
    elif method == "topk":
        kept = rank < int(param)
    else:
        if box is None:
            raise DetcalInputError("NMS post-processing needs the boxes", field="box")
        kept = _nms_keep(np.asarray(box, dtype=np.float64).reshape(-1, 4)[order], s, img, n_img, float(param))
    return order, img, s, kept, rank, n_img


def kept_mask(
    image_id: np.ndarray,
    score: np.ndarray,
    images: np.ndarray,
    method: str = "threshold",
    param: float = 0.3,
    box: np.ndarray | None = None,
) -> np.ndarray:
    """Which predictions [D] (input order) the post-processing ``method`` at ``param`` keeps."""
    order, _, _, kept, _, _ = _sorted_split(image_id, score, images, method, param, box)
    out = np.zeros(len(order), bool)
    out[order] = kept
    return out


def split_confidence(
    image_id: np.ndarray,
    score: np.ndarray,
    images: np.ndarray,
    method: str = "threshold",
    param: float = 0.3,
    box: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(Conf+ [N], Conf- [N])`` of every image in ``images`` from raw predictions (module docstring).

    ``image_id [D]``, ``score [D]`` (top class probability) and, for ``nms``, ``box [D,4]`` xyxy.
    """
    conf_pos, conf_neg, _ = split_and_kept(image_id, score, images, method, param, box)
    return conf_pos, conf_neg


def split_and_kept(
    image_id: np.ndarray,
    score: np.ndarray,
    images: np.ndarray,
    method: str = "threshold",
    param: float = 0.3,
    box: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Conf+ [N], Conf- [N], kept [D])``: :func:`split_confidence` and :func:`kept_mask` from one sort."""
    order, img, s, kept, rank, n_img = _sorted_split(image_id, score, images, method, param, box)
    counts = np.bincount(img, minlength=n_img)
    # the kept per image, from one cumulative count read at the image ends (the rows come by image): the same
    # integers as summing the flags, as floats (exact)
    ends = np.cumsum(counts)
    before = np.zeros(len(kept) + 1, np.int64)
    np.cumsum(kept, out=before[1:])
    n_pos = (before[ends] - before[ends - counts]).astype(np.float64)
    del before, ends
    neg = rank >= n_pos[img] if method == "nms" else ~kept
    with np.errstate(divide="ignore", invalid="ignore"):
        conf_pos = np.bincount(img, weights=np.where(kept, s, 0.0), minlength=n_img) / n_pos
        # the rest of each image when the discarded are the not kept (the same integers)
        n_neg = np.bincount(img, weights=neg, minlength=n_img) if method == "nms" else counts - n_pos
        conf_neg = np.bincount(img, weights=np.where(neg, s, 0.0), minlength=n_img) / n_neg
        conf_all = np.bincount(img, weights=s, minlength=n_img) / counts
    conf_neg = np.where(n_neg > 0, conf_neg, 0.0)
    none = n_pos == 0
    conf_pos = np.where(none, 0.0, conf_pos)
    conf_neg = np.where(none, np.where(counts > 0, conf_all, 0.0), conf_neg)
    in_order = np.zeros(len(order), bool)
    in_order[order] = kept
    return conf_pos, conf_neg, in_order


def contrastive_conf(
    image_id: np.ndarray,
    score: np.ndarray,
    images: np.ndarray,
    method: str = "threshold",
    param: float = 0.3,
    lambda_: float = 5.0,
    box: np.ndarray | None = None,
) -> np.ndarray:
    """ContrastiveConf [N] of every image in ``images``: ``Conf+ - lambda_ * Conf-`` (module docstring)."""
    conf_pos, conf_neg = split_confidence(image_id, score, images, method, param, box)
    return conf_pos - float(lambda_) * conf_neg


def pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of every row of ``x`` [L,N] with ``y`` [N] [L] (NaN for a constant row)."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    y = np.asarray(y, dtype=np.float64)
    xm = x - x.mean(axis=1, keepdims=True)
    ym = y - y.mean()
    with np.errstate(divide="ignore", invalid="ignore"):
        xn = xm / np.linalg.norm(xm, axis=1, keepdims=True)
        r = xn @ (ym / np.linalg.norm(ym))
    return np.clip(r, -1.0, 1.0)


def fit_lambda(
    conf_pos: np.ndarray, conf_neg: np.ndarray, reliability: np.ndarray, lambdas: Sequence[float] = LAMBDA_GRID
) -> tuple[float, float, np.ndarray]:
    """``(best lambda, its Pearson correlation, correlation of every lambda [L])``.

    Maximises the correlation of ``conf_pos - lambda * conf_neg`` with ``reliability`` over the
    images where the reliability is not NaN. Correlations within ``TIE_TOL`` of the maximum count
    as equal and the first of them wins (uq-detr takes the larger float, which for such ties,
    e.g. with ``Conf+`` constant, is rounding noise)."""
    rel = np.asarray(reliability, dtype=np.float64).reshape(-1)
    if not (len(rel) == len(conf_pos) == len(conf_neg)):
        raise DetcalInputError(
            f"reliability has {len(rel)} images, the confidences {len(conf_pos)}", field="reliability"
        )
    ok = ~np.isnan(rel)
    if ok.sum() < 3:
        raise DetcalInputError("fitting lambda needs at least 3 images with a reliability value", field="reliability")
    lam = np.asarray(list(lambdas), dtype=np.float64)
    if len(lam) == 0:
        raise DetcalInputError("the lambda grid is empty", field="lambdas")
    scores = conf_pos[ok][None, :] - lam[:, None] * conf_neg[ok][None, :]
    r = pearson(scores, rel[ok])
    finite = np.where(np.isnan(r), -np.inf, r)
    best = int(np.flatnonzero(finite >= finite.max() - TIE_TOL)[0])
    return float(lam[best]), float(r[best]), r


def per_image_oce(s: ObjectScores, images: np.ndarray) -> np.ndarray:
    """OCE of every image in ``images`` [N] from per-object scores (NaN for an image without objects)."""
    images = np.asarray(images, dtype=np.int64).reshape(-1)
    order = np.argsort(images, kind="stable")
    pos = np.clip(np.searchsorted(images[order], s.image_id), 0, max(len(images) - 1, 0))
    ok = images[order][pos] == s.image_id if len(images) else np.zeros(len(s.image_id), bool)
    row = order[pos[ok]]
    n = np.bincount(row, minlength=len(images)).astype(np.float64)
    total = np.bincount(row, weights=s.per_object[ok], minlength=len(images))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, total / n, np.nan)
