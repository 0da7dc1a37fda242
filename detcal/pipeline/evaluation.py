"""The evaluation pipeline: data -> match -> confidence and box-uncertainty metrics -> result.

Hydra-free; every command (and a notebook) goes through :func:`evaluate`::

    import detcal
    result = detcal.evaluate("instances_val2017.json", "results.json")
    result.headline["ece"]["value"]
    print(result.to_markdown())
    result.write("out/", plots=True)

Data flow (docs/pipeline.md)::

    DataSpec / paths / records -> LoadedData -> match (MatchingSpec) ->
    confidence metrics per IoU threshold (ConfidenceSpec, DeceBinningSpec) ->
    regression sample + metrics (RegressionSpec, SigmaBinningSpec) ->
    EvaluationResult (to_dict / to_markdown / write)
"""
from __future__ import annotations

import functools
import logging
import os
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from detcal.boxes import relative_features, xyxy_to_cxcywh
from detcal.errors import DetcalInputError
from detcal.pipeline.progress import Progress
from detcal.pipeline.sources import LoadedData, load_coco, load_data
from detcal.pipeline.spec import FEATURES, DataSpec, EvaluationSpec, MatchingSpec
from detcal.types import Dataset, Detections, MatchResult, MetricResult

if TYPE_CHECKING:
    from detcal.pipeline.result import EvaluationResult

log = logging.getLogger("detcal")

__all__ = ["evaluate", "as_loaded", "match_data", "relative_box_features", "threshold_label", "dece_maps",
           "HEADLINE_CONFIDENCE", "HEADLINE_REGRESSION"]

HEADLINE_CONFIDENCE: tuple[str, ...] = ("ece", "dece", "mce", "nll", "brier")
HEADLINE_REGRESSION: tuple[str, ...] = ("ence", "m_qce", "c_qce", "nll")


def threshold_label(t: float) -> str:
    """``iou=0.50`` (``iou=kitti`` for the per-class KITTI row, stored as NaN)."""
    if not np.isfinite(t):
        return "iou=kitti"
    return f"iou={t:.2f}" if abs(round(t, 2) - t) < 1e-12 else f"iou={t:g}"


def as_loaded(gt: Any, results: Any = None, *, workdir: str | os.PathLike = ".",
              unknown_category: str = "drop") -> LoadedData:
    """Anything the API accepts as input, as :class:`LoadedData`: a LoadedData, a
    DataSpec, a (Dataset, Detections) pair, or paths of COCO instances + results files."""
    if isinstance(gt, LoadedData):
        return gt
    if isinstance(gt, DataSpec):
        return load_data(gt, workdir)
    if isinstance(gt, Dataset):
        if not isinstance(results, Detections):
            raise TypeError("with a Dataset, results must be a Detections record")
        return LoadedData(gt, results, None, {"source": "records", "dataset": gt.source})
    if isinstance(gt, (str, os.PathLike)):
        if results is None:
            raise TypeError("give the results file next to the ground-truth file")
        return load_coco(gt, results, unknown_category)
    raise TypeError(f"cannot evaluate {type(gt).__name__}: give paths, (Dataset, Detections), a DataSpec or LoadedData")


def require_detections(data: LoadedData) -> None:
    """A clear error naming the results when there is nothing to evaluate."""
    if len(data.detections) == 0:
        p = data.provenance
        where = p.get("results") or p.get("results_dir") or (p.get("adapter") or {}).get("results")
        raise DetcalInputError("there are no detections to evaluate (after leaving out "
                               f"{sum(data.dropped.values())} with unknown categories)" if data.dropped else
                               "there are no detections to evaluate", file=where)


def relative_box_features(data: LoadedData, needed: bool) -> tuple[np.ndarray, int, np.ndarray]:
    """Relative box features [D,4] (clipped to [0, 1]), the clipped count, the per-detection clipped flag [D].

    Images without a width or height give NaN features; when ``needed`` (a
    metric uses position) that is an error naming the file and ``width``."""
    ds, dets = data.dataset, data.detections
    row = ds.images.index_of(dets.image_id)
    if (row < 0).any():
        bad = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError("image id not in the dataset", file=ds.source or None, record=bad, field="image_id")
    w, h = ds.images.width[row], ds.images.height[row]
    no_size = ~(np.isfinite(w) & np.isfinite(h) & (w > 0) & (h > 0))
    if no_size.any():
        if needed:
            img = int(dets.image_id[np.flatnonzero(no_size)[0]])
            raise DetcalInputError(f"image {img} has no width/height, which the box-position features of D-ECE "
                                   f"need; add them, or set dece_binning.features=[] and confidence.maps=[]",
                                   file=ds.source or None, record=f"image {img}", field="width")
        feats = np.full((len(dets), 4), np.nan)
        return feats, 0, np.zeros(len(dets), bool)
    feats, n_clipped = relative_features(dets.box, w, h)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = xyxy_to_cxcywh(dets.box) / np.stack([w, h, w, h], axis=-1).reshape(-1, 4)
    return feats, n_clipped, np.any((rel < 0) | (rel > 1), axis=-1)


def match_data(data: LoadedData, spec: EvaluationSpec, reg_on: bool) -> tuple[MatchResult, MatchResult, list[float]]:
    """Match at the configured thresholds (docs/matching.md).

    The regression sample's IoU is added to the matched thresholds when it is
    missing (returned as regression-only thresholds, not evaluated for
    confidence); with per-class KITTI thresholds the regression sample is
    matched in a second call. Returns (match, match for the regression sample, regression-only thresholds).
    """
    m = spec.matching
    dets = data.detections
    thresholds = m.thresholds()
    if thresholds == "kitti" and data.kitti is None:
        raise DetcalInputError("matching.iou_thresholds=kitti needs KITTI data (data=kitti or data.format=kitti)",
                               field="matching.iou_thresholds")
    t_reg = float(spec.regression.sample_iou)
    extra: list[float] = []
    if reg_on and isinstance(thresholds, list) and not any(abs(t - t_reg) < 1e-9 for t in thresholds):
        extra = [t_reg]
    mr = run_match(m, dets, data, thresholds + extra if extra else thresholds)
    mr_reg = mr
    if reg_on and not isinstance(thresholds, list):
        mr_reg = run_match(m, dets, data, [t_reg])
    return mr, mr_reg, extra


def run_match(m: MatchingSpec, dets: Detections, data: LoadedData, thresholds: Any = None) -> MatchResult:
    """:func:`detcal.matching.match` of ``dets`` against ``data``'s ground truth as ``m`` says
    (``thresholds``: instead of ``m``'s, e.g. with the regression sample's IoU added)."""
    from detcal.matching import match

    if m.mode == "kitti" and data.kitti is None:
        raise DetcalInputError("matching.mode=kitti needs KITTI data (data=kitti or data.format=kitti)",
                               field="matching.mode")
    ds = data.dataset
    return match(dets, ds.gt, m.thresholds() if thresholds is None else thresholds, mode=m.mode,
                 class_agnostic=m.class_agnostic, score_threshold=m.score_threshold, max_dets=m.max_dets,
                 kitti=data.kitti, images=ds.images, gt_ignore=m.gt_ignore)


def _feature_cols(names: list[str]) -> list[int]:
    return [FEATURES.index(n) for n in names]


def _map_bins(b: Any, pair: list[str]) -> int | tuple[int, int, int]:
    """Bins of a (confidence, f1, f2) map grid: the D-ECE bins of those dimensions."""
    if isinstance(b.bins, int):
        return b.bins
    per = {n: b.bins[1 + i] for i, n in enumerate(b.features)}
    return (b.bins[0], per.get(pair[0], b.bins[0]), per.get(pair[1], b.bins[0]))


def dece_maps(spec: EvaluationSpec, p: np.ndarray, y: np.ndarray, feats: np.ndarray) -> dict[str, Any]:
    """D-ECE heat maps over the configured feature pairs (Kueppers et al. 2020, Fig. 1)."""
    from detcal.metrics.confidence import dece
    from detcal.reports.gap_maps import marginal_gap_map

    b = spec.dece_binning
    out: dict[str, Any] = {}
    for pair in spec.confidence.maps:
        a, c = _feature_cols(pair)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = dece(p, y, feats[:, [a, c]], bins=_map_bins(b, pair),
                     sample_threshold=b.sample_threshold, policy=b.policy)
        shape = tuple(int(v) for v in r.params.get("bins", ())) or (1, 1, 1)
        n = int(np.prod(shape))
        m = marginal_gap_map(r.table.get("count", np.zeros(n)), r.table.get("confidence", np.full(n, np.nan)),
                             r.table.get("precision", np.full(n, np.nan)), shape, keep_axes=(1, 2),
                             kept=r.table.get("kept"))
        out[f"{pair[0]}_{pair[1]}"] = {
            "axes": list(pair), "bins": list(shape[1:]), "gap": m["gap"], "count": m["count"],
            "kept_count": m["kept_count"], "sample_threshold": b.sample_threshold, "policy": b.policy,
            "dece": float(r.value),
            "definition": "M(i,j) = sum_kept N_c gap(c) / sum_kept N_c over the confidence bins of "
                          "position cell (i,j) of a D-ECE grid over (confidence, f1, f2)"}
    return out


def _missing_sizes(data: LoadedData, feats: np.ndarray) -> str | None:
    """A warning naming the file and ``width`` when some images have no size (position metrics are then skipped)."""
    bad = ~np.isfinite(feats).all(axis=1)
    if not bad.any():
        return None
    img = int(data.detections.image_id[np.flatnonzero(bad)[0]])
    msg = (f"file {data.dataset.source or data.provenance.get('gt')}, image {img}, field 'width': "
           f"{int(bad.sum())} detections lie in images without width/height; D-ECE, homogeneity, outliers and "
           "the D-ECE maps need box positions relative to the image size and are not computed (the other "
           "metrics are)")
    log.warning(msg)
    return msg


def _null_position_metrics(block: dict[str, Any], reason: str) -> None:
    """Replace the metrics over (confidence, box features) by null with ``reason``."""
    for key, node in block.items():
        if isinstance(node, dict) and int((node.get("params") or {}).get("n_features", 1)) > 1:
            block[key] = {"name": node.get("name", key), "value": None, "variant": node.get("variant"),
                          "params": node.get("params"), "_null": {"value": reason}}


def _confidence_block(spec: EvaluationSpec, data: LoadedData, mr: MatchResult, feats: np.ndarray,
                      progress: Progress, exclude: list[float],
                      no_pos: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Confidence metrics and D-ECE maps per IoU threshold (docs/metrics.md). ``no_pos``: images lack
    sizes, so the metrics over box positions are null with that reason."""
    from detcal.metrics.confidence import ConfidenceConfig, confidence_metrics

    b, c, bs = spec.dece_binning, spec.confidence, spec.bootstrap
    dets = data.detections
    cols = _feature_cols(b.features)
    ccfg = ConfidenceConfig(ece_bins=b.ece_bins, dece_bins=b.bins_arg(), sample_threshold=b.sample_threshold,
                            policy=b.policy, n_boot=bs.n, ci_level=bs.level, seed=bs.seed)
    wanted = c.iou_thresholds
    out: dict[str, Any] = {}
    maps: dict[str, Any] = {}
    for i, t in enumerate(mr.iou_thresholds):
        if wanted is not None and not any(abs(float(t) - w) < 1e-9 for w in wanted):
            continue
        if wanted is None and any(abs(float(t) - w) < 1e-9 for w in exclude):
            continue
        label = threshold_label(float(t))
        progress.step(f"confidence {label}")
        rows = np.flatnonzero(mr.considered & ~mr.ignored[i])
        p, y = dets.score[rows], mr.matched[i, rows]
        if len(rows) == 0 or not y.any():
            why = "no detection was evaluated" if len(rows) == 0 else f"no detection matched at {label}"
            out[label] = {"_sample": {"n": int(len(rows)), "n_matched": int(y.sum()), "features": list(b.features),
                                      "skipped": f"{why}: the confidence metrics cannot be computed"}}
            continue
        f = feats[rows][:, cols] if cols else None
        if no_pos and f is not None:
            f = np.where(np.isfinite(f), f, 0.5)  # placeholder positions; the position metrics are nulled below
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = confidence_metrics(p, y, f, dets.category[rows] if c.per_class else None, ccfg, dets.image_id[rows])
        block: dict[str, Any] = {k: r.to_dict() for k, r in res.items()}
        for node in block.values():
            if isinstance(node, dict) and isinstance(node.get("table"), dict):
                node["table"].pop("bin_index", None)  # cells are in C order over params.bins
        block["_sample"] = {"n": int(len(rows)), "n_matched": int(y.sum()), "features": list(b.features),
                            "warnings": sorted({str(w.message) for w in caught})}
        if no_pos:
            _null_position_metrics(block, "images without width/height: box positions cannot be made relative")
        out[label] = block
        maps[label] = dece_maps(spec, p, y, feats[rows]) if c.maps and not no_pos else {}
    return out, maps


def _regression_block(spec: EvaluationSpec, data: LoadedData, mr: MatchResult, progress: Progress) -> dict[str, Any]:
    """Box-uncertainty metrics (docs/metrics.md) with bootstrap intervals on the headline ones."""
    from detcal.metrics.bootstrap import with_ci
    from detcal.metrics.regression import ence, m_qce, m_qce_joint, regression_metrics
    from detcal.metrics.spaces import regression_sample

    r, sb, bs = spec.regression, spec.sigma_binning, spec.bootstrap
    dets = data.detections
    progress.step("regression")
    if dets.uncertainty_kind is None:
        return {"_sample": {"n": 0, "skipped": "the detections carry no box uncertainty (docs/formats.md)"}}
    t = float(r.sample_iou)
    sample = regression_sample(dets, data.dataset.gt, mr, iou_threshold=t, space=r.space)
    if len(sample) == 0:
        return {"_sample": {"n": 0, "iou_threshold": t,
                            "skipped": f"no true positive at IoU {t}: the box-uncertainty metrics cannot be computed"}}
    levels = np.linspace(0.05, 0.95, r.quantile_levels)
    res = regression_metrics(sample, bins=sb.bins, binning=sb.scheme, qce_bins=sb.qce_bins, qce_binning=sb.qce_scheme,
                             qce_sample_threshold=r.qce_sample_threshold, levels=levels)
    if bs.n > 0:
        boot = dict(n_boot=bs.n, level=bs.level, seed=bs.seed)
        g = sample.image_id
        for k, name in enumerate(sample.coords):
            arrays = (sample.mu[:, k], sample.sigma[:, k], sample.y[:, k])
            res["ence"][name] = with_ci(res["ence"][name], functools.partial(ence, bins=sb.bins, binning=sb.scheme),
                                        g, *arrays, **boot)
            res["m_qce"][name] = with_ci(res["m_qce"][name], functools.partial(m_qce, levels=levels), g, *arrays, **boot)
        if "joint" in res["m_qce"]:
            def _joint(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, cov: np.ndarray | None) -> MetricResult:
                return m_qce_joint(mu, sigma, y, cov=cov, levels=levels)

            res["m_qce"]["joint"] = with_ci(res["m_qce"]["joint"], _joint, g, sample.mu, sample.sigma, sample.y,
                                            sample.cov, **boot)
    out: dict[str, Any] = {m: {c: v.to_dict() for c, v in per.items()} for m, per in res.items()}
    out["_sample"] = {"n": int(len(sample)), "space": sample.space, "coords": list(sample.coords),
                      "iou_threshold": t, "notes": sample.notes}
    return out


def _accounting(data: LoadedData, spec: EvaluationSpec, mr: MatchResult) -> dict[str, Any]:
    """Every input detection: evaluated, or left out by cause."""
    dets, m = data.detections, spec.matching
    below = dets.score < m.score_threshold
    out_cons = ~mr.considered
    acc: dict[str, Any] = {
        "input": int(len(dets) + sum(data.dropped.values())),
        "left_out_at_loading": dict(data.dropped),
        "below_score_threshold": int((out_cons & below).sum()),
        "beyond_max_dets": int((out_cons & ~below).sum()),
        "considered": int(mr.considered.sum()),
        "per_threshold": {},
    }
    for i, t in enumerate(mr.iou_thresholds):
        ign = mr.considered & mr.ignored[i]
        acc["per_threshold"][threshold_label(float(t))] = {
            "evaluated": int((mr.considered & ~mr.ignored[i]).sum()),
            "ignored_region": int(ign.sum()),
            "true_positives": int((mr.matched[i] & mr.considered).sum()),
            "false_positives": int((mr.considered & ~mr.matched[i] & ~mr.ignored[i]).sum())}
    return acc


def _headline(conf: dict[str, Any], reg: dict[str, Any]) -> dict[str, Any]:
    """Flat, sweep-stable headline numbers: confidence at the first evaluated threshold, regression per coordinate."""
    out: dict[str, Any] = {}
    for label, block in conf.items():
        if "skipped" in block.get("_sample", {}):
            continue
        for name in HEADLINE_CONFIDENCE:
            node = block.get(name)
            if node is not None:
                out[name] = {"value": node["value"], "ci": node.get("ci"), "ci_level": node.get("ci_level"),
                             "source": f"confidence/{label}/{name}"}
        break
    for name in HEADLINE_REGRESSION:
        for coord, node in (reg.get(name) or {}).items():
            out[f"{name}_{coord}"] = {"value": node["value"], "ci": node.get("ci"), "ci_level": node.get("ci_level"),
                                      "source": f"regression/{name}/{coord}"}
    return out


def _variants(spec: EvaluationSpec, data: LoadedData) -> dict[str, str]:
    """Which definitions and variants produced the numbers (docs sections)."""
    b, r, sb, bs, m = spec.dece_binning, spec.regression, spec.sigma_binning, spec.bootstrap, spec.matching
    kitti = data.kitti is not None
    rules = ("KITTI devkit rules (difficulty " + str(data.provenance.get("difficulty", "moderate")) +
             ", neighbour classes, DontCare, min height)") if kitti else "COCO rules (crowd regions, maxDets)"
    if kitti and m.thresholds() != "kitti":
        rules += "; IoU thresholds as given, NOT the devkit's per-class 0.7/0.5/0.5 (matching=kitti for those)"
    return {
        "boxes": "docs/metrics.md#boxes: xyxy pixels; relative features cx/W, cy/H, w/W, h/H clipped to [0, 1]",
        "matching": f"docs/matching.md: mode={m.mode}, IoU thresholds={m.thresholds()}, {rules}",
        "confidence": f"docs/metrics.md#ece: equal-width cells over [0, 1], ECE bins={b.ece_bins}, D-ECE bins="
                      f"{b.bins} over (confidence, {', '.join(b.features)}), sample_threshold={b.sample_threshold}, "
                      f"sparse-cell policy={b.policy}",
        "regression": f"docs/metrics.md#ence: space={r.space}, TP at IoU {r.sample_iou}, ENCE bins={sb.bins} "
                      f"{sb.scheme}, C-QCE bins={sb.qce_bins} {sb.qce_scheme}, QCE levels={r.quantile_levels}, "
                      f"UCE equal-width over sigma^2",
        "bootstrap": f"docs/metrics.md#bootstrap: over images, n={bs.n}, level={bs.level}, seed={bs.seed}",
    }


def evaluate(gt: Any, results: Any = None, spec: EvaluationSpec | None = None, *,
             workdir: str | os.PathLike | None = None, progress: bool = False) -> "EvaluationResult":
    """Evaluate one detector's calibration.

    ``gt``/``results``: paths of a COCO instances and a COCO results file, a
    (:class:`~detcal.types.Dataset`, :class:`~detcal.types.Detections`) pair,
    or ``gt`` a :class:`DataSpec` / :class:`LoadedData` alone. ``spec``:
    :class:`EvaluationSpec` (defaults when None). ``workdir``: where a
    synthetic set is generated. Returns an :class:`EvaluationResult`.
    """
    from detcal.pipeline.result import EvaluationResult

    spec = spec or EvaluationSpec()
    timing: dict[str, float] = {}
    conf_on, reg_on = spec.confidence.enabled, spec.regression.enabled
    with Progress(progress, "detcal-evaluate", total=4) as bar:
        t0 = time.perf_counter()
        bar.step("load data")
        data = as_loaded(gt, results, workdir=workdir or ".")
        timing["load"] = time.perf_counter() - t0
        require_detections(data)
        t0 = time.perf_counter()
        bar.step("match")
        mr, mr_reg, extra = match_data(data, spec, reg_on)
        needs_pos = conf_on and (bool(spec.dece_binning.features) or bool(spec.confidence.maps))
        feats, n_clipped, clipped = relative_box_features(data, needed=False)
        no_pos = _missing_sizes(data, feats) if needs_pos else None
        timing["match"] = time.perf_counter() - t0
        bar.total = 3 + (len(mr.iou_thresholds) - len(extra) if conf_on else 0)
        t0 = time.perf_counter()
        conf, maps = _confidence_block(spec, data, mr, feats, bar, extra, no_pos) if conf_on else ({}, {})
        timing["confidence"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        reg = _regression_block(spec, data, mr_reg, bar) if reg_on else {"_sample": {"n": 0, "skipped": "disabled"}}
        timing["regression"] = time.perf_counter() - t0
    ds, dets = data.dataset, data.detections
    warn = [f"confidence at {lbl}: {blk['_sample']['skipped']}" for lbl, blk in conf.items()
            if "skipped" in blk.get("_sample", {})]
    if no_pos:
        warn.insert(0, no_pos)
    if "skipped" in reg.get("_sample", {}) and reg_on and dets.uncertainty_kind is not None:
        warn.append(f"regression: {reg['_sample']['skipped']}")
    record: dict[str, Any] = {
        "data": {**data.provenance, "counts": {
            "images": len(ds.images), "gt": len(ds.gt), "detections": len(dets),
            "categories": {str(k): v for k, v in ds.categories.items()}, "uncertainty": dets.uncertainty_kind}},
        "spec": spec,
        "matching": {**mr.describe(), "regression_only_thresholds": extra},
        "detections": _accounting(data, spec, mr),
        "features": {"names": list(FEATURES), "n_clipped": int(n_clipped),
                     "note": "relative (cx/W, cy/H, w/W, h/H), values outside [0, 1] clipped"},
        "variants": _variants(spec, data),
        "headline": _headline(conf, reg),
        "confidence": conf,
        "dece_maps": maps,
        "regression": reg,
        "warnings": warn,
        "timing_s": {k: round(v, 3) for k, v in timing.items()},
    }
    return EvaluationResult(record=record, data=data, match=mr, features=feats, clipped=clipped, spec=spec)
