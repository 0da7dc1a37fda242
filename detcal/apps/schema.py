"""The config schema of each command: typed dataclasses built from the specs
of :mod:`detcal.pipeline.spec`, registered in Hydra's ConfigStore by
:mod:`detcal.apps._hydra`. The YAML files under configs/ hold values only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from detcal.pipeline.spec import (
    AccuracySpec,
    BootstrapSpec,
    CalibrationSpec,
    ConfidenceSpec,
    DataSpec,
    DeceBinningSpec,
    DiagnosticsSpec,
    EvaluationSpec,
    LocalisationSpec,
    MatchingSpec,
    OCESpec,
    ParallelSpec,
    RegressionSpec,
    ReportSpec,
    SigmaBinningSpec,
    UqDetrSpec,
)

__all__ = ["OutputSpec", "EvaluateApp", "CalibrateApp"]


@dataclass
class _EvaluationFields:
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

    def evaluation(self) -> EvaluationSpec:
        """The :class:`EvaluationSpec` these fields describe."""
        return EvaluationSpec(
            matching=self.matching,
            dece_binning=self.dece_binning,
            sigma_binning=self.sigma_binning,
            confidence=self.confidence,
            regression=self.regression,
            bootstrap=self.bootstrap,
            accuracy=self.accuracy,
            localisation=self.localisation,
            oce=self.oce,
            uq_detr=self.uq_detr,
            diagnostics=self.diagnostics,
            parallel=self.parallel,
        )


@dataclass
class OutputSpec:
    """What a command writes beside metrics.json and summary.md."""

    plots: bool = True  # PNG diagrams
    detections_csv: bool = True  # one row per detection (matched flags, IoU, features)
    detections_format: str = "csv"  # csv | parquet (columnar, pyarrow)

    def __post_init__(self) -> None:
        from detcal.pipeline.spec import _choice

        _choice("output.detections_format", self.detections_format, ("csv", "parquet"))

    print_summary: bool = True  # print summary.md at the end
    progress: bool = True  # progress bar on a terminal


@dataclass
class EvaluateApp(_EvaluationFields):
    """``detcal-evaluate``: one detector's calibration."""

    name: str = "evaluate"
    data: DataSpec = field(default_factory=DataSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)


@dataclass
class CalibrateApp(_EvaluationFields):
    """``detcal-calibrate``: fit calibrators on one part, evaluate before/after on another."""

    name: str = "calibrate"
    data: DataSpec = field(default_factory=DataSpec)
    eval_data: DataSpec | None = None
    calibrator: Any = None
    regression_calibrator: Any = None
    calibration: CalibrationSpec = field(default_factory=CalibrationSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)


@dataclass
class CompareApp:
    """``detcal-compare``: several detectors on one ground truth."""

    name: str = "compare"
    data: DataSpec = field(default_factory=lambda: DataSpec(source="bundled"))
    detectors: list[str] = field(default_factory=list)  # bundled data: which detectors ([] = all)
    results: dict[str, str] = field(default_factory=dict)  # data=coco: name -> COCO results file
    baseline: str | None = None
    iou: float = 0.5
    matching: str = "exclusive"
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    dece_binning: DeceBinningSpec = field(default_factory=DeceBinningSpec)  # the grids of ECE and D-ECE
    top_n_classes: int = 10
    ap_bootstrap: int = 12  # paired AP/AR-difference resamples (one COCO evaluation each; docs/metrics.md)
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)

    def __post_init__(self) -> None:
        from detcal.pipeline.spec import _choice, _int, _prob

        _prob("iou", self.iou, open_lo=True)
        _choice("matching", self.matching, ("exclusive", "netcal_example"))
        _int("ap_bootstrap", self.ap_bootstrap, 0)


@dataclass
class StudyApp:
    """``detcal-study``: a published experiment reproduced on bundled data (docs/real_detectors.md,
    docs/newest_measures.md, docs/metrics.md)."""

    name: str = "study"
    study: str = "kueppers2020"  # kueppers2020 | kuzucu2024 | lakara_retention
    detectors: list[str] = field(default_factory=list)  # bundled detectors ([] = all four)
    n_splits: int = 20  # kueppers2020: seeded 70/30 calibration/test splits over images
    fraction: float = 0.5  # kuzucu2024: share of the images that fit the calibrators
    source: str = "code"  # lakara_retention: code | paper variants
    n_images: int = 500  # lakara_retention: synthetic detector's images
    seed: int = 0
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)

    def __post_init__(self) -> None:
        from detcal.pipeline.spec import _choice, _int, _prob

        _choice("study", self.study, ("kueppers2020", "kuzucu2024", "lakara_retention"))
        _int("n_splits", self.n_splits, 1)
        _prob("fraction", self.fraction, open_lo=True, open_hi=True)
        _int("seed", self.seed, 0)
