"""Data-parallel training and evaluation helpers (``torch.distributed``).

Run the same :func:`detcal.training.trainer.train_stage` under torchrun::

    torchrun --nproc_per_node=2 -m detcal.training.distributed --data toy:64 --stage 1 \\
        --out-dir runs/ddp --iterations 200 --batch-size 4

(or ``python -m torch.distributed.run --standalone --nproc_per_node=2 -m
detcal.training.distributed ...``). The process group uses ``gloo`` on CPU
and ``nccl`` on GPU. Each rank trains on a disjoint shard of every
iteration's global batch (:class:`detcal.training.data.IterationBatchSampler`);
gradients are averaged by ``DistributedDataParallel``; only rank 0 writes
checkpoints and logs. :func:`gather_detections` collects per-rank predictions
and :func:`all_reduce_sums` merges per-bin sufficient statistics (counts,
sums) by addition, so sharded and one-process evaluation agree.

``detcal-main trainer=ddp`` does not spell the stage out as flags: it writes
the stage's full :class:`~detcal.training.spec.StageSpec` and
:class:`~detcal.training.spec.TrainerSpec` to a JSON job file
(:mod:`detcal.training.ddp`) and runs ``... -m detcal.training.distributed
--job <file>``, so every field (``lr_steps``, ``hflip``, ``backend``, ...) arrives.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset
from detcal.data import synthetic
from detcal.data.coco import load_coco_instances
from detcal.models.rfcn import build_rfcn
from detcal.training import trainer  # called as trainer.train_stage: the tests stand in for it
from detcal.training.comm import (  # noqa: F401 - re-exported
    DistInfo,
    all_reduce_sums,
    cleanup,
    gather_detections,
    get_rank_world,
    init_distributed,
    is_main_process,
)
from detcal.training.data import LabelMap, toy_scenes
from detcal.training.ddp import read_job
from detcal.training.predict import predict
from detcal.training.stages import train_kwargs
from detcal.utils.io import write_json


def _load_data(spec: str, seed: int, image_dir: str | None) -> tuple[Dataset, Any]:
    """``toy:N`` | ``synthetic:N`` | ``coco:PATH`` (with ``--image-dir``) | ``module:function`` -> (Dataset, image source)."""
    kind, _, arg = spec.partition(":")
    if kind == "toy":
        return toy_scenes(int(arg), seed)
    if kind == "synthetic":
        ds, _ = synthetic.generate_scenes(int(arg), seed, render=False)
        return ds, (lambda i: synthetic.render_scene(ds, i, seed))
    if kind == "coco":
        if image_dir is None:
            raise DetcalInputError("--data coco:PATH needs --image-dir", field="image_dir")
        return load_coco_instances(arg), image_dir
    if arg:
        fn: Callable[..., tuple[Dataset, Any]] = getattr(importlib.import_module(kind), arg)
        return fn(seed)
    raise DetcalInputError(
        f"unknown --data {spec!r}; expected toy:N, synthetic:N, coco:PATH or module:function", field="data"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m detcal.training.distributed", description="Train one R-FCN stage (torchrun-ready)."
    )
    p.add_argument(
        "--job",
        default=None,
        help="JSON job file written by detcal.training.ddp.write_job (the full "
        "StageSpec/TrainerSpec of detcal-main); replaces every other option",
    )
    p.add_argument("--data", default=None, help="toy:N | synthetic:N | coco:ANNOTATIONS.json | module:function(seed)")
    p.add_argument("--image-dir", default=None)
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument("--stage", type=int, choices=(1, 2), default=1)
    p.add_argument("--init", default=None, help="checkpoint to start from (stage 2: the stage-1 final checkpoint)")
    p.add_argument("--out-dir", default=None)
    p.add_argument("--iterations", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=4, help="global batch (split over ranks)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=0)
    p.add_argument("--max-grad-norm", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--no-resume", action="store_true")
    p.add_argument("--backbone", default="tiny")
    p.add_argument("--norm", default="bn")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--backbone-weights", default=None)
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--deterministic", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--predict-out", default=None, help="after training, predict on the data and write a JSON summary here (rank 0)"
    )
    return p


def _run_job(path: str) -> int:
    """Train one stage described by a job file (:mod:`detcal.training.ddp`)."""
    job = read_job(path)
    info = init_distributed(backend=job.trainer.backend, device=job.trainer.device)
    try:
        torch.manual_seed(job.stage.seed)
        dataset, source = _load_data(job.data, job.data_seed, job.image_dir)
        model = trainer.load_checkpoint(job.init)
        final = trainer.train_stage(
            model,
            dataset,
            source,
            job.stage.stage,
            job.out_dir,
            resume=True,
            device=info.device,
            **train_kwargs(job.stage, job.trainer, job.progress),
        )
        if info.rank == 0:
            print(json.dumps({"final_checkpoint": str(Path(final)), "world_size": info.world_size}))
    finally:
        cleanup()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m detcal.training.distributed`` (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.job is not None:
        return _run_job(args.job)
    if args.data is None or args.out_dir is None or args.iterations is None:
        parser.error("give --job FILE, or --data, --out-dir and --iterations")
    info = init_distributed(device=args.device)
    try:
        torch.manual_seed(args.seed)
        dataset, source = _load_data(args.data, args.data_seed, args.image_dir)
        if args.init is not None:
            model = trainer.load_checkpoint(args.init)
        else:
            lm = LabelMap.from_dataset(dataset)
            model = build_rfcn(
                lm.num_classes,
                args.backbone,
                args.k,
                args.backbone_weights,
                category_ids=lm.category_ids,
                norm=args.norm,
            )
        final = trainer.train_stage(
            model,
            dataset,
            source,
            args.stage,
            args.out_dir,
            args.iterations,
            args.batch_size,
            args.lr,
            args.momentum,
            args.weight_decay,
            args.seed,
            args.checkpoint_every,
            resume=not args.no_resume,
            device=info.device,
            log_every=args.log_every,
            progress=not args.no_progress,
            warmup_iters=args.warmup_iters,
            max_grad_norm=args.max_grad_norm,
            num_threads=args.num_threads,
            deterministic=args.deterministic,
        )
        if args.predict_out is not None:
            res = predict(model, dataset, source, batch_size=args.batch_size, device=info.device, progress=False)
            if info.rank == 0:
                write_json(
                    args.predict_out,
                    {
                        "n_detections": len(res.detections),
                        "world_size": info.world_size,
                        "score_sum": float(res.detections.score.sum()),
                        **res.describe(),
                    },
                )
        if info.rank == 0:
            print(json.dumps({"final_checkpoint": str(Path(final)), "world_size": info.world_size}))
    finally:
        cleanup()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
