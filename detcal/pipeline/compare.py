"""Compare several detectors on one ground truth: accuracy and calibration side by side.

:func:`compare` takes ``{name: Detections}`` and one :class:`~detcal.core.types.Dataset`
and returns a :class:`Comparison`:

* ``table``: one row per detector: COCO AP, AP50, AP75, AR100, AP by size
  (:func:`detcal.metrics.accuracy.coco_ap`), the calibration sample size and
  precision, and the headline confidence measures of the registry
  (:func:`detcal.metrics.measures.headline_names`: ECE, D-ECE, MCE, NLL,
  Brier) on the grids of ``binning`` (a
  :class:`~detcal.pipeline.spec.DeceBinningSpec`, the run's ``dece_binning``;
  by default ECE over 15 bins, D-ECE over 5 bins per dimension of confidence
  and relative cx, cy, w, h, cells with >= 8 samples), each
  calibration metric with the interval ``detcal-evaluate`` gives the same
  detector with the same bootstrap settings (:func:`single_intervals`: the
  same resamples of the images holding its sample, the same leave-one-image-out
  jackknife for BCa, the same method): one interval per number, whichever
  command computes it;
* ``diffs``: for each non-baseline detector, ``metric(detector) -
  metric(baseline)`` with its *paired* bootstrap interval: every replicate
  draws one set of images (with replacement) and evaluates all detectors on
  it, so image difficulty cancels out of the difference (these resamples are
  shared by the detectors, so they are drawn over every image of the ground
  truth, with a delete-a-block jackknife);
* ``per_class`` / ``per_size``: per-class and per-size (COCO small / medium /
  large, by box area) tables;
* ``reliability``: per-detector reliability curves for an overlaid diagram
  (:func:`plot`).

The calibration sample of a detector: its detections matched at ``iou``
(``matching="exclusive"``: pycocotools' rule; ``"netcal_example"``:
:mod:`detcal.matching.netcal_example`), not ignored; ``y`` the matched flag. The
bootstrap uses per-(image, cell) sums and a weight matrix ``[R, I]`` of how
often each image was drawn (no loop over detections or replicates), and each
replicate's values come from the same registry entries as the point values
(:func:`replicate_metrics`). AP/AR
differences get paired intervals from their own, smaller set of resamples
(``ap_n_boot``; one COCO evaluation per resample:
:mod:`detcal.metrics.paired_ap`); box-uncertainty metrics are not part of it yet.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.core.boxes import relative_features
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.matching.engine import match
from detcal.matching.netcal_example import match_netcal_example
from detcal.metrics.accuracy import AREA_RANGES, coco_ap
from detcal.metrics.bootstrap import bootstrap_many, interval, jackknife_blocks, jackknife_many
from detcal.metrics.confidence import SPARSE_RATIO, ConfidenceMetric, SparseCellsWarning, ece
from detcal.metrics.confidence_suite import suite
from detcal.metrics.image_cells import image_cells, replicate_values
from detcal.metrics.measures import headline_names
from detcal.metrics.paired_ap import MIN_MARK_RESAMPLES, few_resamples_note, paired_ap_differences
from detcal.pipeline.sparse_cells import SPARSE_MARK, fitting_bins, log_once
from detcal.pipeline.spec import FEATURES, DeceBinningSpec
from detcal.reports.per_class import (
    per_class_table,
    plot_per_class_reliability,
    plot_reliability,
    reliability_curve,
    table_markdown,
)
from detcal.reports.tables import md_cell
from detcal.utils.io import save_figure

CAL_METRICS: tuple[str, ...] = headline_names()
"""Calibration metrics of the comparison table (each with a bootstrap interval): the registry's headline
measures when this module was imported (:func:`calibration_names` reads the registry at call time)."""
ACC_METRICS: tuple[str, ...] = ("AP", "AP50", "AP75", "AR100", "AP_small", "AP_medium", "AP_large")
JACKKNIFE_BLOCKS = 200
"""Delete-a-block jackknife of the BCa acceleration (as detcal.metrics.bootstrap's generic path)."""


@dataclass
class Comparison:
    """Output of :func:`compare` (module docstring). Values are floats; intervals ``(lo, hi)``."""

    table: list[dict[str, Any]]
    diffs: list[dict[str, Any]]
    per_class: dict[str, list[dict[str, Any]]]
    per_size: list[dict[str, Any]]
    reliability: dict[str, dict[str, np.ndarray]]
    samples: dict[str, dict[str, np.ndarray]] = field(repr=False, default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


def calibration_sample(
    dets: Detections, dataset: Dataset, iou: float = 0.5, matching: str = "exclusive"
) -> dict[str, np.ndarray]:
    """``p, y, features [S,4], category, image (row into dataset.images), area`` of the non-ignored considered detections."""
    if matching == "exclusive":
        m = match(dets, dataset.gt, [iou], images=dataset.images)
    elif matching == "netcal_example":
        m = match_netcal_example(dets, dataset.gt, [iou])
    else:
        raise DetcalInputError(
            f"unknown matching {matching!r}; choose 'exclusive' or 'netcal_example'", field="matching"
        )
    keep = m.considered & ~m.ignored[0]
    row = dataset.images.index_of(dets.image_id)
    if (row < 0).any():
        i = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError(
            f"image_id {int(dets.image_id[i])} is not among the dataset's images",
            record=f"detection row {i}",
            field="image_id",
        )
    f, _ = relative_features(dets.box, dataset.images.width[row], dataset.images.height[row])
    b = dets.box
    return {
        "p": dets.score[keep],
        "y": m.matched[0][keep].astype(np.float64),
        "features": f[keep],
        "category": dets.category[keep],
        "image": row[keep],
        "area": ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]))[keep],
    }


def calibration_names() -> tuple[str, ...]:
    """The calibration metrics of the comparison: the registry's headline measures (:mod:`detcal.metrics.measures`)."""
    return headline_names()


def metric_fns(binning: DeceBinningSpec | None = None) -> dict[str, ConfidenceMetric]:
    """The calibration metrics as the metric objects of evaluate's suite on ``binning``'s grids (default
    :class:`~detcal.pipeline.spec.DeceBinningSpec`: ECE 15 bins, D-ECE 5 per dimension, threshold 8): the
    point values of :func:`point_metrics`, the bootstrap and :func:`replicate_metrics`."""
    b = binning or DeceBinningSpec()
    measures = suite(b.suite_binning())
    return {k: measures[k] for k in calibration_names()}


def _args(s: Mapping[str, np.ndarray], binning: DeceBinningSpec | None) -> tuple[np.ndarray, ...]:
    """``(p, y, features)`` of a calibration sample, the features those of ``binning`` (default all four)."""
    cols = [FEATURES.index(n) for n in (binning or DeceBinningSpec()).features]
    f = s["features"] if cols == list(range(s["features"].shape[1])) else s["features"][:, cols]
    return s["p"], s["y"], f


def point_metrics(s: Mapping[str, np.ndarray], binning: DeceBinningSpec | None = None) -> dict[str, float]:
    """The calibration metrics of one calibration sample (:func:`metric_fns`: the registry's entries)."""
    args = _args(s, binning)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseCellsWarning)  # one line per run: _sparse_line
        return {k: float(m(*args).value) for k, m in metric_fns(binning).items()}


def _sparse_line(samples: Mapping[str, Mapping[str, np.ndarray]], binning: DeceBinningSpec) -> None:
    """The run's one sparse-cell warning (detcal.pipeline.sparse_cells): the detectors whose D-ECE grid has
    more cells than samples/10, with the numbers."""
    grid = binning.grid()
    dims, cells = len(grid), grid.n_cells
    ns = {k: len(v["p"]) for k, v in samples.items() if 0 < len(v["p"]) < cells * SPARSE_RATIO}
    if ns:
        lo = min(ns.values())
        log_once(
            f"sparse cells ({SPARSE_MARK}): dece of {', '.join(ns)}: {cells:,} cells for "
            f"{lo:,}{'' if lo == max(ns.values()) else f'-{max(ns.values()):,}'} detections "
            f"({fitting_bins(lo, dims)} bins per dimension would fit: dece_binning.bins)"
        )


def single_intervals(
    s: Mapping[str, np.ndarray],
    image_id: np.ndarray,
    point: Mapping[str, float],
    n_boot: int,
    level: float,
    seed: int,
    method: str,
    binning: DeceBinningSpec | None = None,
) -> dict[str, dict[str, Any]]:
    """Each metric's interval for one detector exactly as ``detcal-evaluate`` computes it: the same
    resamples (the images holding the detector's sample, drawn by :func:`detcal.metrics.bootstrap.bootstrap_many`
    with ``seed``), the same leave-one-image-out jackknife and method. ``image_id [S]``: each sample's image id."""
    fns = metric_fns(binning)
    args = _args(s, binning)
    reps = bootstrap_many(fns, image_id, *args, n_boot=n_boot, seed=seed)
    jack = jackknife_many(fns, image_id, *args) if method == "bca" else {}
    return {k: interval(reps[k], point[k], level, method, jack.get(k)) for k in fns}


def image_weights(n_images: int, n_boot: int, seed: int) -> np.ndarray:
    """``W [R, I]``: how often each image is drawn in each of ``n_boot`` replicates (shared by all detectors)."""
    draws = np.random.default_rng(seed).integers(0, n_images, size=(n_boot, n_images))
    flat = draws + (np.arange(n_boot)[:, None] * n_images)
    return np.bincount(flat.ravel(), minlength=n_boot * n_images).reshape(n_boot, n_images).astype(np.float64)


def replicate_metrics(
    s: Mapping[str, np.ndarray], W: np.ndarray, binning: DeceBinningSpec | None = None
) -> dict[str, np.ndarray]:
    """The calibration metrics of each bootstrap replicate ``[R]`` (row weights ``W [R, I]`` over the
    dataset's images, ``s["image"]`` each sample's image row), through the registry entries of
    :func:`metric_fns`: the per-(image, cell) sums of each grid once
    (:func:`detcal.metrics.image_cells.image_cells`), then ``W`` times them and each entry's ``values``
    (:func:`detcal.metrics.image_cells.replicate_values`), as the bootstrap of ``detcal-evaluate``.

    With ``W`` all ones this is the point value (tested against :func:`point_metrics`).
    """
    fns = metric_fns(binning)
    names = list(fns)
    W = np.asarray(W, dtype=np.float64)
    out = {k: np.full(len(W), np.nan) for k in names}
    image = np.asarray(s["image"], dtype=np.int64)
    grids = image_cells(fns, names, image, W.shape[1], _args(s, binning))
    with np.errstate(invalid="ignore", divide="ignore"):
        replicate_values(fns, grids, W, out, 0)
    return out


def _size_rows(name: str, s: Mapping[str, np.ndarray], acc: Mapping[str, Any], ece_bins: int) -> list[dict[str, Any]]:
    """Per COCO size (detection box area: small <= 32^2 < medium <= 96^2 < large): AP/AR and calibration."""
    small, medium = AREA_RANGES["small"][1], AREA_RANGES["medium"][1]
    which = {
        "small": s["area"] <= small,
        "medium": (s["area"] > small) & (s["area"] <= medium),
        "large": s["area"] > medium,
    }
    rows = []
    for size, m in which.items():
        pc, yc = s["p"][m], s["y"][m]
        rows.append(
            {
                "detector": name,
                "size": size,
                "AP": acc[f"AP_{size}"].value,
                "AR100": acc[f"AR_{size}"].value,
                "n": int(m.sum()),
                "precision": float(yc.mean()) if m.any() else float("nan"),
                "mean_conf": float(pc.mean()) if m.any() else float("nan"),
                "ece": ece(pc, yc, ece_bins).value,  # the per-size table's own ECE column
            }
        )
    return rows


def _detector_row(
    name: str,
    acc: Mapping[str, Any],
    s: Mapping[str, np.ndarray],
    point: Mapping[str, float],
    single: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """One detector's row: accuracy, sample size, precision, and each calibration metric with its interval
    (``single``: :func:`single_intervals`, the intervals of detcal-evaluate)."""
    row: dict[str, Any] = {
        "detector": name,
        **{k: acc[k].value for k in ACC_METRICS},
        "n": int(len(s["p"])),
        "precision": float(s["y"].mean()) if len(s["p"]) else float("nan"),
    }
    for k in point:
        row[k] = point[k]
        res = single[k]
        row[f"{k}_ci"] = res["ci"]
        if res["note"]:
            row.setdefault("ci_notes", {})[k] = res["note"]
    return row


def _calibration_diffs(
    table: list[dict[str, Any]],
    reps: dict[str, dict[str, np.ndarray]],
    jks: dict[str, dict[str, Any]],
    baseline: str,
    level: float,
    method: str,
) -> list[dict[str, Any]]:
    """Paired differences of every calibration metric from ``baseline``, with their intervals (same replicates)."""
    diffs = []
    base_row = next(r for r in table if r["detector"] == baseline)
    for row in table:
        if row["detector"] == baseline:
            continue
        det = row["detector"]
        names = list(reps[det])
        n_boot = len(reps[det][names[0]])
        for k in names:
            d = reps[det][k] - reps[baseline][k]
            jd, jb = jks[det][k], jks[baseline][k]
            jk = None if jd is None or jb is None else jd - jb
            res = interval(d, row[k] - base_row[k], level, method, jk)
            lo, hi = res["ci"]
            diffs.append(
                {
                    "detector": det,
                    "baseline": baseline,
                    "metric": k,
                    "diff": row[k] - base_row[k],
                    "ci": (lo, hi),
                    "excludes_zero": bool((lo > 0 or hi < 0) and n_boot >= MIN_MARK_RESAMPLES),
                    "ci_note": "; ".join(x for x in (res["note"], few_resamples_note(n_boot, lo, hi)) if x),
                }
            )
    return diffs


def _params(
    iou: float,
    matching: str,
    n_boot: int,
    level: float,
    seed: int,
    baseline: str,
    method: str,
    jackknife_blocks: int,
    ap_n_boot: int,
    ap_metrics: tuple[str, ...],
    binning: DeceBinningSpec,
) -> dict[str, Any]:
    """The settings a comparison records."""
    return {
        "iou": iou,
        "matching": matching,
        "n_boot": int(n_boot),
        "level": level,
        "seed": seed,
        "baseline": baseline,
        "method": method,
        "jackknife_blocks": jackknife_blocks,
        "ap_n_boot": int(ap_n_boot),
        "ap_metrics": list(ap_metrics) if ap_n_boot > 0 else [],
        "ece_bins": binning.ece_bins,
        "dece_bins": binning.bins,
        "dece_sample_threshold": binning.sample_threshold,
    }


def compare(
    runs: Mapping[str, Detections],
    dataset: Dataset,
    *,
    baseline: str | None = None,
    iou: float = 0.5,
    matching: str = "exclusive",
    n_boot: int = 200,
    level: float = 0.95,
    seed: int = 0,
    gt_area: np.ndarray | None = None,
    top_n_classes: int = 10,
    method: str = "bca",
    ap_n_boot: int = 0,
    ap_metrics: tuple[str, ...] = ("AP", "AP50", "AR100"),
    ap_jackknife_blocks: int = 6,
    binning: DeceBinningSpec | None = None,
) -> Comparison:
    """Compare detectors (module docstring). ``baseline`` defaults to the first of ``runs``; ``binning``: the
    run's ``dece_binning`` (default :class:`~detcal.pipeline.spec.DeceBinningSpec`)."""
    t0 = time.time()
    binning = binning or DeceBinningSpec()
    if not runs:
        raise DetcalInputError("no detectors to compare", field="runs")
    names = list(runs)
    baseline = names[0] if baseline is None else baseline
    if baseline not in runs:
        raise DetcalInputError(f"baseline {baseline!r} is not one of {names}", field="baseline")
    if int(n_boot) < 1:
        raise DetcalInputError(f"n_boot must be >= 1, got {n_boot}", field="n_boot")
    W = image_weights(len(dataset.images), int(n_boot), seed)
    block = jackknife_blocks(len(dataset.images), JACKKNIFE_BLOCKS, seed)
    W_jk = (block[None, :] != np.arange(int(block.max()) + 1)[:, None]).astype(np.float64)  # [B, I]
    table, per_size, per_cls, rel, samples, reps, jks, accs = [], [], {}, {}, {}, {}, {}, {}
    for name in names:
        acc = coco_ap(runs[name], dataset, gt_area=gt_area)
        s = calibration_sample(runs[name], dataset, iou, matching)
        samples[name] = s
        point = point_metrics(s, binning)
        reps[name] = replicate_metrics(s, W, binning)
        jks[name] = replicate_metrics(s, W_jk, binning) if method == "bca" else {k: None for k in point}
        accs[name] = {k: float(acc[k].value) for k in ACC_METRICS}
        ids = dataset.images.id[s["image"]]
        single = single_intervals(s, ids, point, int(n_boot), level, seed, method, binning)
        table.append(_detector_row(name, acc, s, point, single))
        per_size += _size_rows(name, s, acc, binning.ece_bins)
        per_cls[name] = per_class_table(
            s["p"],
            s["y"],
            s["category"],
            dataset.categories,
            bins=binning.ece_bins,
            top_n=top_n_classes,
            ap_table=acc["AP"].table,
        )
        rel[name] = reliability_curve(s["p"], s["y"], binning.ece_bins)
    _sparse_line(samples, binning)
    diffs = _calibration_diffs(table, reps, jks, baseline, level, method)
    if ap_n_boot > 0 and len(names) > 1:
        diffs += paired_ap_differences(
            runs,
            dataset,
            baseline,
            list(ap_metrics),
            accs,
            n_boot=int(ap_n_boot),
            level=level,
            seed=seed,
            method=method,
            gt_area=gt_area,
            n_blocks=ap_jackknife_blocks,
        )
    params = _params(
        iou, matching, n_boot, level, seed, baseline, method, int(block.max()) + 1, ap_n_boot, ap_metrics, binning
    )
    params["seconds"] = time.time() - t0
    return Comparison(
        table=table, diffs=diffs, per_class=per_cls, per_size=per_size, reliability=rel, samples=samples, params=params
    )


def _ci_md(ci: Any, f: Any) -> str:
    """``[lo, hi]``, or ``[no interval: see the notes]`` when it is NaN."""
    lo, hi = ci
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return "[no interval: see the notes]"
    return f"[{f(lo)}, {f(hi)}]"


def _note_ref(notes: dict[str, list[str]], note: Any, where: str) -> str:
    """Record ``note`` once (with the places it applies to); return its reference ``(n)``."""
    if not note:
        return ""
    notes.setdefault(str(note), []).append(where)
    return f"({list(notes).index(str(note)) + 1})"


def _notes_md(notes: Mapping[str, list[str]]) -> list[str]:
    """Each distinct note once, numbered, with where it applies."""
    if not notes:
        return []
    return [""] + [f"({i}) {n} [{', '.join(w)}]" for i, (n, w) in enumerate(notes.items(), 1)]


def markdown(c: Comparison, digits: int = 4) -> str:
    """The comparison as Markdown: main table, paired differences, per-size and per-class tables."""
    f = lambda v: f"{v:.{digits}f}"
    cal = [k for k in calibration_names() if c.table and k in c.table[0]]
    head = ["detector", *ACC_METRICS, "n", "precision", *cal]
    lines = ["## Detectors", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in c.table:
        cells = [md_cell(r["detector"]), *(f(r[k]) for k in ACC_METRICS), str(r["n"]), f(r["precision"])]
        cells += [f"{f(r[k])} {_ci_md(r[k + '_ci'], f)}" for k in cal]
        lines.append("| " + " | ".join(cells) + " |")
    lvl = int(round(100 * c.params["level"]))
    lines += [
        "",
        f"## Difference from {c.params['baseline']} (paired bootstrap over images, {lvl}% interval)",
        "",
        "| detector | metric | difference | interval | note |",
        "|---|---|---|---|---|",
    ]
    diff_notes: dict[str, list[str]] = {}
    for d in c.diffs:
        ci = _ci_md(d["ci"], f) + (" *" if d["excludes_zero"] else "")
        ref = _note_ref(diff_notes, d.get("ci_note"), f"{d['detector']} {d['metric']}")
        lines.append(f"| {md_cell(d['detector'])} | {md_cell(d['metric'])} | {f(d['diff'])} | {ci} | {ref} |")
    lines += _notes_md(diff_notes)
    p = c.params
    lines += [
        "",
        f"Intervals: {p.get('method', 'bca')} over {p['n_boot']} image resamples (calibration metrics) and "
        f"{p.get('ap_n_boot', 0)} resamples with COCO AP/AR recomputed on each (AP/AR differences); * the "
        f"interval excludes 0 and rests on at least {MIN_MARK_RESAMPLES} resamples (fewer are too unsteady to "
        "mark a difference). A detector's own intervals are those detcal-evaluate gives it.",
    ]
    row_notes: dict[str, list[str]] = {}
    for r in c.table:
        for k, v in (r.get("ci_notes") or {}).items():
            _note_ref(row_notes, v, f"{r['detector']} {k}")
    if row_notes:
        lines += ["", "Interval notes of the detector table:", *_notes_md(row_notes)[1:]]
    lines += ["", "## By object size", "", table_markdown(c.per_size, digits=digits)]
    for name, rows in c.per_class.items():
        lines += ["", f"## Per class: {name}", "", table_markdown(rows, digits=digits)]
    return "\n".join(lines) + "\n"


def plot(c: Comparison, path: str | os.PathLike[str] | None = None) -> Any:
    """Overlaid reliability diagrams of all detectors (one panel)."""
    import matplotlib  # lazy: matplotlib kept out of start-up (the figure only needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib kept out of start-up

    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    plot_reliability(ax, c.reliability, f"reliability at IoU {c.params['iou']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path, dpi=120)
        plt.close(fig)
    return fig


def plot_per_class(
    c: Comparison, names: Mapping[int, str] | None = None, top_n: int = 9, path: str | os.PathLike[str] | None = None
) -> Any:
    """Per-class reliability diagrams of the most frequent classes, all detectors overlaid."""
    return plot_per_class_reliability(
        {k: (s["p"], s["y"], s["category"]) for k, s in c.samples.items()},
        names,
        top_n=top_n,
        bins=c.params.get("ece_bins", DeceBinningSpec().ece_bins),
        path=path,
    )


__all__ = [
    "ACC_METRICS",
    "CAL_METRICS",
    "Comparison",
    "calibration_names",
    "calibration_sample",
    "compare",
    "image_weights",
    "markdown",
    "metric_fns",
    "plot",
    "plot_per_class",
    "point_metrics",
    "replicate_metrics",
]
