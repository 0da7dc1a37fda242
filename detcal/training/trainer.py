"""Two-stage training of the R-FCN with atomic checkpoints and exact resume.

Levi et al. 2019, App. A.2: stage 1 trains the detector (RPN losses + R-FCN
classification + smooth-L1 box regression on the sampled RoIs) with the
uncertainty branch frozen; stage 2 freezes everything else and trains only the
uncertainty branch by the Gaussian NLL of the deltas of the positive RoIs
(:func:`detcal.models.rfcn.uncertainty_nll`), the model in ``eval()`` mode so
that batch-norm statistics and every other weight stay bitwise unchanged
(paper: 1K iterations, 6 images per iteration, SGD lr 0.001, momentum 0.9).
Stage 3 (std scaling) runs on exported delta records
(:func:`detcal.training.predict.predict`, ``detcal.calibration.regression``).

Learning rate at iteration i (0-based): ``lr * warmup(i) * lr_gamma ** #{s in lr_steps: s <= i}``
with ``warmup(i) = 1/1000 + (1 - 1/1000) * i / warmup_iters`` for ``i < warmup_iters``, else 1.

Files in ``out_dir`` (only rank 0 writes):

* ``stage{S}_last.pt`` every ``checkpoint_every`` iterations and ``stage{S}_final.pt``
  at the end, each written atomically (``torch.save`` to a temporary file in the
  same directory, then ``os.replace``). A checkpoint holds the model state and
  config, the optimizer state, the RNG states (torch, numpy, python, CUDA), the
  data-sampler position (seed, batch size, next iteration) and the iteration.
* ``stage{S}_log.jsonl``: one JSON object per logged iteration: ``stage``,
  ``iteration`` (iterations done), ``loss``, ``losses`` (each term; averaged
  over ranks), ``lr``, ``time`` (seconds since this process started the stage),
  ``world_size``.

Resume: with ``resume=True`` the newest of ``stage{S}_final.pt`` /
``stage{S}_last.pt`` is loaded and training continues from its iteration; the
log is cut back to that iteration. Because the data order and the per-image
sampling are functions of (seed, iteration) (:mod:`detcal.training.data`), a
killed run resumed from its last checkpoint ends with the same weights as an
uninterrupted run (bitwise on CPU with the same thread count; pass
``deterministic=True`` to also ask torch for deterministic kernels).

Data parallelism: when ``torch.distributed`` is initialised (see
:mod:`detcal.training.distributed`), the model is wrapped in
``DistributedDataParallel`` and each rank trains on a disjoint contiguous shard
of each iteration's global batch of ``batch_size`` images, so the global batch
and the (rank-averaged) losses are those of a single process.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset
from detcal.models.rfcn import RFCN, rfcn_from_config
from detcal.training.comm import get_rank_world
from detcal.training.data import DetectionDataset, ImageSource, IterationBatchSampler, LabelMap, collate
from detcal.training.determinism import configure_torch
from detcal.utils.io import atomic_write, write_text

CHECKPOINT_FORMAT = "detcal-rfcn-checkpoint/1"
RESUME_KEYS: tuple[str, ...] = (
    "stage",
    "batch_size",
    "seed",
    "lr",
    "momentum",
    "weight_decay",
    "warmup_iters",
    "lr_steps",
    "lr_gamma",
    "max_grad_norm",
    "hflip",
)
"""Run settings that must agree between a checkpoint and the run resuming it."""


class TrainingStopped(Exception):
    """Raised by a ``callback`` to stop training (tests use it to simulate a kill)."""


def learning_rate(
    iteration: int, lr: float, warmup_iters: int = 0, lr_steps: Sequence[int] = (), lr_gamma: float = 0.1
) -> float:
    """``lr * warmup(i) * lr_gamma ** #{s in lr_steps: s <= i}`` (module docstring)."""
    factor = 1.0
    if iteration < warmup_iters:
        alpha = iteration / warmup_iters
        factor = 1e-3 * (1 - alpha) + alpha
    return float(lr * factor * lr_gamma ** sum(1 for s in lr_steps if s <= iteration))


def _rng_state() -> dict[str, Any]:
    """RNG states as tensors and plain lists only (loadable with ``torch.load(weights_only=True)``)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(gauss),
        },
        "python": [int(version), [int(v) for v in internal], gauss_next],
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Atomically ``torch.save`` ``state`` to ``path`` (temporary sibling + ``os.replace``)."""
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        torch.save(state, fh)
    return path


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint written by :func:`train_stage`; raises :class:`DetcalInputError` naming the file.

    Loaded with ``torch.load(weights_only=True)``: only tensors and plain
    containers are unpickled, so a file carrying any other object (a pickle
    payload that would run code) is refused before anything in it runs.
    """
    path = Path(path)
    if not path.is_file():
        raise DetcalInputError("checkpoint not found", file=path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DetcalInputError(
            f"refused: not a weights-only checkpoint (torch.load(weights_only=True) failed: {first})", file=path
        ) from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise DetcalInputError(
            f"not a detcal R-FCN checkpoint (format {CHECKPOINT_FORMAT!r} expected)", file=path, field="format"
        )
    return state


def load_checkpoint(
    path: str | os.PathLike, model: RFCN | None = None, map_location: str | torch.device = "cpu"
) -> RFCN:
    """Model weights from a checkpoint, into ``model`` or into a model rebuilt from the stored config."""
    state = read_checkpoint(path, map_location)
    if model is None:
        model = rfcn_from_config(state["model_config"])
    model.load_state_dict(state["model"])
    return model


def _latest_checkpoint(out_dir: Path, stage: int) -> Path | None:
    best, best_it = None, -1
    for name in (f"stage{stage}_last.pt", f"stage{stage}_final.pt"):
        p = out_dir / name
        if p.is_file():
            it = int(read_checkpoint(p)["iteration"])
            if it > best_it:
                best, best_it = p, it
    return best


def _trim_log(log_path: Path, iteration: int) -> None:
    if not log_path.is_file():
        return
    keep = []
    for line in log_path.read_text(encoding="utf-8").splitlines():
        try:
            if int(json.loads(line)["iteration"]) <= iteration:
                keep.append(line)
        except (ValueError, KeyError, TypeError):
            continue
    write_text(log_path, "".join(k + "\n" for k in keep))


def train_stage(
    model: RFCN,
    dataset: Dataset,
    images: ImageSource,
    stage: int,
    out_dir: str | os.PathLike,
    iterations: int,
    batch_size: int,
    lr: float,
    momentum: float,
    weight_decay: float,
    seed: int,
    checkpoint_every: int,
    resume: bool = True,
    device: str | torch.device = "cpu",
    log_every: int = 10,
    progress: bool = True,
    *,
    warmup_iters: int = 0,
    lr_steps: Sequence[int] = (),
    lr_gamma: float = 0.1,
    max_grad_norm: float | None = None,
    hflip: bool = False,
    cache_images: bool = True,
    num_workers: int = 0,
    num_threads: int | None = None,
    deterministic: bool = False,
    callback: Callable[[int, dict[str, float]], None] | None = None,
) -> Path:
    """Train ``stage`` (1: detector, 2: uncertainty branch) for ``iterations`` SGD steps; return the final checkpoint.

    ``model`` must carry its label map (``model.category_ids``, build it with
    ``LabelMap.from_dataset(dataset).category_ids``). For stage 2 pass the
    stage-1 model (:func:`load_checkpoint`). SGD with ``lr``, ``momentum``,
    ``weight_decay`` over the stage's trainable parameters; learning-rate
    schedule in the module docstring; optional gradient-norm clipping
    ``max_grad_norm``. ``callback(iterations_done, losses)`` runs after each
    step (and after a checkpoint due at that step); raising
    :class:`TrainingStopped` from it stops the run, as a kill would. After the
    call ``model`` holds the final weights (also when an existing final
    checkpoint is simply reloaded).
    """
    rank, world = get_rank_world()
    _check_stage_args(stage, iterations, batch_size, checkpoint_every, log_every, world)
    configure_torch(num_threads, deterministic, str(device))
    device = torch.device(device)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = (lr, momentum, weight_decay, warmup_iters, lr_steps, lr_gamma, max_grad_norm, hflip)
    cfg = _run_config(stage, iterations, batch_size, seed, *settings)
    final_path = out_dir / f"stage{stage}_final.pt"
    model.to(device)
    params = model.set_stage(stage)
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    latest = _latest_checkpoint(out_dir, stage) if resume else None
    start = _resume(model, optimizer, latest, cfg, iterations, final_path, rank)
    if start >= iterations:
        return final_path
    log_path = out_dir / f"stage{stage}_log.jsonl"
    _start_log(log_path, start, rank)
    forward_model = _distributed(model, device, world)
    label_map = LabelMap(tuple(int(c) for c in model.category_ids.tolist()))
    ds = DetectionDataset(dataset, images, label_map, hflip=hflip, cache=cache_images)
    sampler = IterationBatchSampler(len(dataset.images), batch_size, seed, start, iterations, rank, world)
    loader = _loader(ds, sampler, num_workers, seed, stage)
    model.train_mode_for_stage(stage)

    def step(
        it: int, imgs: Sequence[torch.Tensor], targets: Sequence[dict[str, torch.Tensor]]
    ) -> tuple[dict[str, float], float]:
        lr_it = learning_rate(it, lr, warmup_iters, lr_steps, lr_gamma)
        values = _sgd_step(
            forward_model, optimizer, params, imgs, targets, device, stage, it, lr_it, max_grad_norm, world
        )
        return values, lr_it

    def save(done: int) -> None:  # a checkpoint every checkpoint_every steps, the final one at the end
        if done % checkpoint_every == 0 or done == iterations:
            path = final_path if done == iterations else out_dir / f"stage{stage}_last.pt"
            _checkpoint(path, model, optimizer, cfg, done, seed, batch_size, rank)

    _iterate(loader, range(start, iterations), step, save, log_path, stage, world, rank, log_every, progress, callback)
    return final_path


def _distributed(model: RFCN, device: torch.device, world: int) -> torch.nn.Module:
    """The model the steps call: itself, or wrapped in DistributedDataParallel when there are several ranks."""
    if world == 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )


def _start_log(log_path: Path, start: int, rank: int) -> None:
    """A fresh log for a new run; a resumed run's log cut back to the checkpoint's iteration (rank 0)."""
    if rank == 0:
        if start > 0:
            _trim_log(log_path, start)
        else:
            write_text(log_path, "")
    _barrier()


def _iterate(
    loader: Any,
    its: range,
    step: Callable[..., tuple[dict[str, float], float]],
    save: Callable[[int], None],
    log_path: Path,
    stage: int,
    world: int,
    rank: int,
    log_every: int,
    progress: bool,
    callback: Callable[[int, dict[str, float]], None] | None,
) -> None:
    """The SGD steps ``its`` of one stage: the progress bar, the log lines, ``save`` (the checkpoints, after
    each step) and the callback."""
    start, iterations = its.start, its.stop
    bar = tqdm(
        total=iterations,
        initial=start,
        desc=f"R-FCN stage {stage}",
        disable=not progress or rank != 0,
        dynamic_ncols=True,
    )
    t0 = time.time()
    log_fh = open(log_path, "a", encoding="utf-8") if rank == 0 else None
    try:
        for it, (imgs, targets) in zip(its, loader):
            values, lr_it = step(it, imgs, targets)
            done = it + 1
            bar.update(1)
            if done % log_every == 0 or done == iterations or it == start:
                bar.set_postfix(loss=f"{sum(values.values()):.4f}")
                if log_fh is not None:
                    _log_line(log_fh, stage, done, values, lr_it, time.time() - t0, world)
            save(done)
            if callback is not None:
                callback(done, values)
    finally:
        bar.close()
        if log_fh is not None:
            log_fh.close()


def _check_stage_args(
    stage: int, iterations: int, batch_size: int, checkpoint_every: int, log_every: int, world: int
) -> None:
    """Errors naming the argument for a stage, counts or a batch size that cannot run."""
    if stage not in (1, 2):
        raise DetcalInputError(f"stage must be 1 or 2, got {stage}", field="stage")
    for name, v in (
        ("iterations", iterations),
        ("batch_size", batch_size),
        ("checkpoint_every", checkpoint_every),
        ("log_every", log_every),
    ):
        if int(v) < 1:
            raise DetcalInputError(f"{name} must be >= 1, got {v}", field=name)
    if batch_size % world:
        raise DetcalInputError(
            f"batch_size {batch_size} is not divisible by the world size {world}", field="batch_size"
        )


def _resume(
    model: RFCN,
    optimizer: torch.optim.Optimizer,
    ckpt_path: Path | None,
    run_config: dict[str, Any],
    iterations: int,
    final_path: Path,
    rank: int,
) -> int:
    """The iteration to start from: 0 without a checkpoint, else the checkpoint's (model, optimizer and RNGs
    restored). A checkpoint at the last iteration is made the final one (rank 0) before returning."""
    if ckpt_path is None:
        return 0
    state = read_checkpoint(ckpt_path, map_location="cpu")
    for key in RESUME_KEYS:
        if state["run_config"].get(key) != run_config[key]:
            raise DetcalInputError(
                f"resume: checkpoint has {key}={state['run_config'].get(key)!r}, this run {run_config[key]!r}",
                file=ckpt_path,
                field=key,
            )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    _set_rng_state(state["rng"])
    start = int(state["sampler"]["next_iteration"])
    if start >= iterations:
        if start > iterations:
            raise DetcalInputError(
                f"checkpoint is at iteration {start} > requested {iterations}", file=ckpt_path, field="iteration"
            )
        if rank == 0 and ckpt_path != final_path:
            save_checkpoint(final_path, {**state, "run_config": run_config})
        _barrier()
    return start


def _sgd_step(
    forward_model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    params: Any,
    imgs: Sequence[torch.Tensor],
    targets: Sequence[dict[str, torch.Tensor]],
    device: torch.device,
    stage: int,
    it: int,
    lr_it: float,
    max_grad_norm: float | None,
    world: int,
) -> dict[str, float]:
    """One SGD step at learning rate ``lr_it``; the losses averaged over ranks."""
    for group in optimizer.param_groups:
        group["lr"] = lr_it
    imgs = [im.to(device, non_blocking=True) for im in imgs]
    targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
    losses = forward_model(imgs, targets, stage)
    loss = sum(losses.values())
    if not torch.isfinite(loss):
        raise FloatingPointError(
            f"stage {stage}: non-finite loss at iteration {it}: { ({k: float(v) for k, v in losses.items()}) }"
        )
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    return _reduce_losses(losses, world)


def _run_config(
    stage: int,
    iterations: int,
    batch_size: int,
    seed: int,
    lr: float,
    momentum: float,
    weight_decay: float,
    warmup_iters: int,
    lr_steps: Sequence[int],
    lr_gamma: float,
    max_grad_norm: float | None,
    hflip: bool,
) -> dict[str, Any]:
    """The settings a checkpoint records (and a resume must match, :data:`RESUME_KEYS`), as plain JSON values."""
    return {
        "stage": stage,
        "iterations": int(iterations),
        "batch_size": int(batch_size),
        "seed": int(seed),
        "lr": float(lr),
        "momentum": float(momentum),
        "weight_decay": float(weight_decay),
        "warmup_iters": int(warmup_iters),
        "lr_steps": [int(s) for s in lr_steps],
        "lr_gamma": float(lr_gamma),
        "max_grad_norm": None if max_grad_norm is None else float(max_grad_norm),
        "hflip": bool(hflip),
    }


def _loader(
    ds: DetectionDataset, sampler: IterationBatchSampler, num_workers: int, seed: int, stage: int
) -> DataLoader:
    """The stage's DataLoader over ``sampler``'s batches.

    Every item carries its own seed (detcal.training.data); the workers' RNGs are seeded as well, so that
    nothing a transform might draw depends on the process that loaded it."""
    gen = torch.Generator().manual_seed(int(seed) * 1000 + stage)
    return DataLoader(
        ds,
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=num_workers,
        worker_init_fn=_seed_worker if num_workers else None,
        generator=gen,
    )


def _log_line(
    log_fh: Any, stage: int, done: int, values: dict[str, float], lr_it: float, elapsed: float, world: int
) -> None:
    """One line of the stage's JSONL training log."""
    rec = {
        "stage": stage,
        "iteration": done,
        "loss": float(sum(values.values())),
        "losses": values,
        "lr": lr_it,
        "time": round(elapsed, 3),
        "world_size": world,
    }
    log_fh.write(json.dumps(rec) + "\n")
    log_fh.flush()


def _seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: numpy and python RNGs from the worker's torch seed (set by the loader's generator)."""
    s = torch.initial_seed() % 2**32
    np.random.seed(s)
    random.seed(s)


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _reduce_losses(losses: dict[str, torch.Tensor], world: int) -> dict[str, float]:
    vals = torch.stack([v.detach().float() for v in losses.values()])
    if world > 1:
        vals = vals.clone()
        dist.all_reduce(vals)
        vals /= world
    return {k: float(v) for k, v in zip(losses, vals.cpu())}


def _checkpoint(
    path: Path,
    model: RFCN,
    optimizer: torch.optim.Optimizer,
    run_config: dict[str, Any],
    done: int,
    seed: int,
    batch_size: int,
    rank: int,
) -> None:
    if rank == 0:
        state = {
            "format": CHECKPOINT_FORMAT,
            "stage": run_config["stage"],
            "iteration": done,
            "model": model.state_dict(),
            "model_config": model.config,
            "category_ids": model.category_ids.tolist(),
            "optimizer": optimizer.state_dict(),
            "rng": _rng_state(),
            "sampler": {
                "seed": int(seed),
                "batch_size": int(batch_size),
                "next_iteration": done,
                "position": done * int(batch_size),
            },
            "run_config": run_config,
        }
        save_checkpoint(path, state)
    _barrier()
