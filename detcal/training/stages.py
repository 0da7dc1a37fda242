"""The torch stages of the main job: build the R-FCN, train stages 1-2 (in this process or under
torchrun), predict delta records. torch is imported inside the functions only.

Every stage works in a directory keyed on a fingerprint of its settings and
inputs (:mod:`detcal.training.fingerprint`): a rerun reuses (or resumes) it
only when nothing it depends on changed, otherwise the directory is recomputed whole.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from pathlib import Path
from typing import Any

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_TYPES, Detections
from detcal.data.coco import load_coco_results, write_coco_results
from detcal.data.kitti import write_kitti_results
from detcal.training.ddp import DdpJob, ddp_command, write_job
from detcal.training.determinism import configure_torch, platform_facts
from detcal.training.fingerprint import prepare_stage_dir
from detcal.training.spec import ModelSpec, PredictSpec, StageSpec, TrainerSpec
from detcal.training.splits import Split
from detcal.training.torch_check import require_torch
from detcal.utils.io import to_jsonable, write_json, write_text

__all__ = ["train_kwargs", "torch_setup", "build_model", "train", "predict_split"]

log = logging.getLogger("detcal.main")


def train_kwargs(stage: StageSpec, trainer: TrainerSpec, progress: bool) -> dict[str, Any]:
    """Keyword arguments of :func:`detcal.training.trainer.train_stage` from the two specs (every field of
    the stage; the same in this process and under torchrun)."""
    return dict(
        iterations=stage.iterations,
        batch_size=stage.batch_size,
        lr=float(stage.lr),
        momentum=float(stage.momentum),
        weight_decay=float(stage.weight_decay),
        seed=stage.seed,
        checkpoint_every=stage.checkpoint_every,
        log_every=stage.log_every,
        progress=bool(progress),
        warmup_iters=stage.warmup_iters,
        lr_steps=list(stage.lr_steps),
        lr_gamma=float(stage.lr_gamma),
        max_grad_norm=None if stage.max_grad_norm is None else float(stage.max_grad_norm),
        hflip=bool(stage.hflip),
        cache_images=bool(trainer.cache_images),
        num_workers=trainer.num_workers,
        num_threads=trainer.threads,
        deterministic=bool(trainer.deterministic),
    )


def torch_setup(trainer: TrainerSpec) -> dict[str, Any]:
    """Thread counts and deterministic mode (:func:`detcal.training.determinism.configure_torch`), a clear
    error when CUDA is asked for but absent; return the platform facts of the run
    (:func:`detcal.training.determinism.platform_facts`)."""
    require_torch("detcal-main")
    import torch  # lazy: torch is optional (the [train] extra)

    if trainer.device.startswith("cuda") and not torch.cuda.is_available():
        raise DetcalInputError(
            "trainer.device is cuda but no CUDA device is available (use trainer=cpu)",
            file="configs/trainer",
            field="device",
        )
    configure_torch(trainer.threads, trainer.deterministic, trainer.device)
    return platform_facts(trainer.device)


def build_model(model: ModelSpec, train: Split, categories: list[int] | None, seed: int) -> Any:
    """The R-FCN of ``model`` for the training set's label map, initialised under ``torch.manual_seed(seed)``."""
    import torch  # lazy: torch is optional (the [train] extra)

    from detcal.models.rfcn import build_rfcn  # lazy: needs torch (the [train] extra)
    from detcal.training.data import LabelMap  # lazy: needs torch (the [train] extra)

    lm = LabelMap.from_dataset(train.dataset, categories=categories)
    torch.manual_seed(int(seed))
    return build_rfcn(num_classes=lm.num_classes, category_ids=list(lm.category_ids), **model.build_kwargs())


def _train_ddp(stage: StageSpec, trainer: TrainerSpec, model: Any, train: Split, out_dir: Path, progress: bool) -> Path:
    from detcal.training.trainer import (  # lazy: needs torch (the [train] extra)
        CHECKPOINT_FORMAT,
        load_checkpoint,
        save_checkpoint,
    )

    s = stage.stage
    init = out_dir / f"stage{s}_init.pt"
    save_checkpoint(
        init,
        {
            "format": CHECKPOINT_FORMAT,
            "stage": s - 1,
            "iteration": 0,
            "model": model.state_dict(),
            "model_config": model.config,
            "category_ids": model.category_ids.tolist(),
        },
    )
    job = write_job(
        out_dir / f"ddp_stage{s}.json",
        DdpJob(
            stage=stage,
            trainer=trainer,
            data=train.ddp_data,
            data_seed=train.ddp_seed,
            image_dir=train.ddp_image_dir,
            init=str(init),
            out_dir=str(out_dir),
            progress=progress,
        ),
    )
    cmd = ddp_command(job, trainer.nproc)
    write_text(out_dir / f"ddp_stage{s}.sh", shlex.join(cmd) + "\n")
    log.info("[stage%d] %s", s, shlex.join(cmd))
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun stage {s} failed with exit code {done.returncode}: {shlex.join(cmd)}")
    final = out_dir / f"stage{s}_final.pt"
    load_checkpoint(final, model)
    return final


def train(
    stage: StageSpec,
    trainer: TrainerSpec,
    model: Any,
    train_split: Split,
    out_dir: Path,
    fp: str,
    description: Any,
    progress: bool,
) -> tuple[Path, str]:
    """Train ``stage`` into ``out_dir`` (keyed on ``fp``); return (final checkpoint, status).

    Same fingerprint: the final checkpoint is reloaded, or a killed run resumes
    from its last checkpoint. Another fingerprint: the directory is recomputed whole.
    """
    from detcal.training.trainer import train_stage  # lazy: needs torch (the [train] extra)

    reusable, why = prepare_stage_dir(out_dir, fp, description)
    final = out_dir / f"stage{stage.stage}_final.pt"
    existed = reusable and final.is_file()
    if trainer.kind == "ddp" and not existed:
        path = _train_ddp(stage, trainer, model, train_split, out_dir, progress)
    else:  # reloads the final checkpoint when it exists
        path = train_stage(
            model,
            train_split.dataset,
            train_split.images,
            stage.stage,
            out_dir,
            resume=reusable,
            device=trainer.device,
            **train_kwargs(stage, trainer, progress),
        )
    if existed:
        return path, "skipped (final checkpoint found, fingerprint unchanged)"
    return path, "trained" + ("" if why == "new" else f" ({why})")


def predict_split(
    model: Any, split: Split, predict: PredictSpec, device: str, out: Path, fp: str, description: Any, progress: bool
) -> tuple[Detections, str]:
    """Delta records of ``split`` in ``out`` (reused while ``fp`` is unchanged), read back from the COCO results file."""
    reusable, why = prepare_stage_dir(out, fp, description)
    meta_path, res_path = out / "meta.json", out / "detections.json"
    if reusable and meta_path.is_file() and res_path.is_file():
        return load_coco_results(res_path, dataset=split.dataset), "reused (fingerprint unchanged)"
    from detcal.training.predict import predict as run_predict  # lazy: needs torch (the [train] extra)

    res = run_predict(
        model,
        split.dataset,
        split.images,
        batch_size=predict.batch_size,
        score_threshold=float(predict.score_threshold),
        device=device,
        progress=progress,
    )
    write_coco_results(res_path, res.detections)
    kitti_dir = None
    if set(split.dataset.categories.values()) <= set(KITTI_TYPES):
        kitti_dir = out / "kitti"
        write_kitti_results(kitti_dir, res.detections, categories=split.dataset.categories, dataset=split.dataset)
    write_json(
        meta_path,
        to_jsonable(
            {
                "fingerprint": fp,
                "score_threshold": float(predict.score_threshold),
                "split": split.name,
                "n_images": len(split.dataset.images),
                "n_detections": len(res.detections),
                "inference": res.describe(),
                "files": {
                    "coco_results": str(res_path),
                    "kitti_results": None if kitti_dir is None else str(kitti_dir),
                },
                "note": "KITTI results hold boxes and scores only; the delta records are in the COCO results file",
            }
        ),
    )
    status = f"predicted {len(res.detections)} detections on {len(split.dataset.images)} images"
    return load_coco_results(res_path, dataset=split.dataset), status + ("" if why == "new" else f" ({why})")
