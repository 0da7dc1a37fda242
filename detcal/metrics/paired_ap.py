"""Paired bootstrap of COCO AP/AR differences: images resampled jointly, AP recomputed per resample.

Replicate r draws ``I`` images with replacement (the same draws for every
detector: :func:`image_draws`, the draws behind
:func:`detcal.pipeline.compare.image_weights`); a drawn image enters the
resample as a new image (position ``j`` in the draw gets id ``j``) with all its
ground truth and detections, so an image drawn twice counts twice, exactly as
if its files had been copied. COCO AP/AR of the resample is
:func:`detcal.metrics.accuracy.coco_ap` (equal to pycocotools on the same
resampled files). The interval is :func:`detcal.metrics.bootstrap.interval`
(BCa by default), the acceleration from a delete-a-block jackknife over
``n_blocks`` blocks of images (Efron & Narasimhan 2020).

One COCO evaluation per replicate is the cost (about 0.5 s at 5,000 images and
35k detections on one core): ``n_boot`` is set separately from the
calibration metrics' (``compare.ap_bootstrap``; docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.metrics.accuracy import coco_ap
from detcal.metrics.bootstrap import interval, jackknife_blocks

__all__ = [
    "image_draws",
    "resample_images",
    "ap_replicates",
    "paired_ap_differences",
    "MIN_MARK_RESAMPLES",
    "few_resamples_note",
]


def image_draws(n_images: int, n_boot: int, seed: int) -> np.ndarray:
    """``[R, I]`` image rows drawn with replacement (``np.random.default_rng(seed).integers``)."""
    return np.random.default_rng(seed).integers(0, n_images, size=(n_boot, n_images))


def _rows_of(picks: np.ndarray, image_row: np.ndarray, n_images: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows (of an array grouped by ``image_row``) of each picked image in pick order, and the pick position."""
    order = np.argsort(image_row, kind="stable")
    counts = np.bincount(image_row, minlength=n_images)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    c = counts[picks]
    pos = np.repeat(np.arange(len(picks)), c)
    offs = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
    return order[np.repeat(starts[picks], c) + offs], pos


def resample_images(
    dets: Detections, ds: Dataset, picks: np.ndarray, gt_area: np.ndarray | None = None
) -> tuple[Detections, Dataset, np.ndarray | None]:
    """The detections and dataset of the images ``picks`` (rows into ``ds.images``), image j renamed ``j``."""
    n = len(ds.images)
    im = ds.images
    images = Images(id=np.arange(len(picks)), width=im.width[picks], height=im.height[picks])
    g_rows, g_pos = _rows_of(picks, ds.gt_image_rows(), n)
    g = ds.gt
    gt = GroundTruth(
        image_id=g_pos,
        box=g.box[g_rows],
        category=g.category[g_rows],
        iscrowd=None if g.iscrowd is None else g.iscrowd[g_rows],
        area=None if g.area is None else g.area[g_rows],
    )
    d_rows, d_pos = _rows_of(picks, im.index_of(dets.image_id), n)
    out = Detections(image_id=d_pos, box=dets.box[d_rows], score=dets.score[d_rows], category=dets.category[d_rows])
    area = None if gt_area is None else np.asarray(gt_area, np.float64)[g_rows]
    return out, Dataset(images=images, gt=gt, categories=ds.categories), area


def _summary(dets: Detections, ds: Dataset, area: np.ndarray | None, keys: Sequence[str]) -> dict[str, float]:
    res = coco_ap(dets, ds, gt_area=area)
    return {k: float(res[k].value) for k in keys}


def ap_replicates(
    dets: Detections, ds: Dataset, draws: np.ndarray, keys: Sequence[str], gt_area: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """``{key: [R]}`` COCO AP/AR of each resample in ``draws`` (one COCO evaluation per row)."""
    out = {k: np.full(len(draws), np.nan) for k in keys}
    for r, picks in enumerate(draws):  # one whole COCO evaluation per replicate
        v = _summary(*resample_images(dets, ds, picks, gt_area), keys)
        for k in keys:
            out[k][r] = v[k]
    return out


def ap_jackknife(
    dets: Detections, ds: Dataset, block: np.ndarray, keys: Sequence[str], gt_area: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Delete-a-block jackknife values ``{key: [B]}`` (block j's images left out in value j)."""
    m = int(block.max()) + 1
    out = {k: np.full(m, np.nan) for k in keys}
    for j in range(m):  # one COCO evaluation per block
        v = _summary(*resample_images(dets, ds, np.flatnonzero(block != j), gt_area), keys)
        for k in keys:
            out[k][j] = v[k]
    return out


MIN_MARK_RESAMPLES = 100
"""A difference is marked as excluding 0 only when its interval rests on at least this many resamples:
with fewer, the interval's ends are the few most extreme resamples (at 12, the 2.5% and 97.5% quantiles
interpolate between the two lowest and the two highest), too unsteady to call a difference."""


def few_resamples_note(n_boot: int, lo: float, hi: float) -> str:
    """The note of an interval that excludes 0 on fewer than :data:`MIN_MARK_RESAMPLES` resamples (else empty)."""
    if n_boot >= MIN_MARK_RESAMPLES or not (lo > 0 or hi < 0):
        return ""
    return (
        f"{n_boot} resamples: the interval excludes 0 but rests on too few resamples to mark the difference "
        f"(a mark needs >= {MIN_MARK_RESAMPLES}; ap_bootstrap={MIN_MARK_RESAMPLES} gives one)"
    )


def paired_ap_differences(
    runs: Mapping[str, Detections],
    ds: Dataset,
    baseline: str,
    keys: Sequence[str],
    point: Mapping[str, Mapping[str, float]],
    *,
    n_boot: int,
    level: float = 0.95,
    seed: int = 0,
    method: str = "bca",
    n_blocks: int = 20,
    gt_area: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Paired intervals of ``key(detector) - key(baseline)`` for every non-baseline detector.

    ``point``: the full-sample values ``{detector: {key: value}}``. Returns one
    row per (detector, key): ``diff``, ``ci``, ``excludes_zero``, ``ci_note``
    and the bootstrap parameters.
    """
    draws = image_draws(len(ds.images), n_boot, seed)
    block = jackknife_blocks(len(ds.images), n_blocks, seed)
    reps = {name: ap_replicates(d, ds, draws, keys, gt_area) for name, d in runs.items()}
    jks = {name: ap_jackknife(d, ds, block, keys, gt_area) for name, d in runs.items()} if method == "bca" else {}
    rows = []
    for name in runs:
        if name == baseline:
            continue
        for k in keys:
            diff = point[name][k] - point[baseline][k]
            jk = jks[name][k] - jks[baseline][k] if jks else None
            res = interval(reps[name][k] - reps[baseline][k], diff, level, method, jk)
            lo, hi = res["ci"]
            rows.append(
                {
                    "detector": name,
                    "baseline": baseline,
                    "metric": k,
                    "diff": diff,
                    "ci": (lo, hi),
                    "excludes_zero": bool((lo > 0 or hi < 0) and n_boot >= MIN_MARK_RESAMPLES),
                    "ci_note": "; ".join(x for x in (res["note"], few_resamples_note(int(n_boot), lo, hi)) if x),
                    "bootstrap": {
                        "method": method,
                        "unit": "image",
                        "paired": True,
                        "n_boot": int(n_boot),
                        "level": level,
                        "seed": seed,
                        "jackknife_blocks": int(block.max()) + 1,
                        "recomputed": "COCO AP/AR per resample",
                    },
                }
            )
    return rows
