"""Lakara et al. 2022 on a detector with box uncertainty: RMSE/RMV, LENCE, LL-FU and MWSE retention.

The study computes, per box coordinate (tx, ty, tw, th), what the paper
reports for its weather regressor:

* Table 1: ENCE (equal-count bins), C_v and LENCE = ln|ENCE + 1/C_v|;
* Tables 2-4: F1-AUC, F1@95 and R-AUC (Shifts retention: MSE, rejected
  samples count 0, divided by N) with two uncertainty measures, sigma and
  LL-FU;
* Figure 1: the RMSE/RMV retention curve (R3 curve) and the MWSE retention
  curve; Figure 2: the LL-FU F1-retention and MSE-retention curves.

``source`` selects the source variant of every metric that has one:
``"code"`` (default: as the authors' published evaluation code computes it:
LL-FU with log10, the MWSE curve divided by the total N) or ``"paper"`` (the
paper's text: natural log, the MWSE curve as a mean over the retained
samples). The choice is recorded in the returned dict.

Input: a :class:`detcal.metrics.spaces.RegressionSample` of a detector with
box uncertainty, or ``None`` for the seeded synthetic detector
(:func:`detcal.data.synthetic.simulate_detector`, matched at IoU 0.5), until
real detectors carry uncertainty. Plain function; no Hydra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.data.synthetic import generate_scenes, simulate_detector
from detcal.matching.engine import match
from detcal.metrics import regression as R
from detcal.metrics.spaces import RegressionSample, regression_sample
from detcal.utils.io import save_figure

SOURCES: dict[str, dict[str, str]] = {
    "code": {"ll_fu_log_base": "10", "mwse_normalise": "total"},
    "paper": {"ll_fu_log_base": "e", "mwse_normalise": "retained"},
}
"""Source variants of the study: the authors' evaluation code, or the paper's text."""


def synthetic_sample(n_images: int = 500, seed: int = 0) -> RegressionSample:
    """Regression sample of the seeded synthetic detector (delta records, true positives at IoU 0.5)."""
    ds, _ = generate_scenes(int(n_images), seed=seed, render=False)
    dets = simulate_detector(ds, seed=seed)
    return regression_sample(dets, ds.gt, match(dets, ds.gt, iou_thresholds=[0.5]), iou_threshold=0.5)


def _coordinate(
    mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, *, bins: int, f1_threshold: float | None, opts: dict[str, str]
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    e2 = np.square(y - mu)
    thr = float(np.mean(sigma * sigma)) if f1_threshold is None else float(f1_threshold)
    lence = R.lence(mu, sigma, y, bins=bins)
    ratio = R.rmse_rmv_ratio(mu, sigma, y)
    mw = R.mwse(mu, sigma, y, normalise=opts["mwse_normalise"])
    llfu = R.ll_fu_scores(mu, sigma, y, log_base=opts["ll_fu_log_base"])
    row: dict[str, float] = {
        "n": float(len(mu)),
        "ence": lence.extra["ence"],
        "cv": lence.extra["cv"],
        "lence": lence.value,
        "rmse_rmv": ratio.value,
        "mwse": mw.value,
        "ll_fu": float(llfu.mean()),
        "mse": float(e2.mean()),
        "f1_threshold": thr,
    }
    curves: dict[str, np.ndarray] = {
        "rejected_fraction": ratio.table["rejected_fraction"],
        "rmse_rmv": ratio.table["ratio"],
        "mwse": mw.table["mwse"],
    }
    for name, u in (("sigma", None), ("ll_fu", llfu)):
        ret = R.retention_curve(mu, sigma, y, error="mse", variant="shifts", uncertainty=u)
        f1 = R.f1_retention(mu, sigma, y, threshold=thr, error="mse", uncertainty=u)
        row[f"r_auc_{name}"] = ret.value
        row[f"f1_auc_{name}"] = f1.value
        row[f"f1_at_95_{name}"] = f1.extra["f1_at_95"]
        curves[f"mse_retention_{name}"] = ret.table["error"]
        curves[f"mse_retained_fraction_{name}"] = ret.table["retained_fraction"]
        curves[f"f1_{name}"] = f1.table["f1"]
        curves[f"f1_retained_fraction_{name}"] = f1.table["retained_fraction"]
    return row, curves


def format_table(rows: dict[str, dict[str, float]]) -> str:
    """The study's table as text: one row per coordinate."""
    cols = (
        "ence",
        "cv",
        "lence",
        "rmse_rmv",
        "mwse",
        "ll_fu",
        "r_auc_sigma",
        "r_auc_ll_fu",
        "f1_auc_sigma",
        "f1_auc_ll_fu",
        "f1_at_95_sigma",
        "f1_at_95_ll_fu",
    )
    head = f"{'coord':<6}" + "".join(f"{c:>15}" for c in cols)
    lines = [head, "-" * len(head)]
    for k, row in rows.items():
        lines.append(f"{k:<6}" + "".join(f"{row[c]:>15.5g}" for c in cols))
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str | Path) -> Path:
    """Figure 1 and 2 of the paper for every coordinate: R3, MWSE, LL-FU F1 and MSE retention curves (PNG)."""
    import matplotlib  # lazy: matplotlib only for figures, kept out of start-up

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib only for figures, kept out of start-up

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for k, c in result["curves"].items():
        ret = 1.0 - c["rejected_fraction"]
        axes[0].plot(ret, c["rmse_rmv"], label=k)
        axes[1].plot(ret, c["mwse"], label=k)
        axes[2].plot(c["f1_retained_fraction_ll_fu"], c["f1_ll_fu"], label=k)
        axes[3].plot(c["mse_retained_fraction_ll_fu"], c["mse_retention_ll_fu"], label=k)
    for ax, title in zip(
        axes, ("RMSE/RMV retention (R3)", "MWSE retention", "LL-FU F1 retention", "MSE retention by LL-FU")
    ):
        ax.set_title(title)
        ax.set_xlabel("retained fraction")
        ax.legend(fontsize=7)
    axes[0].axhline(1.0, color="grey", lw=0.8, ls="--")
    fig.suptitle(f"Lakara et al. 2022 metrics (source variants: {result['source']})")
    fig.tight_layout()
    out = Path(path)
    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


def lakara_retention(
    sample: RegressionSample | None = None,
    *,
    source: str = "code",
    bins: int = 10,
    f1_threshold: float | None = None,
    n_images: int = 500,
    seed: int = 0,
    figure: str | Path | None = None,
) -> dict[str, Any]:
    """Run the study; returns ``{"table": {coord: {metric: value}}, "curves": {coord: {...}}, "text", "source",
    "variants", "params"}`` and writes the figure when ``figure`` is a path.

    ``sample``: the detector's regression sample (``None``: the synthetic
    detector of ``n_images`` images, ``seed``). ``f1_threshold``: squared
    error up to which a prediction is acceptable (default: the coordinate's
    mean sigma^2, an error within the predicted RMV; the paper's threshold is
    task-specific). ``bins``: equal-count bins of ENCE.
    """
    if source not in SOURCES:
        raise DetcalInputError(f"source must be one of {tuple(SOURCES)}, got {source!r}", field="source")
    smp = synthetic_sample(n_images, seed) if sample is None else sample
    if len(smp) < 2:
        raise DetcalInputError(f"the regression sample has {len(smp)} true positives; need at least 2", field="sample")
    opts = SOURCES[source]
    table: dict[str, dict[str, float]] = {}
    curves: dict[str, dict[str, np.ndarray]] = {}
    for k, name in enumerate(smp.coords):
        table[name], curves[name] = _coordinate(
            smp.mu[:, k], smp.sigma[:, k], smp.y[:, k], bins=bins, f1_threshold=f1_threshold, opts=opts
        )
    result: dict[str, Any] = {
        "table": table,
        "curves": curves,
        "text": format_table(table),
        "source": source,
        "variants": {
            "ll_fu": "log10" if opts["ll_fu_log_base"] == "10" else "ln",
            "mwse_curve": opts["mwse_normalise"],
            "r_auc": "shifts (mse, divided by N)",
            "ence": "equal_count, ties shared",
            "lence": "natural log",
        },
        "params": {
            "bins": int(bins),
            "f1_threshold": f1_threshold,
            "space": smp.space,
            "synthetic": sample is None,
            "n_images": int(n_images) if sample is None else None,
            "seed": int(seed) if sample is None else None,
        },
    }
    if figure is not None:
        result["figure"] = str(plot(result, figure))
    return result
