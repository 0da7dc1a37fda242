"""Tables and figures of the Levi et al. 2019 synthetic experiment (:mod:`detcal.studies.levi_synthetic`).

Per uncertainty u in (random, trained, oracle): ``{u}_std_vs_true.png``
(predicted vs real std), ``{u}_rmse_rmv.png`` (ENCE reliability diagrams) and
``{u}_interval_reliability.png`` (Kuleshov reliability diagram); and the
Markdown summary table.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from detcal.reports import plots
from detcal.reports.tables import format_number
from detcal.utils.io import write_bytes

__all__ = ["UNCERTAINTIES", "RECALIBRATIONS", "RECAL_LABEL", "summary_markdown", "figures"]

UNCERTAINTIES: tuple[str, ...] = ("random", "trained", "oracle")
RECALIBRATIONS: tuple[str, ...] = ("before", "std_scaling", "kuleshov_isotonic")
RECAL_LABEL: dict[str, str] = {
    "before": "before",
    "std_scaling": "STD scaling",
    "kuleshov_isotonic": "Kuleshov isotonic",
}


def summary_markdown(m: Mapping[str, Any]) -> str:
    """Markdown table: one row per (uncertainty, recalibration): ENCE, C_v, Kuleshov CE, NLL, corr, s."""
    cfg = m["config"]
    lines = [
        "# Levi et al. 2019 synthetic experiment (section 4.1, Appendix A.1)",
        "",
        f"- T = {cfg['n_train']} training, {cfg['n_recal']} recalibration, {cfg['n_test']} test samples; "
        f"x ~ U{list(cfg['x_range'])}, y ~ N(x, x^2); random sigma ~ U{list(cfg['random_sigma_range'])}; seed {cfg['seed']}",
        f"- mean: {cfg['layers']}-layer ReLU MLP (width {cfg['hidden']}), L1; log-variance net: Gaussian NLL "
        f"({cfg['variance_training']}); optimiser {cfg['optimizer']} lr {cfg['lr']}, {cfg['steps']} steps per stage",
        f"- ENCE: {cfg['bins']} equal-count bins; Kuleshov CE: {cfg['kuleshov_reduction']} over "
        f"{cfg['kuleshov_m']} levels (isotonic: recalibrated CDF); metrics on the held-out test set",
        "",
        "| uncertainty | recalibration | ENCE | C_v | Kuleshov CE | NLL | corr(sigma, true std) | learned |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, res in m["results"].items():
        for k in RECALIBRATIONS:
            r = res[k]
            learned = ""
            if k == "std_scaling":
                learned = f"s = {format_number(m['learned'][n]['s'])}"
            elif k == "kuleshov_isotonic":
                kk = m["learned"][n]["kuleshov_isotonic"]
                learned = f"m_z = {format_number(kk['mean_z'])}, s_z = {format_number(kk['std_z'])}"
            lines.append(
                f"| {n} | {RECAL_LABEL[k]} | {format_number(r['ence']['value'])} | "
                f"{format_number(r['cv']['value'])} | {format_number(r['kuleshov_ce']['value'])} | "
                f"{format_number(r['nll']['value'])} | {format_number(r['corr']['value'])} | {learned} |"
            )
    lines += ["", f"Training {m['training']['seconds']} s, total {m['timing_s']['total']} s.", ""]
    return "\n".join(lines)


def _new_figure(w: float, h: float) -> Any:
    from matplotlib.backends.backend_agg import (
        FigureCanvasAgg,  # lazy: matplotlib only for figures, kept out of start-up
    )
    from matplotlib.figure import Figure  # lazy: matplotlib only for figures, kept out of start-up

    fig = Figure(figsize=(w, h), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig: Any, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_bytes(path, buf.getvalue())


def figures(
    out: Path, m: Mapping[str, Any], curves: Mapping[str, Any], seed: int, scatter_points: int, bins: int
) -> list[str]:
    """Write the three figures of each uncertainty into ``out``; return their file names."""
    files: list[str] = []
    rng = np.random.default_rng(int(seed))
    for n, res in m["results"].items():
        # Fig. 1(a) / 4(a, b) / 5(a): predicted std vs real std
        fig = _new_figure(4.0 * len(RECALIBRATIONS), 3.8)
        for i, k in enumerate(RECALIBRATIONS):
            ax = fig.add_subplot(1, len(RECALIBRATIONS), i + 1)
            s, true = curves[n][k]
            pick = rng.choice(len(s), size=min(int(scatter_points), len(s)), replace=False)
            ax.scatter(true[pick], s[pick], s=3, alpha=0.4)
            top = float(max(true.max(), np.quantile(s, 0.99)))
            ax.plot([0, top], [0, top], "--", color="0.4", lw=1, label="identity")
            ax.set_xlabel("real std (x)")
            ax.set_ylabel("predicted std")
            ax.set_title(f"{n}: {RECAL_LABEL[k]}\ncorr = {res[k]['corr']['value']:.3f}", fontsize=9)
            ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        _save_png(fig, out / f"{n}_std_vs_true.png")
        files.append(f"{n}_std_vs_true.png")
        # Fig. 1(c) / 4(c, d) / 5(b): RMSE vs RMV (detcal.reports.plots)
        plots.rmse_rmv_diagram(
            out / f"{n}_rmse_rmv.png",
            {RECAL_LABEL[k]: res[k]["ence"]["table"] for k in RECALIBRATIONS},
            ence={RECAL_LABEL[k]: res[k]["ence"]["value"] for k in RECALIBRATIONS},
            title=f"{n} uncertainty: RMSE vs RMV ({bins} equal-count bins, test set)",
        )
        files.append(f"{n}_rmse_rmv.png")
        # Fig. 1(b) / 5(c): observed vs expected confidence level
        fig = _new_figure(4.6, 4.4)
        ax = fig.add_subplot(1, 1, 1)
        ax.plot([0, 1], [0, 1], "--", color="0.4", lw=1, label="ideal")
        for k in RECALIBRATIONS:
            t = res[k]["kuleshov_ce"]["table"]
            ax.plot(
                t["p"], t["p_hat"], "-", lw=1.5, label=f"{RECAL_LABEL[k]} (CE {res[k]['kuleshov_ce']['value']:.2g})"
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("expected confidence level p")
        ax.set_ylabel("observed confidence level P_hat(p)")
        ax.set_title(f"{n} uncertainty: interval calibration (Kuleshov et al.)", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        _save_png(fig, out / f"{n}_interval_reliability.png")
        files.append(f"{n}_interval_reliability.png")
    return files
