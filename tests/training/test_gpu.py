"""The CUDA paths, run where a GPU is present (skipped otherwise; marked ``gpu``): the streaming evaluator fed
CUDA tensors equals its numpy result, the torchmetrics adapter moves to the GPU, detcal-main trains, predicts and
resumes on one GPU, and torchrun with the NCCL backend trains on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

REPO = Path(__file__).resolve().parents[2]


def _mini79() -> tuple[Any, Any]:
    from detcal.data import bundled
    from detcal.data.coco import load_coco_instances, load_coco_results

    ds = load_coco_instances(bundled.path("coco_mini79"))
    return ds, load_coco_results(bundled.path("coco_mini79", "rfcn-resnet-101"))


def _spec() -> Any:
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

    return EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.75]), bootstrap=BootstrapSpec(n=0))


def test_streaming_evaluator_on_cuda_tensors_equals_numpy() -> None:
    from support.streaming_common import assert_same_numbers

    from detcal.integrations.evaluator import DetectionCalibration, from_records

    ds, dets = _mini79()
    on_numpy = DetectionCalibration(_spec())
    on_cuda = DetectionCalibration(_spec())
    for preds, targets in from_records(ds, dets, batch=8, box_format="xyxy"):
        on_numpy.update(preds, targets)
        on_cuda.update(
            [{k: torch.as_tensor(v).cuda() for k, v in p.items()} for p in preds],
            [{k: torch.as_tensor(v).cuda() for k, v in t.items()} for t in targets],
        )
    assert assert_same_numbers(on_numpy.compute(), on_cuda.compute()) > 100


def test_torchmetrics_adapter_moves_to_cuda_and_equals_numpy() -> None:
    pytest.importorskip("torchmetrics")
    from support.streaming_common import assert_same_numbers

    from detcal.integrations.evaluator import DetectionCalibration, from_records
    from detcal.integrations.torchmetrics import DetectionCalibrationMetric

    ds, dets = _mini79()
    metric = DetectionCalibrationMetric(_spec(), box_format="xyxy").to("cuda")
    plain = DetectionCalibration(_spec())
    for preds, targets in from_records(ds, dets, batch=16, box_format="xyxy"):
        plain.update(preds, targets)
        metric.update(
            [{k: torch.as_tensor(v, device="cuda") for k, v in p.items()} for p in preds],
            [{k: torch.as_tensor(v, device="cuda") for k, v in t.items()} for t in targets],
        )
    out = metric.compute()
    assert all(v.device.type == "cpu" or v.is_cuda for v in out.values())
    assert assert_same_numbers(plain.compute(), metric.result) > 100
    for name, node in plain.compute().headline.items():
        assert float(out[name]) == node["value"]


def test_main_job_trains_predicts_and_resumes_on_one_gpu(tmp_path: Path) -> None:
    from test_main_job import TINY, main_spec, run

    spec = main_spec([*TINY, "trainer=gpu", "trainer.threads=null", "trainer.num_workers=0"])
    assert spec.trainer.device == "cuda"
    run_dir = tmp_path / "run"
    table = run(spec, run_dir)
    assert table, "no Table 1 from the GPU run"
    assert table["rows"], table
    ckpts = sorted((run_dir / "train").rglob("stage*_final.pt"))
    assert len(ckpts) == 2
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
    assert state, "the final checkpoint loads on the CPU"
    mtimes = {p: p.stat().st_mtime_ns for p in ckpts}
    again = run(spec, run_dir)  # unchanged rerun: every stage reused, nothing retrained
    stages = {k: v["status"] for k, v in json.loads((run_dir / "stages.json").read_text()).items()}
    assert stages["stage1"].startswith("skipped") and stages["stage2"].startswith("skipped"), stages
    assert {p: p.stat().st_mtime_ns for p in ckpts} == mtimes
    assert again["rows"] == table["rows"]


def test_torchrun_nccl_trains_on_the_gpu(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
        "-m", "detcal.training.distributed", "--data", "toy:8", "--batch-size", "4", "--iterations", "3",
        "--device", "cuda", "--no-progress", "--out-dir", str(tmp_path / "ddp"),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert list((tmp_path / "ddp").rglob("*.pt")), "no checkpoint written"
