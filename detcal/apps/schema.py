"""The config schema of each command: typed dataclasses built from the specs
of :mod:`detcal.pipeline.spec` (each field declared once there, with its default),
registered in Hydra's ConfigStore by :mod:`detcal.apps._hydra`. The YAML files
under configs/ hold only the values that differ from these defaults (a test
keeps it so); ``--cfg job`` shows the whole resolved config. ``data`` is filled
by the data group, whose option names the source's own spec class
(:mod:`detcal.data.specs`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from detcal.core.config import REQUIRED, check_choice, check_int, check_prob
from detcal.pipeline.spec import (
    BootstrapSpec,
    CalibrationSpec,
    DataSpec,
    DeceBinningSpec,
    EvaluationSpec,
    ReportSpec,
)

__all__ = ["OutputSpec", "EvaluateApp", "CalibrateApp"]


@dataclass
class _EvaluationApp(EvaluationSpec):
    """An app whose config holds every key of :class:`EvaluationSpec` at its top level (``matching.*``,
    ``dece_binning.*``, ...), declared there once."""

    def evaluation(self) -> EvaluationSpec:
        """The :class:`EvaluationSpec` these fields describe."""
        return EvaluationSpec(**{f.name: getattr(self, f.name) for f in dataclasses.fields(EvaluationSpec)})


@dataclass
class OutputSpec:
    """What a command writes beside metrics.json and summary.md."""

    plots: bool = True  # PNG diagrams
    detections_csv: bool = True  # one row per detection (matched flags, IoU, features)
    detections_format: str = "csv"  # csv | parquet (columnar, pyarrow)
    print_summary: bool = True  # print summary.md at the end
    progress: bool = True  # progress bar on a terminal

    def __post_init__(self) -> None:
        check_choice("output.detections_format", self.detections_format, ("csv", "parquet"))


@dataclass
class EvaluateApp(_EvaluationApp):
    """``detcal-evaluate``: one detector's calibration."""

    name: str = "evaluate"  # names the run/sweep directories
    data: DataSpec = REQUIRED  # the data group: data=synthetic | coco | kitti | ... (configs/data/)
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)


@dataclass
class CalibrateApp(_EvaluationApp):
    """``detcal-calibrate``: fit calibrators on one part, evaluate before/after on another."""

    name: str = "calibrate"  # names the run/sweep directories
    data: DataSpec = REQUIRED  # the data group (configs/data/); split into calibration / evaluation parts
    eval_data: DataSpec | None = None  # data@eval_data=<name>: calibrate on data, evaluate on eval_data
    calibrator: Any = None  # confidence calibrator (configs/calibrator/)
    regression_calibrator: Any = None  # box-uncertainty calibrator (calibrator@regression_calibrator=<name>)
    calibration: CalibrationSpec = field(default_factory=CalibrationSpec)
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)


@dataclass
class CompareApp:
    """``detcal-compare``: several detectors on one ground truth."""

    name: str = "compare"  # names the run/sweep directories
    data: DataSpec = REQUIRED  # data=coco_tfzoo | coco_mini79 (bundled) | coco (with results)
    detectors: list[str] = field(default_factory=list)  # bundled data: which detectors ([] = all four)
    results: dict[str, str] = field(default_factory=dict)  # data=coco: name -> COCO results file
    baseline: str | None = None  # differences are taken against this detector (null: the first)
    iou: float = 0.5  # the calibration sample: detections matched at this IoU
    matching: str = "exclusive"  # exclusive (pycocotools) | netcal_example (netcal's example matching)
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    dece_binning: DeceBinningSpec = field(default_factory=DeceBinningSpec)  # the grids of ECE and D-ECE
    top_n_classes: int = 10  # per-class reliability diagrams for the N most frequent classes
    ap_bootstrap: int = 12  # paired AP/AR-difference resamples, one COCO evaluation each (0: none; docs/metrics.md)
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)

    def __post_init__(self) -> None:
        check_prob("iou", self.iou, open_lo=True)
        check_choice("matching", self.matching, ("exclusive", "netcal_example"))
        check_int("ap_bootstrap", self.ap_bootstrap, 0)


@dataclass
class StudyApp:
    """``detcal-study``: a published experiment reproduced on bundled data (docs/real_detectors.md,
    docs/newest_measures.md, docs/metrics.md)."""

    name: str = "study"  # names the run/sweep directories
    study: str = "kueppers2020"  # kueppers2020 | kuzucu2024 | lakara_retention
    detectors: list[str] = field(default_factory=list)  # bundled detectors ([] = all four)
    n_splits: int = 20  # kueppers2020: seeded 70/30 calibration/test splits over images
    fraction: float = 0.5  # kuzucu2024: share of the images that fit the calibrators
    source: str = "code"  # lakara_retention: code | paper (the authors' code or the paper's text)
    n_images: int = 500  # lakara_retention: images of the synthetic detector
    seed: int = 0  # seed of the study's splits and samples
    output: OutputSpec = field(default_factory=OutputSpec)
    report: ReportSpec = field(default_factory=ReportSpec)

    def __post_init__(self) -> None:
        check_choice("study", self.study, ("kueppers2020", "kuzucu2024", "lakara_retention"))
        check_int("n_splits", self.n_splits, 1)
        check_prob("fraction", self.fraction, open_lo=True, open_hi=True)
        check_int("seed", self.seed, 0)
