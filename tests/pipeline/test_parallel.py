"""Parallel evaluation changes where the work runs, never a number: two local
workers, and two torch.distributed (gloo) ranks under torchrun, give metrics.json
bitwise equal to one process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.pipeline.parallel import image_shards
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec, ParallelSpec
from detcal.reports import results_json

THRESHOLDS = [0.5, 0.6, 0.75, 0.9]


def _text(res: detcal.EvaluationResult) -> str:
    d = res.to_dict()
    for k in ("created", "timing_s", "spec"):
        d.pop(k, None)
    return results_json.dumps(d)


def _spec(**par: object) -> EvaluationSpec:
    return EvaluationSpec(
        matching=MatchingSpec(iou_thresholds=THRESHOLDS), bootstrap=BootstrapSpec(n=15), parallel=ParallelSpec(**par)
    )


def test_image_shards_keep_images_whole_and_cover_every_row() -> None:
    rng = np.random.default_rng(0)
    image_id = rng.integers(0, 50, size=1000)
    for n in (1, 2, 3, 7, 100):
        shards = image_shards(image_id, n)
        rows = np.concatenate(shards)
        assert np.array_equal(np.sort(rows), np.arange(1000))
        owners = [set(image_id[s].tolist()) for s in shards]
        assert all(not (a & b) for i, a in enumerate(owners) for b in owners[i + 1 :])
    assert [len(s) for s in image_shards(np.array([], dtype=np.int64), 2)] == [0]


def test_two_workers_equal_one_process_bitwise(coco: DataSpec) -> None:
    one = detcal.evaluate(coco, spec=_spec())
    two = detcal.evaluate(coco, spec=_spec(workers=2))
    assert _text(one) == _text(two)
    assert np.array_equal(one.match.matched, two.match.matched)
    assert np.array_equal(one.match.gt_index, two.match.gt_index)


SCRIPT = f"""
import sys, json
import detcal
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec, ParallelSpec
from detcal.pipeline.parallel import distributed_rank
from detcal.reports import results_json
spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds={THRESHOLDS!r}), bootstrap=BootstrapSpec(n=15),
                      parallel=ParallelSpec(distributed=True))
res = detcal.evaluate(DataSpec(source="coco", gt=sys.argv[1], results=sys.argv[3]), spec=spec)
if distributed_rank() == 0:
    d = res.to_dict()
    for k in ("created", "timing_s", "spec"):
        d.pop(k, None)
    open(sys.argv[2], "w").write(results_json.dumps(d))
"""


@pytest.mark.slow
def test_two_gloo_ranks_under_torchrun_equal_one_process_bitwise(coco: DataSpec, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "rank0.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_port=29531",
            str(script),
            str(coco.gt),
            str(out),
            str(coco.results),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = detcal.evaluate(coco, spec=_spec())
    assert out.read_text() == _text(one)


def test_app_takes_parallel_workers(tmp_path: Path) -> None:
    argv = ["data.n_images=60", "bootstrap.n=0", "output.plots=false", "output.print_summary=false"]
    for w in (1, 2):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "detcal.apps.evaluate",
                *argv,
                f"parallel.workers={w}",
                f"hydra.run.dir={tmp_path / str(w)}",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
    a, b = (json.loads((tmp_path / str(w) / "metrics.json").read_text()) for w in (1, 2))
    assert a["confidence"] == b["confidence"] and a["regression"] == b["regression"]


@pytest.mark.slow
def test_evaluate_app_under_torchrun_writes_one_report(coco: DataSpec, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    args = [
        "data=coco",
        f"data.gt={coco.gt}",
        f"data.results={coco.results}",
        "matching.iou_thresholds=[0.5,0.75]",
        "bootstrap.n=0",
        "output.plots=false",
        "output.print_summary=false",
    ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_port=29533",
            "-m",
            "detcal.apps.evaluate",
            *args,
            "parallel.distributed=true",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list(tmp_path.glob("outputs/evaluate/*/*/metrics.json"))
    assert len(runs) == 1  # rank 0 only
    proc = subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", *args, f"hydra.run.dir={tmp_path / 'one'}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    a, b = (json.loads(p.read_text()) for p in (runs[0], tmp_path / "one" / "metrics.json"))
    assert a["confidence"] == b["confidence"] and a["headline"] == b["headline"]
