"""``detcal-calibrate``: fit recalibration maps on a calibration split, apply them to a
disjoint evaluation split, and evaluate before and after (../shared/METRICS.md section 5).

Pipeline (data flows one way)::

    data source (configs/data)  --split by image, seeded-->  calibration part | evaluation part
        (or two sources: ``data`` = calibration data, ``eval_data`` = evaluation data)
    match each part (configs/matching)
    confidence calibrator (configs/calibrator, ``calibrator``):
        fit on (p, y, f) of the calibration part: non-ignored detections at
        ``calibration.iou_threshold``, y = matched, f = relative box features
        ``calibration.features`` (only for calibrators that use them)
    box-uncertainty calibrator (configs/calibrator, ``regression_calibrator``):
        fit on the true-positive RegressionSample of the calibration part
        (``metrics.regression.iou_threshold``, ``metrics.regression.space``)
    apply both to every detection of the evaluation part, write the calibrated
    results in the input's own format, evaluate before and after on the SAME
    evaluation sample (labels from the matching of the original detections)

Outputs, in the run's output directory only::

    metrics.json           before/after numbers with their variants and parameters,
                           calibrators with their learned values (``describe()``),
                           split (mode, fraction, seed, image ids), in-sample flag,
                           a flat ``headline`` section for detcal-gather
    summary.md             before/after Markdown table (also printed)
    calibrated/            COCO: ``detections.json`` (calibrated ``score`` and
                           uncertainty fields) and, for a split, ``instances.json``
                           (the evaluation images' GT); KITTI: ``results/`` (calibrated
                           scores) and, for a split, ``label_2/`` + ``sizes.txt``
    reliability_{before,after}.png, dece_maps_{before,after}.png,
    rmse_rmv_{before,after}.png

Evaluation protocol. "Before" and "after" use the same labels y (the matching
of the original detections) and the same true-positive sample: calibration
changes scores and uncertainties, not the outcome (Guo et al. 2017; Kueppers
et al. 2020; Levi et al. 2019). A tool that re-reads the written file re-matches
it; since score-ordered (exclusive) matching and ``max_dets`` depend on the
scores, a position-dependent calibrator can change some outcomes: their number
is reported under ``rematch``. "After" for the regression calibrator is its own
output ``transform(mu, sigma)`` on the evaluation sample; ``writeback`` reports
how closely the written record fields reproduce it (exact for deltas with
delta records; first order where a mean shift moves a box that a propagated
standard deviation depends on).

Write-back of a box-uncertainty calibrator (every method here scales sigma per
detection and coordinate, ``r = sigma' / sigma``, and may shift the mean,
``dm = mu' - mu``): delta records ``delta_std *= r``; ``box_std *= r``;
``bbox_covar`` C (x, y, w, h) -> ``A C A^T`` with ``A = J^-1 diag(r) J`` (J the
Jacobian of (x, y, w, h) -> (cx, cy, w, h)); ``covars`` (corners) are scaled by
r^2 when r is the same for all coordinates, otherwise converted to the
equivalent ``bbox_covar`` (recorded). A mean shift moves the box: ``decode(P,
mu')`` (delta space, delta records), ``decode(B, dm)`` (deltas w.r.t. the box),
or ``(cx, cy, w, h) = mu'`` (pixel space); delta records then get
``delta_mean = encode(P, box')``.

Headline (detcal-gather columns; Guo et al. 2017 Table 1 layout with one row
per calibrator): ``dece``, ``ece`` (confidence, after), ``ence``, ``m_qce``,
``nll_box`` (box uncertainty, after; means over the K coordinates), then the
same with suffix ``_uncal`` (before).

Usage::

    detcal-calibrate                                  # synthetic set, temperature + std scaling
    detcal-calibrate calibrator=position_logistic calibrator@regression_calibrator=kuleshov_isotonic
    detcal-calibrate '~calibrator@regression_calibrator'         # confidence only
    detcal-calibrate -m calibrator=temperature,platt,position_logistic,histogram,isotonic,bbq,beta
    detcal-gather multirun/calibrate/<date>/<time>
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from detcal.boxes import cxcywh_to_xyxy, decode_deltas, encode_deltas, relative_features
from detcal.calibration.base import ConfidenceCalibrator, RegressionCalibrator
from detcal.errors import DetcalInputError
from detcal.experiments.common import LoadedData, run_header
from detcal.types import Dataset, Detections, GroundTruth, MatchResult, MetricResult
from detcal.utils.io import to_jsonable, write_text

__all__ = [
    "FEATURES",
    "Part",
    "split_by_image",
    "subset_images",
    "input_format",
    "space_predictions",
    "apply_regression_calibrator",
    "write_calibrated",
    "calibrate",
    "main",
]

FEATURES: tuple[str, ...] = ("cx", "cy", "w", "h")
"""Relative box features (METRICS.md section 1), the columns of ``relative_features``."""

CONFIDENCE_ROWS: tuple[tuple[str, str], ...] = (
    ("dece", "D-ECE"), ("ece", "ECE"), ("mce", "MCE"), ("nll", "NLL"), ("brier", "Brier"),
    ("overconfidence", "over-confidence E[p|y=0]"), ("underconfidence", "under-confidence E[1-p|y=1]"),
)
"""Confidence metrics of the before/after table (key in confidence_metrics, label)."""

REGRESSION_ROWS: tuple[tuple[str, str], ...] = (
    ("ence", "ENCE"), ("cv", "C_v"), ("m_qce", "M-QCE"), ("c_qce", "C-QCE"), ("nll", "NLL"),
    ("interval_ce", "Kuleshov CE"),
)
"""Regression metrics of the before/after table, per coordinate (key in regression_metrics, label)."""


# ----------------------------------------------------------------------------- config helpers


def _plain(x: Any) -> Any:
    """Plain Python containers from OmegaConf nodes (anything else unchanged)."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra is a dependency
        return x
    if isinstance(x, (DictConfig, ListConfig)):
        return OmegaConf.to_container(x, resolve=True)
    return x


def _feature_columns(names: Any, field: str) -> list[int]:
    names = list(_plain(names) or [])
    bad = [n for n in names if n not in FEATURES]
    if bad:
        raise DetcalInputError(f"unknown box feature(s) {bad}; known: {list(FEATURES)}",
                               file="configs/calibrate.yaml", field=field)
    return [FEATURES.index(n) for n in names]


# ----------------------------------------------------------------------------- data preparation


@dataclasses.dataclass
class Part:
    """One side of the protocol (calibration or evaluation) after matching.

    ``data`` (dataset, detections [D], KITTI rules, provenance), ``match``
    (MatchResult over the D detections), ``features [D,4]`` relative
    (cx, cy, w, h) clipped to [0, 1], ``n_clipped`` detections with a clipped value.
    """

    data: LoadedData
    match: MatchResult
    features: np.ndarray
    n_clipped: int

    def confidence_rows(self, threshold_row: int) -> tuple[np.ndarray, np.ndarray]:
        """Confidence sample at one matching row: (detection rows [S], y [S] bool)."""
        keep = self.match.considered & ~self.match.ignored[threshold_row]
        rows = np.flatnonzero(keep)
        return rows, self.match.matched[threshold_row, rows]


def subset_images(data: LoadedData, image_ids: np.ndarray, label: str) -> LoadedData:
    """The images ``image_ids`` of ``data`` with their GT and detections (record order kept)."""
    ds = data.dataset
    ids = np.asarray(image_ids, dtype=np.int64)
    images = ds.images.select(np.isin(ds.images.id, ids))
    gt = ds.gt.select(np.isin(ds.gt.image_id, ids))
    dets = data.detections.select(np.isin(data.detections.image_id, ids))
    sub = Dataset(images=images, gt=gt, categories=dict(ds.categories), source=f"{ds.source} [{label}]")
    return LoadedData(sub, dets, data.kitti, {**data.provenance, "subset": label})


def split_by_image(data: LoadedData, calibration_fraction: float, seed: int) -> tuple[LoadedData, LoadedData, dict[str, Any]]:
    """Seeded split of the images of ``data`` into (calibration, evaluation).

    Images sorted by id, permuted by ``numpy.random.default_rng(seed)``; the
    first ``k = round(calibration_fraction * N)`` form the calibration part
    (1 <= k <= N - 1). Detections and GT follow their image.
    """
    frac = float(calibration_fraction)
    if not 0.0 < frac < 1.0:
        raise DetcalInputError(f"calibration_fraction must be in (0, 1), got {calibration_fraction}",
                               file="configs/calibrate.yaml", field="split.calibration_fraction")
    ids = np.unique(data.dataset.images.id)
    n = len(ids)
    k = int(round(frac * n))
    if not 1 <= k <= n - 1:
        raise DetcalInputError(f"{n} images cannot be split with calibration_fraction={frac} "
                               f"(needs at least one image on each side)", field="split.calibration_fraction")
    perm = np.random.default_rng(int(seed)).permutation(n)
    cal_ids, eval_ids = np.sort(ids[perm[:k]]), np.sort(ids[perm[k:]])
    info = {"mode": "split", "unit": "image", "calibration_fraction": frac, "seed": int(seed),
            "method": "numpy.random.default_rng(seed).permutation over sorted image ids; first round(f N) calibrate",
            "n_images": {"calibration": int(k), "evaluation": int(n - k)},
            "evaluation_image_ids": eval_ids.tolist()}
    return subset_images(data, cal_ids, "calibration"), subset_images(data, eval_ids, "evaluation"), info


def input_format(data: LoadedData) -> str:
    """``"coco"`` or ``"kitti"``: the format the detections were read from (data provenance)."""
    prov = data.provenance
    fmt = prov.get("format") if prov.get("source") == "synthetic" else prov.get("source")
    if fmt not in ("coco", "kitti"):
        raise DetcalInputError(f"cannot tell the input format from the data provenance {prov.get('source')!r}",
                               field="data")
    return str(fmt)


def _prepare(data: LoadedData, matcher: Callable[..., MatchResult]) -> Part:
    ds, dets = data.dataset, data.detections
    mr = matcher(dets, ds.gt, kitti=data.kitti, images=ds.images)
    row = ds.images.index_of(dets.image_id)
    if (row < 0).any():
        bad = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError("image id not in the dataset", file=ds.source, record=bad, field="image_id")
    feats, n_clipped = relative_features(dets.box, ds.images.width[row], ds.images.height[row])
    return Part(data, mr, feats, n_clipped)


def _threshold_row(mr: MatchResult, t: Any) -> int:
    if t is None:
        return 0
    try:
        return mr.threshold_index(float(t))
    except KeyError as exc:
        raise DetcalInputError(str(exc.args[0]), file="configs/calibrate.yaml", field="calibration.iou_threshold") from None


# ----------------------------------------------------------------------------- box uncertainty write-back


def space_predictions(dets: Detections, space: str) -> tuple[np.ndarray, np.ndarray]:
    """Predicted ``(mu [D,K], sigma [D,K])`` of EVERY detection in ``space``.

    Uses :func:`detcal.metrics.spaces.regression_sample` (one source of truth
    for the propagation) with each detection matched to a stand-in GT equal to
    its own box (a unit box where the box is degenerate); the targets y of
    that sample are meaningless and dropped.
    """
    from detcal.metrics.spaces import regression_sample

    d = len(dets)
    box = dets.box.copy()
    bad = ~np.all(np.isfinite(box), axis=1) | (box[:, 2] <= box[:, 0]) | (box[:, 3] <= box[:, 1])
    box[bad] = [0.0, 0.0, 1.0, 1.0]
    gt = GroundTruth(image_id=dets.image_id, box=box, category=dets.category)
    mr = MatchResult(iou_thresholds=np.array([0.5]), matched=np.ones((1, d), bool), ignored=np.zeros((1, d), bool),
                     gt_index=np.arange(d, dtype=np.int64)[None, :], iou=np.ones(d), considered=np.ones(d, bool))
    s = regression_sample(dets, gt, mr, iou_threshold=0.5, space=space)
    return s.mu, s.sigma


def apply_regression_calibrator(
    dets: Detections, calibrator: RegressionCalibrator, space: str
) -> tuple[Detections, dict[str, Any]]:
    """Detections with the recalibrated uncertainty written into their own fields.

    ``(mu', sigma') = calibrator.transform(mu, sigma)`` in ``space`` for every
    detection; ``r = sigma'/sigma``, ``dm = mu' - mu`` are written back as the
    module docstring describes. Returns the new record and notes (fields
    changed, corner covariances converted, boxes moved).
    """
    from detcal.metrics.spaces import J_XYWH_TO_CXCYWH, J_CORNERS_TO_CXCYWH

    kind = dets.uncertainty_kind
    if kind is None:
        raise DetcalInputError("the detections carry no box uncertainty to recalibrate", field="delta_std")
    mu, sigma = space_predictions(dets, space)
    mu2, sg2 = calibrator.transform(mu, sigma)
    r = sg2 / sigma
    shift = mu2 - mu
    moved = bool(np.any(shift != 0.0))
    notes: dict[str, Any] = {"space": space, "uncertainty_kind": kind, "mean_shifted": moved,
                             "scale_ratio": {"min": float(r.min()) if r.size else None,
                                             "max": float(r.max()) if r.size else None}}
    kw: dict[str, Any] = {}
    box = dets.box
    if moved:
        if space == "pixel":
            box = cxcywh_to_xyxy(mu2)
        elif space == "delta" and kind == "delta":
            box = decode_deltas(dets.proposal, mu2)
        else:  # deltas w.r.t. the final box B: mu = 0, mu' = dm
            box = decode_deltas(dets.box, mu2)
        kw["box"] = box
        notes["box_update"] = {"pixel": "(cx, cy, w, h) = mu'", "delta": "decode(P, mu')" if kind == "delta"
                               else "decode(B, dm)", "box": "decode(B, dm)"}[space]
    if kind == "delta":
        kw["delta_std"] = dets.delta_std * r
        if moved:
            kw["delta_mean"] = mu2.copy() if space == "delta" else encode_deltas(dets.proposal, box)
        notes["fields"] = ["delta_std"] + (["delta_mean", "box"] if moved else [])
    elif kind == "box_std":
        kw["box_std"] = dets.box_std * r
        notes["fields"] = ["box_std"] + (["box"] if moved else [])
    elif kind == "box_cov":
        j_inv = np.linalg.inv(J_XYWH_TO_CXCYWH)
        a = np.einsum("ij,dj,jk->dik", j_inv, r, J_XYWH_TO_CXCYWH)
        kw["box_cov"] = np.einsum("dij,djk,dlk->dil", a, dets.box_cov, a)
        notes["fields"] = ["box_cov"] + (["box"] if moved else [])
    else:  # corner_cov
        uniform = np.all(np.isclose(r, r[:, :1], rtol=1e-12, atol=0.0)) if r.size else True
        if uniform:
            kw["corner_cov"] = dets.corner_cov * (r[:, :1] ** 2)[:, :, None, None]
            notes["fields"] = ["corner_cov"] + (["box"] if moved else [])
        else:
            block = np.zeros((len(dets), 4, 4))
            block[:, :2, :2] = dets.corner_cov[:, 0]
            block[:, 2:, 2:] = dets.corner_cov[:, 1]
            cov_c = np.einsum("ij,djk,lk->dil", J_CORNERS_TO_CXCYWH, block, J_CORNERS_TO_CXCYWH)
            cov_c = cov_c * r[:, :, None] * r[:, None, :]
            j_inv = np.linalg.inv(J_XYWH_TO_CXCYWH)
            kw["box_cov"] = np.einsum("ij,djk,lk->dil", j_inv, cov_c, j_inv)
            kw["corner_cov"] = None
            notes["fields"] = ["box_cov (converted from corner covariances)"] + (["box"] if moved else [])
            notes["converted"] = "covars (corner 2x2) -> bbox_covar (4x4 in x, y, w, h): a per-coordinate " \
                                 "scaling does not keep the corners independent"
    new = dataclasses.replace(dets, **kw)
    mu_w, sg_w = space_predictions(new, space)
    if not (space == "pixel" or (space == "delta" and kind == "delta")):
        mu_w = encode_deltas(dets.box, new.box)  # the reference box itself carries the mean: compare the shift
    with np.errstate(invalid="ignore", divide="ignore"):
        dev_s = float(np.max(np.abs(sg_w / sg2 - 1.0))) if sg2.size else 0.0
        dev_m = float(np.max(np.abs(mu_w - mu2) / sg2)) if sg2.size else 0.0
    notes["writeback"] = {"max_rel_sigma_deviation": dev_s, "max_mean_deviation_in_sigmas": dev_m,
                          "note": "written record fields re-read in the space vs the calibrator's output"}
    return new, notes


# ----------------------------------------------------------------------------- output files


def write_calibrated(out_dir: Path, fmt: str, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
    """Write the calibrated evaluation detections in format ``fmt`` under ``out_dir``.

    COCO: ``detections.json`` (+ ``instances.json`` when ``write_gt``); KITTI:
    ``results/`` (+ ``label_2/`` and ``sizes.txt`` when ``write_gt``).
    Returns the written paths by role.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {"format": fmt}
    if fmt == "coco":
        from detcal.data.coco import write_coco_instances, write_coco_results

        write_coco_results(out_dir / "detections.json", dets)
        paths["results"] = str(out_dir / "detections.json")
        if write_gt:
            write_coco_instances(out_dir / "instances.json", dataset)
            paths["gt"] = str(out_dir / "instances.json")
    else:
        from detcal.data.kitti import write_kitti_labels, write_kitti_results
        from detcal.types import KITTI_CATEGORIES

        write_kitti_results(out_dir / "results", dets, categories=KITTI_CATEGORIES, dataset=dataset)
        paths["results"] = str(out_dir / "results")
        if write_gt:
            write_kitti_labels(out_dir / "label_2", dataset)
            im = dataset.images
            lines = [f"{Path(n).stem if n else f'{int(i):06d}'} {w:g} {h:g}"
                     for i, w, h, n in zip(im.id.tolist(), im.width.tolist(), im.height.tolist(), im.file_name)]
            write_text(out_dir / "sizes.txt", "\n".join(lines) + ("\n" if lines else ""))
            paths["gt"] = str(out_dir / "label_2")
            paths["sizes"] = str(out_dir / "sizes.txt")
    return paths


# ----------------------------------------------------------------------------- evaluation


def _confidence_eval(cfg: Any, p: np.ndarray, y: np.ndarray, feats: np.ndarray | None, category: np.ndarray,
                     image_id: np.ndarray) -> dict[str, MetricResult]:
    """The confidence suite (METRICS.md section 3) with bootstrap intervals over images."""
    from detcal.metrics.confidence import ConfidenceConfig, confidence_metrics

    c = cfg.metrics.confidence
    dece_bins = _plain(c.dece_bins)
    ccfg = ConfidenceConfig(
        ece_bins=int(c.bins), dece_bins=tuple(dece_bins) if isinstance(dece_bins, list) else int(dece_bins),
        sample_threshold=int(c.sample_threshold), policy=str(c.policy), n_boot=int(cfg.bootstrap.n),
        ci_level=float(cfg.bootstrap.level), seed=int(cfg.bootstrap.seed),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return confidence_metrics(p, y, feats, category if bool(c.get("per_class", False)) else None, ccfg, image_id)


def _dece_maps(cfg: Any, p: np.ndarray, y: np.ndarray, feats_all: np.ndarray) -> dict[str, Any]:
    """D-ECE maps over the configured feature pairs (Kueppers et al. 2020, Fig. 1), as detcal-evaluate draws them."""
    from detcal.metrics.confidence import dece
    from detcal.reports.plots import marginal_gap_map

    c = cfg.metrics.confidence
    out: dict[str, Any] = {}
    for pair in _plain(c.get("maps")) or []:
        a, b = _feature_columns(pair, "metrics.confidence.maps")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = dece(p, y, feats_all[:, [a, b]], bins=_plain(c.dece_bins), sample_threshold=int(c.sample_threshold),
                     policy=str(c.policy))
        shape = tuple(int(v) for v in r.params.get("bins", ())) or (1, 1, 1)
        n_cells = int(np.prod(shape))
        m = marginal_gap_map(r.table.get("count", np.zeros(n_cells)), r.table.get("confidence", np.full(n_cells, np.nan)),
                             r.table.get("precision", np.full(n_cells, np.nan)), shape, keep_axes=(1, 2),
                             kept=r.table.get("kept"))
        out[f"{pair[0]}_{pair[1]}"] = {"axes": list(pair), "gap": m["gap"], "count": m["count"],
                                      "kept_count": m["kept_count"], "dece": float(r.value)}
    return out


def _mean_over_coords(fn: Callable[..., MetricResult], name: str, **kw: Any) -> Callable[..., MetricResult]:
    def mean_fn(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> MetricResult:
        vals = [float(fn(mu[:, k], sigma[:, k], y[:, k], **kw).value) for k in range(mu.shape[1])]
        return MetricResult(name=name, value=float(np.mean(vals)), variant="mean over coordinates",
                            params={**kw, "per_coordinate": vals})
    return mean_fn


def _regression_eval(cfg: Any, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, image_id: np.ndarray,
                     coords: Sequence[str], space: str) -> dict[str, Any]:
    """Regression suite (METRICS.md section 4) per coordinate, plus coordinate means with bootstrap intervals."""
    from detcal.metrics.bootstrap import with_ci
    from detcal.metrics.regression import ence, gaussian_nll, m_qce, regression_metrics
    from detcal.metrics.spaces import RegressionSample

    r, b = cfg.metrics.regression, cfg.binning
    levels = np.linspace(0.05, 0.95, int(r.quantile_levels))
    sample = RegressionSample(mu=mu, sigma=sigma, y=y, rows=np.arange(len(mu)), image_id=image_id, space=space,
                              coords=tuple(coords))
    res = regression_metrics(sample, bins=int(b.bins), binning=str(b.scheme), qce_bins=int(b.get("qce_bins", b.bins)),
                             qce_binning=str(b.get("qce_scheme", "equal_width")),
                             qce_sample_threshold=int(r.sample_threshold), levels=levels, with_joint=False)
    out: dict[str, Any] = {k: {c: v.to_dict() for c, v in per.items()} for k, per in res.items()
                           if k in dict(REGRESSION_ROWS)}
    means = {"ence": _mean_over_coords(ence, "ence_mean", bins=int(b.bins), binning=str(b.scheme)),
             "m_qce": _mean_over_coords(m_qce, "m_qce_mean", levels=levels),
             "nll": _mean_over_coords(gaussian_nll, "nll_mean")}
    summary: dict[str, Any] = {}
    n_boot = int(cfg.bootstrap.n)
    for key, fn in means.items():
        m = fn(mu, sigma, y) if len(mu) else MetricResult(name=f"{key}_mean", value=float("nan"))
        if n_boot > 0 and len(mu):
            m = with_ci(m, fn, image_id, mu, sigma, y, n_boot=n_boot, level=float(cfg.bootstrap.level),
                        seed=int(cfg.bootstrap.seed), fast=False)
        summary[key] = m.to_dict()
    out["_mean"] = summary
    return out


def _probit(p: np.ndarray) -> np.ndarray:
    from scipy.special import ndtri

    return ndtri(np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1.0 - 1e-12))


# ----------------------------------------------------------------------------- report


def _node(block: Mapping[str, Any], *path: str) -> Any:
    node: Any = block
    for k in path:
        if not isinstance(node, Mapping) or k not in node:
            return None
        node = node[k]
    return node


def _headline(ev: Mapping[str, Any]) -> dict[str, Any]:
    """Flat sweep-stable numbers: after first, then ``_uncal`` (before)."""
    out: dict[str, Any] = {}
    spec = [("dece", ("confidence", "{s}", "dece")), ("ece", ("confidence", "{s}", "ece")),
            ("ence", ("regression", "{s}", "_mean", "ence")), ("m_qce", ("regression", "{s}", "_mean", "m_qce")),
            ("nll_box", ("regression", "{s}", "_mean", "nll"))]
    for suffix, stage in (("", "after"), ("_uncal", "before")):
        for key, path in spec:
            node = _node(ev, *(p.format(s=stage) for p in path))
            if node is not None:
                out[key + suffix] = {"value": node["value"], "ci": node.get("ci"), "ci_level": node.get("ci_level"),
                                     "source": "evaluation/" + "/".join(p.format(s=stage) for p in path)}
    return out


def _before_after_table(ev: Mapping[str, Any]) -> str:
    from detcal.reports.tables import comparison_table

    rows: dict[str, dict[str, Any]] = {}
    conf = ev.get("confidence") or {}
    if conf:
        for key, label in CONFIDENCE_ROWS:
            b, a = _node(conf, "before", key), _node(conf, "after", key)
            if b is not None and a is not None:
                rows[f"{label}"] = {"before": b, "after": a, "change": float(a["value"]) - float(b["value"])}
    reg = ev.get("regression") or {}
    if reg:
        for key, label in (("ence", "ENCE"), ("m_qce", "M-QCE"), ("nll", "NLL")):
            b, a = _node(reg, "before", "_mean", key), _node(reg, "after", "_mean", key)
            if b is not None and a is not None:
                rows[f"{label} (box, mean over coords)"] = {"before": b, "after": a,
                                                            "change": float(a["value"]) - float(b["value"])}
        coords = list((_node(reg, "before", "ence") or {}).keys())
        for key, label in REGRESSION_ROWS:
            for c in coords:
                b, a = _node(reg, "before", key, c), _node(reg, "after", key, c)
                if b is not None and a is not None:
                    rows[f"{label} {c}"] = {"before": b, "after": a, "change": float(a["value"]) - float(b["value"])}
        for c in coords:
            a = _node(reg, "after", "interval_ce_cdf", c)
            if a is not None:
                rows[f"Kuleshov CE {c} (recalibrated CDF)"] = {"after": a}
    return comparison_table(rows, ["before", "after", "change"], label="metric")


def _summary_md(m: Mapping[str, Any]) -> str:
    sp = m["split"]
    cal = m["calibrators"]
    parts = [f"# detcal-calibrate summary (detcal {m['detcal_version']})", ""]
    if sp["mode"] == "split":
        parts.append(f"- split: by image, seed {sp['seed']}, calibration fraction {sp['calibration_fraction']} "
                     f"({sp['n_images']['calibration']} calibration / {sp['n_images']['evaluation']} evaluation images)")
    else:
        parts.append(f"- split: two datasets (calibration: {m['data']['calibration'].get('source')}, "
                     f"evaluation: {m['data']['evaluation'].get('source')})")
    for role in ("confidence", "regression"):
        c = cal.get(role)
        if c:
            fitted = c["describe"].get("fitted") or {}
            short = {k: v for k, v in fitted.items() if not isinstance(v, (list, dict)) or len(str(v)) < 120}
            parts.append(f"- {role} calibrator: {c['name']} ({c['describe']['method']}), fitted on "
                         f"{c['n_fit']} samples; learned {json.dumps(to_jsonable(short))}")
        else:
            parts.append(f"- {role} calibrator: none ({cal.get(role + '_skipped', 'not configured')})")
    es = m["evaluation"]["_sample"]
    parts.append(f"- evaluation: held-out, N = {es['n_confidence']} detections ({es['n_matched']} matched) at IoU "
                 f"{es['iou_threshold']}; labels from the matching of the original detections; in-sample numbers: "
                 + ("yes, under `in_sample`" if m.get("in_sample") else "no"))
    parts.append(f"- calibrated results ({m['outputs']['format']}): {m['outputs']['results']}")
    rm = m.get("rematch") or {}
    if rm:
        parts.append(f"- re-matching the calibrated file changes {rm['changed']} of {rm['n']} outcomes "
                     f"at the calibration IoU threshold")
    parts += ["", "## Before / after (held-out evaluation split)", "", _before_after_table(m["evaluation"])]
    if m.get("in_sample"):
        parts += ["## In-sample (calibration split; optimistic, for reference only)", "",
                  _before_after_table(m["in_sample"])]
    parts += ["Files: " + ", ".join(m["files"]), ""]
    return "\n".join(parts)


def _plots(out_dir: Path, ev: Mapping[str, Any], maps: Mapping[str, Any], cfg: Any) -> list[str]:
    from detcal.reports import plots

    files: list[str] = []
    conf = ev.get("confidence") or {}
    for stage in ("before", "after"):
        e = _node(conf, stage, "ece")
        if e:
            t = e["table"]
            name = f"reliability_{stage}.png"
            plots.reliability_diagram(out_dir / name, t.get("confidence", []), t.get("precision", []), t.get("count", []),
                                      ece=e["value"], title=f"Reliability {stage} calibration (evaluation split)")
            files.append(name)
        if maps.get(stage):
            name = f"dece_maps_{stage}.png"
            d = _node(conf, stage, "dece", "value")
            plots.dece_heatmaps(out_dir / name, maps[stage], sample_threshold=int(cfg.metrics.confidence.sample_threshold),
                                dece=d, title=f"D-ECE maps {stage} calibration")
            files.append(name)
        reg = _node(ev, "regression", stage, "ence")
        if reg:
            name = f"rmse_rmv_{stage}.png"
            plots.rmse_rmv_diagram(out_dir / name, {c: v["table"] for c, v in reg.items()},
                                   ence={c: v["value"] for c, v in reg.items()},
                                   log=bool(cfg.metrics.regression.get("log_plot", False)),
                                   title=f"RMSE vs RMV {stage} calibration (evaluation split)")
            files.append(name)
    return files


def _json_text(obj: Any) -> str:
    return json.dumps(obj, indent=1, allow_nan=True)


# ----------------------------------------------------------------------------- the task


def _instantiate_calibrator(node: Any, want: type, field: str) -> Any:
    from hydra.utils import instantiate

    if node is None:
        return None
    obj = instantiate(node)
    if not isinstance(obj, want):
        raise DetcalInputError(f"{type(obj).__name__} is not a {want.__name__}; choose one of configs/calibrator "
                               f"of that kind", file="configs/calibrate.yaml", field=field)
    return obj


def _choice(group: str, fallback: str) -> str:
    try:
        from hydra.core.hydra_config import HydraConfig

        return str(HydraConfig.get().runtime.choices.get(group) or fallback)
    except ValueError:
        return fallback


def _counts(part: Part, row: int) -> dict[str, Any]:
    mr = part.match
    return {"images": len(part.data.dataset.images), "gt": len(part.data.dataset.gt),
            "detections": len(part.data.detections), "considered": int(mr.considered.sum()),
            "true_positives": int((mr.matched[row] & mr.considered).sum()),
            "false_positives": int((mr.considered & ~mr.matched[row] & ~mr.ignored[row]).sum()),
            "ignored": int((mr.considered & mr.ignored[row]).sum()), "n_clipped_features": int(part.n_clipped)}


def calibrate(cfg: Any, out_dir: str | Path, *, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the recalibration protocol described by the composed config ``cfg``; write under ``out_dir``.

    Returns the metrics.json content. Hydra-free apart from ``hydra.utils.instantiate``
    (tests call it with a composed config and a temporary directory).
    """
    from hydra.utils import instantiate

    from detcal.metrics.spaces import regression_sample

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    echo = bool(cfg.get("progress", True))

    def step(msg: str) -> None:
        if echo:
            print(f"[detcal-calibrate] {msg}", file=sys.stderr)

    # ---- data and split
    step("load data")
    data: LoadedData = instantiate(cfg.data).load(out_dir)
    eval_node = cfg.get("eval_data")
    if eval_node is not None:
        eval_data: LoadedData = instantiate(eval_node).load(out_dir / "eval_data")
        cal_data = data
        split = {"mode": "two_datasets", "calibration_fraction": None, "seed": None,
                 "n_images": {"calibration": len(cal_data.dataset.images), "evaluation": len(eval_data.dataset.images)}}
    else:
        cal_data, eval_data, split = split_by_image(data, float(cfg.split.calibration_fraction), int(cfg.split.seed))
    split["in_sample"] = bool(cfg.calibration.get("in_sample", False))
    fmt = input_format(eval_data)
    timing["load"] = time.perf_counter() - t0

    # ---- match
    t0 = time.perf_counter()
    step("match")
    matcher = instantiate(cfg.matching)
    cal, ev = _prepare(cal_data, matcher), _prepare(eval_data, matcher)
    row_c = _threshold_row(cal.match, cfg.calibration.iou_threshold)
    row_e = _threshold_row(ev.match, cfg.calibration.iou_threshold)
    timing["match"] = time.perf_counter() - t0

    conf_cal = _instantiate_calibrator(cfg.get("calibrator"), ConfidenceCalibrator, "calibrator")
    reg_cal = _instantiate_calibrator(cfg.get("regression_calibrator"), RegressionCalibrator, "regression_calibrator")
    fit_cols = _feature_columns(cfg.calibration.features, "calibration.features")
    dece_cols = _feature_columns(cfg.metrics.confidence.dece_features, "metrics.confidence.dece_features")
    calibrators: dict[str, Any] = {}
    evaluation: dict[str, Any] = {}
    in_sample: dict[str, Any] = {}
    maps: dict[str, Any] = {}
    dets_out = ev.data.detections

    # ---- confidence
    t0 = time.perf_counter()
    rows_e, y_e = ev.confidence_rows(row_e)
    if conf_cal is not None:
        step(f"fit confidence calibrator {type(conf_cal).__name__}")
        rows_c, y_c = cal.confidence_rows(row_c)
        use_f = bool(getattr(conf_cal, "uses_features", False)) and len(fit_cols) > 0
        f_c = cal.features[rows_c][:, fit_cols] if use_f else None
        conf_cal.fit(cal.data.detections.score[rows_c], y_c, f_c)
        f_all = ev.features[:, fit_cols] if use_f else None
        new_score = conf_cal.transform(dets_out.score, f_all)
        dets_out = dataclasses.replace(dets_out, score=new_score)
        calibrators["confidence"] = {
            "name": _choice("calibrator", type(conf_cal).__name__), "describe": conf_cal.describe(),
            "n_fit": int(len(rows_c)), "n_fit_matched": int(y_c.sum()),
            "iou_threshold": float(cal.match.iou_thresholds[row_c]),
            "features": [FEATURES[j] for j in fit_cols] if use_f else [],
        }
        step("evaluate confidence")
        fe = ev.features[rows_e][:, dece_cols] if dece_cols else None
        cat, img = ev.data.detections.category[rows_e], ev.data.detections.image_id[rows_e]
        p_b, p_a = ev.data.detections.score[rows_e], new_score[rows_e]
        evaluation["confidence"] = {
            "before": {k: v.to_dict() for k, v in _confidence_eval(cfg, p_b, y_e, fe, cat, img).items()},
            "after": {k: v.to_dict() for k, v in _confidence_eval(cfg, p_a, y_e, fe, cat, img).items()},
        }
        maps = {"before": _dece_maps(cfg, p_b, y_e, ev.features[rows_e]),
                "after": _dece_maps(cfg, p_a, y_e, ev.features[rows_e])}
        if split["in_sample"]:
            p_in = conf_cal.transform(cal.data.detections.score[rows_c], f_c)
            fc = cal.features[rows_c][:, dece_cols] if dece_cols else None
            cat_c, img_c = cal.data.detections.category[rows_c], cal.data.detections.image_id[rows_c]
            in_sample["confidence"] = {
                "before": {k: v.to_dict() for k, v in
                           _confidence_eval(cfg, cal.data.detections.score[rows_c], y_c, fc, cat_c, img_c).items()},
                "after": {k: v.to_dict() for k, v in _confidence_eval(cfg, p_in, y_c, fc, cat_c, img_c).items()},
            }
    else:
        calibrators["confidence_skipped"] = "no confidence calibrator configured"
    timing["confidence"] = time.perf_counter() - t0

    # ---- box uncertainty
    t0 = time.perf_counter()
    r = cfg.metrics.regression
    space, t_reg = str(r.space), float(r.iou_threshold)
    if reg_cal is not None and ev.data.detections.uncertainty_kind is not None \
            and cal.data.detections.uncertainty_kind is not None:
        step(f"fit box-uncertainty calibrator {type(reg_cal).__name__}")
        s_c = regression_sample(cal.data.detections, cal.data.dataset.gt, cal.match, iou_threshold=t_reg, space=space)
        if len(s_c) == 0:
            raise DetcalInputError(f"no true positives at IoU {t_reg} in the calibration data: nothing to fit",
                                   field="metrics.regression.iou_threshold")
        reg_cal.fit(s_c.mu, s_c.sigma, s_c.y)
        dets_out, wb = apply_regression_calibrator(dets_out, reg_cal, space)
        calibrators["regression"] = {"name": _choice("calibrator@regression_calibrator", type(reg_cal).__name__),
                                     "describe": reg_cal.describe(), "n_fit": int(len(s_c)),
                                     "iou_threshold": t_reg, "space": space, "coords": list(s_c.coords),
                                     "writeback": wb}
        step("evaluate box uncertainty")
        s_e = regression_sample(ev.data.detections, ev.data.dataset.gt, ev.match, iou_threshold=t_reg, space=space)
        cdf = getattr(reg_cal, "cdf", None)
        mu_a, sg_a = reg_cal.transform(s_e.mu, s_e.sigma) if len(s_e) else (s_e.mu, s_e.sigma)
        evaluation["regression"] = {
            "before": _regression_eval(cfg, s_e.mu, s_e.sigma, s_e.y, s_e.image_id, s_e.coords, space),
            "after": _regression_eval(cfg, mu_a, sg_a, s_e.y, s_e.image_id, s_e.coords, space),
        }
        if cdf is not None and len(s_e):
            # Kuleshov CE of the recalibrated CDF R(Phi((y - mu)/sigma)) itself, at the original (mu, sigma),
            # next to the CE of the Gaussian N(mu', sigma'^2) that the written file carries
            z = _probit(cdf(s_e.y, s_e.mu, s_e.sigma))
            from detcal.metrics.regression import interval_calibration_error

            evaluation["regression"]["after"]["interval_ce_cdf"] = {
                c: interval_calibration_error(np.zeros(len(z)), np.ones(len(z)), z[:, k]).to_dict()
                for k, c in enumerate(s_e.coords)}
        if split["in_sample"]:
            mu_i, sg_i = reg_cal.transform(s_c.mu, s_c.sigma)
            in_sample["regression"] = {
                "before": _regression_eval(cfg, s_c.mu, s_c.sigma, s_c.y, s_c.image_id, s_c.coords, space),
                "after": _regression_eval(cfg, mu_i, sg_i, s_c.y, s_c.image_id, s_c.coords, space),
            }
    elif reg_cal is None:
        calibrators["regression_skipped"] = "no box-uncertainty calibrator configured"
    else:
        calibrators["regression_skipped"] = "the detections carry no box uncertainty (METRICS.md section 1)"
    timing["regression"] = time.perf_counter() - t0

    # ---- outputs
    t0 = time.perf_counter()
    step("write calibrated results")
    outputs = write_calibrated(out_dir / "calibrated", fmt, dets_out, ev.data.dataset, write_gt=split["mode"] == "split")
    if "gt" not in outputs:
        prov = ev.data.provenance
        outputs["gt"] = prov.get("gt") or prov.get("label_dir") or (prov.get("adapter") or {}).get("gt")
    rematched = matcher(dets_out, ev.data.dataset.gt, kitti=ev.data.kitti, images=ev.data.dataset.images)
    changed = (rematched.matched[row_e] != ev.match.matched[row_e]) | (rematched.ignored[row_e] != ev.match.ignored[row_e]) \
        | (rematched.considered != ev.match.considered)

    evaluation["_sample"] = {"n_confidence": int(len(rows_e)), "n_matched": int(y_e.sum()),
                             "iou_threshold": float(ev.match.iou_thresholds[row_e])}
    metrics: dict[str, Any] = {
        **run_header("detcal-calibrate", cfg, out_dir, overrides),
        "data": {"calibration": {**cal.data.provenance, "counts": _counts(cal, row_c)},
                 "evaluation": {**ev.data.provenance, "counts": _counts(ev, row_e)}},
        "split": split,
        "matching": {"calibration": cal.match.describe(), "evaluation": ev.match.describe()},
        "calibrators": calibrators,
        "headline": _headline(evaluation),
        "evaluation": evaluation,
        "in_sample": in_sample if split["in_sample"] else None,
        "rematch": {"n": int(len(dets_out)), "changed": int(changed.sum()),
                    "iou_threshold": float(ev.match.iou_thresholds[row_e]),
                    "note": "outcomes of the written file re-matched (score order / max_dets may differ); "
                            "before/after above use the original labels"},
        "dece_maps": maps,
        "outputs": outputs,
        "variants": {
            "protocol": "METRICS.md 5: fit on the calibration split, evaluate on a disjoint split "
                        "(or a second dataset); labels and TP sample fixed by the original matching",
            "confidence": f"METRICS.md 3: ECE bins={cfg.metrics.confidence.bins}, D-ECE bins="
                          f"{_plain(cfg.metrics.confidence.dece_bins)} over (confidence, "
                          f"{', '.join(FEATURES[j] for j in dece_cols)}), sample_threshold="
                          f"{cfg.metrics.confidence.sample_threshold}, policy={cfg.metrics.confidence.policy}",
            "regression": f"METRICS.md 4: space={space}, TP at IoU {t_reg}, ENCE bins={cfg.binning.bins} "
                          f"{cfg.binning.scheme}; Kuleshov CE m=100 levels, sum, one-sided; "
                          "headline box metrics are means over the coordinates",
            "bootstrap": f"percentile over images, n={cfg.bootstrap.n}, level={cfg.bootstrap.level}, "
                         f"seed={cfg.bootstrap.seed}",
        },
        "files": ["metrics.json", "summary.md"],
    }
    metrics = to_jsonable(metrics)
    if bool(cfg.get("plots", True)):
        step("plots")
        metrics["files"] += _plots(out_dir, metrics["evaluation"], metrics["dece_maps"], cfg)
    timing["write"] = time.perf_counter() - t0
    metrics["timing_s"] = {k: round(v, 3) for k, v in timing.items()}
    write_text(out_dir / "metrics.json", _json_text(metrics) + "\n")
    from detcal.reports.tables import write_table

    write_table(out_dir / "summary.md", _summary_md(metrics), echo=bool(cfg.get("print_summary", True)))
    return metrics


def main() -> None:
    """Console entry point ``detcal-calibrate`` (Hydra command line: overrides, ``-m``, ``--cfg job``...)."""
    from detcal.experiments.common import run_hydra_app, task_overrides

    run_hydra_app("calibrate", lambda cfg, run_dir: calibrate(cfg, run_dir, overrides=task_overrides()), "detcal-calibrate")


if __name__ == "__main__":  # pragma: no cover
    main()
