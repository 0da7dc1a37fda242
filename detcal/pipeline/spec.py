"""Typed specifications of an evaluation and of a recalibration run.

These dataclasses are the one schema of detcal's configuration: the Hydra
apps register them in the ConfigStore (structured configs, so YAML files hold
only values), convert the composed config into them once at the app boundary,
and hand them to the Hydra-free API (:func:`detcal.evaluate`,
:func:`detcal.calibrate`). A notebook user builds them directly::

    spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5]))

Every spec validates itself on construction and raises :class:`ConfigError`
naming the dotted config key and what is allowed.

Names mean one thing each:

* ``confidence.iou_thresholds`` -- the thresholds whose labels the confidence
  metrics are computed at (``None``: every matching threshold);
* ``regression.sample_iou`` -- true positives at this IoU form the box-uncertainty sample;
* ``calibration.fit_iou`` -- the labels a confidence calibrator is fitted on;
* ``dece_binning`` -- the cells of ECE / D-ECE over (confidence, box features);
* ``sigma_binning`` -- the bins over sigma of ENCE and C-QCE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from detcal.binning.cells import grid_bytes
from detcal.binning.edges import BinGrid
from detcal.core.config import ConfigError, check_choice, check_int, check_prob
from detcal.data.specs import (
    BundledDataSpec,
    CocoDataSpec,
    DataSpec,
    KittiDataSpec,
    LvisDataSpec,
    OpenImagesDataSpec,
    SyntheticDataSpec,
    VocDataSpec,
    YoloDataSpec,
)
from detcal.metrics.confidence_suite import SuiteBinning
from detcal.utils import memory  # the module: tests stand in for available_bytes there

__all__ = [
    "FEATURES",
    "ReportSpec",
    "ConfigError",
    "DataSpec",
    "CocoDataSpec",
    "KittiDataSpec",
    "YoloDataSpec",
    "VocDataSpec",
    "LvisDataSpec",
    "OpenImagesDataSpec",
    "SyntheticDataSpec",
    "BundledDataSpec",
    "MatchingSpec",
    "DeceBinningSpec",
    "SigmaBinningSpec",
    "ConfidenceSpec",
    "RegressionSpec",
    "BootstrapSpec",
    "AccuracySpec",
    "LocalisationSpec",
    "OCESpec",
    "UqDetrSpec",
    "DiagnosticsSpec",
    "ParallelSpec",
    "EvaluationSpec",
    "SplitSpec",
    "CalibrationSpec",
]

FEATURES: tuple[str, ...] = ("cx", "cy", "w", "h")
"""Relative box features, the columns of :func:`detcal.core.boxes.relative_features`."""


def _features(key: str, names: Any) -> None:
    if not isinstance(names, (list, tuple)):
        raise ConfigError(key, f"must be a list of box features from {list(FEATURES)}, got {names!r}")
    bad = [n for n in names if n not in FEATURES]
    if bad:
        raise ConfigError(key, f"unknown box feature(s) {bad}; allowed: {list(FEATURES)}")


@dataclass
class MatchingSpec:
    """Box matching (docs/matching.md): ``mode`` exclusive (by descending
    score, pycocotools; with KITTI data the score-ordered KITTI variant), max
    (several detections may match one box) or kitti (the KITTI devkit's
    label-order walk) or netcal_example (netcal's detection example: each
    detection against the box of highest IoU of any class, matched when that
    IoU reaches the threshold and the classes agree; not one-to-one) or voc
    (the Pascal VOC devkit's rule: IoU > t with the best box of the class,
    difficult boxes ignored, :mod:`detcal.matching.voc`) or lvis (LVISEval's
    federated rules, with ``data=lvis``: :mod:`detcal.matching.lvis`) or
    openimages (the Open Images challenge's group-of and image-level-label
    rules, with ``data=openimages``: :mod:`detcal.matching.openimages`);
    ``iou_thresholds`` a list, or ``"kitti"`` for the
    devkit's per-class thresholds (Car 0.7, Pedestrian and Cyclist 0.5);
    ``gt_ignore``: a COCO ``ignore`` key is overwritten by ``iscrowd`` as in
    pycocotools 2.0.x (``pycocotools``) or either flag ignores a box
    (``ignore_or_crowd``)."""

    mode: str = "exclusive"  # exclusive | max | kitti | netcal_example | voc | lvis | openimages (docs/matching.md)
    # a list of IoU values in (0, 1], or kitti (the devkit's per-class thresholds)
    iou_thresholds: Any = field(default_factory=lambda: [0.5, 0.75])
    class_agnostic: bool = False  # match regardless of the category
    score_threshold: float = 0.0  # detections with a lower score are left out
    max_dets: int | None = 100  # per image, the highest-scoring ones (null: no cap)
    # a COCO 'ignore' key is overwritten by iscrowd (pycocotools 2.0.x); ignore_or_crowd: either flag
    gt_ignore: str = "pycocotools"

    def __post_init__(self) -> None:
        check_choice(
            "matching.mode", self.mode, ("exclusive", "max", "kitti", "netcal_example", "voc", "lvis", "openimages")
        )
        check_choice("matching.gt_ignore", self.gt_ignore, ("pycocotools", "ignore_or_crowd"))
        t = self.iou_thresholds
        if isinstance(t, (int, float)) and not isinstance(t, bool):  # one threshold: 0.5 reads as [0.5]
            t = [t]
        if isinstance(t, str):
            if t != "kitti":
                raise ConfigError("matching.iou_thresholds", f"a list of IoU values in (0, 1] or 'kitti', got {t!r}")
        else:
            if not isinstance(t, (list, tuple)) or not t:
                raise ConfigError("matching.iou_thresholds", f"a non-empty list of IoU values or 'kitti', got {t!r}")
            for v in t:
                check_prob("matching.iou_thresholds", v, open_lo=True)
            self.iou_thresholds = [float(v) for v in t]
        if self.max_dets is not None:
            check_int("matching.max_dets", self.max_dets, 1)

    def thresholds(self) -> list[float] | str:
        """The thresholds as :func:`detcal.matching.match` takes them."""
        return self.iou_thresholds if isinstance(self.iou_thresholds, str) else list(self.iou_thresholds)


@dataclass
class DeceBinningSpec:
    """Equal-width cells over (confidence, box features) for ECE / D-ECE
    (docs/metrics.md): ``ece_bins`` over confidence alone; ``bins`` per
    dimension of the D-ECE grid (one int or one per dimension, confidence
    first) over (confidence, *features*); cells with fewer than
    ``sample_threshold`` samples are dropped (``policy=drop``) or kept with gap
    0 (``policy=netcal``, netcal 1.4.0)."""

    ece_bins: int = 15  # ECE bins over [0, 1] (Guo et al. 2017)
    bins: Any = 5  # D-ECE bins per dimension, or one count per dimension (confidence first)
    features: list[str] = field(default_factory=lambda: list(FEATURES))  # box features of D-ECE
    sample_threshold: int = 8  # sparse-cell threshold: cells with fewer detections are sparse
    policy: str = "drop"  # drop: sparse cells leave N | netcal: they count with gap 0 (netcal 1.4.0)

    def __post_init__(self) -> None:
        check_int("dece_binning.ece_bins", self.ece_bins, 1)
        _features("dece_binning.features", self.features)
        self.features = list(self.features)
        check_int("dece_binning.sample_threshold", self.sample_threshold, 1)
        check_choice("dece_binning.policy", self.policy, ("drop", "netcal"))
        b = self.bins
        if isinstance(b, (list, tuple)):
            if len(b) != 1 + len(self.features):
                raise ConfigError(
                    "dece_binning.bins",
                    f"one bin count per dimension (confidence + "
                    f"{len(self.features)} features = {1 + len(self.features)}), got {list(b)}",
                )
            for v in b:
                check_int("dece_binning.bins", v, 1)
            self.bins = [int(v) for v in b]
        else:
            check_int("dece_binning.bins", b, 1)
        self._check_memory()

    def _check_memory(self) -> None:
        """The D-ECE grid's arrays estimated before anything is loaded (one group; per-class grids are
        checked again where they are allocated)."""

        dims = self.grid()
        n_cells = dims.n_cells
        need, have = grid_bytes(n_cells, 5), memory.available_bytes()
        if need > have:
            raise ConfigError(
                "dece_binning.bins",
                f"a D-ECE grid of {' x '.join(map(str, dims))} = {n_cells:,} cells needs about {memory.gib(need)} of "
                f"memory, more than the {memory.gib(have)} available: use fewer bins or fewer features",
            )

    def grid(self) -> BinGrid:
        """The D-ECE grid: one bin count per dimension (confidence, then :attr:`features`), normalised here
        once and passed down as it is (:class:`detcal.binning.BinGrid`)."""
        return BinGrid.of(self.bins, 1 + len(self.features))

    def suite_binning(self, edges: str | None = None) -> SuiteBinning:
        """The cells of the confidence suite (:func:`detcal.metrics.confidence_suite.suite`): the
        confidence-only grid of ``ece_bins``, the D-ECE :meth:`grid`, its sample threshold and policy, and
        the edge rule ``edges`` (``ConfidenceSpec.edges``)."""
        return SuiteBinning(
            confidence=BinGrid.of(self.ece_bins, 1),
            position=self.grid(),
            sample_threshold=self.sample_threshold,
            policy=self.policy,
            edges=edges,
        )


@dataclass
class SigmaBinningSpec:
    """Bins over the predicted sigma for ENCE (``scheme``, ``bins``; Levi et
    al. 2019 use 10 equal-count bins) and for C-QCE (``qce_scheme``,
    ``qce_bins``; netcal bins equal-width). UCE is always equal-width over sigma^2."""

    scheme: str = "equal_count"  # ENCE bins over sigma: equal_count (Levi et al. 2019) | equal_width (netcal)
    bins: int = 10  # ENCE bins
    qce_scheme: str = "equal_width"  # C-QCE bins over sigma: equal_width (netcal) | equal_count
    qce_bins: int = 10  # C-QCE bins

    def __post_init__(self) -> None:
        check_choice("sigma_binning.scheme", self.scheme, ("equal_count", "equal_width"))
        check_choice("sigma_binning.qce_scheme", self.qce_scheme, ("equal_count", "equal_width"))
        check_int("sigma_binning.bins", self.bins, 1)
        check_int("sigma_binning.qce_bins", self.qce_bins, 1)


@dataclass
class ConfidenceSpec:
    """Which confidence metrics run: at ``iou_thresholds`` (``None``: every
    threshold the user matched at), D-ECE heat ``maps`` over feature pairs, and
    the per-class ECE means when ``per_class``, with a per-class table and
    reliability diagrams of the ``per_class_top_n`` most frequent classes at
    the first threshold; ``log_counts``: log-scaled count histograms under the
    reliability diagrams. Source variants
    (docs/metrics.md): ``edges`` of the confidence bins (``None``: the
    sparse-cell policy's rule; ``guo``: Guo et al.'s ((m-1)/M, m/M]) and
    ``homogeneity_spread`` (``std``, or Thetis's ``variance``)."""

    enabled: bool = True
    iou_thresholds: list[float] | None = None  # null: every matching threshold; or a subset
    maps: list[list[str]] = field(default_factory=lambda: [["cx", "cy"], ["w", "h"]])  # D-ECE maps over these pairs
    per_class: bool = True  # per-class ECE means, a per-class table and reliability diagrams
    per_class_top_n: int = 9  # ... of the N most frequent classes
    log_counts: bool = False  # log-scaled count histograms under the reliability diagrams
    edges: str | None = None  # confidence-bin edges: null (the policy's), guo ((m-1)/M, m/M]), floor, netcal
    homogeneity_spread: str = "std"  # std, or variance (Thetis)

    def __post_init__(self) -> None:
        if self.edges is not None:
            check_choice("confidence.edges", self.edges, ("floor", "netcal", "guo"))
        check_choice("confidence.homogeneity_spread", self.homogeneity_spread, ("std", "variance"))
        if self.iou_thresholds is not None:
            for v in self.iou_thresholds:
                check_prob("confidence.iou_thresholds", v, open_lo=True)
            self.iou_thresholds = [float(v) for v in self.iou_thresholds]
        for pair in self.maps:
            _features("confidence.maps", pair)
            if len(pair) != 2:
                raise ConfigError("confidence.maps", f"each map is a pair of box features, got {list(pair)}")
        self.maps = [list(p) for p in self.maps]


@dataclass
class RegressionSpec:
    """Box-uncertainty metrics: the sample is the true positives at
    ``sample_iou``, in ``space`` (delta, box or pixel); C-QCE bins with fewer
    than ``qce_sample_threshold`` samples are dropped; ``quantile_levels``
    levels tau = 0.05 ... 0.95 for QCE and the pinball loss. Source variants:
    ``ll_fu_log_base`` (``e`` as in Lakara et al.'s text, ``10`` as in their
    code) and ``mwse_normalise`` (``retained``, or ``total`` N as their code).
    ``coverage_level``: the nominal level of the interval coverage metrics."""

    enabled: bool = True  # the box-uncertainty metrics
    space: str = "delta"  # delta | box | pixel
    sample_iou: float = 0.5  # true positives at this IoU form the box-uncertainty sample
    qce_sample_threshold: int = 1  # C-QCE bins with fewer samples are dropped
    quantile_levels: int = 19  # tau = 0.05, ..., 0.95
    log_plot: bool = False  # log-log RMSE vs RMV diagram
    ll_fu_log_base: str = "e"  # e (Lakara et al.'s text) or 10 (their code)
    mwse_normalise: str = "retained"  # retained count, or total N (Lakara et al.'s code)
    coverage_level: float = 0.9  # nominal level of the interval coverage metrics (docs/metrics.md#coverage)

    def __post_init__(self) -> None:
        check_choice("regression.ll_fu_log_base", self.ll_fu_log_base, ("e", "10"))
        check_choice("regression.mwse_normalise", self.mwse_normalise, ("retained", "total"))
        check_choice("regression.space", self.space, ("delta", "box", "pixel"))
        check_prob("regression.sample_iou", self.sample_iou, open_lo=True)
        check_int("regression.qce_sample_threshold", self.qce_sample_threshold, 1)
        check_int("regression.quantile_levels", self.quantile_levels, 1)
        check_prob("regression.coverage_level", self.coverage_level, open_lo=True, open_hi=True)


@dataclass
class ReportSpec:
    """report.html of a run (docs/report.md): ``enabled=false`` skips it. Thumbnails of the
    worst-calibrated detections come from ``data.image_dir`` when it is set."""

    enabled: bool = True  # write report.html


@dataclass
class BootstrapSpec:
    """Bootstrap over images for the intervals of the headline metrics
    (``n=0`` switches them off); ``method``: ``bca`` (bias-corrected and
    accelerated, jackknife over images; the default), ``bc`` (bias-corrected
    percentile) or ``percentile``. Every interval reports the bootstrap bias."""

    n: int = 200  # resamples over images; 0 switches the intervals off
    level: float = 0.95  # confidence level of the intervals
    seed: int = 0  # seed of the resampling
    method: str = "bca"  # bca (bias-corrected and accelerated) | bc | percentile; the bias is always reported

    def __post_init__(self) -> None:
        check_int("bootstrap.n", self.n, 0)
        check_choice("bootstrap.method", self.method, ("bca", "bc", "percentile"))
        check_prob("bootstrap.level", self.level, open_lo=True, open_hi=True)
        check_int("bootstrap.seed", self.seed, 0)


@dataclass
class AccuracySpec:
    """Accuracy beside calibration: COCO AP/AR from detcal's own matching (equal to pycocotools'
    summarize()), or KITTI AP (the devkit's) for KITTI data."""

    enabled: bool = True  # COCO AP/AR (KITTI, VOC, LVIS, Open Images AP for their data)


@dataclass
class LocalisationSpec:
    """Localisation-aware measures of Kuzucu et al. 2024 (docs/newest_measures.md): LRP with its
    components and LRP-optimal thresholds, LaECE (``laece_bins`` equal-width bins, closed on the
    ``closed`` side) and LaACE; ``tau``: the IoU a true positive needs (0, as the reference).
    ``pdq``: also the Probabilistic Detection Quality (Hall et al. 2020) from the detections' box
    covariances, or ``pdq_fixed_cov`` px^2 on each corner for detections without. ``pdq_variant``:
    ``pdq_evaluation`` (the reference implementation's conventions, what papers report) or
    ``detcal_continuous`` (detcal's earlier definition); ``pdq_gt_mask``: ``auto`` (the segmentation
    masks when the ground-truth file has them, else boxes), ``segmentation`` or ``box``. ``kde_ece``:
    also the KDE detection calibration error of Popordanoska et al. 2024 (binary link over IoU
    0.50:0.95 and IoU link at 0.5, their evaluation script's variant)."""

    enabled: bool = True  # LRP, LaECE and LaACE (Kuzucu et al. 2024)
    tau: float = 0.0  # the IoU a true positive needs (0, as the reference)
    laece_bins: int = 25  # equal-width confidence bins of LaECE / LaACE
    closed: str = "right"  # right | left: the closed side of each bin
    variant: str = "kuzucu2024"  # kuzucu2024 | fiveai
    pdq: bool = False  # also the Probabilistic Detection Quality (Hall et al. 2020)
    # px^2 on each corner for detections without covariances (null: those are refused)
    pdq_fixed_cov: float | None = None
    pdq_variant: str = "pdq_evaluation"  # pdq_evaluation (the reference's conventions) | detcal_continuous
    pdq_gt_mask: str = "auto"  # auto (segmentation when the ground truth has it) | segmentation | box
    kde_ece: bool = False  # also the KDE detection calibration error (Popordanoska et al. 2024)

    def __post_init__(self) -> None:
        check_prob("localisation.tau", self.tau)
        check_choice("localisation.pdq_variant", self.pdq_variant, ("pdq_evaluation", "detcal_continuous"))
        check_choice("localisation.pdq_gt_mask", self.pdq_gt_mask, ("auto", "segmentation", "box"))
        if self.pdq_fixed_cov is not None and not (
            isinstance(self.pdq_fixed_cov, (int, float))
            and math.isfinite(self.pdq_fixed_cov)
            and self.pdq_fixed_cov > 0
        ):
            raise ConfigError(
                "localisation.pdq_fixed_cov", f"must be a positive number of px^2, got {self.pdq_fixed_cov!r}"
            )
        check_int("localisation.laece_bins", self.laece_bins, 1)
        check_choice("localisation.closed", self.closed, ("right", "left"))
        check_choice("localisation.variant", self.variant, ("kuzucu2024", "fiveai"))


@dataclass
class OCESpec:
    """Object-level calibration (Park et al., TPAMI 2026; docs/newest_measures.md): OCE at the IoU
    ``iou_thresholds`` with every aggregation (``aggregation`` is the headline one), the Brier
    score ``brier`` (auto: exact multi-class when the results carry ``all_scores``), the objects of
    ``variant`` (detcal: crowd / ignored boxes are not objects; uq_detr: every box). ``reliability``:
    per-image contrastive confidence (kept by ``reliability_method`` at ``reliability_param``), its
    lambda fitted on a seeded half of the images to the per-image OCE and the correlation on the
    other half; ``per_image_csv`` writes the per-image scores (oce_per_image.csv)."""

    enabled: bool = True  # object-level calibration, Park et al. 2026 (docs/newest_measures.md)
    iou_thresholds: list[float] = field(default_factory=lambda: [0.5, 0.75])  # OCE at these IoU thresholds
    aggregation: str = "mean"  # mean | max_iou | iou_weighted (the headline one; all three are recorded)
    brier: str = "auto"  # auto | multiclass (needs all_scores in the results) | binary
    variant: str = "detcal"  # detcal (crowd / ignored boxes are not objects) | uq_detr (every box)
    reliability: bool = True  # per-image contrastive confidence vs minus the per-image OCE
    reliability_method: str = "threshold"  # threshold | topk | nms: which predictions are kept
    reliability_param: float = 0.3  # score threshold, k, or NMS IoU
    reliability_seed: int = 0  # the seeded half of the images that fits lambda
    per_image_csv: bool = False  # write oce_per_image.csv

    def __post_init__(self) -> None:
        if not self.iou_thresholds:
            raise ConfigError("oce.iou_thresholds", "needs at least one IoU threshold")
        for t in self.iou_thresholds:
            check_prob("oce.iou_thresholds", t, open_lo=True)
        check_choice("oce.aggregation", self.aggregation, ("mean", "max_iou", "iou_weighted"))
        check_choice("oce.brier", self.brier, ("auto", "multiclass", "binary"))
        check_choice("oce.variant", self.variant, ("detcal", "uq_detr"))
        check_choice("oce.reliability_method", self.reliability_method, ("threshold", "topk", "nms"))
        if not (
            isinstance(self.reliability_param, (int, float))
            and math.isfinite(self.reliability_param)
            and self.reliability_param >= 0
        ):
            raise ConfigError("oce.reliability_param", f"must be a number >= 0, got {self.reliability_param!r}")
        check_int("oce.reliability_seed", self.reliability_seed, 0)


@dataclass
class UqDetrSpec:
    """D-ECE, LaECE and LRP with uq-detr 0.1.1's conventions (docs/newest_measures.md), recorded
    under ``uq_detr`` when ``enabled``: TP IoU ``tau`` (> 0), ``bins`` over each sample's score
    range, ``tp_criterion`` greedy (>= tau, one detection per box) or independent (> tau),
    crowd boxes as plain objects (``crowd=object``) or removed (``drop``)."""

    enabled: bool = False  # D-ECE, LaECE, LRP with uq-detr 0.1.1's conventions (docs/newest_measures.md)
    tau: float = 0.5  # TP IoU (> 0)
    bins: int = 25  # equal-width bins over each sample's score range
    tp_criterion: str = "greedy"  # greedy (>= tau, one detection per box) | independent (> tau)
    crowd: str = "object"  # object (crowd boxes are plain objects, as uq-detr) | drop

    def __post_init__(self) -> None:
        check_prob("uq_detr.tau", self.tau, open_lo=True, open_hi=True)
        check_int("uq_detr.bins", self.bins, 1)
        check_choice("uq_detr.tp_criterion", self.tp_criterion, ("greedy", "independent"))
        check_choice("uq_detr.crowd", self.crowd, ("object", "drop"))


@dataclass
class DiagnosticsSpec:
    """Why a detector is miscalibrated (docs/metrics.md#diagnostics), for COCO-style data: ``tide``: TIDE's
    error types (Bolya et al. 2020, equal to tidecv 1.0.1; foreground IoU ``tide_foreground``, background
    ``tide_background``), each detection's type in detections.csv and the calibration error split by type;
    ``confusion``: the class-agnostic confusion matrix at IoU ``confusion_iou`` of the detections with
    ``score >= confusion_score`` and the likely label errors (``label_error_score``, ``label_error_iou``,
    the ``label_error_top`` of each list); ``operating_points``: precision, recall and F1 against the score
    threshold, F1- and LRP-optimal thresholds and the ECE of what each keeps."""

    tide: bool = True  # TIDE error types (equal to tidecv 1.0.1), per detection in detections.csv, ECE/D-ECE by type
    tide_foreground: float = 0.5  # TIDE's IoU of a true positive
    tide_background: float = 0.1  # ... and below which a detection is background
    confusion: bool = True  # class-agnostic confusion matrix and likely label errors
    confusion_iou: float = 0.5  # IoU of a confusion-matrix match
    confusion_score: float = 0.5  # detections with score >= this enter the confusion matrix
    label_error_score: float = 0.7  # likely label errors: detections at least this confident ...
    label_error_iou: float = 0.8  # ... and, for a class disagreement, at least this IoU with the box
    label_error_top: int = 20  # listed per kind
    operating_points: bool = True  # precision / recall / F1 vs score threshold, F1- and LRP-optimal thresholds

    def __post_init__(self) -> None:
        check_prob("diagnostics.tide_foreground", self.tide_foreground, open_lo=True)
        check_prob("diagnostics.tide_background", self.tide_background)
        if self.tide_background > self.tide_foreground:
            raise ConfigError("diagnostics.tide_background", "must not exceed diagnostics.tide_foreground")
        check_prob("diagnostics.confusion_iou", self.confusion_iou, open_lo=True)
        check_prob("diagnostics.confusion_score", self.confusion_score)
        check_prob("diagnostics.label_error_score", self.label_error_score)
        check_prob("diagnostics.label_error_iou", self.label_error_iou, open_lo=True)
        check_int("diagnostics.label_error_top", self.label_error_top, 0)


@dataclass
class ParallelSpec:
    """How the work is spread; never what is computed (the numbers are bitwise those of one process).

    ``workers``: processes on this machine (image shards are matched, IoU thresholds evaluated, in
    parallel). ``distributed``: run under ``torchrun`` (torch.distributed, gloo or nccl): each rank
    reads (COCO results) and matches its shard of the images and evaluates its share of the
    thresholds; the pieces are gathered on every rank and rank 0 writes the report.
    ``shard_size``: in one process, detections are matched in image shards of about this many
    (bounding the matcher's memory, docs/scale.md); 0: all at once."""

    workers: int = 1  # processes on this machine (image shards matched, thresholds evaluated in parallel)
    distributed: bool = False  # under torchrun: each rank reads and matches its image shard of COCO results
    shard_size: int = 1_000_000  # detections per matching shard in one process (bounded memory); 0: all at once

    def __post_init__(self) -> None:
        check_int("parallel.workers", self.workers, 1)
        check_int("parallel.shard_size", self.shard_size, 0)


@dataclass
class EvaluationSpec:
    """Everything that determines the numbers of an evaluation (and ``parallel``, which does not)."""

    matching: MatchingSpec = field(default_factory=MatchingSpec)
    dece_binning: DeceBinningSpec = field(default_factory=DeceBinningSpec)
    sigma_binning: SigmaBinningSpec = field(default_factory=SigmaBinningSpec)
    confidence: ConfidenceSpec = field(default_factory=ConfidenceSpec)
    regression: RegressionSpec = field(default_factory=RegressionSpec)
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    accuracy: AccuracySpec = field(default_factory=AccuracySpec)
    localisation: LocalisationSpec = field(default_factory=LocalisationSpec)
    oce: OCESpec = field(default_factory=OCESpec)
    uq_detr: UqDetrSpec = field(default_factory=UqDetrSpec)
    diagnostics: DiagnosticsSpec = field(default_factory=DiagnosticsSpec)
    parallel: ParallelSpec = field(default_factory=ParallelSpec)


@dataclass
class SplitSpec:
    """Seeded split of one dataset's images into calibration and evaluation parts."""

    calibration_fraction: float = 0.5  # share of the images that fit the calibrators (when eval_data is not given)
    seed: int = 0  # seed of the split by image

    def __post_init__(self) -> None:
        check_prob("calibration.split.calibration_fraction", self.calibration_fraction, open_lo=True, open_hi=True)
        check_int("calibration.split.seed", self.seed, 0)


@dataclass
class CalibrationSpec:
    """How calibrators are fitted: the confidence calibrator on the non-ignored
    detections at ``fit_iou`` (``None``: the first matching threshold), with the
    relative box ``features`` for calibrators that use them; the box-uncertainty
    calibrator on the regression sample (``regression.sample_iou``).
    ``in_sample`` also evaluates on the calibration part (labelled optimistic)."""

    fit_iou: float | None = 0.5  # the confidence calibrator is fitted on the labels at this IoU (null: first threshold)
    # relative box features for calibrators that use them ([] = none)
    features: list[str] = field(default_factory=lambda: list(FEATURES))
    in_sample: bool = False  # also evaluate on the calibration part itself (labelled in-sample)
    # used when eval_data is not given: one dataset split by image (seeded)
    split: SplitSpec = field(default_factory=SplitSpec)

    def __post_init__(self) -> None:
        if self.fit_iou is not None:
            check_prob("calibration.fit_iou", self.fit_iou, open_lo=True)
        _features("calibration.features", self.features)
        self.features = list(self.features)
