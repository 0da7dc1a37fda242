"""The recalibration pipeline: fit calibrators on one part of the data, apply them to a
disjoint part, and evaluate before and after (docs/calibration.md).

Hydra-free; ``detcal-calibrate`` and notebooks call :func:`calibrate`::

    import detcal
    res = detcal.calibrate(detcal.DataSpec(), confidence="temperature", regression="std_scaling")
    print(res.to_markdown()); res.write("out/")

Protocol. One dataset split by image (seeded; ``CalibrationSpec.split``) or
two datasets (``eval_data``). The confidence calibrator is fitted on the
non-ignored detections of the calibration part at ``calibration.fit_iou``
(y = matched; relative box features for calibrators that use them); the
box-uncertainty calibrator on the true-positive regression sample at
``regression.sample_iou``. "Before" and "after" use the same labels and the
same TP sample (the matching of the original detections): calibration changes
scores and uncertainties, not outcomes. A tool that re-matches the written
file may see some outcomes change (score order, max_dets): counted under ``rematch``.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from detcal.calibration.base import Calibrator, ConfidenceCalibrator, RegressionCalibrator
from detcal.core.errors import DetcalInputError
from detcal.core.results import CalibrationEvaluationBlock, CalibratorsBlock
from detcal.core.types import MatchResult, MetricResult, Skipped
from detcal.metrics.bootstrap import with_ci
from detcal.metrics.confidence_suite import confidence_metrics
from detcal.metrics.paired import PairedDifference, confidence_changes, paired_bootstrap_many
from detcal.metrics.regression import ence, gaussian_nll, interval_calibration_error, m_qce, regression_metrics
from detcal.metrics.regression.coverage import edge_sample, gaussian_coverage, gaussian_width
from detcal.metrics.spaces import RegressionSample, regression_sample
from detcal.pipeline.calibration_result import REGRESSION_ROWS, CalibrationResult
from detcal.pipeline.confidence_block import interval_settings, spec_suite
from detcal.pipeline.coverage_block import sample_coverage
from detcal.pipeline.evaluation import (
    EvaluationInput,
    ResultsInput,
    as_loaded,
    dece_maps,
    few_images_warning,
    relative_box_features,
    require_detections,
)
from detcal.pipeline.matcher import run_match
from detcal.pipeline.progress import Progress
from detcal.pipeline.registry import make_calibrator
from detcal.pipeline.sources import LoadedData, subset_images
from detcal.pipeline.spec import FEATURES, CalibrationSpec, ConfigError, EvaluationSpec
from detcal.pipeline.writeback import apply_regression_calibrator

CalibrationInput = EvaluationInput | tuple[EvaluationInput, ResultsInput]
"""What :func:`calibrate` reads: what :func:`~detcal.pipeline.evaluation.evaluate` reads, or a (gt, results) pair."""

__all__ = ["Part", "split_by_image", "calibrate", "resolve_calibrator", "REGRESSION_ROWS"]


@dataclass
class Part:
    """One side of the protocol after matching: data, MatchResult over its D detections,
    relative features [D,4] clipped to [0, 1], and the clipped count."""

    data: LoadedData
    match: MatchResult
    features: np.ndarray
    n_clipped: int

    def confidence_rows(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """Confidence sample at one matching row: (detection rows [S], y [S] bool)."""
        rows = np.flatnonzero(self.match.considered & ~self.match.ignored[row])
        return rows, self.match.matched[row, rows]

    def counts(self, row: int) -> dict[str, Any]:
        mr = self.match
        return {
            "images": len(self.data.dataset.images),
            "gt": len(self.data.dataset.gt),
            "detections": len(self.data.detections),
            "considered": int(mr.considered.sum()),
            "true_positives": int((mr.matched[row] & mr.considered).sum()),
            "false_positives": int((mr.considered & ~mr.matched[row] & ~mr.ignored[row]).sum()),
            "ignored": int((mr.considered & mr.ignored[row]).sum()),
            "n_clipped_features": int(self.n_clipped),
            "left_out_at_loading": dict(self.data.dropped),
        }


def split_by_image(
    data: LoadedData, calibration_fraction: float, seed: int
) -> tuple[LoadedData, LoadedData, dict[str, Any]]:
    """Seeded split of the images into (calibration, evaluation): images sorted by id, permuted by
    ``numpy.random.default_rng(seed)``, the first ``round(f N)`` calibrate (1 <= k <= N - 1)."""
    ids = np.unique(data.dataset.images.id)
    n = len(ids)
    k = int(round(float(calibration_fraction) * n))
    if not 1 <= k <= n - 1:
        raise ConfigError(
            "calibration.split.calibration_fraction",
            f"{n} images cannot be split with fraction {calibration_fraction} (needs at least one image on each side)",
        )
    perm = np.random.default_rng(int(seed)).permutation(n)
    cal_ids, eval_ids = np.sort(ids[perm[:k]]), np.sort(ids[perm[k:]])
    info = {
        "mode": "split",
        "unit": "image",
        "calibration_fraction": float(calibration_fraction),
        "seed": int(seed),
        "method": "numpy.random.default_rng(seed).permutation over sorted image ids; first round(f N) calibrate",
        "n_images": {"calibration": int(k), "evaluation": int(n - k)},
        "evaluation_image_ids": eval_ids.tolist(),
    }
    return subset_images(data, cal_ids, "calibration"), subset_images(data, eval_ids, "evaluation"), info


def _prepare(data: LoadedData, spec: EvaluationSpec) -> Part:
    mr = run_match(spec.matching, data.detections, data)
    feats, n_clipped, _ = relative_box_features(data, needed=True)
    return Part(data, mr, feats, n_clipped)


def _reg_match(part: Part, spec: EvaluationSpec) -> MatchResult:
    """A match that has the regression sample's IoU (the part's own, or one at that IoU alone, e.g. with
    the KITTI devkit's per-class thresholds)."""
    t = float(spec.regression.sample_iou)
    if np.any(np.abs(part.match.iou_thresholds - t) < 1e-9):
        return part.match
    return run_match(spec.matching, part.data.detections, part.data, [t])


def _threshold_row(mr: MatchResult, t: float | None) -> int:
    """The matching row a confidence calibrator is fitted on: ``fit_iou``'s, or the KITTI devkit's
    per-class row when the matching uses the devkit thresholds (``iou=kitti``)."""
    if t is None:
        return 0
    if len(mr.iou_thresholds) == 1 and not np.isfinite(mr.iou_thresholds[0]):
        return 0
    try:
        return mr.threshold_index(float(t))
    except KeyError as exc:
        raise ConfigError("calibration.fit_iou", f"{exc.args[0]} (it must be one of matching.iou_thresholds)") from None


CalibratorT = TypeVar("CalibratorT", bound=Calibrator)


def resolve_calibrator(obj: CalibratorT | str | None, want: type[CalibratorT], role: str) -> CalibratorT | None:
    """A calibrator object from an object or a registry name (configs/calibrator/<name>.yaml)."""
    if obj is None:
        return None
    made = make_calibrator(obj) if isinstance(obj, str) else obj
    if not isinstance(made, want):
        raise ConfigError(role, f"{type(made).__name__} is not a {want.__name__}; choose a calibrator of that kind")
    return made


def _confidence_eval(
    spec: EvaluationSpec,
    p: np.ndarray,
    y: np.ndarray,
    feats: np.ndarray | None,
    category: np.ndarray,
    image_id: np.ndarray,
) -> dict[str, MetricResult]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = confidence_metrics(
            p,
            y,
            feats,
            category if spec.confidence.per_class else None,
            spec_suite(spec),
            image_id,
            **interval_settings(spec),
        )
    return dict(res)


def _confidence_change(
    spec: EvaluationSpec,
    p_b: np.ndarray,
    p_a: np.ndarray,
    y: np.ndarray,
    feats: np.ndarray | None,
    image_id: np.ndarray,
) -> dict[str, PairedDifference] | Skipped:
    """After minus before of the confidence suite, with paired-bootstrap intervals over images."""
    if spec.bootstrap.n == 0:
        return Skipped("bootstrap.n=0: no intervals for the changes")
    bs = spec.bootstrap
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ch = confidence_changes(
            p_b, p_a, y, feats, image_id, spec_suite(spec), method=bs.method, n_boot=bs.n, level=bs.level, seed=bs.seed
        )
    return dict(ch)


def _regression_change(
    spec: EvaluationSpec, s_e: RegressionSample, mu_a: np.ndarray, sg_a: np.ndarray
) -> dict[str, PairedDifference] | Skipped:
    """After minus before of the coordinate-mean ENCE, M-QCE and NLL, with paired-bootstrap intervals."""
    r, sb, bs = spec.regression, spec.sigma_binning, spec.bootstrap
    if bs.n == 0 or len(s_e) == 0:
        return Skipped("bootstrap.n=0 or an empty sample: no intervals for the changes")
    levels = np.linspace(0.05, 0.95, r.quantile_levels)
    means = {
        "ence": _mean_over_coords(ence, "ence_mean", bins=sb.bins, binning=sb.scheme),
        "m_qce": _mean_over_coords(m_qce, "m_qce_mean", levels=levels),
        "nll": _mean_over_coords(gaussian_nll, "nll_mean"),
        **_coverage_means(spec),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ch = paired_bootstrap_many(
            means,
            s_e.image_id,
            (s_e.mu, s_e.sigma, s_e.y),
            None,
            (mu_a, sg_a, s_e.y),
            n_boot=bs.n,
            level=bs.level,
            seed=bs.seed,
            method=bs.method,
            fast=False,
        )
    return dict(ch)


def _coverage_means(spec: EvaluationSpec) -> dict[str, Callable[..., MetricResult]]:
    """Coordinate-mean coverage and width of the central ``regression.coverage_level`` intervals."""
    lv = float(spec.regression.coverage_level)
    return {
        "coverage": _mean_over_coords(gaussian_coverage, "coverage_mean", level=lv),
        "interval_width": _mean_over_coords(gaussian_width, "interval_width_mean", level=lv),
    }


def _mean_over_coords(fn: Callable[..., MetricResult], name: str, **kw: Any) -> Callable[..., MetricResult]:
    def mean_fn(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> MetricResult:
        vals = [float(fn(mu[:, k], sigma[:, k], y[:, k], **kw).value) for k in range(mu.shape[1])]
        return MetricResult(
            name=name,
            value=float(np.mean(vals)),
            variant="mean over coordinates",
            params={**kw, "per_coordinate": vals},
        )

    return mean_fn


def _regression_eval(
    spec: EvaluationSpec,
    mu: np.ndarray,
    sigma: np.ndarray,
    y: np.ndarray,
    image_id: np.ndarray,
    coords: Sequence[str],
    space: str,
) -> dict[str, Any]:
    """Regression suite per coordinate, plus coordinate means with bootstrap intervals."""
    r, sb, bs = spec.regression, spec.sigma_binning, spec.bootstrap
    levels = np.linspace(0.05, 0.95, r.quantile_levels)
    sample = RegressionSample(
        mu=mu, sigma=sigma, y=y, rows=np.arange(len(mu)), image_id=image_id, space=space, coords=tuple(coords)
    )
    res = regression_metrics(
        sample,
        bins=sb.bins,
        binning=sb.scheme,
        qce_bins=sb.qce_bins,
        qce_binning=sb.qce_scheme,
        qce_sample_threshold=r.qce_sample_threshold,
        levels=levels,
        ll_fu_log_base=r.ll_fu_log_base,
        mwse_normalise=r.mwse_normalise,
        with_joint=False,
    )
    out: dict[str, Any] = {k: dict(per) for k, per in res.items() if k in dict(REGRESSION_ROWS)}
    means = {
        "ence": _mean_over_coords(ence, "ence_mean", bins=sb.bins, binning=sb.scheme),
        "m_qce": _mean_over_coords(m_qce, "m_qce_mean", levels=levels),
        "nll": _mean_over_coords(gaussian_nll, "nll_mean"),
        **_coverage_means(spec),
    }
    summary: dict[str, Any] = {}
    for key, fn in means.items():
        m = fn(mu, sigma, y) if len(mu) else MetricResult(name=f"{key}_mean", value=float("nan"))
        if bs.n > 0 and len(mu):
            m = with_ci(
                m, fn, image_id, mu, sigma, y, n_boot=bs.n, level=bs.level, seed=bs.seed, fast=False, method=bs.method
            )
        summary[key] = m
    out["_mean"] = summary
    cov = sample_coverage(sample, float(r.coverage_level), None, None)
    out.update({k: dict(per) for k, per in cov.items()})
    return out


def _probit(p: np.ndarray) -> np.ndarray:
    from scipy.special import ndtri  # lazy: scipy kept out of start-up

    return ndtri(np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12))


def _fit_report(cal: Calibrator) -> dict[str, Any] | None:
    rep = getattr(cal, "fit_report_", None)
    return dict(rep) if isinstance(rep, dict) else None


def calibrate(
    data: CalibrationInput,
    spec: EvaluationSpec | None = None,
    calibration: CalibrationSpec | None = None,
    *,
    confidence: ConfidenceCalibrator | str | None = "temperature",
    regression: RegressionCalibrator | str | None = "std_scaling",
    eval_data: CalibrationInput | None = None,
    workdir: str | os.PathLike | None = None,
    progress: bool = False,
    names: dict[str, str] | None = None,
) -> CalibrationResult:
    """Fit calibrators on a calibration part, apply them to a disjoint evaluation part, evaluate before/after.

    ``data``: what :func:`detcal.evaluate` accepts (DataSpec, LoadedData, (Dataset, Detections) as a
    tuple, or a (gt, results) pair of paths); split by image unless ``eval_data`` is given.
    ``confidence`` / ``regression``: calibrator objects or registry names (``None`` skips one).
    Returns a :class:`~detcal.pipeline.calibration_result.CalibrationResult`.
    """
    spec = spec or EvaluationSpec()
    calibration = calibration or CalibrationSpec()
    names = dict(names or {})
    conf_cal = resolve_calibrator(confidence, ConfidenceCalibrator, "calibrator")
    reg_cal = resolve_calibrator(regression, RegressionCalibrator, "regression_calibrator")
    if isinstance(confidence, str):
        names.setdefault("confidence", confidence)
    if isinstance(regression, str):
        names.setdefault("regression", regression)
    workdir = workdir or "."
    timing: dict[str, float] = {}

    with Progress(progress, "detcal-calibrate", total=6) as bar:
        t0 = time.perf_counter()
        bar.step("load data")
        cal_loaded, ev_loaded, split = _load_and_split(data, eval_data, calibration, workdir)
        timing["load"] = time.perf_counter() - t0
        few_images_warning(spec, ev_loaded)  # the before/after intervals resample the evaluation part's images

        t0 = time.perf_counter()
        bar.step("match")
        cal, ev = _prepare(cal_loaded, spec), _prepare(ev_loaded, spec)
        row_c, row_e = _threshold_row(cal.match, calibration.fit_iou), _threshold_row(ev.match, calibration.fit_iou)
        timing["match"] = time.perf_counter() - t0
        out = _Outputs(dets_out=ev.data.detections)

        t0 = time.perf_counter()
        rows_e, y_e = ev.confidence_rows(row_e)
        if conf_cal is not None:
            _fit_confidence(conf_cal, cal, ev, row_c, row_e, spec, calibration, names, bar, out)
        else:
            out.calibrators.entries["confidence"] = Skipped("no confidence calibrator configured")
        timing["confidence"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        has_unc = ev.data.detections.uncertainty_kind is not None and cal.data.detections.uncertainty_kind is not None
        if reg_cal is not None and has_unc:
            _fit_regression(reg_cal, cal, ev, spec, calibration, names, bar, out)
        elif reg_cal is None:
            out.calibrators.entries["regression"] = Skipped("no box-uncertainty calibrator configured")
        else:
            out.calibrators.entries["regression"] = Skipped("the detections carry no box uncertainty (docs/formats.md)")
        timing["regression"] = time.perf_counter() - t0

    record = _calibration_record(spec, calibration, cal, ev, row_c, row_e, rows_e, y_e, split, out, timing)
    return CalibrationResult(
        record=record, calibrated=out.dets_out, evaluation_data=ev.data, spec=spec, write_gt=split["mode"] == "split"
    )


def _load_and_split(
    data: CalibrationInput, eval_data: CalibrationInput | None, calibration: CalibrationSpec, workdir: str | os.PathLike
) -> tuple[LoadedData, LoadedData, dict[str, Any]]:
    """The calibration part, the evaluation part and the record of the split (step "load data" of calibrate)."""

    def _load(x: CalibrationInput, sub: str) -> LoadedData:
        if isinstance(x, tuple):
            return as_loaded(*x, workdir=os.path.join(workdir, sub))
        return as_loaded(x, workdir=os.path.join(workdir, sub) if sub else workdir)

    loaded = _load(data, "")
    require_detections(loaded)
    if eval_data is not None:
        ev_loaded, cal_loaded = _load(eval_data, "eval_data"), loaded
        split: dict[str, Any] = {
            "mode": "two_datasets",
            "calibration_fraction": None,
            "seed": None,
            "n_images": {"calibration": len(cal_loaded.dataset.images), "evaluation": len(ev_loaded.dataset.images)},
        }
    else:
        cal_loaded, ev_loaded, split = split_by_image(
            loaded, calibration.split.calibration_fraction, calibration.split.seed
        )
    split["in_sample"] = bool(calibration.in_sample)
    return cal_loaded, ev_loaded, split


@dataclass
class _Outputs:
    """What :func:`calibrate` gathers: the written detections and the record's sections."""

    dets_out: Any
    calibrators: CalibratorsBlock = dataclasses.field(default_factory=CalibratorsBlock)
    evaluation: CalibrationEvaluationBlock = dataclasses.field(default_factory=CalibrationEvaluationBlock)
    in_sample: dict[str, Any] = dataclasses.field(default_factory=dict)
    maps: dict[str, Any] = dataclasses.field(default_factory=dict)


def _fit_confidence(
    conf_cal: ConfidenceCalibrator,
    cal: Part,
    ev: Part,
    row_c: int,
    row_e: int,
    spec: EvaluationSpec,
    calibration: CalibrationSpec,
    names: dict[str, str],
    bar: Progress,
    out: _Outputs,
) -> None:
    """Fit the confidence calibrator on the calibration part, rescore the evaluation part, evaluate both ways."""
    fit_cols = [FEATURES.index(n) for n in calibration.features]
    dece_cols = [FEATURES.index(n) for n in spec.dece_binning.features]
    rows_e, y_e = ev.confidence_rows(row_e)
    bar.step(f"fit {type(conf_cal).__name__}")
    rows_c, y_c = cal.confidence_rows(row_c)
    if len(rows_c) == 0 or not y_c.any() or y_c.all():
        raise DetcalInputError(
            f"the calibration part has {len(rows_c)} detections at IoU "
            f"{float(cal.match.iou_thresholds[row_c])} of which {int(y_c.sum())} matched: "
            "a confidence calibrator needs both matched and unmatched detections",
            field="calibration.fit_iou",
        )
    use_f = bool(getattr(conf_cal, "uses_features", False)) and len(fit_cols) > 0
    f_c = cal.features[rows_c][:, fit_cols] if use_f else None
    conf_cal.fit(cal.data.detections.score[rows_c], y_c, f_c)
    new_score = conf_cal.transform(out.dets_out.score, ev.features[:, fit_cols] if use_f else None)
    out.dets_out = dataclasses.replace(out.dets_out, score=new_score)
    out.calibrators.entries["confidence"] = {
        "name": names.get("confidence", type(conf_cal).__name__),
        "describe": conf_cal.describe(),
        "fit_report": _fit_report(conf_cal),
        "n_fit": int(len(rows_c)),
        "n_fit_matched": int(y_c.sum()),
        "iou_threshold": float(cal.match.iou_thresholds[row_c]),
        "features": [FEATURES[j] for j in fit_cols] if use_f else [],
    }
    bar.step("evaluate confidence")
    fe = ev.features[rows_e][:, dece_cols] if dece_cols else None
    cat, img = ev.data.detections.category[rows_e], ev.data.detections.image_id[rows_e]
    p_b, p_a = ev.data.detections.score[rows_e], new_score[rows_e]
    out.evaluation.entries["confidence"] = {
        "before": _confidence_eval(spec, p_b, y_e, fe, cat, img),
        "after": _confidence_eval(spec, p_a, y_e, fe, cat, img),
        "change": _confidence_change(spec, p_b, p_a, y_e, fe, img),
    }
    out.maps = {
        "before": dece_maps(spec, p_b, y_e, ev.features[rows_e]),
        "after": dece_maps(spec, p_a, y_e, ev.features[rows_e]),
    }
    if calibration.in_sample:
        p_in = conf_cal.transform(cal.data.detections.score[rows_c], f_c)
        fc = cal.features[rows_c][:, dece_cols] if dece_cols else None
        cat_c, img_c = cal.data.detections.category[rows_c], cal.data.detections.image_id[rows_c]
        out.in_sample["confidence"] = {
            "before": _confidence_eval(spec, cal.data.detections.score[rows_c], y_c, fc, cat_c, img_c),
            "after": _confidence_eval(spec, p_in, y_c, fc, cat_c, img_c),
        }


_EDGES_NOT_WRITTEN = (
    "intervals on the box edges (regression_calibrator.space=edges) have no Gaussian in the file's own "
    "coordinates (x1 and x2 get different quantiles): the calibrated results file keeps the original uncertainty"
)


def _reg_sample(part: Part, spec: EvaluationSpec, t_reg: float, space: str, edges: bool) -> Any:
    """The true-positive sample of one part in ``space``, or on the pixel box edges (x1, y1, x2, y2)."""
    d = part.data
    s = regression_sample(
        d.detections, d.dataset.gt, _reg_match(part, spec), iou_threshold=t_reg, space="pixel" if edges else space
    )
    return edge_sample(s) if edges else s


def _fit_regression(
    reg_cal: RegressionCalibrator,
    cal: Part,
    ev: Part,
    spec: EvaluationSpec,
    calibration: CalibrationSpec,
    names: dict[str, str],
    bar: Progress,
    out: _Outputs,
) -> None:
    """Fit the box-uncertainty calibrator on the calibration TPs, rewrite the evaluation part, evaluate both ways."""
    space, t_reg = spec.regression.space, float(spec.regression.sample_iou)
    edges = getattr(reg_cal, "space", None) == "edges"  # conformal on the pixel box edges
    space = "pixel" if edges else space
    bar.step(f"fit {type(reg_cal).__name__}")
    s_c = _reg_sample(cal, spec, t_reg, space, edges)
    if len(s_c) == 0:
        raise DetcalInputError(
            f"no true positives at IoU {t_reg} in the calibration data: nothing to fit", field="regression.sample_iou"
        )
    grouped = bool(getattr(reg_cal, "uses_groups", False))  # Mondrian conformal: the category of each sample
    fit_kw = {"groups": cal.data.detections.category[s_c.rows]} if grouped else {}
    reg_cal.fit(s_c.mu, s_c.sigma, s_c.y, **fit_kw)
    if edges:
        wb: dict[str, Any] | Skipped = Skipped(_EDGES_NOT_WRITTEN)
    else:
        out.dets_out, wb = apply_regression_calibrator(out.dets_out, reg_cal, space)
    out.calibrators.entries["regression"] = {
        "name": names.get("regression", type(reg_cal).__name__),
        "describe": reg_cal.describe(),
        "fit_report": _fit_report(reg_cal),
        "n_fit": int(len(s_c)),
        "iou_threshold": t_reg,
        "space": space,
        "coords": list(s_c.coords),
        "writeback": wb,
    }
    bar.step("evaluate box uncertainty")
    s_e = _reg_sample(ev, spec, t_reg, space, edges)
    ev_kw = {"groups": ev.data.detections.category[s_e.rows]} if grouped else {}
    mu_a, sg_a = reg_cal.transform(s_e.mu, s_e.sigma, **ev_kw) if len(s_e) else (s_e.mu, s_e.sigma)
    out.evaluation.entries["regression"] = {
        "before": _regression_eval(spec, s_e.mu, s_e.sigma, s_e.y, s_e.image_id, s_e.coords, space),
        "after": _regression_eval(spec, mu_a, sg_a, s_e.y, s_e.image_id, s_e.coords, space),
        "change": _regression_change(spec, s_e, mu_a, sg_a),
    }
    cdf = getattr(reg_cal, "cdf", None)
    if cdf is not None and len(s_e):
        # Kuleshov CE of the recalibrated CDF itself, next to that of the Gaussian the written file carries
        z = _probit(cdf(s_e.y, s_e.mu, s_e.sigma))
        out.evaluation["regression"]["after"]["interval_ce_cdf"] = {
            c: interval_calibration_error(np.zeros(len(z)), np.ones(len(z)), z[:, k]) for k, c in enumerate(s_e.coords)
        }
    if calibration.in_sample:
        mu_i, sg_i = reg_cal.transform(s_c.mu, s_c.sigma, **fit_kw)
        out.in_sample["regression"] = {
            "before": _regression_eval(spec, s_c.mu, s_c.sigma, s_c.y, s_c.image_id, s_c.coords, space),
            "after": _regression_eval(spec, mu_i, sg_i, s_c.y, s_c.image_id, s_c.coords, space),
        }


def _calibration_record(
    spec: EvaluationSpec,
    calibration: CalibrationSpec,
    cal: Part,
    ev: Part,
    row_c: int,
    row_e: int,
    rows_e: np.ndarray,
    y_e: np.ndarray,
    split: dict[str, Any],
    out: _Outputs,
    timing: dict[str, float],
) -> dict[str, Any]:
    """The record of :class:`CalibrationResult`: data, split, matching, calibrators, before/after, rematch, variants."""
    space, t_reg = spec.regression.space, float(spec.regression.sample_iou)
    rematched = run_match(spec.matching, out.dets_out, ev.data)
    changed = (
        (rematched.matched[row_e] != ev.match.matched[row_e])
        | (rematched.ignored[row_e] != ev.match.ignored[row_e])
        | (rematched.considered != ev.match.considered)
    )
    out.evaluation.entries["_sample"] = {
        "n_confidence": int(len(rows_e)),
        "n_matched": int(y_e.sum()),
        "iou_threshold": float(ev.match.iou_thresholds[row_e]),
    }
    return {
        "data": {
            "calibration": {**cal.data.provenance, "counts": cal.counts(row_c)},
            "evaluation": {**ev.data.provenance, "counts": ev.counts(row_e)},
        },
        "spec": {"evaluation": spec, "calibration": calibration},
        "split": split,
        "matching": {"calibration": cal.match.describe(), "evaluation": ev.match.describe()},
        "calibrators": out.calibrators,
        "evaluation": out.evaluation,
        "in_sample": out.in_sample if calibration.in_sample else None,
        "rematch": {
            "n": int(len(out.dets_out)),
            "changed": int(changed.sum()),
            "iou_threshold": float(ev.match.iou_thresholds[row_e]),
            "note": "outcomes of the written file re-matched (score order / max_dets may differ); "
            "before/after above use the original labels",
        },
        "dece_maps": out.maps,
        "variants": {
            "protocol": "docs/calibration.md#protocol: fit on the calibration part, evaluate on a disjoint part "
            "(or a second dataset); labels and TP sample fixed by the original matching",
            "confidence": f"docs/metrics.md#dece: ECE bins={spec.dece_binning.ece_bins}, D-ECE bins="
            f"{spec.dece_binning.bins} over (confidence, {', '.join(spec.dece_binning.features)}), "
            f"sample_threshold={spec.dece_binning.sample_threshold}, policy={spec.dece_binning.policy}",
            "regression": f"docs/metrics.md#ence: space={space}, TP at IoU {t_reg}, ENCE bins={spec.sigma_binning.bins} "
            f"{spec.sigma_binning.scheme}; Kuleshov CE m=100 levels, sum, one-sided; "
            "headline box metrics are means over the coordinates",
            "bootstrap": f"docs/metrics.md#bootstrap: over images, n={spec.bootstrap.n}, level={spec.bootstrap.level}, "
            f"seed={spec.bootstrap.seed}",
        },
        "timing_s": {k: round(v, 3) for k, v in timing.items()},
    }
