"""The torchmetrics adapter is a real ``torchmetrics.Metric``: it sits in a ``MetricCollection``
beside torchmetrics' own ``MeanAveragePrecision`` (the same update calls feed both), clones,
resets and moves like one, and its result is that of the framework-free evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from support.streaming_common import text

from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.integrations.evaluator import DetectionCalibration, from_records
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

torch = pytest.importorskip("torch")
torchmetrics = pytest.importorskip("torchmetrics")
from detcal.integrations.torchmetrics import DetectionCalibrationMetric  # noqa: E402

SPEC = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5]), bootstrap=BootstrapSpec(n=0))


def _batches(fmt: str = "xywh"):
    ds = load_coco_instances(bundled.path("coco_mini79"))
    dets = load_coco_results(bundled.path("coco_mini79", "rfcn-resnet-101"))
    for preds, targets in from_records(ds, dets, batch=8, box_format=fmt):
        tp = [{k: torch.as_tensor(v) for k, v in p.items()} for p in preds]
        tt = [{k: torch.as_tensor(v) for k, v in t.items()} for t in targets]
        yield tp, tt
    return ds


def test_metric_in_a_collection_beside_mean_average_precision() -> None:
    pytest.importorskip("pycocotools")
    from torchmetrics.detection import MeanAveragePrecision

    cats = load_coco_instances(bundled.path("coco_mini79")).categories
    cal = DetectionCalibrationMetric(SPEC, box_format="xywh", categories=cats)
    assert isinstance(cal, torchmetrics.Metric)
    coll = torchmetrics.MetricCollection({"cal": cal, "map": MeanAveragePrecision(box_format="xywh")})
    ref = DetectionCalibration(SPEC, box_format="xywh", categories=cats)
    for preds, targets in _batches():
        coll.update(preds, targets)
        ref.update(preds, targets)
    out = coll.compute()
    expected = ref.compute()
    assert text(coll["cal"].result) == text(expected)
    for name, node in expected.headline.items():
        assert float(out[name]) == node["value"]
    assert "map" in out and 0 < float(out["map"]) < 1
    # a sanity check that both saw the same stream: torchmetrics' MAP converts the boxes itself (detcal's
    # AP is tested equal to pycocotools on the files in tests/matching/test_coco_exact.py), so close, not equal
    assert float(out["AP"]) == pytest.approx(float(out["map"]), abs=1e-3)


def test_clone_reset_and_states() -> None:
    cats = load_coco_instances(bundled.path("coco_mini79")).categories
    m = DetectionCalibrationMetric(SPEC, box_format="xywh", categories=cats)
    for preds, targets in _batches():
        assert m(preds, targets) is None  # forward only updates
    c = m.clone()
    first = {k: float(v) for k, v in m.compute().items()}
    assert {k: float(v) for k, v in c.compute().items()} == first
    assert all(isinstance(getattr(m, n), list) for n in ("det_box", "img_id"))
    m.reset()
    assert m.det_box == [] and m.img_id == []
    for preds, targets in _batches():
        m.update(preds, targets)
    again = {k: float(v) for k, v in m.compute().items()}
    np.testing.assert_equal(again, first)
