"""``detcal-main``: the R-FCN regression-calibration pipeline of Levi et al. 2019 in one run directory.

Levi, Gispan, Giladi, Fetaya 2019, "Evaluating and calibrating uncertainty
prediction in regression tasks", section 4.2, Appendix A.2 and Table 1
(shared papers/levi2019_regression_calibration.txt). Stages, each logged with
its wall time and recorded in ``stages.json``::

    data       train split (synthetic scenes, or COCO restricted to KITTI classes through a class map)
               and the recal / val splits (synthetic scenes with disjoint seeds, or the data group's
               KITTI / COCO images split by detcal.data.kitti.split_frames)
    stage1     detector: RPN + R-FCN heads, uncertainty branch frozen        (train/stage1_*.pt)
    stage2     uncertainty branch only, Gaussian NLL of the deltas           (train/stage2_*.pt)
    predict    recal and val: delta records (proposal P, delta mean mu, std sigma), exported as
               COCO results (predictions/<split>/detections.json, with the delta fields) and KITTI
               results (predictions/<split>/kitti/*.txt, boxes and scores)
    calibrate  stage 3, fitted on the recal regression sample (true positives at IoU 0.5):
               std scaling sigma' = s_k sigma, s_k = sqrt(mean_t (y_tk - mu_tk)^2 / sigma_tk^2)
               (Levi et al. Eq. 12, closed form) and the isotonic recalibration of Kuleshov et al.
               2018 (mu' = mu + sigma m_z, sigma' = sigma s_z, the moments of the recalibrated CDF);
               applied to val (calibration/val_<method>.json)
    evaluate   val before and after each method with detcal.experiments.evaluate
               (eval/val_<variant>/metrics.json, summary.md, PNGs): ENCE (10 equal-count bins over
               sigma), C_v per coordinate tx ty tw th, confidence ECE / D-ECE, TPs and precision
    report     table1.json / table1.md (Levi et al. Table 1 layout: rows ENCE before / std scaling /
               isotonic and C_v, columns tx ty tw th, plus the learned s) and the reliability
               diagrams reliability_<variant>.png (RMSE against RMV per coordinate)

ENCE = (1/B) sum_b |RMV(b) - RMSE(b)| / RMV(b), RMV(b) = sqrt(mean_b sigma^2),
RMSE(b) = sqrt(mean_b (y - mu)^2) (Levi et al. Eq. 8); C_v = std(sigma, ddof=1) /
mean(sigma) (Eq. 9). Std scaling multiplies sigma by a constant per coordinate, so
C_v is unchanged by it (the paper's point: calibration does not create dispersion).

Resume: rerunning with the same run directory (``hydra.run.dir=...``) skips
what is done: training stages continue from (or stop at) their checkpoints
(:func:`detcal.training.trainer.train_stage`), predictions are reused while the
stage-2 checkpoint they came from is unchanged; calibration, evaluation and the
report are cheap and always recomputed.

Training data parallelism (``trainer=ddp``): stages 1 and 2 run as
``python -m torch.distributed.run --standalone --nproc_per_node=N -m
detcal.training.distributed ...`` subprocesses (see configs/trainer/ddp.yaml).

Nothing here imports torch at module level (the evaluation source
:class:`DeltaRecordsSource` is used by ``detcal-evaluate`` without torch).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

import detcal
from detcal.errors import DetcalInputError
from detcal.experiments.common import LoadedData
from detcal.types import COORDS, KITTI_TYPES, Dataset, Detections
from detcal.utils.io import to_jsonable, write_json, write_text

__all__ = [
    "DeltaRecordsSource",
    "Split",
    "PAPER_TABLE1",
    "VARIANTS",
    "run",
    "main",
    "prepare_splits",
    "table1_markdown",
]

log = logging.getLogger("detcal.main")

VARIANTS: tuple[str, ...] = ("before", "std_scaling", "isotonic")
"""Evaluated versions of the val predictions (Table 1 rows)."""

ROW_LABELS: dict[str, str] = {
    "before": "ENCE before calibration",
    "std_scaling": "ENCE after std scaling",
    "isotonic": "ENCE after isotonic (Kuleshov)",
}

PAPER_TABLE1: dict[str, dict[str, float]] = {
    "ENCE before calibration": {"tx": 0.165, "ty": 0.254, "tw": 0.244, "th": 0.126},
    "ENCE after std scaling": {"tx": 0.083, "ty": 0.047, "tw": 0.084, "th": 0.057},
    "ENCE after isotonic (Kuleshov)": {"tx": 0.060, "ty": 0.039, "tw": 0.126, "th": 0.112},
    "C_v": {"tx": 0.40, "ty": 0.33, "tw": 0.38, "th": 0.26},
}
"""Levi et al. 2019, Table 1 (KITTI val, R-FCN), as fractions (../shared/REFERENCES.md)."""


# ----------------------------------------------------------------------------- config helpers


def _plain(x: Any) -> Any:
    """Plain Python containers from OmegaConf nodes (resolved); other values unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra-core is a dependency
        return x
    if isinstance(x, (DictConfig, ListConfig)):
        return OmegaConf.to_container(x, resolve=True)
    return x


def _get(node: Any, key: str, default: Any = None) -> Any:
    if node is None:
        return default
    try:
        v = node.get(key, default)
    except AttributeError:
        return default
    return default if v is None else v


def _need_path(value: Any, name: str, what: str = "path", must_exist: bool = True) -> Path:
    if value in (None, "", "???"):
        raise DetcalInputError(f"{name} is required (give {name}=<{what}>)", file="configs/main.yaml", field=name)
    p = Path(str(value)).expanduser()
    if must_exist and not p.exists():
        raise DetcalInputError("does not exist", file=p, field=name)
    return p


def _data_kind(cfg: Any) -> str:
    """``synthetic``, ``kitti`` or ``coco`` from the data group's ``_target_``."""
    target = str(_get(cfg.data, "_target_", ""))
    for kind, cls in (("synthetic", "SyntheticSource"), ("kitti", "KittiSource"), ("coco", "CocoSource")):
        if target.endswith(cls):
            return kind
    raise DetcalInputError(f"unsupported data source {target!r} for detcal-main (synthetic, kitti or coco)",
                           file="configs/data", field="_target_")


# ----------------------------------------------------------------------------- data


@dataclass
class Split:
    """One image set of the pipeline.

    ``dataset`` (images, GT, categories); ``images`` the image source of
    :mod:`detcal.training.data` (a directory, or ``render(row) -> [H,W,3]``);
    ``gt_format`` ``coco`` or ``kitti`` (how its GT is written for the
    evaluation); ``difficulty`` (KITTI); ``ddp_data`` the ``--data`` /
    ``--image-dir`` / ``--data-seed`` arguments that rebuild it in
    ``detcal.training.distributed``; ``provenance`` for the result files.
    """

    name: str
    dataset: Dataset
    images: Any
    gt_format: str = "coco"
    difficulty: str = "moderate"
    ddp_data: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)


def _subset(ds: Dataset, image_ids: np.ndarray) -> Dataset:
    keep_img = np.isin(ds.images.id, image_ids)
    keep_gt = np.isin(ds.gt.image_id, image_ids)
    return Dataset(ds.images.select(keep_img), ds.gt.select(keep_gt), dict(ds.categories), ds.source)


def _synthetic_split(name: str, n_images: int, seed: int, gt_format: str, difficulty: str) -> Split:
    from detcal.data import synthetic

    if int(n_images) < 1:
        raise DetcalInputError(f"need at least one image, got {n_images}", file="configs/main.yaml", field=f"splits.{name}_images")
    ds, _ = synthetic.generate_scenes(int(n_images), int(seed), render=False)
    if gt_format == "kitti":
        from detcal.data.kitti import kitti_difficulty
        from detcal.types import KITTI_DIFFICULTY

        level = int(KITTI_DIFFICULTY[difficulty]["level"])
        diff = kitti_difficulty(ds.gt.box, ds.gt.truncation, ds.gt.occlusion)
        ds = dataclasses.replace(ds, gt=dataclasses.replace(ds.gt, difficulty=diff, ignore=ds.gt.ignore | (diff < 0) | (diff > level)))

    def render(row: int, _ds: Dataset = ds, _seed: int = int(seed)) -> np.ndarray:
        return synthetic.render_scene(_ds, row, _seed)

    return Split(name, ds, render, gt_format, difficulty, ["--data", f"synthetic:{int(n_images)}", "--data-seed", str(int(seed))],
                 {"source": "synthetic", "n_images": int(n_images), "seed": int(seed), "image_size": [160, 120]})


def _coco_train_split(cfg: Any, run_dir: Path) -> Split:
    from detcal.data.coco import load_coco_instances, write_coco_instances

    t = cfg.train_data
    inst = _need_path(t.instances, "train_data.instances", "COCO instances JSON")
    image_dir = _need_path(t.image_dir, "train_data.image_dir", "image directory")
    ds = load_coco_instances(inst)
    prov: dict[str, Any] = {"source": "coco", "instances": str(inst.resolve()), "image_dir": str(image_dir.resolve())}
    cap = _get(t, "max_images")
    if cap is not None:
        ids = np.sort(ds.images.id)[: int(cap)]
        ds = _subset(ds, ids)
        prov["max_images"] = int(cap)
    cm_path = _get(t, "class_map")
    if cm_path is not None:
        from detcal.data.classmap import load_class_map

        cm = load_class_map(_need_path(cm_path, "train_data.class_map", "class-map YAML"))
        ds = cm.remap_dataset(ds, "coco_to_kitti")
        prov["class_map"] = {"file": str(cm_path), "name": cm.name, "version": cm.version, "direction": "coco_to_kitti"}
    out = run_dir / "data" / "train_instances.json"
    write_coco_instances(out, ds)  # what the model was trained on; also the DDP --data file
    prov["written"] = str(out)
    return Split("train", ds, str(image_dir), "coco", "moderate", ["--data", f"coco:{out}", "--image-dir", str(image_dir)], prov)


def _kitti_eval_splits(cfg: Any) -> tuple[Split, Split]:
    from detcal.data.kitti import load_kitti_labels, split_frames

    d, s = cfg.data, cfg.splits
    label_dir = _need_path(d.label_dir, "data.label_dir", "label_2 directory")
    image_dir = _need_path(d.image_dir, "data.image_dir", "image_2 directory")
    sizes = _get(d, "sizes")
    difficulty = str(_get(d, "difficulty", "moderate"))
    frames = sorted(p.stem for p in label_dir.glob("*.txt"))
    if not frames:
        raise DetcalInputError("no label files (*.txt)", file=label_dir, field="data.label_dir")
    cap = _get(s, "max_images")
    if cap is not None:
        frames = frames[: int(cap)]
    recal, val = split_frames(frames, _get(s, "val_size", 0.2), int(_get(s, "split_seed", 0)))
    out = []
    for name, fr in (("recal", recal), ("val", val)):
        if not fr:
            raise DetcalInputError(f"the {name} split is empty ({len(frames)} frames, val_size={_get(s, 'val_size')})",
                                   file="configs/main.yaml", field="splits.val_size")
        ds = load_kitti_labels(label_dir, image_dir=image_dir, sizes=sizes, difficulty=difficulty, image_ids=fr)
        out.append(Split(name, ds, str(image_dir), "kitti", difficulty, [],
                         {"source": "kitti", "label_dir": str(label_dir.resolve()), "image_dir": str(image_dir.resolve()),
                          "frames": len(fr), "val_size": _get(s, "val_size"), "split_seed": int(_get(s, "split_seed", 0)),
                          "max_images": cap, "difficulty": difficulty}))
    return out[0], out[1]


def _coco_eval_splits(cfg: Any) -> tuple[Split, Split]:
    from detcal.data.coco import load_coco_instances
    from detcal.data.kitti import split_frames

    gt = _need_path(cfg.data.gt, "data.gt", "COCO instances JSON")
    image_dir = _need_path(_get(cfg.splits, "image_dir"), "splits.image_dir", "image directory of data.gt")
    ds = load_coco_instances(gt)
    ids = np.sort(ds.images.id)
    cap = _get(cfg.splits, "max_images")
    if cap is not None:
        ids = ids[: int(cap)]
    recal, val = split_frames([int(i) for i in ids], _get(cfg.splits, "val_size", 0.2), int(_get(cfg.splits, "split_seed", 0)))
    out = []
    for name, fr in (("recal", recal), ("val", val)):
        sub = _subset(ds, np.array([int(f) for f in fr], dtype=np.int64))
        out.append(Split(name, sub, str(image_dir), "coco", "moderate", [],
                         {"source": "coco", "gt": str(gt.resolve()), "image_dir": str(image_dir.resolve()), "images": len(fr)}))
    return out[0], out[1]


def prepare_splits(cfg: Any, run_dir: str | os.PathLike) -> dict[str, Split]:
    """The ``train``, ``recal`` and ``val`` splits described by ``cfg`` (see the module docstring).

    The recal and val splits are disjoint (synthetic: different seeds; real
    data: :func:`detcal.data.kitti.split_frames`). Their ground truth is
    written to ``<run_dir>/splits/<name>/`` in their format (COCO instances,
    or KITTI label_2 + sizes.txt) for the evaluation.
    """
    run_dir = Path(run_dir)
    kind = _data_kind(cfg)
    s = cfg.splits
    if kind == "synthetic":
        fmt = str(_get(cfg.data, "format", "coco"))
        if fmt not in ("coco", "kitti"):
            raise DetcalInputError(f"format must be coco or kitti, got {fmt!r}", file="configs/data/synthetic.yaml", field="format")
        diff = str(_get(cfg.data, "difficulty", "moderate"))
        seeds = [int(s.train_seed), int(s.recal_seed), int(s.val_seed)]
        if len(set(seeds)) != 3:
            raise DetcalInputError(f"train/recal/val seeds must differ (disjoint scenes), got {seeds}", file="configs/main.yaml",
                                   field="splits.*_seed")
        recal = _synthetic_split("recal", s.recal_images, s.recal_seed, fmt, diff)
        val = _synthetic_split("val", s.val_images, s.val_seed, fmt, diff)
    elif kind == "kitti":
        recal, val = _kitti_eval_splits(cfg)
    else:
        recal, val = _coco_eval_splits(cfg)
    src = str(_get(cfg.train_data, "source", "synthetic"))
    if src == "synthetic":
        train = _synthetic_split("train", s.train_images, s.train_seed, "coco", "moderate")
    elif src == "coco":
        train = _coco_train_split(cfg, run_dir)
    else:
        raise DetcalInputError(f"train_data.source must be synthetic or coco, got {src!r}", file="configs/main.yaml",
                               field="train_data.source")
    for sp in (recal, val):
        _write_split_gt(sp, run_dir / "splits" / sp.name)
    return {"train": train, "recal": recal, "val": val}


def _write_split_gt(split: Split, out: Path) -> None:
    """Write the split's GT for the evaluation: ``instances.json`` (COCO) or ``label_2/`` + ``sizes.txt`` (KITTI)."""
    if split.gt_format == "coco":
        from detcal.data.coco import write_coco_instances

        write_coco_instances(out / "instances.json", split.dataset)
        split.provenance["gt"] = str(out / "instances.json")
        return
    from detcal.data.kitti import write_kitti_labels

    im = split.dataset.images
    write_kitti_labels(out / "label_2", split.dataset)
    lines = [f"{Path(n).stem or f'{int(i):06d}'} {w:g} {h:g}" for i, n, w, h in zip(im.id.tolist(), im.file_name, im.width.tolist(),
                                                                                 im.height.tolist())]
    write_text(out / "sizes.txt", "".join(line + "\n" for line in lines))
    split.provenance["gt"] = str(out / "label_2")


def _gt_paths(split: Split, run_dir: Path) -> dict[str, str | None]:
    base = run_dir / "splits" / split.name
    if split.gt_format == "coco":
        return {"gt": str(base / "instances.json"), "sizes": None}
    return {"gt": str(base / "label_2"), "sizes": str(base / "sizes.txt")}


# ----------------------------------------------------------------------------- evaluation source


@dataclass
class DeltaRecordsSource:
    """A data source for :func:`detcal.experiments.evaluate.evaluate`: ground truth in COCO
    (``instances.json``) or KITTI (``label_2`` + ``sizes``) format and detections from a COCO
    results file with delta records (``proposal``, ``delta_mean``, ``delta_std``).

    KITTI results files carry no uncertainty, so the delta records always travel
    as COCO results; with ``format="kitti"`` the devkit rules of ``difficulty``
    apply (:func:`detcal.data.kitti.kitti_rules`).
    """

    gt: str
    results: str
    format: str = "coco"
    sizes: str | None = None
    difficulty: str = "moderate"

    def load(self, run_dir: str | os.PathLike) -> LoadedData:
        """Read both; ``run_dir`` is unused (nothing is written)."""
        from detcal.data.coco import load_coco_instances, load_coco_results

        gt = Path(self.gt)
        res = Path(self.results)
        for p, name in ((gt, "gt"), (res, "results")):
            if not p.exists():
                raise DetcalInputError("does not exist", file=p, field=f"data.{name}")
        rules = None
        if self.format == "coco":
            ds = load_coco_instances(gt)
        elif self.format == "kitti":
            from detcal.data.kitti import kitti_rules, load_kitti_labels

            ds = load_kitti_labels(gt, sizes=self.sizes, difficulty=self.difficulty)
            rules = kitti_rules(self.difficulty)
        else:
            raise DetcalInputError(f"format must be coco or kitti, got {self.format!r}", field="data.format")
        dets = load_coco_results(res, dataset=ds)
        prov = {"source": "detcal-main", "format": self.format, "gt": str(gt.resolve()), "results": str(res.resolve()),
                "sizes": self.sizes, "difficulty": self.difficulty if self.format == "kitti" else None}
        return LoadedData(ds, dets, rules, prov)


# ----------------------------------------------------------------------------- stage bookkeeping


class _Stages:
    """``stages.json``: status and wall time of every stage; one log line per stage."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "stages.json"
        self.record: dict[str, Any] = {}

    @staticmethod
    def _now() -> str:
        return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

    def run(self, name: str, fn: Callable[[], tuple[Any, str]]) -> Any:
        log.info("[%s] start", name)
        t0 = time.perf_counter()
        out, status = fn()
        dt = time.perf_counter() - t0
        self.record[name] = {"status": status, "seconds": round(dt, 3), "finished": self._now()}
        write_json(self.path, self.record)
        log.info("[%s] %s in %.1f s", name, status, dt)
        return out


# ----------------------------------------------------------------------------- training


def _torch_setup(cfg: Any) -> None:
    import torch

    threads = _get(cfg.trainer, "threads")
    if threads is not None:
        torch.set_num_threads(int(threads))
    dev = str(_get(cfg.trainer, "device", "cpu"))
    if dev.startswith("cuda") and not torch.cuda.is_available():
        raise DetcalInputError("trainer.device is cuda but no CUDA device is available (use trainer=cpu)",
                               file="configs/trainer", field="device")


def _build_model(cfg: Any, train: Split) -> Any:
    """The R-FCN of the model group (a partial of build_rfcn) for the training set's label map."""
    import torch
    from hydra.utils import instantiate

    from detcal.training.data import LabelMap

    cats = _plain(_get(cfg.train_data, "categories"))
    lm = LabelMap.from_dataset(train.dataset, categories=cats)
    torch.manual_seed(int(cfg.stage1.seed))
    builder = instantiate(cfg.model)
    return builder(num_classes=lm.num_classes, category_ids=list(lm.category_ids))


def _stage_kwargs(st: Any) -> dict[str, Any]:
    return dict(iterations=int(st.iterations), batch_size=int(st.batch_size), lr=float(st.lr), momentum=float(st.momentum),
                weight_decay=float(st.weight_decay), seed=int(st.seed), checkpoint_every=int(st.checkpoint_every))


def _train_single(cfg: Any, stage: int, model: Any, train: Split, out_dir: Path) -> Path:
    from detcal.training.trainer import train_stage

    st = cfg[f"stage{stage}"]
    tr = cfg.trainer
    return train_stage(
        model, train.dataset, train.images, stage, out_dir, **_stage_kwargs(st), resume=True, device=str(tr.device),
        log_every=int(st.log_every), progress=bool(cfg.progress), warmup_iters=int(st.warmup_iters),
        lr_steps=[int(v) for v in _plain(st.lr_steps) or []], lr_gamma=float(st.lr_gamma),
        max_grad_norm=None if st.max_grad_norm is None else float(st.max_grad_norm), hflip=bool(st.hflip),
        cache_images=bool(_get(tr, "cache_images", True)), num_workers=int(_get(tr, "num_workers", 0)),
        num_threads=None if _get(tr, "threads") is None else int(tr.threads), deterministic=bool(_get(tr, "deterministic", False)),
    )


def ddp_command(cfg: Any, stage: int, train: Split, init: Path, out_dir: Path) -> list[str]:
    """The torchrun command line that trains ``stage`` under ``trainer=ddp`` (see configs/trainer/ddp.yaml)."""
    st, tr = cfg[f"stage{stage}"], cfg.trainer
    if _plain(st.lr_steps) or bool(st.hflip):
        raise DetcalInputError("trainer=ddp does not forward lr_steps / hflip to detcal.training.distributed; set "
                               f"stage{stage}.lr_steps=[] and stage{stage}.hflip=false", file="configs/trainer/ddp.yaml",
                               field=f"stage{stage}")
    nproc = int(_get(tr, "nproc", 1))
    if int(st.batch_size) % nproc:
        raise DetcalInputError(f"stage{stage}.batch_size {st.batch_size} is not divisible by trainer.nproc {nproc}",
                               file="configs/trainer/ddp.yaml", field="nproc")
    dev = str(_get(tr, "device", "cuda"))
    backend = _get(tr, "backend")
    auto = "nccl" if dev.startswith("cuda") else "gloo"
    if backend is not None and str(backend) != auto:
        raise DetcalInputError(f"detcal.training.distributed picks the backend from the device ({auto} for {dev}); "
                               f"got backend={backend}", file="configs/trainer/ddp.yaml", field="backend")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "detcal.training.distributed", *train.ddp_data, "--stage", str(stage), "--init", str(init),
           "--out-dir", str(out_dir), "--iterations", str(int(st.iterations)), "--batch-size", str(int(st.batch_size)),
           "--lr", repr(float(st.lr)), "--momentum", repr(float(st.momentum)), "--weight-decay", repr(float(st.weight_decay)),
           "--warmup-iters", str(int(st.warmup_iters)), "--seed", str(int(st.seed)),
           "--checkpoint-every", str(int(st.checkpoint_every)), "--log-every", str(int(st.log_every)), "--device", dev]
    if st.max_grad_norm is not None:
        cmd += ["--max-grad-norm", repr(float(st.max_grad_norm))]
    if _get(tr, "threads") is not None:
        cmd += ["--num-threads", str(int(tr.threads))]
    if bool(_get(tr, "deterministic", False)):
        cmd += ["--deterministic"]
    if not bool(cfg.progress):
        cmd += ["--no-progress"]
    return cmd


def _train_ddp(cfg: Any, stage: int, model: Any, train: Split, out_dir: Path) -> Path:
    from detcal.training.trainer import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint

    init = out_dir / f"stage{stage}_init.pt"
    save_checkpoint(init, {"format": CHECKPOINT_FORMAT, "stage": stage - 1, "iteration": 0, "model": model.state_dict(),
                           "model_config": model.config, "category_ids": model.category_ids.tolist()})
    cmd = ddp_command(cfg, stage, train, init, out_dir)
    write_text(out_dir / f"ddp_stage{stage}.sh", shlex.join(cmd) + "\n")
    log.info("[stage%d] %s", stage, shlex.join(cmd))
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun stage {stage} failed with exit code {done.returncode}: {shlex.join(cmd)}")
    final = out_dir / f"stage{stage}_final.pt"
    load_checkpoint(final, model)
    return final


def _train(cfg: Any, stage: int, model: Any, train: Split, out_dir: Path) -> tuple[Path, str]:
    final = out_dir / f"stage{stage}_final.pt"
    existed = final.is_file()
    if str(_get(cfg.trainer, "kind", "single")) == "ddp" and not existed:
        path = _train_ddp(cfg, stage, model, train, out_dir)
    else:
        path = _train_single(cfg, stage, model, train, out_dir)  # reloads the final checkpoint when it exists
    return path, ("skipped (final checkpoint found)" if existed else "trained")


# ----------------------------------------------------------------------------- prediction


def _fingerprint(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"file": str(path), "size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}


def _predict(cfg: Any, model: Any, split: Split, ckpt: Path, run_dir: Path) -> tuple[Detections, str]:
    """Delta records of ``split`` (reused while ``ckpt`` is unchanged), read back from the COCO results file."""
    from detcal.data.coco import load_coco_results, write_coco_results

    out = run_dir / "predictions" / split.name
    meta_path, res_path = out / "meta.json", out / "detections.json"
    fp = _fingerprint(ckpt)
    status = "reused (checkpoint unchanged)"
    meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() and res_path.is_file() else None
    if meta is None or meta.get("checkpoint") != fp or meta.get("score_threshold") != float(cfg.predict.score_threshold):
        from detcal.training.predict import predict

        res = predict(model, split.dataset, split.images, batch_size=int(cfg.predict.batch_size),
                      score_threshold=float(cfg.predict.score_threshold), device=str(cfg.trainer.device),
                      progress=bool(cfg.progress))
        write_coco_results(res_path, res.detections)
        kitti_dir = None
        names = set(split.dataset.categories.values())
        if names <= set(KITTI_TYPES):
            from detcal.data.kitti import write_kitti_results

            kitti_dir = out / "kitti"
            write_kitti_results(kitti_dir, res.detections, categories=split.dataset.categories, dataset=split.dataset)
        write_json(meta_path, to_jsonable({
            "checkpoint": fp, "score_threshold": float(cfg.predict.score_threshold), "split": split.name,
            "n_images": len(split.dataset.images), "n_detections": len(res.detections), "inference": res.describe(),
            "files": {"coco_results": str(res_path), "kitti_results": None if kitti_dir is None else str(kitti_dir)},
            "note": "KITTI results hold boxes and scores only; the delta records are in the COCO results file",
        }))
        status = f"predicted {len(res.detections)} detections on {len(split.dataset.images)} images"
    return load_coco_results(res_path, dataset=split.dataset), status


# ----------------------------------------------------------------------------- stage 3


def _matcher(cfg: Any) -> Callable[..., Any]:
    from hydra.utils import instantiate

    return instantiate(cfg.evaluation.matching)


def _kitti_rules(split: Split) -> Any:
    if split.gt_format != "kitti":
        return None
    from detcal.data.kitti import kitti_rules

    return kitti_rules(split.difficulty)


def regression_sample_of(cfg: Any, split: Split, dets: Detections) -> Any:
    """TP regression sample (delta space) of ``dets`` at ``calibration.iou_threshold``, matched with the
    evaluation's matching rules (KITTI devkit rules for KITTI splits)."""
    from detcal.metrics.spaces import regression_sample

    t = float(cfg.calibration.iou_threshold)
    mr = _matcher(cfg)(dets, split.dataset.gt, kitti=_kitti_rules(split), images=split.dataset.images, iou_thresholds=[t])
    return regression_sample(dets, split.dataset.gt, mr, iou_threshold=t, space="delta")


def _fit_calibrators(cfg: Any, recal: Split, dets: Detections) -> tuple[dict[str, Any], dict[str, Any]]:
    from detcal.calibration.regression import KuleshovIsotonic, StdScaling

    sample = regression_sample_of(cfg, recal, dets)
    if len(sample) < 2:
        raise DetcalInputError(f"the recal split has {len(sample)} true positives at IoU {cfg.calibration.iou_threshold}: "
                               "too few to calibrate (train longer or use more images)", field="calibration")
    known = {"std_scaling": StdScaling, "isotonic": KuleshovIsotonic}
    methods = [str(m) for m in _plain(cfg.calibration.methods)]
    bad = [m for m in methods if m not in known]
    if bad:
        raise DetcalInputError(f"unknown calibration method(s) {bad}; known: {list(known)}", file="configs/main.yaml",
                               field="calibration.methods")
    fitted = {m: known[m]().fit(sample.mu, sample.sigma, sample.y) for m in methods}
    info = {"n_recal_tp": len(sample), "iou_threshold": float(cfg.calibration.iou_threshold),
            "methods": {m: c.describe() for m, c in fitted.items()}}
    if "std_scaling" in fitted:
        info["s"] = dict(zip(COORDS, fitted["std_scaling"].scale_.tolist()))
    return fitted, info


def calibrated(dets: Detections, calibrator: Any) -> Detections:
    """``dets`` with ``(delta_mean, delta_std)`` replaced by ``calibrator.transform`` (boxes, scores and
    proposals unchanged, so the same detections are matched)."""
    mu, sigma = calibrator.transform(dets.delta_mean, dets.delta_std)
    return dataclasses.replace(dets, delta_mean=mu, delta_std=sigma)


# ----------------------------------------------------------------------------- evaluation


def _eval_config(cfg: Any, split: Split, results: Path, run_dir: Path) -> Any:
    from omegaconf import OmegaConf

    e = cfg.evaluation
    paths = _gt_paths(split, run_dir)
    return OmegaConf.create({
        "name": "main-eval",
        "data": {"_target_": f"{__name__}.DeltaRecordsSource", "gt": paths["gt"], "results": str(results),
                 "format": split.gt_format, "sizes": paths["sizes"], "difficulty": split.difficulty},
        "matching": _plain(e.matching), "binning": _plain(e.binning), "metrics": _plain(e.metrics),
        "bootstrap": _plain(e.bootstrap), "plots": bool(e.plots), "progress": bool(cfg.progress),
        "print_summary": bool(_get(e, "print_summary", False)),
    })


def _evaluate_variant(cfg: Any, split: Split, results: Path, variant: str, run_dir: Path) -> dict[str, Any]:
    from detcal.experiments.evaluate import evaluate

    out = run_dir / "eval" / f"{split.name}_{variant}"
    return evaluate(_eval_config(cfg, split, results, run_dir), out, overrides=[f"variant={variant}"])


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    return float(spearmanr(x[ok], y[ok]).statistic)


def _summaries(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Table-1 numbers of one evaluated variant: ENCE and C_v per coordinate, bins, confidence, detection counts."""
    reg = metrics["regression"]
    ence = {c: float(reg["ence"][c]["value"]) for c in COORDS}
    cv = {c: float(reg["cv"][c]["value"]) for c in COORDS}
    tables = {c: {k: reg["ence"][c]["table"][k] for k in ("rmv", "rmse", "count")} for c in COORDS}
    rho = {c: _spearman(np.asarray(tables[c]["rmv"], float), np.asarray(tables[c]["rmse"], float)) for c in COORDS}
    conf_label = next(iter(metrics["confidence"]), None)
    conf = {}
    if conf_label is not None:
        block = metrics["confidence"][conf_label]
        conf = {"iou": conf_label, "ece": block["ece"]["value"], "dece": block["dece"]["value"],
                "n": block["_sample"]["n"], "ece_bins": block["ece"]["params"].get("bins"),
                "dece_bins": block["dece"]["params"].get("bins")}
    counts = {}
    for label, c in metrics["matching"]["counts"].items():
        tp, fp = int(c["true_positives"]), int(c["false_positives"])
        counts[label] = {"detections": int(c["considered"]), "true_positives": tp, "false_positives": fp,
                         "ignored": int(c["ignored"]), "precision": tp / (tp + fp) if tp + fp else float("nan")}
    return {"ence": ence, "cv": cv, "ence_tables": tables, "rmse_rmv_spearman": rho, "n_tp": int(reg["_sample"]["n"]),
            "confidence": conf, "detection": counts, "gt": int(metrics["data"]["counts"]["gt"])}


def _fmt_pct(x: float) -> str:
    return "nan" if not np.isfinite(x) else f"{100 * x:.1f}%"


def table1_markdown(t: Mapping[str, Any]) -> str:
    """Markdown of the Table 1 analogue (Levi et al. 2019 layout) plus calibration and detection sanity."""
    cols = list(t["columns"])
    head = "| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    lines = [f"## Table 1 analogue (Levi et al. 2019): {t['split']} split, N = {t['n_tp_val']} true positives at IoU "
             f"{t['iou_threshold']}; ENCE over {t['bins']} {t['binning']} bins of sigma", "", head.rstrip("\n")]
    for row, vals in t["rows"].items():
        fmt = (lambda v: f"{v:.2f}") if row.startswith("C_v") else _fmt_pct
        lines.append(f"| {row} | " + " | ".join(fmt(float(vals[c])) for c in cols) + " |")
    if t.get("std_scaling_s"):
        lines.append("| s (std scaling, fitted on recal) | " + " | ".join(f"{float(t['std_scaling_s'][c]):.3f}" for c in cols) + " |")
    lines += ["", "C_v per variant (std scaling and isotonic multiply sigma by a constant per coordinate, so C_v is unchanged):", "",
              head.rstrip("\n")]
    for v, vals in t["cv"].items():
        lines.append(f"| C_v {v} | " + " | ".join(f"{float(vals[c]):.6f}" for c in cols) + " |")
    lines += ["", "Spearman correlation of RMSE(b) with RMV(b) over the bins (1: the error rises with the predicted std):", "",
              head.rstrip("\n")]
    for v, vals in t["rmse_rmv_spearman"].items():
        lines.append(f"| {v} | " + " | ".join(f"{float(vals[c]):.2f}" for c in cols) + " |")
    lines += ["", "Detection and confidence calibration (before recalibration):", "",
              "| split | detections | TP | FP | precision | ECE | D-ECE |", "|---|---|---|---|---|---|---|"]
    for name, d in t["detection"].items():
        c = d.get("confidence", {})
        lines.append(f"| {name} ({d.get('iou', '')}) | {d['detections']} | {d['true_positives']} | {d['false_positives']} | "
                     f"{d['precision']:.3f} | {float(c.get('ece', float('nan'))):.4f} | {float(c.get('dece', float('nan'))):.4f} |")
    paper = t.get("paper", {})
    if paper:
        lines += ["", "Levi et al. 2019, Table 1 (KITTI val, R-FCN), for reference:", "", head.rstrip("\n")]
        for row, vals in paper.items():
            fmt = (lambda v: f"{v:.2f}") if row.startswith("C_v") else _fmt_pct
            lines.append(f"| {row} | " + " | ".join(fmt(float(vals[c])) for c in cols) + " |")
    lines += ["", "Files: " + ", ".join(t["files"]), ""]
    return "\n".join(lines)


def _detection_row(name: str, summ: Mapping[str, Any]) -> dict[str, Any]:
    conf = summ["confidence"]
    label = conf.get("iou") or next(iter(summ["detection"]))
    row = dict(summ["detection"].get(label, {}))
    row["iou"] = label
    row["confidence"] = {"ece": conf.get("ece"), "dece": conf.get("dece"), "ece_bins": conf.get("ece_bins"),
                         "dece_bins": conf.get("dece_bins")}
    row["gt"] = summ["gt"]
    return row


# ----------------------------------------------------------------------------- the pipeline


def run(cfg: Any, run_dir: str | os.PathLike) -> dict[str, Any]:
    """Run the whole pipeline described by the composed ``main`` config in ``run_dir``; return the Table 1 JSON.

    Hydra-free apart from ``hydra.utils.instantiate`` (tests call it with a
    composed config and a temporary directory). See the module docstring for
    the stages, the files and the resume rules.
    """
    from omegaconf import OmegaConf

    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / "main_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    stages = _Stages(run_dir)
    train_dir = run_dir / "train"

    def _data() -> tuple[dict[str, Split], str]:
        sp = prepare_splits(cfg, run_dir)
        return sp, "prepared " + ", ".join(f"{k} {len(v.dataset.images)} images / {len(v.dataset.gt)} boxes" for k, v in sp.items())

    splits: dict[str, Split] = stages.run("data", _data)
    _torch_setup(cfg)
    model = _build_model(cfg, splits["train"])
    stages.run("stage1", lambda: _train(cfg, 1, model, splits["train"], train_dir))
    ckpt2 = stages.run("stage2", lambda: _train(cfg, 2, model, splits["train"], train_dir))
    dets: dict[str, Detections] = {}

    def _predict_all() -> tuple[None, str]:
        msgs = []
        for name in ("recal", "val"):
            dets[name], msg = _predict(cfg, model, splits[name], ckpt2, run_dir)
            msgs.append(f"{name}: {msg}")
        return None, "; ".join(msgs)

    stages.run("predict", _predict_all)

    def _calibrate() -> tuple[tuple[dict[str, Any], dict[str, Path]], str]:
        from detcal.data.coco import write_coco_results

        fitted, info = _fit_calibrators(cfg, splits["recal"], dets["recal"])
        files = {"before": run_dir / "predictions" / "val" / "detections.json"}
        for m, c in fitted.items():
            files[m] = run_dir / "calibration" / f"val_{m}.json"
            write_coco_results(files[m], calibrated(dets["val"], c))
        write_json(run_dir / "calibration" / "calibrators.json", to_jsonable(info))
        s = info.get("s", {})
        return (info, files), (f"fitted on {info['n_recal_tp']} recal TPs" +
                               ("; s = " + ", ".join(f"{k} {v:.3f}" for k, v in s.items()) if s else ""))

    calib_info, variant_files = stages.run("calibrate", _calibrate)

    summaries: dict[str, dict[str, Any]] = {}

    def _evaluate_all() -> tuple[None, str]:
        for v, path in variant_files.items():
            summaries[v] = _summaries(_evaluate_variant(cfg, splits["val"], path, v, run_dir))
        recal_metrics = _evaluate_variant(cfg, splits["recal"], run_dir / "predictions" / "recal" / "detections.json", "before",
                                          run_dir)
        summaries["_recal"] = _summaries(recal_metrics)
        return None, "evaluated val " + ", ".join(variant_files) + " and recal before"

    stages.run("evaluate", _evaluate_all)

    def _report() -> tuple[dict[str, Any], str]:
        from detcal.reports import plots

        files = ["table1.json", "table1.md", "stages.json", "calibration/calibrators.json"]
        for v in variant_files:
            name = f"reliability_{v}.png"
            s = summaries[v]
            plots.rmse_rmv_diagram(run_dir / name, s["ence_tables"], ence=s["ence"],
                                   title=f"val, {v.replace('_', ' ')}: RMSE vs RMV per coordinate ({s['n_tp']} TPs)")
            files.append(name)
        files += [f"eval/val_{v}/" for v in variant_files] + ["eval/recal_before/"]
        e = cfg.evaluation.binning
        rows = {ROW_LABELS[v]: summaries[v]["ence"] for v in VARIANTS if v in summaries}
        rows["C_v"] = summaries["before"]["cv"]
        table = {
            "table": "Levi et al. 2019 Table 1 analogue",
            "detcal_version": detcal.__version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "run_dir": str(run_dir.resolve()),
            "split": "val",
            "columns": list(COORDS),
            "rows": rows,
            "ence": {v: summaries[v]["ence"] for v in variant_files},
            "cv": {v: summaries[v]["cv"] for v in variant_files},
            "std_scaling_s": calib_info.get("s"),
            "rmse_rmv_spearman": {v: summaries[v]["rmse_rmv_spearman"] for v in variant_files},
            "reliability": {v: summaries[v]["ence_tables"] for v in variant_files},
            "recal": {"n_tp": summaries["_recal"]["n_tp"], "ence_before": summaries["_recal"]["ence"],
                      "cv_before": summaries["_recal"]["cv"]},
            "n_tp_val": summaries["before"]["n_tp"],
            "iou_threshold": float(cfg.calibration.iou_threshold),
            "bins": int(e.bins),
            "binning": str(e.scheme),
            "definitions": {
                "ENCE": "(1/B) sum_b |RMV(b) - RMSE(b)| / RMV(b), RMV = sqrt(mean sigma^2), RMSE = sqrt(mean (y - mu)^2), "
                        "bins over sigma (Levi et al. 2019 Eq. 8; METRICS.md 4)",
                "C_v": "std(sigma, ddof=1) / mean(sigma) (Levi et al. 2019 Eq. 9)",
                "std_scaling": "sigma' = s_k sigma, s_k = sqrt(mean (y - mu)^2 / sigma^2) on recal TPs (closed-form NLL minimiser)",
                "isotonic": "Kuleshov et al. 2018 recalibrated CDF R(Phi((y - mu)/sigma)); mean/std by exact integration",
                "sample": "true positives at the IoU threshold, delta space (tx, ty, tw, th w.r.t. the RoI), unweighted deltas",
            },
            "detection": {"val": _detection_row("val", summaries["before"]), "recal": _detection_row("recal", summaries["_recal"])},
            "calibration": calib_info,
            "paper": PAPER_TABLE1,
            "data": {k: v.provenance for k, v in splits.items()},
            "stages": stages.record,
            "files": files,
        }
        return table, "wrote table1.json, table1.md and the reliability diagrams"

    table = stages.run("report", _report)
    table["stages"] = stages.record
    table["timing_s"] = {k: v["seconds"] for k, v in stages.record.items()}
    table["timing_s"]["total"] = round(time.perf_counter() - t_start, 3)
    table = to_jsonable(table)
    write_json(run_dir / "table1.json", table)
    md = table1_markdown(table)
    write_text(run_dir / "table1.md", md)
    print(md, flush=True)
    log.info("detcal-main: done in %.1f s; results in %s", table["timing_s"]["total"], run_dir)
    return table


def main() -> None:
    """Console entry point ``detcal-main`` (Hydra command line: overrides, ``experiment=...``, ``hydra.run.dir=...``)."""
    from detcal.experiments.common import run_hydra_app

    run_hydra_app("main", run, "detcal-main")


if __name__ == "__main__":  # pragma: no cover
    main()
