"""``trainer=ddp``: one training stage as a torchrun subprocess, described by a JSON job file.

:func:`write_job` stores the stage's full :class:`StageSpec` and
:class:`TrainerSpec` (every field: ``lr_steps``, ``hflip``, ``backend``, ...),
the training data (``synthetic:N`` + seed, or ``coco:<instances>`` + image
directory), the initial checkpoint and the output directory;
``python -m detcal.training.distributed --job <file>`` reads it back with
:func:`read_job` (the specs validate again) and trains with the same keyword
arguments as a single-process run (:func:`detcal.training.stages.train_kwargs`).
Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detcal.core.errors import DetcalInputError
from detcal.training.spec import StageSpec, TrainerSpec
from detcal.utils.io import write_json

__all__ = ["JOB_FORMAT", "DdpJob", "write_job", "read_job", "ddp_command"]

JOB_FORMAT = "detcal-ddp-job/1"


@dataclass
class DdpJob:
    """What one torchrun stage needs: ``data`` (``synthetic:N`` | ``coco:PATH`` | ``toy:N``) with
    ``data_seed`` / ``image_dir``, the ``init`` checkpoint, ``out_dir`` and the two specs."""

    stage: StageSpec
    trainer: TrainerSpec
    data: str
    data_seed: int
    image_dir: str | None
    init: str
    out_dir: str
    progress: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"format": JOB_FORMAT, **dataclasses.asdict(self)}


def write_job(path: str | Path, job: DdpJob) -> Path:
    """Write ``job`` as JSON to ``path``."""
    path = Path(path)
    write_json(path, job.to_dict())
    return path


def read_job(path: str | Path) -> DdpJob:
    """Read a job file back (both specs validate again); a clear error naming the file and field."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DetcalInputError(f"cannot read the DDP job file: {exc}", file=path) from None
    if not isinstance(raw, dict) or raw.get("format") != JOB_FORMAT:
        raise DetcalInputError(f"not a detcal DDP job file ({JOB_FORMAT!r} expected)", file=path, field="format")
    try:
        stage = StageSpec(**raw["stage"])
        trainer = TrainerSpec(**raw["trainer"])
        return DdpJob(
            stage=stage,
            trainer=trainer,
            data=str(raw["data"]),
            data_seed=int(raw["data_seed"]),
            image_dir=raw.get("image_dir"),
            init=str(raw["init"]),
            out_dir=str(raw["out_dir"]),
            progress=bool(raw.get("progress", False)),
        )
    except KeyError as exc:
        raise DetcalInputError("missing field", file=path, field=str(exc.args[0])) from None
    except TypeError as exc:
        raise DetcalInputError(f"bad job file: {exc}", file=path) from None


def ddp_command(job_file: str | Path, nproc: int) -> list[str]:
    """The torchrun command line that trains the stage of ``job_file`` on ``nproc`` processes."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={int(nproc)}",
        "-m",
        "detcal.training.distributed",
        "--job",
        str(job_file),
    ]
