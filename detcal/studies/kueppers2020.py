"""The D-ECE experiment of Küppers et al. 2020 (CVPR Workshops) on the bundled COCO records.

Küppers, Kronenberger, Shantia, Haselhoff, "Multivariate Confidence
Calibration for Object Detection". Protocol, as run by :func:`run`:

* data: the four bundled detectors on COCO val2017 (``coco_tfzoo``, score >=
  0.3), labelled with netcal's example matching
  (:func:`detcal.matching.netcal_example.match_netcal_example`) at IoU 0.60 and 0.75;
* features: (conf), (conf, cx, cy), (conf, w, h), (conf, cx, cy, w, h), the
  box features relative to the image size (:func:`detcal.core.boxes.relative_features`);
* D-ECE with 15 bins (1 dimension), 5 per dimension (3 dimensions), 3 per
  dimension (5 dimensions), netcal's cells, cells with fewer than
  ``sample_threshold`` samples (default 1: every occupied cell counts, netcal's
  default) count with gap 0 (:func:`detcal.metrics.confidence.dece_kueppers`, policy
  ``"netcal"``);
* 20 seeded 70/30 calibration/test splits over *images*;
* calibrators (a parameter; names of :data:`detcal.calibration.CONFIDENCE_CALIBRATORS`):
  histogram binning (on the D-ECE grid of the feature set), logistic (Platt),
  position-dependent logistic (the set's features), beta, position-dependent
  beta (``"position_beta"``: detcal's when registered, else
  :class:`InterimPositionBeta`), temperature. A
  position-dependent calibrator has no (conf)-only row;
* result: D-ECE on the test split before and after calibration, mean and std
  over the splits; :func:`markdown_table` and :func:`plot`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.calibration import CONFIDENCE_CALIBRATORS, make_calibrator
from detcal.calibration.base import ConfidenceCalibrator, clip_p, sigmoid
from detcal.calibration.confidence import fit_logistic
from detcal.core.boxes import relative_features
from detcal.data import bundled
from detcal.matching.netcal_example import match_netcal_example
from detcal.metrics.confidence import dece_kueppers
from detcal.utils.io import save_figure

FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "conf": (),
    "conf,cx,cy": ("cx", "cy"),
    "conf,w,h": ("w", "h"),
    "conf,cx,cy,w,h": ("cx", "cy", "w", "h"),
}
"""Feature sets of the paper (the box features besides the confidence)."""
BINS_PER_DIM: dict[int, int] = {1: 15, 3: 5, 5: 3}
"""D-ECE bins per dimension, by number of dimensions."""
IOUS: tuple[float, ...] = (0.60, 0.75)
POSITION_DEPENDENT: frozenset[str] = frozenset({"position_logistic", "position_beta"})
"""Calibrators that need box features (no row for the (conf) set)."""
DEFAULT_CALIBRATORS: tuple[str, ...] = (
    "histogram",
    "platt",
    "position_logistic",
    "beta",
    "position_beta",
    "temperature",
)
"""The paper's calibrators. ``position_beta`` is detcal's registered one when
it exists, else the interim :class:`InterimPositionBeta` of this module."""
_FEATURE_COLUMN = {"cx": 0, "cy": 1, "w": 2, "h": 3}


@dataclass
class StudyResult:
    """``rows``: one dict per (detector, iou, features, calibrator) with ``mean``, ``std``, ``values [splits]``.

    ``calibrator == "uncalibrated"`` rows are the D-ECE before calibration
    on the same test splits; ``full`` holds the uncalibrated D-ECE on all
    detections (the number compared with netcal).
    """

    rows: list[dict[str, Any]]
    full: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)


def detector_sample(detector: str, iou: float) -> dict[str, np.ndarray]:
    """``p [D]``, ``y [D]`` (netcal example matching at ``iou``), ``features [D,4]`` (cx, cy, w, h relative), ``image [D]``."""
    ds, dets = bundled.load("coco_tfzoo", detector)
    m = match_netcal_example(dets, ds.gt, [iou])
    row = ds.images.index_of(dets.image_id)
    f, _ = relative_features(dets.box, ds.images.width[row], ds.images.height[row])
    return {"p": dets.score, "y": m.matched[0].astype(np.float64), "features": f, "image": dets.image_id}


def feature_columns(features: np.ndarray, name: str) -> np.ndarray | None:
    """The box-feature columns ``[D,F]`` of feature set ``name`` (None for (conf))."""
    cols = [_FEATURE_COLUMN[c] for c in FEATURE_SETS[name]]
    return features[:, cols] if cols else None


def set_dece(p: np.ndarray, y: np.ndarray, f: np.ndarray | None, sample_threshold: int = 1) -> float:
    """D-ECE of one feature set with the paper's bins (netcal cells)."""
    n_dim = 1 + (0 if f is None else f.shape[1])
    return dece_kueppers(p, y, f, bins=BINS_PER_DIM[n_dim], sample_threshold=sample_threshold, policy="netcal").value


def image_splits(
    image_ids: np.ndarray, n_splits: int = 20, cal_fraction: float = 0.7, seed: int = 0
) -> list[np.ndarray]:
    """``n_splits`` boolean masks over the *unique* images: True = calibration split."""
    uniq = np.unique(image_ids)
    n_cal = int(round(cal_fraction * len(uniq)))
    out = []
    for s in range(n_splits):
        perm = np.random.default_rng([seed, s]).permutation(len(uniq))
        mask = np.zeros(len(uniq), bool)
        mask[perm[:n_cal]] = True
        out.append(mask)
    return out


class InterimPositionBeta(ConfidenceCalibrator):
    """Position-dependent beta calibration, independent form (interim, study-only).

    ``p' = sigmoid(c + a ln p - b ln(1 - p) + sum_i (a_i ln f_i - b_i ln(1 - f_i)))``
    with features clipped to ``[1e-6, 1 - 1e-6]``: the beta-calibration
    family (Kull et al. 2017) extended to the box features as in netcal's
    multivariate beta calibration without feature covariances
    (``BetaCalibration(detection=True)``; netcal's ``BetaCalibrationDependent``
    adds the dependencies). Fitted by :func:`fit_logistic` with an L2 penalty
    ``l2`` on the feature terms. Used by :func:`run` only while
    ``detcal.calibration`` registers no ``position_beta``.
    """

    uses_features = True
    requires_features = True

    def __init__(self, l2: float = 1e-4) -> None:
        self.l2 = l2

    @staticmethod
    def _design(p: np.ndarray, f: np.ndarray) -> np.ndarray:
        q = clip_p(p)
        g = np.clip(f, 1e-6, 1 - 1e-6)
        return np.column_stack([np.ones_like(q), np.log(q), -np.log1p(-q), np.log(g), -np.log1p(-g)])

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        assert features is not None
        X = self._design(p, features)
        pen = np.full(X.shape[1], float(self.l2))
        pen[:3] = 0.0
        w0 = np.zeros(X.shape[1])
        w0[1:3] = 1.0
        self.coef_ = fit_logistic(X, y, pen, w0=w0)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        assert features is not None
        return sigmoid(self._design(p, features) @ self.coef_)


def _make(name: str, n_dim: int) -> Any:
    if name == "position_beta" and name not in CONFIDENCE_CALIBRATORS:
        return InterimPositionBeta()
    if name == "histogram":
        return make_calibrator("histogram", bins=15, grid_bins=BINS_PER_DIM[n_dim])
    return make_calibrator(name)


def _split_deces(
    p: np.ndarray,
    y: np.ndarray,
    feats: np.ndarray,
    img_row: np.ndarray,
    splits: Sequence[np.ndarray],
    feature_sets: Sequence[str],
    calibrators: Sequence[str],
    sample_threshold: int,
) -> dict[tuple[str, str], list[float]]:
    """Held-out D-ECE per (feature set, calibrator) over the image splits ("uncalibrated" included)."""
    vals: dict[tuple[str, str], list[float]] = {}
    for cal_img in splits:
        cal = cal_img[img_row]
        test = ~cal
        conf_only: dict[str, np.ndarray] = {}
        for fs in feature_sets:
            f_all = feature_columns(feats, fs)
            n_dim = 1 + (0 if f_all is None else f_all.shape[1])
            f_cal = None if f_all is None else f_all[cal]
            f_test = None if f_all is None else f_all[test]
            vals.setdefault((fs, "uncalibrated"), []).append(set_dece(p[test], y[test], f_test, sample_threshold))
            for name in calibrators:
                pos = name in POSITION_DEPENDENT
                if pos and f_all is None:
                    continue
                if name == "histogram":
                    q = _make(name, n_dim).fit(p[cal], y[cal], f_cal).transform(p[test], f_test)
                elif pos:
                    q = _make(name, n_dim).fit(p[cal], y[cal], f_cal).transform(p[test], f_test)
                else:  # confidence-only: one fit per split, shared by the feature sets
                    if name not in conf_only:
                        conf_only[name] = _make(name, 1).fit(p[cal], y[cal]).transform(p[test])
                    q = conf_only[name]
                vals.setdefault((fs, name), []).append(set_dece(q, y[test], f_test, sample_threshold))
    return vals


def run(
    detectors: Sequence[str] = bundled.DETECTORS,
    ious: Sequence[float] = IOUS,
    feature_sets: Sequence[str] = tuple(FEATURE_SETS),
    calibrators: Sequence[str] = DEFAULT_CALIBRATORS,
    n_splits: int = 20,
    cal_fraction: float = 0.7,
    sample_threshold: int = 1,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> StudyResult:
    """Run the protocol (module docstring); returns every split's D-ECE. ``progress``: called with one
    line after each (detector, IoU) part, saying which, how many of how many and the time so far."""
    t0 = time.time()
    rows: list[dict[str, Any]] = []
    full: list[dict[str, Any]] = []
    parts = [(det, iou) for det in detectors for iou in ious]
    for k, (det, iou) in enumerate(parts):
        s = detector_sample(det, float(iou))
        p, y, feats = s["p"], s["y"], s["features"]
        uniq, img_row = np.unique(s["image"], return_inverse=True)
        splits = image_splits(s["image"], n_splits, cal_fraction, seed)
        for fs in feature_sets:
            full.append(
                {
                    "detector": det,
                    "iou": float(iou),
                    "features": fs,
                    "dece": set_dece(p, y, feature_columns(feats, fs), sample_threshold),
                }
            )
        vals = _split_deces(p, y, feats, img_row, splits, feature_sets, calibrators, sample_threshold)
        for (fs, name), v in vals.items():
            arr = np.asarray(v)
            rows.append(
                {
                    "detector": det,
                    "iou": float(iou),
                    "features": fs,
                    "calibrator": name,
                    "mean": float(arr.mean()),
                    "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
                    "values": arr,
                }
            )
        if progress is not None:
            progress(
                f"kueppers2020: {k + 1}/{len(parts)} {det} at IoU {float(iou):.2f} done "
                f"({n_splits} splits, {len(calibrators)} calibrators; {time.time() - t0:.0f} s so far)"
            )
    params = {
        "detectors": list(detectors),
        "ious": [float(i) for i in ious],
        "feature_sets": list(feature_sets),
        "calibrators": list(calibrators),
        "n_splits": n_splits,
        "cal_fraction": cal_fraction,
        "sample_threshold": sample_threshold,
        "seed": seed,
        "bins_per_dim": BINS_PER_DIM,
        "seconds": time.time() - t0,
    }
    return StudyResult(rows=rows, full=full, params=params)


def markdown_table(result: StudyResult, scale: float = 100.0) -> str:
    """One Markdown table: rows (detector, IoU, calibrator), columns the feature sets, cells ``mean ± std`` (in %)."""
    fsets = list(result.params["feature_sets"])
    cals = ["uncalibrated"] + list(result.params["calibrators"])
    idx = {(r["detector"], r["iou"], r["features"], r["calibrator"]): r for r in result.rows}
    head = "| detector | IoU | calibrator | " + " | ".join(f"D-ECE ({fs}) %" for fs in fsets) + " |"
    lines = [head, "|" + "---|" * (3 + len(fsets))]
    for det in result.params["detectors"]:
        for iou in result.params["ious"]:
            for c in cals:
                cells = []
                for fs in fsets:
                    r = idx.get((det, iou, fs, c))
                    cells.append("—" if r is None else f"{scale * r['mean']:.2f} ± {scale * r['std']:.2f}")
                lines.append(
                    f"| {bundled.DETECTOR_LABELS.get(det, det)} | {iou:.2f} | {c} | " + " | ".join(cells) + " |"
                )
    return "\n".join(lines)


def position_gain(result: StudyResult, features: str = "conf,cx,cy,w,h") -> list[dict[str, Any]]:
    """Per detector and IoU: held-out D-ECE of each position-dependent calibrator vs its confidence-only counterpart."""
    pairs = {"position_logistic": "platt", "position_beta": "beta"}
    idx = {(r["detector"], r["iou"], r["features"], r["calibrator"]): r for r in result.rows}
    out = []
    for det in result.params["detectors"]:
        for iou in result.params["ious"]:
            for pos, base in pairs.items():
                a, b = idx.get((det, iou, features, pos)), idx.get((det, iou, features, base))
                if a is None or b is None:
                    continue
                diff = a["values"] - b["values"]
                out.append(
                    {
                        "detector": det,
                        "iou": iou,
                        "position": pos,
                        "baseline": base,
                        "position_mean": a["mean"],
                        "baseline_mean": b["mean"],
                        "diff_mean": float(diff.mean()),
                        "diff_std": float(diff.std(ddof=1)) if len(diff) > 1 else 0.0,
                        "lower_in_splits": int((diff < 0).sum()),
                        "n_splits": len(diff),
                    }
                )
    return out


def plot(result: StudyResult, path: Any = None) -> Any:
    """One figure: a panel per (IoU, feature set), grouped bars per detector, one bar per calibrator (mean ± std over splits)."""
    import matplotlib  # lazy: matplotlib only for figures, kept out of start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib only for figures, kept out of start-up

    fsets, ious, dets = result.params["feature_sets"], result.params["ious"], result.params["detectors"]
    cals = ["uncalibrated"] + list(result.params["calibrators"])
    idx = {(r["detector"], r["iou"], r["features"], r["calibrator"]): r for r in result.rows}
    fig, axes = plt.subplots(
        len(ious), len(fsets), figsize=(4.2 * len(fsets), 3.4 * len(ious)), squeeze=False, sharey="row"
    )
    width = 0.8 / len(cals)
    for i, iou in enumerate(ious):
        for j, fs in enumerate(fsets):
            ax = axes[i][j]
            for k, c in enumerate(cals):
                xs, ms, ss = [], [], []
                for d, det in enumerate(dets):
                    r = idx.get((det, iou, fs, c))
                    if r is not None:
                        xs.append(d + (k - (len(cals) - 1) / 2) * width)
                        ms.append(100 * r["mean"])
                        ss.append(100 * r["std"])
                ax.bar(xs, ms, width, yerr=ss, color=f"C{k}", capsize=1.5)
            ax.set_xticks(range(len(dets)))
            ax.set_xticklabels([bundled.DETECTOR_LABELS.get(d, d) for d in dets], rotation=20, fontsize=7)
            ax.set_title(f"IoU {iou:.2f}, ({fs})", fontsize=9)
            if j == 0:
                ax.set_ylabel("held-out D-ECE (%)")
    from matplotlib.patches import Patch  # lazy: matplotlib only for figures, kept out of start-up

    fig.legend(
        handles=[Patch(color=f"C{k}", label=c) for k, c in enumerate(cals)],
        loc="upper center",
        ncol=len(cals),
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    if path is not None:
        save_figure(fig, path, dpi=120)
        plt.close(fig)
    return fig


__all__ = [
    "BINS_PER_DIM",
    "DEFAULT_CALIBRATORS",
    "FEATURE_SETS",
    "IOUS",
    "InterimPositionBeta",
    "StudyResult",
    "detector_sample",
    "feature_columns",
    "image_splits",
    "markdown_table",
    "plot",
    "position_gain",
    "run",
    "set_dece",
]
