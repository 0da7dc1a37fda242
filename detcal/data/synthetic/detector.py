"""The simulated detector with planted miscalibration."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from detcal.core.boxes import area, decode_deltas, encode_deltas, xyxy_to_cxcywh
from detcal.core.types import Dataset, Detections
from detcal.data.synthetic._common import (
    B_MAX,
    B_MIN,
    DONTCARE_CATEGORY,
    FP_MAX_IOU,
    FP_ROUNDS,
    STREAM_DETECTOR,
    check,
    check_pair,
    check_vec4,
    gather,
    intersection,
    padded_groups,
    stream_rng,
)

# --------------------------------------------------------------------------- simulated detector


def records_around(
    rng: np.random.Generator,
    target: np.ndarray,
    true_std: np.ndarray,
    std_range: tuple[float, float],
    proposal_jitter: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Delta records around target boxes [n,4]: (proposal, mu, sigma_true, box), all [n,4].

    ``P = decode(target, j)``, ``j ~ N(0, diag(proposal_jitter^2))``;
    ``sigma = true_std * exp(U[log lo, log hi])`` per detection and coordinate;
    ``y = encode(P, target)``; ``mu = y - e``, ``e ~ N(0, sigma^2)``; ``box = decode(P, mu)``.
    """
    n = len(target)
    proposal = decode_deltas(target, rng.normal(size=(n, 4)) * proposal_jitter)
    sigma = true_std * np.exp(rng.uniform(np.log(std_range[0]), np.log(std_range[1]), size=(n, 4)))
    y = encode_deltas(proposal, target)
    mu = y - rng.normal(size=(n, 4)) * sigma
    return proposal, mu, sigma, decode_deltas(proposal, mu)


def _image_rows(dataset: Dataset) -> np.ndarray:
    return dataset.gt_image_rows()


def _fp_boxes(
    rng: np.random.Generator,
    dataset: Dataset,
    gt_rows_img: np.ndarray,
    n_fp_img: np.ndarray,
    pool: np.ndarray,
    classes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """False-positive boxes with the GT laws of shape and position, overlapping no GT.

    Each FP takes once the relative size and class of a random regular GT (any
    image); each round it takes the relative centre of another random regular GT,
    jittered by N(0, (0.1 w)^2) and kept inside the image, until its IoU with
    every GT of its image is < 0.1 (crowd: intersection over detection area).
    Keeping the shape across rounds keeps the FP size law equal to the GT law
    (redrawing it would favour small boxes). Returns (image row [F], box [F,4],
    category [F], number dropped after the last round)."""
    imgs = dataset.images
    W, H = imgs.width, imgs.height
    fp_img = np.repeat(np.arange(len(imgs)), n_fp_img)
    F = len(fp_img)
    gt = dataset.gt
    pad = padded_groups(gt_rows_img, len(imgs))
    ok_pad = pad >= 0
    gt_box_pad = gather(gt.box, pad, np.nan)
    crowd_pad = ok_pad & gather(gt.iscrowd, pad, False)
    if len(pool):
        src_img = gt_rows_img[pool]
        rel_pool = xyxy_to_cxcywh(gt.box[pool] / np.stack([W[src_img], H[src_img]] * 2, axis=1))
        pick = rng.integers(0, len(pool), size=F)
        wh = rel_pool[pick, 2:]
        cat = gt.category[pool[pick]]
    else:
        wh = rng.uniform(0.1, 0.4, size=(F, 2))
        cat = classes[rng.integers(0, len(classes), size=F)]
    scale = np.stack([W[fp_img], H[fp_img]] * 2, axis=1)

    box = np.zeros((F, 4))
    todo = np.arange(F)
    for _ in range(FP_ROUNDS):
        if len(todo) == 0:
            break
        k = len(todo)
        centre = rel_pool[rng.integers(0, len(pool), size=k), :2] if len(pool) else rng.random((k, 2))
        half = wh[todo] / 2
        centre = np.clip(centre + rng.normal(size=(k, 2)) * 0.1 * wh[todo], half, 1.0 - half)
        box[todo] = np.concatenate([centre - half, centre + half], axis=1) * scale[todo]
        g = gt_box_pad[fp_img[todo]]  # [k, M, 4]
        inter = intersection(box[todo][:, None, :], g)
        a_det = area(box[todo])[:, None]
        union = np.where(crowd_pad[fp_img[todo]], a_det, a_det + area(g) - inter)
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = np.where(union > 0, inter / union, 0.0)
        bad = (np.nan_to_num(iou, nan=0.0) >= FP_MAX_IOU).any(axis=1) | (area(box[todo]) <= 0)
        todo = todo[bad]
    keep = np.ones(F, bool)
    keep[todo] = False
    return fp_img[keep], box[keep], cat[keep], int(len(todo))


def _auto_bins(
    n_det: int,
    n_classes: int,
    position_bins: int | None,
    size_bins: int | None,
    max_position: int = 5,
    max_size: int = 3,
    min_per_group: float = 40.0,
) -> tuple[int, int]:
    """Bins of the score groups: the given ones, else the most (<= 5, <= 3) with >= 40 detections per group."""
    p = max_position if position_bins is None else int(position_bins)
    s = max_size if size_bins is None else int(size_bins)
    while n_det < min_per_group * 2 * n_classes * p * p * s:
        if position_bins is None and p > 1:
            p -= 1
        elif size_bins is None and s > 1:
            s -= 1
        else:
            break
    return p, s


def _score_groups(
    border: np.ndarray,
    category: np.ndarray,
    classes: np.ndarray,
    rx: np.ndarray,
    ry: np.ndarray,
    rel_area: np.ndarray,
    position_bins: int,
    size_bins: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Group [D] of each detection: (border?, class, cx bin, cy bin, size bin), raveled.

    Position bins: equal width over [0, 1] of cx/W and cy/H (clipped); size bins:
    equal count over ``sqrt(w h / (W H))`` of all detections (edges returned)."""
    cls_idx = np.searchsorted(classes, category).clip(0, len(classes) - 1)
    gx = np.clip(np.floor(np.clip(rx, 0, 1) * position_bins), 0, position_bins - 1).astype(np.int64)
    gy = np.clip(np.floor(np.clip(ry, 0, 1) * position_bins), 0, position_bins - 1).astype(np.int64)
    size = np.sqrt(np.clip(rel_area, 0, None))
    edges = np.quantile(size, np.linspace(0, 1, size_bins + 1)[1:-1]) if len(size) else np.zeros(max(size_bins - 1, 0))
    gs = np.searchsorted(edges, size, side="right").astype(np.int64)
    shape = (2, len(classes), position_bins, position_bins, size_bins)
    group = (
        np.ravel_multi_index((border.astype(np.int64), cls_idx, gx, gy, gs), shape)
        if len(border)
        else np.zeros(0, np.int64)
    )
    info = {"n_groups": int(np.prod(shape)), "shape": list(shape), "size_edges": edges.tolist()}
    return group, info


def detector_params(**kw: Any) -> dict[str, Any]:
    """Validate and normalise the keyword arguments of :func:`simulate_detector`."""
    check(
        0.0 <= kw["border_overconfidence"] < 1.0,
        f"expected a value in [0, 1), got {kw['border_overconfidence']}",
        "border_overconfidence",
    )
    check(
        0.0 <= kw["border_width"] <= 0.5,
        f"expected a relative width in [0, 0.5], got {kw['border_width']}",
        "border_width",
    )
    std_scale = check_vec4(kw["std_scale"], "std_scale")
    true_std = check_vec4(kw["true_delta_std"], "true_delta_std")
    jitter = np.asarray(kw["proposal_jitter"], dtype=np.float64).reshape(-1)
    check(
        jitter.shape == (4,) and bool(np.all(jitter >= 0)),
        f"expected 4 values >= 0, got {kw['proposal_jitter']!r}",
        "proposal_jitter",
    )
    lo, hi = check_pair(kw["std_range"], "std_range")
    check(kw["fp_per_image"] >= 0, f"expected a rate >= 0, got {kw['fp_per_image']}", "fp_per_image")
    check(0.0 <= kw["recall"] <= 1.0, f"expected a probability, got {kw['recall']}", "recall")
    check(
        kw["score_concentration"] > 0, f"expected a value > 0, got {kw['score_concentration']}", "score_concentration"
    )
    for name in ("position_bins", "size_bins"):
        v = kw[name]
        check(
            bool(v is None or (isinstance(v, (int, np.integer)) and 1 <= v <= 20)),
            f"expected None or an int in 1..20, got {v!r}",
            name,
        )
    check(kw["duplicate_rate"] >= 0, f"expected a rate >= 0, got {kw['duplicate_rate']}", "duplicate_rate")
    sd = kw["score_decimals"]
    check(
        bool(sd is None or (isinstance(sd, (int, np.integer)) and 0 <= sd <= 15)),
        f"expected None or an int in 0..15, got {sd!r}",
        "score_decimals",
    )
    check(
        kw["uncertainty"] in ("delta", "box_std", "none"),
        f"expected 'delta', 'box_std' or 'none', got {kw['uncertainty']!r}",
        "uncertainty",
    )
    out = dict(kw)
    out.update(
        std_scale=std_scale.tolist(),
        true_delta_std=true_std.tolist(),
        proposal_jitter=jitter.tolist(),
        std_range=[lo, hi],
        categories=None if kw["categories"] is None else [int(c) for c in kw["categories"]],
    )
    return out


def _planted_scores(
    rng: np.random.Generator,
    p: dict[str, Any],
    border: np.ndarray,
    category: np.ndarray,
    classes: np.ndarray,
    rx: np.ndarray,
    ry: np.ndarray,
    rel_area: np.ndarray,
    planted_tp: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Latent precision q, reported score, b per detection [D] and the score groups' description.

    q ~ Beta(a+1, b_g) for planted TPs, Beta(a, b_g+1) for FPs, b_g = a n_fp / n_tp per group (see
    :func:`simulate_detector`); the description also carries the per-group TP/FP counts (``_n_tp_g``, ``_n_fp_g``).
    """
    a = float(p["score_concentration"])
    pos_bins, size_bins = _auto_bins(len(category), len(classes), p["position_bins"], p["size_bins"])
    group, group_info = _score_groups(border, category, classes, rx, ry, rel_area, pos_bins, size_bins)
    n_groups = int(group_info["n_groups"])
    n_tp_g = np.bincount(group[planted_tp], minlength=n_groups).astype(np.float64)
    n_fp_g = np.bincount(group[~planted_tp], minlength=n_groups).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # n_tp = 0: all FP, b = B_MAX gives q ~ 0
        b_g = np.clip(np.where(n_tp_g > 0, a * n_fp_g / n_tp_g, B_MAX), B_MIN, B_MAX)
    b = b_g[group]
    q = rng.beta(np.where(planted_tp, a + 1.0, a), np.where(planted_tp, b, b + 1.0))
    score = np.where(border, q ** (1.0 - p["border_overconfidence"]), q)
    if p["score_decimals"] is not None:
        score = np.round(score, int(p["score_decimals"]))
    return q, score, b, {**group_info, "_n_tp_g": n_tp_g, "_n_fp_g": n_fp_g}


def simulate(dataset: Dataset, seed: int, p: dict[str, Any]) -> tuple[Detections, dict[str, Any]]:
    check(
        isinstance(dataset, Dataset), f"expected a detcal.core.types.Dataset, got {type(dataset).__name__}", "dataset"
    )
    gt = dataset.gt
    imgs = dataset.images
    img_rows = _image_rows(dataset)
    rng = stream_rng(seed, STREAM_DETECTOR)
    names = dataset.categories
    if p["categories"] is None:
        classes = np.array(sorted(c for c, n in names.items() if n != "DontCare"), dtype=np.int64)
    else:
        classes = np.array(sorted(p["categories"]), dtype=np.int64)
    if len(classes) == 0:
        classes = np.array(sorted(set(gt.category.tolist()) - {DONTCARE_CATEGORY}) or [1], dtype=np.int64)
    wh = gt.box[:, 2:] - gt.box[:, :2]
    eligible = ~gt.ignore & ~gt.iscrowd & np.isin(gt.category, classes) & np.all(wh > 0, axis=1)
    detected = eligible & (rng.random(len(gt)) < p["recall"])
    tp_gt = np.flatnonzero(detected)
    n_dup = rng.poisson(p["duplicate_rate"], size=len(tp_gt))
    src = np.concatenate([tp_gt, np.repeat(tp_gt, n_dup)])
    true_std, jitter = np.asarray(p["true_delta_std"]), np.asarray(p["proposal_jitter"])
    prop_t, mu_t, sig_t, box_t = records_around(rng, gt.box[src], true_std, tuple(p["std_range"]), jitter)

    n_fp_img = rng.poisson(p["fp_per_image"], size=len(imgs))
    fp_img, fp_box, fp_cat, fp_dropped = _fp_boxes(rng, dataset, img_rows, n_fp_img, np.flatnonzero(eligible), classes)
    prop_f = decode_deltas(fp_box, rng.normal(size=(len(fp_box), 4)) * jitter)
    mu_f = encode_deltas(prop_f, fp_box)
    sig_f = true_std * np.exp(rng.uniform(np.log(p["std_range"][0]), np.log(p["std_range"][1]), size=(len(fp_box), 4)))

    row = np.concatenate([img_rows[src], fp_img])
    proposal = np.concatenate([prop_t, prop_f])
    mu = np.concatenate([mu_t, mu_f])
    sigma = np.concatenate([sig_t, sig_f])
    box = np.concatenate([box_t, decode_deltas(prop_f, mu_f)])
    category = np.concatenate([gt.category[src], fp_cat])
    planted_tp = np.concatenate([np.ones(len(tp_gt), bool), np.zeros(len(src) - len(tp_gt) + len(fp_box), bool)])

    c = xyxy_to_cxcywh(box)
    rx, ry = c[:, 0] / imgs.width[row], c[:, 1] / imgs.height[row]
    bw = p["border_width"]
    border = (rx < bw) | (rx > 1 - bw) | (ry < bw) | (ry > 1 - bw)

    rel_area = c[:, 2] * c[:, 3] / (imgs.width[row] * imgs.height[row])
    q, score, b, group_info = _planted_scores(rng, p, border, category, classes, rx, ry, rel_area, planted_tp)
    n_tp_g, n_fp_g = group_info.pop("_n_tp_g"), group_info.pop("_n_fp_g")

    order = np.lexsort((rng.random(len(row)), row))
    kw: dict[str, Any] = {}
    sig_rep = sigma * np.asarray(p["std_scale"])
    if p["uncertainty"] == "delta":
        kw = {"proposal": proposal[order], "delta_mean": mu[order], "delta_std": sig_rep[order]}
    elif p["uncertainty"] == "box_std":
        pw, ph = proposal[:, 2] - proposal[:, 0], proposal[:, 3] - proposal[:, 1]
        bw_, bh_ = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
        box_std = sig_rep * np.stack([pw, ph, bw_, bh_], axis=1)
        kw = {"box_std": box_std[order]}
    dets = Detections(image_id=imgs.id[row[order]], box=box[order], score=score[order], category=category[order], **kw)
    info = {
        "n_detections": int(len(row)),
        "n_planted_tp": int(len(tp_gt)),
        "n_duplicates": int(len(src) - len(tp_gt)),
        "n_false_positives": int(len(fp_box)),
        "n_fp_dropped": fp_dropped,
        "n_eligible_gt": int(eligible.sum()),
        "border_share": float(border.mean()) if len(border) else float("nan"),
        "classes": classes.tolist(),
        "score_groups": {
            **group_info,
            "occupied": int(np.count_nonzero(n_tp_g + n_fp_g)),
            "occupied_without_tp": int(np.count_nonzero((n_tp_g == 0) & (n_fp_g > 0))),
            "b_median_per_detection": float(np.median(b)) if len(b) else float("nan"),
        },
        "planted_tp": planted_tp[order],
        "latent_q": q[order],
        "true_std": sigma[order],
        "border": border[order],
    }
    return dets, info


def simulate_detector(
    dataset: Dataset,
    seed: int = 0,
    *,
    border_overconfidence: float = 0.5,
    border_width: float = 0.15,
    std_scale: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
    true_delta_std: Sequence[float] = (0.05, 0.05, 0.08, 0.08),
    fp_per_image: float = 2.0,
    score_decimals: int | None = 3,
    uncertainty: str = "delta",
    recall: float = 0.9,
    score_concentration: float = 2.0,
    std_range: tuple[float, float] = (0.5, 1.5),
    proposal_jitter: Sequence[float] = (0.1, 0.1, 0.1, 0.1),
    duplicate_rate: float = 0.0,
    categories: Sequence[int] | None = None,
    position_bins: int | None = None,
    size_bins: int | None = None,
) -> Detections:
    """Simulated detections on ``dataset`` with a KNOWN, planted miscalibration.

    Detections (random stream 1 of ``seed``; vectorised over the dataset):

    * Planted true positives: each regular GT (not ignored, not crowd, of a
      detected class: ``categories`` or all but DontCare) is detected once with
      probability ``recall``. Proposal ``P = decode(GT, j)``, ``j ~ N(0,
      diag(proposal_jitter^2))``; true per-coordinate std
      ``sigma_k = true_delta_std[k] * exp(U[log std_range])`` (heteroscedastic,
      independent per detection and coordinate, so C_v > 0); target
      ``y = encode(P, GT)``; mean ``mu = y - e``, ``e ~ N(0, sigma^2)``; box
      ``B = decode(P, mu)``. With the defaults >= 99% reach IoU >= 0.5 with
      their GT (tested).
    * False positives: Poisson(``fp_per_image``) per image; the relative size
      and class of a random regular GT of any image (so TPs and FPs share the
      size law), placed at the relative centre of another random regular GT,
      jittered by N(0, (0.1 w)^2) and kept inside the image, re-placed until
      IoU < 0.1 with every GT of the image (crowd: intersection over detection
      area); dropped after 30 rounds (counted). Same proposal/sigma recipe,
      ``mu = encode(P, B)``.
    * Duplicates (off by default): Poisson(``duplicate_rate``) more boxes per
      detected GT, drawn like TPs but counted as false positives in the score
      model, so the planted calibration holds under ``exclusive`` matching only
      when they score below the TP (not guaranteed) and never under ``max``
      matching; keep 0 for the planted truth.

    Confidence (planted truth). Every detection has a latent precision
    ``q ~ Beta(a, b_g)`` and is a true positive with probability ``q``; it is
    generated in the equivalent order: outcome first, then
    ``q | TP ~ Beta(a + 1, b_g)``, ``q | FP ~ Beta(a, b_g + 1)`` with
    ``a = score_concentration`` and ``b_g = a * n_FP,g / n_TP,g`` from the
    realised counts of its group g, so that by Bayes ``P(TP | q, g) = q``
    exactly (``n_TP,g / a = n_FP,g / b_g``). Groups: (near the border?, class,
    cx/W bin, cy/H bin, size bin) with ``position_bins`` equal-width bins per
    axis and ``size_bins`` equal-count bins of ``sqrt(w h / (W H))`` (``None``:
    the most bins up to 5 and 3 that keep >= 40 detections per group on
    average, reducing position bins first); FPs
    avoid GTs, so their spatial law differs from the TPs' and a single group
    would leave position-dependent miscalibration (D-ECE above the sampling
    floor); with 5 x 5 x 3 groups D-ECE of the calibrated part is at the
    floor of a resampled oracle. A group without TPs gets ``b = 1e3`` (q ~ 0),
    b is clipped to [1e-3, 1e3]. Tiny groups make q sharper (it then knows the
    group's realised precision); use fewer bins for small sets.
    Reported score, with ``bo = border_overconfidence`` and the predicted box
    centre ``(cx/W, cy/H)``::

        score = q                    if both in [border_width, 1 - border_width]
        score = q ** (1 - bo)        otherwise (near the border: over-confident,
                                     score >= q, precision = score ** (1 / (1 - bo)))

    then rounded to ``score_decimals`` (ties, as in real results files).

    Regression (planted truth): reported std ``s_k = sigma_k * std_scale[k]``,
    so ``sqrt(mean(e_k^2 / s_k^2)) = 1 / std_scale[k]``; ``std_scale = 1`` is
    calibrated, and std scaling (docs/calibration.md) must learn ``1/std_scale``.
    ``uncertainty``: ``"delta"`` gives ``proposal``, ``delta_mean = mu``,
    ``delta_std = s``; ``"box_std"`` gives the first-order pixel stds
    ``(s_tx Pw, s_ty Ph, s_tw Bw, s_th Bh)`` of (cx, cy, w, h), which the
    box-record evaluation (P := B, mu = 0) maps back to exactly the same
    normalised residuals; ``"none"`` gives none.

    Rows are grouped by image (ascending row of ``dataset.images``) in a random
    order within each image. The parameters and realised counts are saved by
    :func:`write_synthetic` (``meta.json``).
    """
    params = detector_params(**_bound_kwargs(simulate_detector, locals(), skip=("dataset", "seed")))
    dets, _ = simulate(dataset, int(seed), params)
    return dets


def _bound_kwargs(fn: Any, values: dict[str, Any], skip: tuple[str, ...]) -> dict[str, Any]:
    return {k: values[k] for k in inspect.signature(fn).parameters if k not in skip}


def detector_defaults() -> dict[str, Any]:
    """The default keyword arguments of :func:`simulate_detector` (recorded in ``meta.json``)."""
    sig = inspect.signature(simulate_detector)
    return {k: v.default for k, v in sig.parameters.items() if v.kind is inspect.Parameter.KEYWORD_ONLY}
