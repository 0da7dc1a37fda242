"""Across ranks: two gloo processes under torchrun, each fed its DistributedSampler share of the
bundled mini79 images (interleaved, uneven: 40 and 39 images, one padded copy), give on every
rank the result of one process. Checked for the framework-free evaluator (its own gather) and for
the torchmetrics Metric (torchmetrics' own ``cat`` state sync)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.streaming_common import assert_same_numbers, text

import detcal
from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.integrations.evaluator import DetectionCalibration, from_records
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

DETECTOR = "faster-rcnn-resnet-50"

SCRIPT = r"""
import json, sys
import numpy as np
import torch.distributed as dist
sys.path.insert(0, sys.argv[2])
from support.streaming_common import text
from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.integrations.evaluator import DetectionCalibration, from_records
from detcal.integrations.torchmetrics import DetectionCalibrationMetric
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.75]), bootstrap=BootstrapSpec(n=10))
ds = load_coco_instances(bundled.path("coco_mini79"))
dets = load_coco_results(bundled.path("coco_mini79", "@DETECTOR@"))
rows = np.arange(len(ds.images))[rank::world]
padded = np.concatenate([rows, rows[:1]]) if rank == 1 else rows  # DistributedSampler pads with repeats
plain = DetectionCalibration(spec, box_format="xywh", categories=ds.categories)
pad = DetectionCalibration(spec, box_format="xywh", categories=ds.categories, duplicate_images="first")
group = DetectionCalibration(spec, box_format="xywh", categories=ds.categories, process_group=dist.new_group([0, 1]))
metric = DetectionCalibrationMetric(spec, box_format="xywh", categories=ds.categories)
for preds, targets in from_records(ds, dets, batch=8, image_order=rows, box_format="xywh"):
    plain.update(preds, targets)
    group.update(preds, targets)
    metric.update(preds, targets)
for preds, targets in from_records(ds, dets, batch=8, image_order=padded, box_format="xywh"):
    pad.update(preds, targets)
head = {k: float(v) for k, v in metric.compute().items()}
out = {"plain": text(plain.compute()), "pad": text(pad.compute()), "group": text(group.compute()),
       "metric": text(metric.result), "head": head, "local_images": len(plain)}
open(f"{sys.argv[1]}/rank{rank}.json", "w").write(json.dumps(out))
dist.destroy_process_group()
""".replace("@DETECTOR@", DETECTOR)


@pytest.mark.slow
def test_two_gloo_ranks_give_every_rank_the_one_process_result(tmp_path: Path) -> None:
    pytest.importorskip("torchmetrics")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    tests_dir = str(Path(__file__).resolve().parents[1])  # tests/, where the support package lives
    with socket.socket() as sock:  # a free port: other test runs may use torchrun at the same time
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={port}",
            str(script),
            str(tmp_path),
            tests_dir,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["local_images"] for r in ranks] == [40, 39]
    spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.75]), bootstrap=BootstrapSpec(n=10))
    ds = load_coco_instances(bundled.path("coco_mini79"))
    dets = load_coco_results(bundled.path("coco_mini79", DETECTOR))
    one = DetectionCalibration(spec, box_format="xywh", categories=ds.categories)
    for preds, targets in from_records(ds, dets, batch=8, box_format="xywh"):
        one.update(preds, targets)
    single = one.compute()
    for r in ranks:
        assert r["plain"] == r["pad"] == r["group"] == r["metric"] == text(single)  # bitwise, on every rank
        assert r["head"] == ranks[0]["head"]
        assert np.isclose(r["head"]["ece"], single.headline["ece"]["value"], rtol=0, atol=0)
    offline = detcal.evaluate(str(bundled.path("coco_mini79")), str(bundled.path("coco_mini79", DETECTOR)), spec=spec)
    assert_same_numbers(single, offline)
