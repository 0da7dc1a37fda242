"""Probabilistic Detection Quality (PDQ; Hall et al., WACV 2020).

A probabilistic box has two independent Gaussian corners: top-left
``(X1, Y1) ~ N(mu_tl, S_tl)`` and bottom-right ``(X2, Y2) ~ N(mu_br, S_br)``,
2x2 covariances in pixels (``Detections.corner_cov [D,2,2,2]``, PDQ's
``covars``). Pixel ``(r, c)`` covers ``[c, c+1) x [r, r+1)``; the probability
that the box covers it (overlaps it) is::

    p(r, c) = P(X1 <= c + 1, Y1 <= r + 1) * P(X2 >= c, Y2 >= r)

(bivariate normal CDFs, correlation included); ``p < 0.0027`` is set to 0,
as in the reference. A box without covariance covers each pixel by the
fraction of the pixel inside it (the reference's ``BBoxDetInst`` with
positional probability 1); with ``fixed_cov=v`` every detection instead gets
the corner covariance ``v * I`` (px^2; the reference converter's fixed
covariance option).

Ground truth ``g`` (boxes only: its pixels are those whose centre lies in the
box, at least the pixel of its centre; crowd and ignored GT are left out) and
detection ``d`` of the same image::

    fg(g, d) = sum_{pixels of g} log(p + 1e-14)
    bg(g, d) = sum_{pixels outside g, p > 0} log(1 - p + 1e-14)
    spatial  = exp((fg + bg) / n_pixels(g))    (snapped to 0 or 1 where np.isclose, as the reference)
    label    = score of d if its category is g's, else 0   (single-label detections)
    pPDQ     = sqrt(spatial * label)

Per image, the assignment maximising the sum of pPDQ (Hungarian,
``scipy.optimize.linear_sum_assignment``); assigned pairs with pPDQ > 0 are
TP, the other detections FP, the other GT FN::

    PDQ = sum_TP pPDQ / (N_TP + N_FP + N_FN)

with the averages over TPs of pPDQ, spatial, label, foreground
``exp(fg / n)`` and background ``exp(bg / n)`` quality. This is PDQ of the
paper; later versions of the reference also scale the label qualities by
one minus a calibration error, which is not done here.

Conventions against the reference (``pdq_evaluation``): its boxes are in
inclusive pixel corners (``x2`` is the last covered pixel) and ours are
continuous (``x2 = x1 + w``). ``inclusive=True`` moves the bottom-right
corner by +1 px to follow the reference on boxes written in its convention.

Covariance inputs: ``corner_cov`` as is; ``box_cov`` (x, y, w, h) 4x4 by
``x2 = x + w, y2 = y + h`` (the cross-covariance of the corners is dropped:
PDQ's corners are independent); ``box_std`` (cx, cy, w, h) by ``x1 = cx -
w/2`` etc. (:func:`corner_covariances`).

Implementation: a loop over images (unavoidable: one assignment per image);
within an image, every detection's map is evaluated on its own window (the
box widened by 5 standard deviations, outside of which ``p`` falls below the
threshold) and summed over any GT rectangle by integral images, so no
Python loop runs over detections or pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, Images, MetricResult
from detcal.metrics import pdq_evaluation as pe
from detcal.metrics._special import ndtr
from detcal.utils.processes import map_in_processes

HEATMAP_THRESHOLD: float = 0.0027
"""Spatial probabilities below this are 0 (the reference's ``_HEATMAP_THRESH``)."""
SMALL: float = 1e-14
"""Added inside the logs (the reference's ``_SMALL_VAL``)."""
_N_SIGMA: float = 5.0

# Gauss-Legendre nodes on [0, 1] for Plackett's identity
_GL_X, _GL_W = np.polynomial.legendre.leggauss(24)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W


def bvn_cdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """``P(Z1 <= h, Z2 <= k)`` for standard normals of correlation ``rho`` (broadcast arrays).

    Plackett's identity ``d Phi2 / d rho = phi2(h, k, rho)``:
    ``Phi2(h, k, rho) = Phi(h) Phi(k) + int_0^rho phi2(h, k, r) dr``, by 24-point
    Gauss-Legendre quadrature (|rho| <= 0.95 keeps it accurate to ~1e-9).
    """
    h, k, rho = np.broadcast_arrays(np.asarray(h, float), np.asarray(k, float), np.asarray(rho, float))
    out = ndtr(h) * ndtr(k)
    nz = rho != 0
    if not nz.any():
        return out
    hh, kk, rr = h[nz], k[nz], rho[nz]
    hh = np.clip(hh, -40, 40)
    kk = np.clip(kk, -40, 40)
    r = rr[..., None] * _GL_X
    one = 1.0 - r * r
    q = (hh[..., None] ** 2 - 2.0 * r * hh[..., None] * kk[..., None] + kk[..., None] ** 2) / (2.0 * one)
    dens = np.exp(-q) / (2.0 * np.pi * np.sqrt(one))
    out[nz] += rr * (dens @ _GL_W)
    return np.clip(out, 0.0, 1.0)


def box_cov_to_corner_cov(box_cov: np.ndarray) -> np.ndarray:
    """``[D,4,4]`` covariance of (x, y, w, h) -> ``[D,2,2,2]`` covariances of (x1, y1) and (x2, y2)."""
    c = np.asarray(box_cov, dtype=np.float64)
    a = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    br = np.einsum("ij,djk,lk->dil", a, c, a)
    return np.stack([c[:, :2, :2], br], axis=1)


def box_std_to_corner_cov(box_std: np.ndarray) -> np.ndarray:
    """``[D,4]`` std of (cx, cy, w, h), independent -> ``[D,2,2,2]`` (both corners: var c + var size / 4)."""
    s = np.asarray(box_std, dtype=np.float64)
    vx = s[:, 0] ** 2 + 0.25 * s[:, 2] ** 2
    vy = s[:, 1] ** 2 + 0.25 * s[:, 3] ** 2
    one = np.zeros((len(s), 2, 2))
    one[:, 0, 0], one[:, 1, 1] = vx, vy
    return np.stack([one, one.copy()], axis=1)


def corner_covariances(dets: Detections, fixed_cov: float | None = None) -> np.ndarray | None:
    """The ``[D,2,2,2]`` corner covariances PDQ uses, or ``None`` (deterministic boxes).

    ``fixed_cov`` (px^2) overrides everything. Otherwise ``corner_cov``,
    ``box_cov`` or ``box_std``, in that order; each 2x2 block must be
    symmetric positive semi-definite.
    """
    D = len(dets)
    if fixed_cov is not None:
        if not (np.isfinite(fixed_cov) and fixed_cov > 0):
            raise DetcalInputError(f"fixed_cov must be a positive variance in px^2, got {fixed_cov}", field="fixed_cov")
        return np.broadcast_to(np.eye(2) * float(fixed_cov), (D, 2, 2, 2)).copy()
    if dets.corner_cov is not None:
        cc, name = dets.corner_cov, "corner_cov"
    elif dets.box_cov is not None:
        cc, name = box_cov_to_corner_cov(dets.box_cov), "box_cov"
    elif dets.box_std is not None:
        cc, name = box_std_to_corner_cov(dets.box_std), "box_std"
    else:
        return None
    cc = np.asarray(cc, dtype=np.float64).reshape(D, 2, 2, 2)
    a, b, c, d = cc[..., 0, 0], cc[..., 0, 1], cc[..., 1, 0], cc[..., 1, 1]
    tol = 1e-9 * np.maximum(1.0, np.abs(cc).max(axis=(-1, -2)))
    bad = (
        ~np.isfinite(cc).all(axis=(-1, -2))
        | (np.abs(b - c) > tol)
        | (a < -tol)
        | (d < -tol)
        | (a * d - b * c < -tol * np.maximum(1.0, a * d))
    )
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise DetcalInputError(
            f"{'top-left' if j == 0 else 'bottom-right'} corner covariance {cc[i, j].tolist()} is not symmetric positive semi-definite",
            record=f"detection row {int(i)}",
            field=name,
        )
    return cc


@dataclass
class _ImageMaps:
    """Per-detection windows: origin (x0, y0) [D], size (nw, nh), integral images of fg / bg log terms [D,H+1,W+1]."""

    x0: np.ndarray
    y0: np.ndarray
    nw: np.ndarray
    nh: np.ndarray
    s_fg: np.ndarray
    s_bg: np.ndarray


def _windows(box: np.ndarray, sx: np.ndarray, sy: np.ndarray, W: int, H: int, shift: float) -> tuple[np.ndarray, ...]:
    x0 = np.clip(np.floor(box[:, 0] - _N_SIGMA * sx[:, 0]) - 1, 0, W).astype(np.int64)
    x1 = np.clip(np.ceil(box[:, 2] + shift + _N_SIGMA * sx[:, 1]) + 1, 0, W).astype(np.int64)
    y0 = np.clip(np.floor(box[:, 1] - _N_SIGMA * sy[:, 0]) - 1, 0, H).astype(np.int64)
    y1 = np.clip(np.ceil(box[:, 3] + shift + _N_SIGMA * sy[:, 1]) + 1, 0, H).astype(np.int64)
    return x0, np.maximum(x1 - x0, 0), y0, np.maximum(y1 - y0, 0)


def _maps(box: np.ndarray, cov: np.ndarray | None, W: int, H: int, shift: float, threshold: float) -> _ImageMaps:
    """Spatial probability maps of the detections of one image, on their windows, as integral images."""
    D = len(box)
    if cov is None:
        sx = np.zeros((D, 2))
        sy = np.zeros((D, 2))
    else:
        sx = np.sqrt(np.maximum(cov[:, :, 0, 0], 0))
        sy = np.sqrt(np.maximum(cov[:, :, 1, 1], 0))
    x0, nw, y0, nh = _windows(box, sx, sy, W, H, shift)
    Wm, Hm = int(nw.max(initial=0)), int(nh.max(initial=0))
    cx = x0[:, None] + np.arange(Wm)  # pixel columns [D,Wm]
    ry = y0[:, None] + np.arange(Hm)  # pixel rows [D,Hm]
    valid = (np.arange(Wm) < nw[:, None])[:, None, :] & (np.arange(Hm) < nh[:, None])[:, :, None]  # [D,Hm,Wm]
    x1, y1, x2, y2 = box[:, 0:1], box[:, 1:2], box[:, 2:3] + shift, box[:, 3:4] + shift
    if cov is None:
        ox = np.clip(np.minimum(x2, cx + 1.0) - np.maximum(x1, cx), 0.0, 1.0)
        oy = np.clip(np.minimum(y2, ry + 1.0) - np.maximum(y1, ry), 0.0, 1.0)
        p = oy[:, :, None] * ox[:, None, :]
    else:
        eps = 1e-12
        sxe, sye = np.maximum(sx, eps), np.maximum(sy, eps)
        rho = np.clip(cov[:, :, 0, 1] / (sxe * sye), -0.999, 0.999)
        rho = np.where((sx > eps) & (sy > eps), rho, 0.0)
        # top-left: P(X1 <= c + 1, Y1 <= r + 1); bottom-right: P(X2 >= c, Y2 >= r) = Phi2((mu - c)/s, (mu - r)/s, rho)
        hx_tl = (cx + 1.0 - x1) / sxe[:, 0:1]
        hy_tl = (ry + 1.0 - y1) / sye[:, 0:1]
        hx_br = (x2 - cx) / sxe[:, 1:2]
        hy_br = (y2 - ry) / sye[:, 1:2]
        if not rho.any():
            p = (ndtr(hy_tl) * ndtr(hy_br))[:, :, None] * (ndtr(hx_tl) * ndtr(hx_br))[:, None, :]
        else:
            r_tl = rho[:, 0][:, None, None]
            r_br = rho[:, 1][:, None, None]
            p = bvn_cdf(hx_tl[:, None, :], hy_tl[:, :, None], r_tl) * bvn_cdf(
                hx_br[:, None, :], hy_br[:, :, None], r_br
            )
        p = np.minimum(p, 1.0)
        p[p < threshold] = 0.0
    p = np.where(valid, p, 0.0)
    lfg = np.where(valid, np.log(p + SMALL), 0.0)
    lbg = np.where(p > 0, np.log(1.0 - p + SMALL), 0.0)
    s_fg = np.zeros((D, Hm + 1, Wm + 1))
    s_bg = np.zeros((D, Hm + 1, Wm + 1))
    s_fg[:, 1:, 1:] = lfg.cumsum(1).cumsum(2)
    s_bg[:, 1:, 1:] = lbg.cumsum(1).cumsum(2)
    return _ImageMaps(x0, y0, nw, nh, s_fg, s_bg)


def gt_pixel_ranges(box: np.ndarray, W: int, H: int) -> tuple[np.ndarray, ...]:
    """Pixel ranges ``[c0, c1) x [r0, r1)`` of GT boxes [G,4]: centres inside the box, at least the centre pixel."""

    def axis(a: np.ndarray, b: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        lo = np.ceil(a - 0.5).astype(np.int64)
        hi = np.ceil(b - 0.5).astype(np.int64)
        mid = np.floor(0.5 * (a + b)).astype(np.int64)
        empty = hi <= lo
        lo = np.where(empty, mid, lo)
        hi = np.where(empty, mid + 1, hi)
        lo = np.clip(lo, 0, n - 1)
        hi = np.clip(hi, lo + 1, n)
        return lo, hi

    c0, c1 = axis(box[:, 0], box[:, 2], W)
    r0, r1 = axis(box[:, 1], box[:, 3], H)
    return c0, c1, r0, r1


def _rect_sums(
    S: np.ndarray, m: _ImageMaps, c0: np.ndarray, c1: np.ndarray, r0: np.ndarray, r1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sum over each GT rectangle [G] of each detection's map [D] (integral image S [D,...]); and the pixel counts inside the windows."""
    lx0 = np.clip(c0[:, None] - m.x0[None, :], 0, m.nw[None, :])
    lx1 = np.clip(c1[:, None] - m.x0[None, :], 0, m.nw[None, :])
    ly0 = np.clip(r0[:, None] - m.y0[None, :], 0, m.nh[None, :])
    ly1 = np.clip(r1[:, None] - m.y0[None, :], 0, m.nh[None, :])
    d = np.broadcast_to(np.arange(S.shape[0])[None, :], lx0.shape)
    tot = S[d, ly1, lx1] - S[d, ly0, lx1] - S[d, ly1, lx0] + S[d, ly0, lx0]
    return tot, (lx1 - lx0) * (ly1 - ly0)


def pair_qualities(
    det_box: np.ndarray,
    det_cov: np.ndarray | None,
    det_score: np.ndarray,
    det_cat: np.ndarray,
    gt_box: np.ndarray,
    gt_cat: np.ndarray,
    W: int,
    H: int,
    *,
    inclusive: bool = False,
    threshold: float = HEATMAP_THRESHOLD,
    chunk: int = 16,
) -> dict[str, np.ndarray]:
    """All [G,D] qualities of one image: ``ppdq``, ``spatial``, ``label``, ``fg``, ``bg``."""
    shift = 1.0 if inclusive else 0.0
    c0, c1, r0, r1 = gt_pixel_ranges(gt_box, W, H)
    n = ((c1 - c0) * (r1 - r0)).astype(np.float64)[:, None]
    G, D = len(gt_box), len(det_box)
    fg = np.empty((G, D))
    bg = np.empty((G, D))
    # detections in chunks of similar window size, so that padding to the largest window stays small
    if det_cov is None:
        sx = sy = np.zeros((D, 2))
    else:
        sx = np.sqrt(np.maximum(det_cov[:, :, 0, 0], 0))
        sy = np.sqrt(np.maximum(det_cov[:, :, 1, 1], 0))
    _, nw, _, nh = _windows(det_box, sx, sy, W, H, shift)
    order = np.argsort(nw * nh, kind="stable")
    for part in np.array_split(order, max(1, -(-D // chunk))):  # loop over chunks of detections
        m = _maps(det_box[part], None if det_cov is None else det_cov[part], W, H, shift, threshold)
        fg_in, n_in = _rect_sums(m.s_fg, m, c0, c1, r0, r1)
        bg_in, _ = _rect_sums(m.s_bg, m, c0, c1, r0, r1)
        fg[:, part] = fg_in + (n - n_in) * np.log(SMALL)  # GT pixels outside a window have p = 0
        bg[:, part] = m.s_bg[:, -1, -1][None, :] - bg_in
    spatial = pe.snap(np.exp((fg + bg) / n))
    label = np.where(gt_cat[:, None] == det_cat[None, :], det_score[None, :], 0.0)
    return {
        "ppdq": np.sqrt(spatial * label),
        "spatial": spatial,
        "label": label,
        "fg": pe.snap(np.exp(fg / n)),
        "bg": pe.snap(np.exp(bg / n)),
    }


def _image_rows_checked(images: Images, dets: Detections) -> np.ndarray:
    """Row of each detection's image [D]; a clear error for an unknown image id or a score outside [0, 1]."""
    img_of_det = images.index_of(dets.image_id)
    if (img_of_det < 0).any():
        i = int(np.flatnonzero(img_of_det < 0)[0])
        raise DetcalInputError(
            f"image_id {int(dets.image_id[i])} is not among the dataset's images",
            record=f"detection row {i}",
            field="image_id",
        )
    bad = ~((dets.score >= 0) & (dets.score <= 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DetcalInputError(f"score {dets.score[i]} is outside [0, 1]", record=f"detection row {i}", field="score")
    return img_of_det


def _continuous_params(dets: Detections, fixed_cov: float | None, inclusive: bool, threshold: float) -> dict[str, Any]:
    """The parameters recorded with a ``detcal_continuous`` PDQ."""
    return {
        "corners": "inclusive" if inclusive else "continuous",
        "fixed_cov": fixed_cov,
        "heatmap_threshold": threshold,
        "inclusive": inclusive,
        "covariance": "fixed" if fixed_cov is not None else (dets.uncertainty_kind or "none"),
        "gt_mask": "box pixels (centre inside)",
        "label_quality": "score of the detection's own class",
        "assignment": "optimal (Hungarian) per image",
        "ece_scaling": False,
    }


def _pdq_continuous(
    dataset: Dataset,
    dets: Detections,
    *,
    fixed_cov: float | None = None,
    inclusive: bool = False,
    threshold: float = HEATMAP_THRESHOLD,
) -> MetricResult:
    """PDQ of the ``detcal_continuous`` variant (module docstring); per-detection results in ``table``."""
    images = dataset.images
    cov = corner_covariances(dets, fixed_cov)
    gt = dataset.gt
    keep_gt = ~(gt.iscrowd | gt.ignore)
    gt_rows = np.flatnonzero(keep_gt)
    img_of_det = _image_rows_checked(images, dets)
    img_of_gt = dataset.gt_image_rows()[gt_rows]
    N = len(images)
    d_order = np.argsort(img_of_det, kind="stable")
    d_start = np.searchsorted(img_of_det[d_order], np.arange(N + 1))
    g_order = np.argsort(img_of_gt, kind="stable")
    g_start = np.searchsorted(img_of_gt[g_order], np.arange(N + 1))
    D = len(dets)
    det_ppdq = np.zeros(D)
    det_spatial = np.zeros(D)
    det_label = np.zeros(D)
    det_gt = np.full(D, -1, np.int64)
    tot = {"ppdq": 0.0, "spatial": 0.0, "label": 0.0, "fg": 0.0, "bg": 0.0}
    n_tp = 0
    active = np.flatnonzero((np.diff(d_start) > 0) & (np.diff(g_start) > 0))
    for i in active.tolist():  # loop over images: one assignment each
        dr = d_order[d_start[i] : d_start[i + 1]]
        gr = gt_rows[g_order[g_start[i] : g_start[i + 1]]]
        W = max(int(np.ceil(images.width[i])), 1)
        H = max(int(np.ceil(images.height[i])), 1)
        q = pair_qualities(
            dets.box[dr],
            None if cov is None else cov[dr],
            dets.score[dr],
            dets.category[dr],
            gt.box[gr],
            gt.category[gr],
            W,
            H,
            inclusive=inclusive,
            threshold=threshold,
        )
        rows, cols = linear_sum_assignment(q["ppdq"], maximize=True)
        ok = q["ppdq"][rows, cols] > 0
        rows, cols = rows[ok], cols[ok]
        n_tp += len(rows)
        for k in tot:
            tot[k] += float(q[k][rows, cols].sum())
        det_ppdq[dr[cols]] = q["ppdq"][rows, cols]
        det_spatial[dr[cols]] = q["spatial"][rows, cols]
        det_label[dr[cols]] = q["label"][rows, cols]
        det_gt[dr[cols]] = gr[rows]
    n_fp = D - n_tp
    n_fn = len(gt_rows) - n_tp
    denom = n_tp + n_fp + n_fn
    value = tot["ppdq"] / denom if denom else float("nan")
    avg = {k: (tot[k] / n_tp if n_tp else 0.0) for k in tot}
    return MetricResult(
        name="pdq",
        value=value,
        variant="detcal_continuous",
        params=_continuous_params(dets, fixed_cov, inclusive, threshold),
        table={"det_ppdq": det_ppdq, "det_spatial": det_spatial, "det_label": det_label, "det_gt_index": det_gt},
        extra=_averages_and_counts(avg, n_tp, n_fp, n_fn),
    )


def describe_choices() -> dict[str, Any]:
    return {"heatmap_threshold": HEATMAP_THRESHOLD, "small": SMALL, "window_sigmas": _N_SIGMA}


VARIANTS: tuple[str, ...] = ("pdq_evaluation", "detcal_continuous")
"""PDQ variants: ``pdq_evaluation`` (default; the reference implementation's conventions,
:mod:`detcal.metrics.pdq_evaluation`) and ``detcal_continuous`` (detcal's earlier definition, module docstring)."""


def pdq(
    dataset: Dataset,
    dets: Detections,
    *,
    variant: str = "pdq_evaluation",
    gt_mask: str | None = None,
    segmentations: list[Any] | None = None,
    class_scores: np.ndarray | None = None,
    fixed_cov: float | None = None,
    inclusive: bool = False,
    threshold: float = HEATMAP_THRESHOLD,
    workers: int = 1,
) -> MetricResult:
    """PDQ of ``dets`` on ``dataset``; per-detection results in ``table``.

    ``variant="pdq_evaluation"``: ``gt_mask`` ``"segmentation"`` (needs ``segmentations``, one COCO
    segmentation per ground-truth row, :func:`detcal.data.coco_masks.load_segmentations`) or ``"box"``;
    by default ``"segmentation"`` when segmentations are given, else ``"box"``. ``class_scores [D, C]``:
    class distributions (categories in ascending id order, :func:`detcal.data.coco_masks.load_class_scores`)
    for the label quality. ``workers`` processes split the images. ``inclusive`` belongs to
    ``detcal_continuous`` only; ``threshold`` is fixed at the reference's 0.0027 in ``pdq_evaluation``.
    """
    if variant not in VARIANTS:
        raise DetcalInputError(f"unknown PDQ variant {variant!r}; choose one of {VARIANTS}", field="variant")
    if variant == "detcal_continuous":
        return _pdq_continuous(dataset, dets, fixed_cov=fixed_cov, inclusive=inclusive, threshold=threshold)
    if inclusive or threshold != HEATMAP_THRESHOLD:
        raise DetcalInputError("inclusive / threshold belong to the detcal_continuous variant", field="variant")
    return _pdq_reference(
        dataset,
        dets,
        gt_mask=gt_mask,
        segmentations=segmentations,
        class_scores=class_scores,
        fixed_cov=fixed_cov,
        workers=workers,
    )


def _pdq_reference(
    dataset: Dataset,
    dets: Detections,
    *,
    gt_mask: str | None,
    segmentations: list[Any] | None,
    class_scores: np.ndarray | None,
    fixed_cov: float | None,
    workers: int,
) -> MetricResult:
    mode = gt_mask or ("segmentation" if segmentations is not None else "box")
    if mode not in ("segmentation", "box"):
        raise DetcalInputError(f"gt_mask must be 'segmentation' or 'box', got {gt_mask!r}", field="gt_mask")
    cov = corner_covariances(dets, fixed_cov)
    scores, gt_col = pe.label_table(dataset, dets, class_scores)
    images = dataset.images
    img_of_det = _image_rows_checked(images, dets)
    px = pe.gt_pixels(dataset, mode, segmentations)
    gt_rows = np.flatnonzero(px["n"] > 0)  # annotations without a pixel are left out, as in the reference
    img_of_gt = dataset.gt_image_rows()[gt_rows]
    N = len(images)
    d_order = np.argsort(img_of_det, kind="stable")
    g_order = gt_rows[np.argsort(img_of_gt, kind="stable")]
    ctx = {
        "d_order": d_order,
        "d_start": np.searchsorted(img_of_det[d_order], np.arange(N + 1)),
        "g_order": g_order,
        "g_start": np.searchsorted(np.sort(img_of_gt, kind="stable"), np.arange(N + 1)),
        "scores": scores,
        "gt_col": gt_col,
        "gt_cat": dataset.gt.category,
        "det_cat": dets.category,
        "det_score": dets.score,
        "cov": cov,
        "box": dets.box,
        "px": px,
        "H": images.height.astype(np.int64),
        "W": images.width.astype(np.int64),
    }
    parts = np.array_split(np.arange(N), max(1, min(int(workers), N) * 4)) if workers > 1 else [np.arange(N)]
    results = [r for chunk in map_in_processes(pe.evaluate_images, parts, (ctx,), int(workers)) for r in chunk]
    return _reference_result(results, dets, mode, scores is not None, fixed_cov, cov is not None, workers)


def _reference_result(
    results: list[dict[str, Any]],
    dets: Detections,
    mode: str,
    with_scores: bool,
    fixed_cov: float | None,
    with_cov: bool,
    workers: int,
) -> MetricResult:
    D = len(dets)
    tot = {k: sum(r.get(k, 0.0) for r in results) for k in ("ppdq", "spatial", "label", "fg", "bg")}
    n_tp, n_fp, n_fn = (sum(r[k] for r in results) for k in ("TP", "FP", "FN"))
    det_ppdq = np.zeros(D)
    det_spatial = np.zeros(D)
    det_label = np.zeros(D)
    det_gt = np.full(D, -1, np.int64)
    for r in results:  # per image: scatter the true positives' qualities
        if len(r["det"]):
            det_ppdq[r["det"]] = r["det_ppdq"]
            det_spatial[r["det"]] = r["det_spatial"]
            det_label[r["det"]] = r["det_label"]
            det_gt[r["det"]] = r["gt"]
    denom = n_tp + n_fp + n_fn
    avg = {k: (tot[k] / n_tp if n_tp else 0.0) for k in tot}
    return MetricResult(
        name="pdq",
        value=tot["ppdq"] / denom if denom else float("nan"),
        variant="pdq_evaluation",
        params={
            "gt_mask": mode,
            "crowd": "kept (filter_gts=False)",
            "fixed_cov": fixed_cov,
            "covariance": "fixed"
            if fixed_cov is not None
            else (dets.uncertainty_kind if with_cov else "none (uniform boxes)"),
            "label_quality": "class distribution (all_scores)" if with_scores else "score of the detection's own class",
            "heatmap_threshold": HEATMAP_THRESHOLD,
            "assignment": "Hungarian per image on the float32 cost table",
            "ece_scaling": False,
            "reference": "david2611/pdq_evaluation",
            "workers": int(workers),
        },
        table={"det_ppdq": det_ppdq, "det_spatial": det_spatial, "det_label": det_label, "det_gt_index": det_gt},
        extra=_averages_and_counts(avg, n_tp, n_fp, n_fn),
    )


def _averages_and_counts(avg: dict[str, float], n_tp: int, n_fp: int, n_fn: int) -> dict[str, Any]:
    """The figures every PDQ variant reports beside PDQ: averages over true positives and the TP/FP/FN counts."""
    return {
        "avg_pPDQ": avg["ppdq"],
        "avg_spatial": avg["spatial"],
        "avg_label": avg["label"],
        "avg_fg": avg["fg"],
        "avg_bg": avg["bg"],
        "TP": n_tp,
        "FP": n_fp,
        "FN": n_fn,
    }
