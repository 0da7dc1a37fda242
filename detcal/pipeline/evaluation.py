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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.results import (
    AccuracyBlock,
    ConfidenceBlock,
    DiagnosticsBlock,
    LocalisationBlock,
    OCEBlock,
    RegressionBlock,
    UQDetrBlock,
)
from detcal.core.types import Dataset, Detections, MatchResult, MetricResult, Skipped
from detcal.metrics.measures import headline_names
from detcal.metrics.spaces import regression_sample
from detcal.pipeline.confidence_block import confidence_blocks, dece_maps, threshold_label
from detcal.pipeline.input_checks import check_input
from detcal.pipeline.parallel import distributed_rank, distributed_world, gather_shards, match_in_shards, parallel_match
from detcal.pipeline.progress import Progress
from detcal.pipeline.sources import LoadedData, load_coco, load_data, release_memory, unknown_category_warning
from detcal.pipeline.sparse_cells import SPARSE_MARK, log_once, sparse_cells_line
from detcal.pipeline.spec import FEATURES, DataSpec, EvaluationSpec

if TYPE_CHECKING:
    from detcal.pipeline.result import EarlyFigures, EvaluationResult
    from detcal.reports.html.worst import GridCells

log = logging.getLogger("detcal")

__all__ = [
    "evaluate",
    "as_loaded",
    "match_data",
    "relative_box_features",
    "features_when_read",
    "threshold_label",
    "dece_maps",
    "HEADLINE_REGRESSION",
    "headline_entry",
]

HEADLINE_REGRESSION: tuple[str, ...] = ("ence", "m_qce", "c_qce", "nll")


EvaluationInput = LoadedData | DataSpec | Dataset | str | os.PathLike[str]
"""What :func:`evaluate` reads: loaded data, a data spec, a :class:`Dataset` (with its
:class:`Detections` as ``results``) or the path of a COCO instances file (with the results file's)."""
ResultsInput = Detections | str | os.PathLike[str] | None
"""The detections next to a :class:`Dataset`, or the results file next to an instances path."""


def as_loaded(
    gt: EvaluationInput,
    results: ResultsInput = None,
    *,
    workdir: str | os.PathLike = ".",
    unknown_category: str = "drop",
    shard: tuple[int, int] | None = None,
) -> LoadedData:
    """Anything the API accepts as input, as :class:`LoadedData`: a LoadedData, a
    DataSpec, a (Dataset, Detections) pair, or paths of COCO instances + results files.
    ``shard`` (rank, world): COCO results are read for that rank's image shard only (docs/scale.md).
    Input read from files (a DataSpec, paths) passes the checks of :mod:`detcal.pipeline.input_checks`
    (thresholds from the DataSpec; their defaults for paths)."""

    if isinstance(gt, LoadedData):
        return gt
    if isinstance(gt, DataSpec):
        loaded = load_data(gt, workdir, shard)
        check_input(loaded, gt)
        return loaded
    if isinstance(gt, Dataset):
        if not isinstance(results, Detections):
            raise TypeError("with a Dataset, results must be a Detections record")
        return LoadedData(gt, results, None, {"source": "records", "dataset": gt.source})
    if isinstance(gt, (str, os.PathLike)):
        if results is None or isinstance(results, Detections):
            raise TypeError("give the results file next to the ground-truth file")
        loaded = load_coco(gt, results, unknown_category, shard=shard)
        check_input(loaded)
        return loaded
    raise TypeError(f"cannot evaluate {type(gt).__name__}: give paths, (Dataset, Detections), a DataSpec or LoadedData")


def require_detections(data: LoadedData) -> None:
    """A clear error naming the results when there is nothing to evaluate."""
    if len(data.detections) == 0:
        p = data.provenance
        where = p.get("results") or p.get("results_dir") or (p.get("adapter") or {}).get("results")
        raise DetcalInputError(
            "there are no detections to evaluate (after leaving out "
            f"{sum(data.dropped.values())} with unknown categories)"
            if data.dropped
            else "there are no detections to evaluate",
            file=where,
        )


_FEATURE_BLOCK = 1 << 16


def relative_box_features(data: LoadedData, needed: bool) -> tuple[np.ndarray, int, np.ndarray]:
    """Relative box features [D,4] (clipped to [0, 1]), the clipped count, the per-detection clipped flag [D].

    Images without a width or height give NaN features; when ``needed`` (a
    metric uses position) that is an error naming the file and ``width``."""
    ds, dets = data.dataset, data.detections
    row = ds.images.index_of(dets.image_id)
    if (row < 0).any():
        bad = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError("image id not in the dataset", file=ds.source or None, record=bad, field="image_id")
    width, height = ds.images.width, ds.images.height  # float64; gathered a block at a time below
    sized = np.isfinite(width) & np.isfinite(height) & (width > 0) & (height > 0)  # per image, not per detection
    no_size = np.zeros(0, bool) if sized.all() else ~sized[row]
    if no_size.any():
        if needed:
            img = int(dets.image_id[np.flatnonzero(no_size)[0]])
            raise DetcalInputError(
                f"image {img} has no width/height, which the box-position features of D-ECE "
                f"need; add them, or set dece_binning.features=[] and confidence.maps=[]",
                file=ds.source or None,
                record=f"image {img}",
                field="width",
            )
        feats = np.full((len(dets), 4), np.nan)
        return feats, 0, np.zeros(len(dets), bool)
    feats, clipped = np.empty((len(dets), 4)), np.zeros(len(dets), bool)
    for lo in range(0, len(dets), _FEATURE_BLOCK):  # row blocks: elementwise, so the same values, small temporaries
        sl = slice(lo, lo + _FEATURE_BLOCK)
        _relative_block(dets.box[sl], width[row[sl]], height[row[sl]], feats[sl], clipped[sl])
    n_clipped = int(np.count_nonzero(clipped))
    return feats, n_clipped, clipped


def _held_features(data: LoadedData, needs_pos: bool) -> tuple[list[np.ndarray], int, np.ndarray, str | None]:
    """:func:`relative_box_features` with the features in a list that the confidence block empties (it then holds
    the only reference and lets them go once every grid's cells are made: :func:`confidence_blocks`), and the
    reason box positions are missing when a measure reads them (:func:`_missing_sizes`; None otherwise)."""
    feats, n_clipped, clipped = relative_box_features(data, needed=False)
    return [feats], n_clipped, clipped, _missing_sizes(data, feats) if needs_pos else None


def features_when_read(data: LoadedData) -> Callable[[], np.ndarray]:
    """``relative_box_features(data, needed=False)[0]`` made at the first call and kept: the same array at
    every call, not held before a stage reads it."""
    return functools.cache(lambda: relative_box_features(data, needed=False)[0])


def _relative_block(box: np.ndarray, w: np.ndarray, h: np.ndarray, feats: np.ndarray, clipped: np.ndarray) -> None:
    """:func:`~detcal.core.boxes.relative_features` of a row block, one column at a time with the same
    operations (the same values), into ``feats`` [B,4] (clipped to [0, 1]) and ``clipped`` [B] (any value outside)."""
    b = np.asarray(box, np.float64)
    for k, den in enumerate((w, h)):
        side = b[:, k + 2] - b[:, k]
        for col, v in ((k, b[:, k] + 0.5 * side), (k + 2, side)):
            v /= den
            clipped |= (v < 0) | (v > 1)
            np.clip(v, 0.0, 1.0, out=feats[:, col])


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
        raise DetcalInputError(
            "matching.iou_thresholds=kitti needs KITTI data (data=kitti or data.format=kitti)",
            field="matching.iou_thresholds",
        )
    t_reg = float(spec.regression.sample_iou)
    extra: list[float] = []
    if reg_on and isinstance(thresholds, list) and not any(abs(t - t_reg) < 1e-9 for t in thresholds):
        extra = [t_reg]
    par = spec.parallel
    if data.shard is None and (par.workers > 1 or par.distributed):

        def _match(th: Any) -> MatchResult:
            return parallel_match(m, dets, data, th, par.workers, par.distributed, par.shard_size)
    else:  # one process, or this rank's shard of a sharded read: image shards of par.shard_size, in turn

        def _match(th: Any) -> MatchResult:
            return match_in_shards(m, dets, data, th, par.shard_size)

    mr = _match(thresholds + extra if extra else thresholds)  # type: ignore[operator]  # extra only with a list
    mr_reg = mr
    if reg_on and not isinstance(thresholds, list):
        mr_reg = _match([t_reg])
    if data.shard is not None:  # sharded reading (COCO results, IoU lists): gather every rank's shard
        mr = mr_reg = gather_shards(data, mr)
    return mr, mr_reg, extra


def _per_class(
    spec: EvaluationSpec, data: LoadedData, mr: MatchResult, extra: list[float], acc: AccuracyBlock | Skipped
) -> dict[str, Any]:
    """Per-class table (n, precision, mean confidence, ECE, MCE, Brier, AP) of the most frequent classes at
    the first evaluated threshold."""
    # lazy: kept out of detcal-evaluate start-up (loads when the run reaches it)
    from detcal.reports.per_class import per_class_table

    sample = per_class_sample(mr, extra)
    if sample is None:
        return {}
    i, keep = sample
    dets = data.detections
    ap = acc.metric("AP") if isinstance(acc, AccuracyBlock) else None
    ap_table = {k: np.asarray(ap.table[k], float) for k in ("category", "ap", "ap50")} if ap and ap.table else None
    rows = per_class_table(
        dets.score[keep],
        mr.matched[i, keep],
        dets.category[keep],
        data.dataset.categories,
        bins=spec.dece_binning.ece_bins,
        top_n=spec.confidence.per_class_top_n,
        ap_table=ap_table,
    )
    return {"iou": threshold_label(float(mr.iou_thresholds[i])), "top_n": spec.confidence.per_class_top_n, "rows": rows}


def per_class_sample(mr: MatchResult, extra: list[float]) -> tuple[int, np.ndarray] | None:
    """The matching row of the per-class table and figure (the first threshold that is not regression-only)
    and the rows of its evaluated detections; None: no such threshold, or no detection evaluated there."""
    rows_t = [i for i, t in enumerate(mr.iou_thresholds) if not any(abs(float(t) - w) < 1e-9 for w in extra)]
    if not rows_t:
        return None
    keep = np.flatnonzero(mr.considered & ~mr.ignored[rows_t[0]])
    return (rows_t[0], keep) if len(keep) else None


def _early_figures(
    figures: EarlyFigures,
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    extra: list[float],
    shown: dict[str, Any],
) -> None:
    """Send the run's figures to ``figures``' process now that what they show is computed (``shown``: the
    record's ``confidence``, ``dece_maps`` and ``regression``), with the per-class panels when the run
    makes a per-class table (the same panels :meth:`EvaluationResult.write` would send at the end)."""
    # lazy: the per-class figure's panels only in a run with figures
    from detcal.pipeline.result import panels_of
    from detcal.reports.per_class import most_frequent  # lazy: as above

    panels = None
    sample = per_class_sample(mr, extra) if spec.confidence.enabled and spec.confidence.per_class else None
    top_n = spec.confidence.per_class_top_n
    if sample is not None and len(most_frequent(data.detections.category[sample[1]], top_n)):  # the table has rows
        panels = panels_of(data, mr, sample[0], sample[1], int(top_n))
    figures.start(spec, shown, panels)


def _missing_sizes(data: LoadedData, feats: np.ndarray) -> str | None:
    """A warning naming the file and ``width`` when some images have no size (position metrics are then skipped)."""
    if feats.size == 0 or bool(np.isfinite(feats.min()) and np.isfinite(feats.max())):
        return None  # every value finite (NaN and infinities reach the smallest or the largest): no row to name
    bad = ~np.isfinite(feats).all(axis=1)
    if not bad.any():
        return None
    img = int(data.detections.image_id[np.flatnonzero(bad)[0]])
    msg = (
        f"file {data.dataset.source or data.provenance.get('gt')}, image {img}, field 'width': "
        f"{int(bad.sum())} detections lie in images without width/height; D-ECE, homogeneity, outliers and "
        "the D-ECE maps need box positions relative to the image size and are not computed (the other "
        "metrics are)"
    )
    log.warning(msg)
    return msg


def _regression_block(
    spec: EvaluationSpec, data: LoadedData, mr: MatchResult, progress: Progress
) -> RegressionBlock | Skipped:
    """Box-uncertainty metrics (docs/metrics.md) with bootstrap intervals on the headline ones."""

    r, sb, bs = spec.regression, spec.sigma_binning, spec.bootstrap
    dets = data.detections
    progress.step("regression")
    if dets.uncertainty_kind is None:
        return Skipped("the detections carry no box uncertainty (docs/formats.md)")
    t = float(r.sample_iou)
    sample = regression_sample(dets, data.dataset.gt, mr, iou_threshold=t, space=r.space)
    if len(sample) == 0:
        return Skipped(f"no true positive at IoU {t}: the box-uncertainty metrics cannot be computed")
    # the regression metrics and the bootstrap (~20 ms of imports) serve only detections with a box uncertainty
    from detcal.metrics.bootstrap import with_ci  # lazy: kept out of a plain COCO run's start-up
    from detcal.metrics.regression import ence, m_qce, m_qce_joint, regression_metrics  # lazy: as above

    levels = np.linspace(0.05, 0.95, r.quantile_levels)
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
    )
    if bs.n > 0:
        boot: dict[str, Any] = dict(n_boot=bs.n, level=bs.level, seed=bs.seed, method=bs.method)
        g = sample.image_id
        for k, name in enumerate(sample.coords):
            arrays = (sample.mu[:, k], sample.sigma[:, k], sample.y[:, k])
            res["ence"][name] = with_ci(
                res["ence"][name], functools.partial(ence, bins=sb.bins, binning=sb.scheme), g, *arrays, **boot
            )
            res["m_qce"][name] = with_ci(
                res["m_qce"][name], functools.partial(m_qce, levels=levels), g, *arrays, **boot
            )
        if "joint" in res["m_qce"]:

            def _joint(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, cov: np.ndarray | None) -> MetricResult:
                return m_qce_joint(mu, sigma, y, cov=cov, levels=levels)

            res["m_qce"]["joint"] = with_ci(
                res["m_qce"]["joint"], _joint, g, sample.mu, sample.sigma, sample.y, sample.cov, **boot
            )
    out: dict[str, Any] = {m: dict(per) for m, per in res.items()}
    # lazy: scipy kept out of start-up (coverage_block reads metrics.regression.coverage)
    from detcal.pipeline.coverage_block import coverage_block

    out.update(coverage_block(dets, data.dataset.gt, mr, t, r.space, r.coverage_level))
    out["_sample"] = {
        "n": int(len(sample)),
        "space": sample.space,
        "coords": list(sample.coords),
        "iou_threshold": t,
        "notes": sample.notes,
    }
    return RegressionBlock(out)


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
            "false_positives": int((mr.considered & ~mr.matched[i] & ~mr.ignored[i]).sum()),
        }
    return acc


def headline_entry(m: MetricResult, source: str) -> dict[str, Any]:
    """One headline number: the metric's value and interval, and where in metrics.json it comes from."""
    return {
        "value": float(m.value),
        "ci": None if m.ci is None else list(m.ci),
        "ci_level": m.ci_level,
        "source": source,
    }


def _headline(conf: dict[str, ConfidenceBlock | Skipped], reg: RegressionBlock | Skipped) -> dict[str, Any]:
    """Flat, sweep-stable headline numbers: confidence at the first evaluated threshold, regression per coordinate."""
    out: dict[str, Any] = {}
    for label, block in conf.items():
        if isinstance(block, Skipped):
            continue
        for name in headline_names():  # the registry's headline measures (detcal.metrics.measures)
            m = block.metric(name)
            if m is not None:
                out[name] = headline_entry(m, f"confidence/{label}/{name}")
        break
    per_coord = reg.per_coordinate() if isinstance(reg, RegressionBlock) else {}
    for name in HEADLINE_REGRESSION:
        for coord, m in (per_coord.get(name) or {}).items():
            out[f"{name}_{coord}"] = headline_entry(m, f"regression/{name}/{coord}")
    return out


_PROTOCOL_RULES: dict[str, str] = {
    "voc": "the VOC devkit's rules (IoU > t with the best box of the class, difficult boxes ignored; docs/formats.md)",
    "lvis": "LVISEval's federated rules (300 per image, unverified categories not evaluated, unmatched detections "
    "of not-exhaustive categories ignored; docs/formats.md)",
    "openimages": "the Open Images challenge's rules (verified classes only, group-of boxes found once; "
    "docs/formats.md)",
}
"""The matching description of the protocol modes (docs/formats.md); the others use COCO's or KITTI's."""


def _variants(spec: EvaluationSpec, data: LoadedData) -> dict[str, str]:
    """Which definitions and variants produced the numbers (docs sections)."""
    b, r, sb, bs, m = spec.dece_binning, spec.regression, spec.sigma_binning, spec.bootstrap, spec.matching
    kitti = data.kitti is not None
    rules = (
        (
            "KITTI devkit rules (difficulty "
            + str(data.provenance.get("difficulty", "moderate"))
            + ", neighbour classes, DontCare, min height)"
        )
        if kitti
        else _PROTOCOL_RULES.get(m.mode, "COCO rules (crowd regions, maxDets)")
    )
    if kitti and m.thresholds() != "kitti":
        rules += "; IoU thresholds as given, NOT the devkit's per-class 0.7/0.5/0.5 (matching=kitti for those)"
    return {
        "boxes": "docs/metrics.md#boxes: xyxy pixels; relative features cx/W, cy/H, w/W, h/H clipped to [0, 1]",
        "matching": f"docs/matching.md: mode={m.mode}, IoU thresholds={m.thresholds()}, {rules}",
        "confidence": f"docs/metrics.md#ece: equal-width cells over [0, 1], ECE bins={b.ece_bins}, D-ECE bins="
        f"{b.bins} over (confidence, {', '.join(b.features)}), sample_threshold={b.sample_threshold}, "
        f"sparse-cell policy={b.policy}, edges={spec.confidence.edges or 'policy default'}, "
        f"homogeneity spread={spec.confidence.homogeneity_spread}",
        "regression": f"docs/metrics.md#ence: space={r.space}, TP at IoU {r.sample_iou}, ENCE bins={sb.bins} "
        f"{sb.scheme} (tied sigmas on a bin edge shared by rank), C-QCE bins={sb.qce_bins} "
        f"{sb.qce_scheme}, QCE levels={r.quantile_levels}, UCE equal-width over sigma^2, "
        f"LL-FU log base {r.ll_fu_log_base}, MWSE normalised by the {r.mwse_normalise} count",
        "bootstrap": f"docs/calibration.md#bootstrap: over images, n={bs.n}, level={bs.level}, seed={bs.seed}, "
        f"interval={bs.method} (the bootstrap bias is reported beside each interval)",
    }


def _metric_warnings(conf: dict[str, ConfidenceBlock | Skipped], data: LoadedData) -> list[str]:
    """Detections left out for an unknown category, and the warnings the metrics raised (kept beside their
    sample too): each also one log line."""
    out = []
    if data.dropped.get("unknown_category"):
        out.append(
            unknown_category_warning(data.provenance.get("results", "the results"), data.dropped["unknown_category"])
        )  # logged where it was loaded

    for lbl, blk in conf.items():
        if isinstance(blk, Skipped):
            continue
        for w in blk.sample.get("warnings") or []:
            if SPARSE_MARK in w:  # one line for the whole evaluation, below
                continue
            out.append(f"confidence at {lbl}: {w}")
            log.warning("%s", out[-1])
    sparse = sparse_cells_line(conf)
    if sparse:
        out.append(sparse)
        log_once(sparse)
    return out


MIN_IMAGES_FOR_INTERVALS = 30
"""Below this many images a bootstrap interval (images resampled) is flagged in the run's warnings."""


def few_images_warning(spec: EvaluationSpec, data: LoadedData) -> list[str]:
    """A note when the bootstrap intervals come from fewer than :data:`MIN_IMAGES_FOR_INTERVALS` images:
    they then understate the uncertainty (from one image the interval has zero width)."""
    n = len(data.dataset.images)
    if spec.bootstrap.n == 0 or n >= MIN_IMAGES_FOR_INTERVALS:
        return []
    msg = (
        f"intervals from {n} image{'s' if n != 1 else ''} (fewer than {MIN_IMAGES_FOR_INTERVALS}): the bootstrap "
        "resamples images, so its intervals understate the uncertainty"
        + (" (from one image every interval has zero width)" if n == 1 else "")
    )
    log.warning("%s", msg)
    return [msg]


def _worst(
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    feats: Callable[[], np.ndarray],
    conf: dict[str, ConfidenceBlock | Skipped],
    no_pos: str | None,
    cells: dict[str, GridCells],
) -> dict[str, Any]:
    """The worst-calibrated detections for the report (docs/metrics.md#worst-calibrated-detections); ``cells``:
    the D-ECE cells the calibration split by error type left (the same sample and grid: not binned again)."""
    shared = cells.pop("dece", None)  # released on every path
    if not conf or no_pos or data.shard is not None:
        return {}
    # lazy: kept out of detcal-evaluate start-up (loads when the run reaches it)
    from detcal.pipeline.report_data import worst_block

    return worst_block(spec, data, mr, feats, conf, cells=shared)


def _diagnostics(
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    feats: Callable[[], np.ndarray],
    conf: dict[str, ConfidenceBlock | Skipped],
    loc: LocalisationBlock | Skipped,
    timing: dict[str, float],
    keep: dict[str, GridCells],
    kept: dict[Any, np.ndarray],
) -> tuple[DiagnosticsBlock | Skipped, dict[str, np.ndarray]]:
    """TIDE, calibration by error type, confusion, label errors, operating points (docs/metrics.md#diagnostics);
    its time in ``timing["diagnostics"]``; the D-ECE cells of the calibration split left in ``keep``; ``kept``:
    the confidence block's cells, read by the calibration split (no second binning, no feature read)."""
    d = spec.diagnostics
    if not (d.tide or d.confusion or d.operating_points):
        return Skipped("diagnostics.tide, .confusion and .operating_points are false"), {}
    # lazy: kept out of detcal-evaluate start-up (loads when the run reaches it)
    from detcal.pipeline.diagnostics_block import diagnostics_block

    t0 = time.perf_counter()
    out = diagnostics_block(spec, data, mr, feats, conf, loc, keep, kept)
    timing["diagnostics"] = time.perf_counter() - t0
    return out


def _warnings(
    conf: dict[str, ConfidenceBlock | Skipped], reg: RegressionBlock | Skipped, reg_expected: bool, no_pos: str | None
) -> list[str]:
    """The run's warnings: missing image sizes, skipped confidence thresholds, a skipped box-uncertainty block."""
    warn = [f"confidence at {lbl}: {blk.reason}" for lbl, blk in conf.items() if isinstance(blk, Skipped)]
    if no_pos:
        warn.insert(0, no_pos)
    if isinstance(reg, Skipped) and reg_expected:
        warn.append(f"regression: {reg.reason}")
    return warn


def _run_warnings(
    spec: EvaluationSpec,
    data: LoadedData,
    conf: dict[str, ConfidenceBlock | Skipped],
    reg: RegressionBlock | Skipped,
    reg_on: bool,
    no_pos: str | None,
) -> list[str]:
    """metrics.json ``warnings``: :func:`_warnings` (the box-uncertainty block expected when it is on and the
    detections carry uncertainty), then the metrics' own and :func:`few_images_warning`."""
    expected = reg_on and data.detections.uncertainty_kind is not None
    return _warnings(conf, reg, expected, no_pos) + _metric_warnings(conf, data) + few_images_warning(spec, data)


def _load(
    gt: EvaluationInput, results: ResultsInput, spec: EvaluationSpec, workdir: str | os.PathLike | None
) -> LoadedData:
    """The input as :class:`LoadedData`; under ``parallel.distributed``, this rank's shard of it."""
    shard = None
    if spec.parallel.distributed:
        shard = (distributed_rank(), distributed_world())
    return as_loaded(gt, results, workdir=workdir or ".", shard=shard)


def _data_record(data: LoadedData) -> dict[str, Any]:
    """metrics.json ``data``: the input's provenance and its counts."""
    ds, dets = data.dataset, data.detections
    return {
        **data.provenance,
        "counts": {
            "images": len(ds.images),
            "gt": len(ds.gt),
            "detections": len(dets),
            "categories": {str(k): v for k, v in ds.categories.items()},
            "uncertainty": dets.uncertainty_kind,
        },
    }


def _accuracy_and_oce(
    spec: EvaluationSpec, data: LoadedData, timing: dict[str, float]
) -> tuple[
    AccuracyBlock | Skipped,
    LocalisationBlock | Skipped,
    OCEBlock | Skipped,
    UQDetrBlock | Skipped,
    dict[str, np.ndarray] | None,
]:
    """The accuracy, localisation, OCE and uq-detr records and the per-image rows; their times in ``timing``."""
    t0 = time.perf_counter()
    # lazy: kept out of detcal-evaluate start-up (loads when the run reaches it)
    from detcal.pipeline.accuracy_block import accuracy_and_localisation

    acc, loc = accuracy_and_localisation(spec, data)
    timing["accuracy"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # lazy: kept out of detcal-evaluate start-up (loads when the run reaches it)
    from detcal.pipeline.oce_block import oce_block, per_image_rows, uq_detr_block

    oce_rec, uq_rec = oce_block(spec, data), uq_detr_block(spec, data)
    timing["oce"] = time.perf_counter() - t0
    return acc, loc, oce_rec, uq_rec, per_image_rows(oce_rec)


def evaluate(
    gt: EvaluationInput,
    results: ResultsInput = None,
    spec: EvaluationSpec | None = None,
    *,
    workdir: str | os.PathLike | None = None,
    progress: bool = False,
    figures: EarlyFigures | None = None,
) -> EvaluationResult:
    """Evaluate one detector's calibration.

    ``gt``/``results``: paths of a COCO instances and a COCO results file, a
    (:class:`~detcal.core.types.Dataset`, :class:`~detcal.core.types.Detections`) pair,
    or ``gt`` a :class:`DataSpec` / :class:`LoadedData` alone. ``spec``:
    :class:`EvaluationSpec` (defaults when None). ``workdir``: where a
    synthetic set is generated. ``figures``: a figure process waiting for its work
    (:class:`~detcal.pipeline.result.EarlyFigures`, as ``detcal-evaluate`` makes): the figures are sent to
    it once the confidence and box-uncertainty blocks are computed, and drawn while the other measures
    run (the result's ``write`` then waits for them). Returns an :class:`EvaluationResult`.
    """
    # lazy: kept out of detcal-evaluate start-up (loads when the run reaches it)
    from detcal.pipeline.result import EvaluationResult

    spec = spec or EvaluationSpec()
    timing: dict[str, float] = {}
    conf_on, reg_on = spec.confidence.enabled, spec.regression.enabled
    with Progress(progress, "detcal-evaluate", total=4) as bar:
        t0 = time.perf_counter()
        bar.step("load data")
        data = _load(gt, results, spec, workdir)
        timing["load"] = time.perf_counter() - t0
        if data.shard is None:
            require_detections(data)
        t0 = time.perf_counter()
        bar.step("match")
        mr, mr_reg, extra = match_data(data, spec, reg_on)
        require_detections(data)
        needs_pos = conf_on and (bool(spec.dece_binning.features) or bool(spec.confidence.maps))
        held, n_clipped, clipped, no_pos = _held_features(data, needs_pos)
        timing["match"] = time.perf_counter() - t0
        bar.total = 3 + (len(mr.iou_thresholds) - len(extra) if conf_on else 0)
        t0 = time.perf_counter()
        release_memory()  # the free pages left by loading and matching, before the per-threshold samples
        kept: dict[Any, np.ndarray] = {}  # the considered detections' cells (narrow integers), read by diagnostics
        conf, maps = confidence_blocks(spec, data, mr, held, bar, extra, no_pos, kept) if conf_on else ({}, {})
        del held  # made again after the accuracy and OCE stages (the same values): not held across their peaks
        timing["confidence"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        reg = _regression_block(spec, data, mr_reg, bar) if reg_on else Skipped("disabled")
        timing["regression"] = time.perf_counter() - t0
        if figures is not None:
            _early_figures(figures, spec, data, mr, extra, {"confidence": conf, "dece_maps": maps, "regression": reg})
        acc, loc, oce_rec, uq_rec, per_image = _accuracy_and_oce(spec, data, timing)
        feats_of = features_when_read(data)  # made where first read: after TIDE's scene is released
        cells: dict[str, GridCells] = {}  # the calibration split's D-ECE cells, read again by the worst detections
        diag, diag_cols = _diagnostics(spec, data, mr, feats_of, conf, loc, timing, cells, kept)
        del kept
    warn = _run_warnings(spec, data, conf, reg, reg_on, no_pos)
    record: dict[str, Any] = {
        "data": _data_record(data),
        "spec": spec,
        "matching": {**mr.describe(), "regression_only_thresholds": extra},
        "detections": _accounting(data, spec, mr),
        "features": {
            "names": list(FEATURES),
            "n_clipped": int(n_clipped),
            "note": "relative (cx/W, cy/H, w/W, h/H), values outside [0, 1] clipped",
        },
        "variants": _variants(spec, data),
        "headline": _headline(conf, reg),
        "confidence": conf,
        "dece_maps": maps,
        "regression": reg,
        "accuracy": acc,
        "localisation": loc,
        "oce": oce_rec,
        "uq_detr": uq_rec,
        "per_class": _per_class(spec, data, mr, extra, acc) if conf_on and spec.confidence.per_class else {},
        "worst_detections": _worst(spec, data, mr, feats_of, conf, no_pos, cells),
        "diagnostics": diag,
        "warnings": warn,
        "timing_s": {k: round(v, 3) for k, v in timing.items()},
    }
    res = EvaluationResult(
        record=record, data=data, match=mr, features=feats_of(), clipped=clipped, spec=spec, per_image=per_image
    )
    res.diagnostics_columns = diag_cols  # tide_error in detections.csv
    res.early_figures = figures
    return res
