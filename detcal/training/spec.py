"""Typed specification of the main job (``detcal-main``): the R-FCN pipeline of Levi et al. 2019.

These dataclasses are the schema of ``configs/main.yaml`` (the app registers
:class:`MainApp` in Hydra's ConfigStore) and the input of the Hydra-free
pipeline :func:`detcal.training.job.run_main_job`. Every spec validates itself
on construction and raises :class:`detcal.pipeline.spec.ConfigError` naming the
dotted config key (``stage1.lr: must be > 0, got -1``).

Types are OmegaConf-compatible (int, float, bool, str, Optional[...],
list[...], dict[str, Any], nested dataclasses). Nothing here imports torch.

The model is described by :class:`ModelSpec` without a ``_target_``: its fields
are the keyword arguments of :func:`detcal.models.rfcn.build_rfcn` that the
config chooses; the label map (``num_classes``, ``category_ids``) comes from
the training set, so the builder is fixed and a config cannot name an
arbitrary callable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from detcal.core.config import REQUIRED, ConfigError, check_choice, check_int, check_number
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, ReportSpec

__all__ = [
    "ModelSpec",
    "TrainerSpec",
    "StageSpec",
    "SplitsSpec",
    "TrainDataSpec",
    "PredictSpec",
    "MainCalibrationSpec",
    "MainOutputSpec",
    "Table1Spec",
    "DryRunSpec",
    "MainJobSpec",
    "MainApp",
    "stage1_defaults",
    "stage2_defaults",
]


@dataclass
class ModelSpec:
    """The R-FCN (:func:`detcal.models.rfcn.build_rfcn` keyword arguments; configs/model/*.yaml).

    ``backbone``: tiny | resnet50 | resnet101; ``k`` the position-sensitive
    grid; ``backbone_weights`` the LOCAL path of a torchvision state dict
    (None: random initialisation); ``norm`` bn | gn | none; ``min_size`` /
    ``max_size`` the resize bounds (None: the backbone's defaults).
    """

    backbone: str = "tiny"  # tiny | resnet50 | resnet101
    k: int = 3  # position-sensitive grid k x k
    # LOCAL path of a torchvision state dict (null: random initialisation; detcal never downloads)
    backbone_weights: str | None = None
    norm: str = "bn"  # bn | gn | none
    min_size: int | None = None  # shorter side in px (null: the backbone's default, 120 / 400 for tiny)
    max_size: int | None = None  # longer side bound in px (null: the backbone's default)
    rpn_post_nms_top_n_train: int | None = 150  # RPN proposals kept after NMS in training
    roi_batch_size_per_image: int = 64  # sampled RoIs per image in training
    stage2_positives_per_image: int | None = None  # stage 2: positive RoIs per image (null: all)
    box_score_thresh: float = 0.05  # detections with a lower score are dropped at inference
    box_nms_thresh: float = 0.3  # per-class NMS IoU at inference
    box_detections_per_img: int = 100  # detections kept per image at inference

    def __post_init__(self) -> None:
        check_choice("model.backbone", self.backbone, ("tiny", "resnet50", "resnet101"))
        check_choice("model.norm", self.norm, ("bn", "gn", "none"))
        check_int("model.k", self.k, 1)
        for name in ("min_size", "max_size", "rpn_post_nms_top_n_train", "stage2_positives_per_image"):
            v = getattr(self, name)
            if v is not None:
                check_int(f"model.{name}", v, 1)
        check_int("model.roi_batch_size_per_image", self.roi_batch_size_per_image, 1)
        check_int("model.box_detections_per_img", self.box_detections_per_img, 1)
        check_number("model.box_score_thresh", self.box_score_thresh, lo=0.0)
        check_number("model.box_nms_thresh", self.box_nms_thresh, positive=True)

    def build_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``build_rfcn`` (besides ``num_classes`` and ``category_ids``)."""
        return asdict(self)


@dataclass
class TrainerSpec:
    """Where and how stages 1-2 run (configs/trainer/*.yaml): ``kind`` single (this process) or ddp
    (torchrun subprocesses, ``nproc`` of them, ``backend`` None: nccl with CUDA, gloo on CPU)."""

    kind: str = "single"  # single (this process) | ddp (torchrun subprocesses)
    device: str = "cpu"  # cpu | cuda[:N]
    threads: int | None = None  # torch.set_num_threads (null: torch's default)
    nproc: int = 1  # processes (GPUs) per node (trainer=ddp only)
    backend: str | None = None  # process-group backend (ddp; null: nccl with CUDA, gloo on CPU)
    num_workers: int = 0  # DataLoader workers (0: images load in the main process)
    cache_images: bool = True  # keep decoded images in memory during training
    deterministic: bool = False  # torch.use_deterministic_algorithms

    def __post_init__(self) -> None:
        check_choice("trainer.kind", self.kind, ("single", "ddp"))
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError("trainer.device", f"must be cpu or cuda[:N], got {self.device!r}")
        if self.threads is not None:
            check_int("trainer.threads", self.threads, 1)
        check_int("trainer.nproc", self.nproc, 1)
        if self.backend is not None:
            check_choice("trainer.backend", self.backend, ("nccl", "gloo"))
            if self.backend == "nccl" and not self.device.startswith("cuda"):
                raise ConfigError("trainer.backend", "nccl needs trainer.device=cuda (use gloo on the CPU)")
        check_int("trainer.num_workers", self.num_workers, 0)


@dataclass
class StageSpec:
    """One SGD training stage: ``stage`` 1 (detector, uncertainty branch frozen) or 2 (uncertainty
    branch only, Gaussian NLL). Learning rate at iteration i: ``lr * warmup(i) * lr_gamma ** #{s in
    lr_steps: s <= i}`` (:func:`detcal.training.trainer.learning_rate`)."""

    stage: int = 1  # 1 (detector, uncertainty branch frozen) | 2 (uncertainty branch only, Gaussian NLL)
    iterations: int = 20000  # SGD iterations
    batch_size: int = 4  # images per iteration (all processes together)
    lr: float = 0.02  # learning rate
    momentum: float = 0.9  # SGD momentum
    weight_decay: float = 0.0001  # L2 weight decay
    warmup_iters: int = 200  # linear warm-up iterations
    lr_steps: list[int] = field(default_factory=list)  # iterations at which the learning rate is multiplied by lr_gamma
    lr_gamma: float = 0.1  # the step factor
    max_grad_norm: float | None = 10.0  # gradient-norm clipping (null: none)
    hflip: bool = False  # random horizontal flips
    seed: int = 0  # seed of the stage (sampling, initialisation)
    checkpoint_every: int = 500  # iterations between checkpoints
    log_every: int = 20  # iterations between log lines

    def __post_init__(self) -> None:
        if self.stage not in (1, 2) or isinstance(self.stage, bool):
            raise ConfigError("stage.stage", f"must be 1 or 2, got {self.stage!r}")
        p = f"stage{self.stage}"
        for name in ("iterations", "batch_size", "checkpoint_every", "log_every"):
            check_int(f"{p}.{name}", getattr(self, name), 1)
        check_int(f"{p}.warmup_iters", self.warmup_iters, 0)
        check_int(f"{p}.seed", self.seed, 0)
        check_number(f"{p}.lr", self.lr, positive=True)
        check_number(f"{p}.momentum", self.momentum, lo=0.0)
        check_number(f"{p}.weight_decay", self.weight_decay, lo=0.0)
        check_number(f"{p}.lr_gamma", self.lr_gamma, positive=True)
        if self.max_grad_norm is not None:
            check_number(f"{p}.max_grad_norm", self.max_grad_norm, positive=True)
        if not isinstance(self.lr_steps, (list, tuple)):
            raise ConfigError(f"{p}.lr_steps", f"must be a list of iterations, got {self.lr_steps!r}")
        for s in self.lr_steps:
            check_int(f"{p}.lr_steps", s, 1)
        self.lr_steps = [int(s) for s in self.lr_steps]
        if self.lr_steps != sorted(self.lr_steps):
            raise ConfigError(f"{p}.lr_steps", f"must be increasing, got {self.lr_steps}")


def stage1_defaults() -> StageSpec:
    """Stage 1 of configs/main.yaml."""
    return StageSpec(stage=1)


def stage2_defaults() -> StageSpec:
    """Stage 2 of configs/main.yaml (Levi et al. App. A.2: 1K iterations, 6 images, SGD lr 0.001, momentum 0.9)."""
    return StageSpec(
        stage=2,
        iterations=1000,
        batch_size=6,
        lr=0.001,
        momentum=0.9,
        weight_decay=0.0,
        warmup_iters=0,
        max_grad_norm=None,
        seed=1,
        checkpoint_every=200,
    )


@dataclass
class SplitsSpec:
    """The image sets. ``data.source=synthetic``: three generated sets of ``*_images`` scenes with
    disjoint ``*_seed``; ``kitti`` / ``coco``: the data's labelled images split into recal / val by
    :func:`detcal.data.kitti.split_frames` (``val_size`` a count or a fraction, ``split_seed``,
    ``max_images`` the first N sorted images; ``image_dir`` the image folder of a COCO ``data.gt``)."""

    # data=synthetic: scenes of the training set (160 x 120, KITTI classes Car/Pedestrian/Cyclist)
    train_images: int = 2000
    train_seed: int = 1  # ... and its seed (the three seeds must differ: disjoint scenes)
    recal_images: int = 1000  # data=synthetic: scenes of the recalibration split
    recal_seed: int = 2  # ... and its seed
    val_images: int = 1000  # data=synthetic: scenes of the validation split
    val_seed: int = 3  # ... and its seed
    # data=kitti | coco: count or fraction of the images that go to val (Levi et al.: ~6K recal / ~1.5K val)
    val_size: float = 0.2
    split_seed: int = 0  # data=kitti | coco: seed of the recal / val split
    max_images: int | None = None  # data=kitti | coco: keep only the first N images (sorted by id) before splitting
    image_dir: str | None = None  # data=coco: directory of the images of data.gt (data=kitti uses data.image_dir)

    def __post_init__(self) -> None:
        for name in ("train", "recal", "val"):
            check_int(f"splits.{name}_images", getattr(self, f"{name}_images"), 1)
            check_int(f"splits.{name}_seed", getattr(self, f"{name}_seed"), 0)
        check_number("splits.val_size", self.val_size, positive=True)
        check_int("splits.split_seed", self.split_seed, 0)
        if self.max_images is not None:
            check_int("splits.max_images", self.max_images, 1)


@dataclass
class TrainDataSpec:
    """The stage 1/2 training set: ``source`` synthetic (``splits.train_*``) or coco (``instances`` +
    ``image_dir``, optionally remapped by the ``class_map`` YAML and cut to ``max_images``);
    ``categories`` the training category ids after remapping (None: every trainable category)."""

    source: str = "synthetic"  # synthetic (splits.train_*) | coco
    instances: str | None = None  # source=coco: COCO instances JSON
    image_dir: str | None = None  # source=coco: its image directory
    class_map: str | None = None  # class-map YAML (configs/classmap/...): remap COCO -> KITTI, drop unmapped classes
    max_images: int | None = None  # keep the first N images (sorted by id)
    categories: list[int] | None = None  # training category ids (after remapping); null: every trainable category

    def __post_init__(self) -> None:
        check_choice("train_data.source", self.source, ("synthetic", "coco"))
        if self.max_images is not None:
            check_int("train_data.max_images", self.max_images, 1)
        if self.categories is not None:
            for c in self.categories:
                check_int("train_data.categories", c)
            self.categories = [int(c) for c in self.categories]


@dataclass
class PredictSpec:
    """Inference on recal and val: ``batch_size`` images per forward pass; a detection is kept when
    its score is > ``score_threshold``."""

    batch_size: int = 4  # images per forward pass
    score_threshold: float = 0.05  # a detection is kept when its score is > this (recorded in the results)

    def __post_init__(self) -> None:
        check_int("predict.batch_size", self.batch_size, 1)
        check_number("predict.score_threshold", self.score_threshold, lo=0.0)
        if not self.score_threshold < 1:
            raise ConfigError("predict.score_threshold", f"must be in [0, 1), got {self.score_threshold}")


@dataclass
class MainCalibrationSpec:
    """Stage 3: the regression calibrators (names of configs/calibrator/*.yaml, e.g. ``std_scaling``,
    ``kuleshov_isotonic``), fitted on the recal true positives at ``iou_threshold``."""

    iou_threshold: float = 0.5  # regression sample: true positives at this IoU (Levi et al.)
    # names of configs/calibrator/: std_scaling (Levi et al. Eq. 12), kuleshov_isotonic (Kuleshov et al. 2018)
    methods: list[str] = field(default_factory=lambda: ["std_scaling", "kuleshov_isotonic"])

    def __post_init__(self) -> None:
        check_number("calibration.iou_threshold", self.iou_threshold, positive=True)
        if self.iou_threshold > 1:
            raise ConfigError("calibration.iou_threshold", f"must be in (0, 1], got {self.iou_threshold}")
        if not isinstance(self.methods, (list, tuple)) or not all(isinstance(m, str) and m for m in self.methods):
            raise ConfigError("calibration.methods", f"must be a list of calibrator names, got {self.methods!r}")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError("calibration.methods", f"names must be unique, got {list(self.methods)}")
        if "before" in self.methods:
            raise ConfigError("calibration.methods", "'before' names the uncalibrated variant")
        self.methods = list(self.methods)


@dataclass
class MainOutputSpec:
    """What the main job writes besides table1.json / table1.md."""

    plots: bool = True  # PNGs of every evaluation and the reliability diagrams
    print_summary: bool = False  # print each evaluation's summary.md (the Table 1 analogue is printed anyway)


def _table1_bootstrap() -> BootstrapSpec:
    return BootstrapSpec(n=1000)


@dataclass
class Table1Spec:
    """The Table 1 analogue's intervals: the change of each coordinate's val ENCE (and C_v) after minus
    before calibration, paired bootstrap over the val images with ``bootstrap`` (n, level, seed, method;
    the evaluation's interval method, BCa by default; ``n=0`` leaves the intervals out)."""

    # paired bootstrap over val images (n=0: no intervals)
    bootstrap: BootstrapSpec = field(default_factory=_table1_bootstrap)


@dataclass
class DryRunSpec:
    """``dry_run.enabled``: instead of the whole job, check in a minute that a full run would work: the
    splits load, the model builds, one SGD step of each stage runs on the first training batch, and a
    prediction runs on ``images`` recal and val images whose results are written where the full run
    writes them (dry_run.json says what was checked; nothing is trained or reused)."""

    enabled: bool = False  # load, build, one SGD step per stage, predict `images` recal/val images, in a minute
    images: int = 4  # recal and val images predicted

    def __post_init__(self) -> None:
        check_int("dry_run.images", self.images, 1)


@dataclass
class MainJobSpec:
    """Everything that determines a main-job run (see :func:`detcal.training.job.run_main_job`)."""

    data: DataSpec = field(default_factory=DataSpec)
    model: ModelSpec = field(default_factory=ModelSpec)
    trainer: TrainerSpec = field(default_factory=TrainerSpec)
    splits: SplitsSpec = field(default_factory=SplitsSpec)
    train_data: TrainDataSpec = field(default_factory=TrainDataSpec)
    stage1: StageSpec = field(default_factory=stage1_defaults)
    stage2: StageSpec = field(default_factory=stage2_defaults)
    predict: PredictSpec = field(default_factory=PredictSpec)
    calibration: MainCalibrationSpec = field(default_factory=MainCalibrationSpec)
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    output: MainOutputSpec = field(default_factory=MainOutputSpec)
    table1: Table1Spec = field(default_factory=Table1Spec)
    dry_run: DryRunSpec = field(default_factory=DryRunSpec)
    progress: bool = True  # tqdm bars on stderr

    def __post_init__(self) -> None:
        if self.stage1.stage != 1:
            raise ConfigError("stage1.stage", f"must be 1, got {self.stage1.stage}")
        if self.stage2.stage != 2:
            raise ConfigError("stage2.stage", f"must be 2, got {self.stage2.stage}")
        if self.data.source == "synthetic":
            seeds = [self.splits.train_seed, self.splits.recal_seed, self.splits.val_seed]
            if self.train_data.source == "coco":
                seeds = seeds[1:]
            if len(set(seeds)) != len(seeds):
                raise ConfigError("splits.*_seed", f"train/recal/val seeds must differ (disjoint scenes), got {seeds}")
        if abs(self.evaluation.regression.sample_iou - self.calibration.iou_threshold) > 1e-12:
            raise ConfigError(
                "evaluation.regression.sample_iou",
                f"must equal calibration.iou_threshold (the sample the "
                f"calibrators are fitted on), got {self.evaluation.regression.sample_iou} and "
                f"{self.calibration.iou_threshold}",
            )
        if self.trainer.kind == "ddp":
            for st in (self.stage1, self.stage2):
                if st.batch_size % self.trainer.nproc:
                    raise ConfigError(
                        f"stage{st.stage}.batch_size",
                        f"{st.batch_size} is not divisible by trainer.nproc {self.trainer.nproc}",
                    )


@dataclass
class MainApp(MainJobSpec):
    """``detcal-main`` (configs/main.yaml): :class:`MainJobSpec` plus the run name."""

    name: str = "main"  # names the run/sweep directories
    data: DataSpec = REQUIRED  # the data group's spec class (data=synthetic | kitti | coco)
    report: ReportSpec = field(default_factory=ReportSpec)  # report.html of the run (docs/report.md)

    def job(self) -> MainJobSpec:
        """The :class:`MainJobSpec` part (without the app's ``name``)."""
        return MainJobSpec(**{f: getattr(self, f) for f in MainJobSpec.__dataclass_fields__})
