"""PDQ exactly as pdq_evaluation computes it (the ``pdq_evaluation`` variant of :func:`detcal.metrics.pdq.pdq`).

Hall, Dayoub, Skinner, Zhang, Miller, Corke, Carneiro, Angelova, Sünderhauf,
"Probabilistic Object Detection: Definition and Evaluation" (WACV 2020); the
reference implementation every published PDQ comes from is the public
repository david2611/pdq_evaluation (``PDQ(filter_gts=False,
segment_mode=False, greedy_mode=False)``, its COCO reading path). Its
conventions, in our words:

* detection maps: :mod:`detcal.metrics.pdq_maps` (Gaussian corners drawn on
  their regions of interest, the far corner at ``x2 + 1, y2 + 1`` in the
  flipped image, probability outside the image removed, values < 0.0027 set
  to 0; a detection without covariance is a uniform box with fractional
  border pixels);
* ground truth: every annotation, crowd included; its pixels are the
  segmentation mask rasterised from the COCO polygons / RLE
  (``gt_mask="segmentation"``), or with ``gt_mask="box"`` the pixel box
  ``floor(x1) .. ceil(x2)`` x ``floor(y1) .. ceil(y2)``, inclusive, clipped
  to the image; an annotation with no pixel is left out. Background pixels
  are those outside the bounding box of the object's pixels (pixels inside
  that box but outside a mask count neither way);
* ``fg = sum_{object pixels} log(p + 1e-14)``,
  ``bg = sum_{background pixels, p > 0} log(1 - p + 1e-14)``,
  ``spatial = exp((fg + bg) / n_object_pixels)`` (then values ``isclose`` to
  0 or 1 snapped), foreground / background qualities ``exp(fg / n)``,
  ``exp(bg / n)``;
* label quality: the probability the detection's class distribution
  (``all_scores`` of the COCO results, ``label_probs`` of the RVC format)
  gives the ground truth's class; without a distribution the detection's
  score when the classes agree, else 0;
* ``pPDQ`` the geometric mean of spatial and label quality; per image the
  Hungarian assignment on the square ``1 - pPDQ`` cost table (float32, padded
  with ones, as the reference); assigned pairs with pPDQ > 0 are true
  positives, other detections false positives, other objects false negatives;
  ``PDQ = sum_TP pPDQ / (TP + FP + FN)``, the other figures averages over TPs.

Qualities pass through the reference's float32 cost tables (``1 - (1 - q)``
in float32) so that the assignment and the TP test see the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.data.coco_masks import mask_rows, segmentation_crop
from detcal.metrics import pdq_maps

CHUNK_CELLS: int = 1_000_000
"""Detections of an image are processed in groups whose padded grids hold about this many cells."""


def gt_pixels(dataset: Dataset, mode: str, segmentations: list[Any] | None) -> dict[str, np.ndarray]:
    """:func:`_gt_pixels` with ``rect_start [G+1]``: the rectangles of row ``g`` are ``rect_start[g] .. rect_start[g+1]``."""
    px = _gt_pixels(dataset, mode, segmentations)
    px["rect_start"] = np.searchsorted(px["rect_gt"], np.arange(len(dataset.gt) + 1))
    return px


def _gt_pixels(dataset: Dataset, mode: str, segmentations: list[Any] | None) -> dict[str, np.ndarray]:
    """Every annotation's pixels as rectangles (``rect_gt``, ``r0, r1, c0, c1``, half-open), its pixel count ``n``
    and the bounding box of its pixels (``b_r0 .. b_c1``, half-open); annotations without pixels get ``n = 0``."""
    gt, images = dataset.gt, dataset.images
    rows = dataset.gt_image_rows()
    H = images.height[rows]
    W = images.width[rows]
    if not (np.isfinite(H).all() and np.isfinite(W).all()):
        raise DetcalInputError(
            "PDQ needs every image's width and height", file=dataset.source or None, field="width/height"
        )
    H, W = H.astype(np.int64), W.astype(np.int64)
    G = len(gt)
    if mode == "box":
        c0 = np.maximum(np.floor(gt.box[:, 0]), 0).astype(np.int64)
        r0 = np.maximum(np.floor(gt.box[:, 1]), 0).astype(np.int64)
        c1 = np.minimum(np.minimum(np.ceil(gt.box[:, 2]), W) + 1, W).astype(np.int64)
        r1 = np.minimum(np.minimum(np.ceil(gt.box[:, 3]), H) + 1, H).astype(np.int64)
        n = np.maximum(c1 - c0, 0) * np.maximum(r1 - r0, 0)
        return {
            "rect_gt": np.arange(G),
            "r0": r0,
            "r1": r1,
            "c0": c0,
            "c1": c1,
            "n": n,
            "b_r0": r0,
            "b_r1": r1,
            "b_c0": c0,
            "b_c1": c1,
        }
    if segmentations is None or len(segmentations) != G:
        raise DetcalInputError(
            "gt_mask='segmentation' needs one segmentation per ground-truth row", field="segmentations"
        )
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("rect_gt", "r0", "c0", "c1")}
    n = np.zeros(G, np.int64)
    box = np.zeros((G, 4), np.int64)
    for g in range(G):  # rasterising the annotations (data loading: one mask each)
        if segmentations[g] is None:
            continue
        try:
            m, x0 = segmentation_crop(segmentations[g], int(H[g]), int(W[g]))
        except (ValueError, TypeError) as e:
            raise DetcalInputError(
                f"bad segmentation: {e}",
                file=dataset.source or None,
                record=f"annotation id {int(gt.id[g])}",
                field="segmentation",
            ) from e
        r, a, b = mask_rows(m)
        if len(r) == 0:
            continue
        a, b = a + x0, b + x0
        n[g] = int(m.sum())
        box[g] = (r.min(), r.max() + 1, a.min(), b.max())
        parts["rect_gt"].append(np.full(len(r), g))
        parts["r0"].append(r)
        parts["c0"].append(a)
        parts["c1"].append(b)
    cat = {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in parts.items()}
    return {
        "rect_gt": cat["rect_gt"],
        "r0": cat["r0"],
        "r1": cat["r0"] + 1,
        "c0": cat["c0"],
        "c1": cat["c1"],
        "n": n,
        "b_r0": box[:, 0],
        "b_r1": box[:, 1],
        "b_c0": box[:, 2],
        "b_c1": box[:, 3],
    }


def _chunks(box: np.ndarray, cov: np.ndarray | None, H: int, W: int) -> list[np.ndarray]:
    """Detections in groups of similar grid size (padding stays small, memory bounded)."""
    D = len(box)
    if cov is None:
        return [np.arange(D)]
    s = np.sqrt(np.maximum(cov[:, :, [0, 1], [0, 1]], 0)).sum(axis=(1, 2))  # rough ROI extent
    size = (2 * 2 * pdq_maps.ROI_SIGMAS * s + 8) ** 2 / 4
    order = np.argsort(size, kind="stable")
    out, start = [], 0
    while start < D:
        stop = start + 1
        while stop < D and size[order[stop]] * (stop + 1 - start) <= CHUNK_CELLS:
            stop += 1
        out.append(order[start:stop])
        start = stop
    return out


def image_qualities(
    det_box: np.ndarray,
    det_cov: np.ndarray | None,
    label: np.ndarray,
    px: dict[str, np.ndarray],
    gt_rows: np.ndarray,
    H: int,
    W: int,
) -> dict[str, np.ndarray]:
    """The [G, D] qualities of one image: ``spatial``, ``fg``, ``bg`` (float64), ``label`` (float32), ``ppdq``."""
    G, D = len(gt_rows), len(det_box)
    local = np.full(int(gt_rows.max(initial=-1)) + 1, -1)
    local[gt_rows] = np.arange(G)
    start = px["rect_start"][gt_rows]
    lens = px["rect_start"][gt_rows + 1] - start
    sel = np.repeat(start - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))  # this image's rectangles
    owner = local[px["rect_gt"][sel]]
    fg = np.zeros((G, D))
    bg = np.zeros((G, D))
    for part in _chunks(det_box, det_cov, H, W):  # groups of detections, each vectorised
        g = pdq_maps.build_grids(det_box[part], None if det_cov is None else det_cov[part], H, W)
        f_in, _ = pdq_maps.rect_sums(g, px["r0"][sel], px["r1"][sel], px["c0"][sel], px["c1"][sel])
        fsum = np.zeros((G, len(part)))
        np.add.at(fsum, owner, f_in)
        _, b_in = pdq_maps.rect_sums(
            g, px["b_r0"][gt_rows], px["b_r1"][gt_rows], px["b_c0"][gt_rows], px["b_c1"][gt_rows]
        )
        _, b_tot = pdq_maps.totals(g)
        fg[:, part] = fsum
        bg[:, part] = b_tot[None, :] - b_in
    n = px["n"][gt_rows].astype(np.float64)[:, None]
    spatial = snap(np.exp((fg + bg) / n))
    with np.errstate(divide="ignore"):
        ppdq = np.exp((np.log(label.astype(np.float64)) + np.log(spatial)) / 2.0)
    return {"ppdq": ppdq, "spatial": spatial, "label": label, "fg": snap(np.exp(fg / n)), "bg": snap(np.exp(bg / n))}


def snap(q: np.ndarray) -> np.ndarray:
    q = q.copy()
    q[np.isclose(q, 0.0)] = 0.0
    q[np.isclose(q, 1.0)] = 1.0
    return q


def _cost_table(q: np.ndarray, n: int) -> np.ndarray:
    """The reference's float32 ``n x n`` cost table ``1 - q``, padded with ones."""
    cost = np.ones((n, n), np.float32)
    cost[: q.shape[0], : q.shape[1]] -= q
    return cost


def assign_image(q: dict[str, np.ndarray]) -> dict[str, Any]:
    """Hungarian assignment on the float32 cost table; sums over true positives and the counts of one image."""
    G, D = q["ppdq"].shape
    n = max(G, D)
    cost = {k: _cost_table(v, n) for k, v in q.items()}
    rows, cols = linear_sum_assignment(cost["ppdq"])
    tab = {k: np.float32(1.0) - c for k, c in cost.items()}  # qualities read back as the reference does
    ok = tab["ppdq"][rows, cols] > 0
    tp_r, tp_c = rows[ok], cols[ok]
    out = {k: float(tab[k][tp_r, tp_c].astype(np.float64).sum()) for k in tab}
    out.update(
        TP=int(ok.sum()),
        FP=int(((~ok) & (cols < D)).sum()),
        FN=int(((~ok) & (rows < G)).sum()),
        det=tp_c,
        gt=tp_r,
        det_ppdq=tab["ppdq"][tp_r, tp_c],
        det_spatial=tab["spatial"][tp_r, tp_c],
        det_label=tab["label"][tp_r, tp_c],
    )
    return out


def label_table(
    dataset: Dataset, dets: Detections, class_scores: np.ndarray | None
) -> tuple[np.ndarray | None, np.ndarray]:
    """Column of each ground-truth row's class in ``class_scores`` (ascending category id), checked."""
    cats = np.array(sorted(dataset.categories), dtype=np.int64)
    col = np.searchsorted(cats, dataset.gt.category)
    if class_scores is None:
        return None, col
    cs = np.asarray(class_scores, dtype=np.float64)
    if cs.shape != (len(dets), len(cats)):
        raise DetcalInputError(
            f"class_scores has shape {cs.shape}, expected ({len(dets)}, {len(cats)}): one probability per "
            "detection and category, categories in ascending id order",
            field="class_scores",
        )
    return cs.astype(np.float32), col


def evaluate_images(items: np.ndarray, ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """The assignments of the images ``items`` (rows into the dataset's images)."""
    out = []
    for i in items:  # one assignment per image
        dr = ctx["d_order"][ctx["d_start"][i] : ctx["d_start"][i + 1]]
        gr = ctx["g_order"][ctx["g_start"][i] : ctx["g_start"][i + 1]]
        if len(dr) == 0 or len(gr) == 0:
            out.append({"TP": 0, "FP": len(dr), "FN": len(gr), "det": np.zeros(0, int), "gt": np.zeros(0, int)})
            continue
        if ctx["scores"] is not None:
            label = ctx["scores"][dr][:, ctx["gt_col"][gr]].T
        else:
            same = ctx["gt_cat"][gr][:, None] == ctx["det_cat"][dr][None, :]
            label = np.where(same, ctx["det_score"][dr][None, :], 0.0).astype(np.float32)
        cov = None if ctx["cov"] is None else ctx["cov"][dr]
        q = image_qualities(ctx["box"][dr], cov, label, ctx["px"], gr, ctx["H"][i], ctx["W"][i])
        res = assign_image(q)
        res["det"], res["gt"] = dr[res["det"]], gr[res["gt"]]
        out.append(res)
    return out
