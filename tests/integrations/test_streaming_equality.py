"""The streaming evaluator gives the offline evaluation's numbers.

Real detections (the bundled COCO sets) are fed image by image, in batches of
1, 8 and 64 images, in the results file's image order and shuffled; the
metrics.json of ``compute()`` is compared with ``detcal.evaluate`` on the same
files (or the same bundled records): every integer, flag and text exactly,
every float to 1e-12. With ``order="arrival"`` and the file's image order the
arrays are those of the offline run, so the text is bitwise equal; in the
default ``order="image_id"`` the result does not depend on order, batches or
merges at all (bitwise equal to each other)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from support.streaming_common import assert_same_numbers, text

import detcal
from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.integrations.evaluator import DetectionCalibration, from_records
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

SPEC = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.75]), bootstrap=BootstrapSpec(n=10))


def _file_image_order(ds: detcal.core.types.Dataset, dets: detcal.core.types.Detections) -> np.ndarray:
    """Image rows in the order the results file first names them, then the images without detections."""
    row = ds.images.index_of(dets.image_id)
    _, first = np.unique(row, return_index=True)
    named = row[np.sort(first)]
    return np.concatenate([named, np.setdiff1d(np.arange(len(ds.images)), named)])


def _stream(ds, dets, spec, *, batch=8, rows=None, fmt="xyxy", order="image_id") -> DetectionCalibration:
    m = DetectionCalibration(spec, box_format=fmt, categories=ds.categories, order=order)
    for preds, targets in from_records(ds, dets, batch=batch, image_order=rows, box_format=fmt):
        m.update(preds, targets)
    return m


@pytest.fixture(scope="module")
def mini79() -> dict:
    out = {"gt": str(bundled.path("coco_mini79")), "ds": load_coco_instances(bundled.path("coco_mini79"))}
    for d in bundled.DETECTORS:
        path = str(bundled.path("coco_mini79", d))
        out[d] = (path, load_coco_results(path), detcal.evaluate(out["gt"], path, spec=SPEC))
    return out


@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_mini79_every_detector_equals_detcal_evaluate_on_the_files(mini79: dict, detector: str) -> None:
    ds, (_, dets, offline) = mini79["ds"], mini79[detector]
    rows = _file_image_order(ds, dets)
    arrival = _stream(ds, dets, SPEC, rows=rows, fmt="xywh", order="arrival").compute()
    assert text(arrival) == text(offline)  # the offline arrays: bitwise
    by_id = _stream(ds, dets, SPEC, rows=rows, fmt="xywh").compute()
    assert assert_same_numbers(by_id, offline) > 1000


def test_mini79_batches_and_orders_give_one_result(mini79: dict) -> None:
    ds, (_, dets, offline) = mini79["ds"], mini79["rfcn-resnet-101"]
    shuffled = np.random.default_rng(7).permutation(len(ds.images))
    file_order = _file_image_order(ds, dets)
    results = [
        _stream(ds, dets, SPEC, batch=b, rows=r, fmt="xywh").compute()
        for b, r in ((1, shuffled), (8, file_order), (64, shuffled))
    ]
    for r in results:
        assert text(r) == text(results[0])  # order- and batch-free: bitwise
    assert_same_numbers(results[0], offline)


def test_tfzoo_one_detector_equals_the_bundled_evaluation() -> None:
    spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5]), bootstrap=BootstrapSpec(n=0))
    ds, dets = bundled.load("coco_tfzoo", "ssd-inception-v2")
    offline = detcal.evaluate(
        detcal.DataSpec(source="bundled", bundle="coco_tfzoo", detector="ssd-inception-v2"), spec=spec
    )
    m = _stream(ds, dets, spec, batch=64, order="arrival")
    assert text(m.compute()) == text(offline)
    assert m.state_bytes()["per_detection"] == 44.0  # xyxy float64 [4] + score float64 + label int32


@pytest.mark.slow
@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_tfzoo_every_detector_batches_and_orders_default_spec(detector: str) -> None:
    """All 5,000 images, the default spec (10 thresholds of the bootstrap included): batches of 1, 8 and
    64, the bundled order (bitwise, order="arrival") and shuffled (order="image_id", 1e-12)."""
    ds, dets = bundled.load("coco_tfzoo", detector)
    spec = EvaluationSpec()
    offline = detcal.evaluate(detcal.DataSpec(source="bundled", bundle="coco_tfzoo", detector=detector), spec=spec)
    assert text(_stream(ds, dets, spec, batch=64, order="arrival").compute()) == text(offline)
    shuffled = np.random.default_rng(5).permutation(len(ds.images))
    one = _stream(ds, dets, spec, batch=1, rows=shuffled).compute()
    eight = _stream(ds, dets, spec, batch=8).compute()
    assert text(one) == text(eight)
    assert_same_numbers(one, offline)


def test_delta_records_with_regression_metrics_equal_the_files(tmp_path) -> None:
    from detcal.data.synthetic import write_synthetic

    p = write_synthetic(tmp_path, n_images=40, seed=3, render=False)
    ds, dets = load_coco_instances(p["coco_instances"]), load_coco_results(p["coco_results"])
    offline = detcal.evaluate(str(p["coco_instances"]), str(p["coco_results"]), spec=SPEC)
    assert dets.uncertainty_kind == "delta" and offline.record["regression"]["_sample"]["n"] > 50
    shuffled = np.random.default_rng(1).permutation(len(ds.images))
    assert_same_numbers(_stream(ds, dets, SPEC, batch=8, rows=shuffled, fmt="xywh").compute(), offline)


def test_merge_and_add_equal_one_evaluator(mini79: dict) -> None:
    ds, (_, dets, offline) = mini79["ds"], mini79["ssd-resnet-50-v1"]
    rows = np.random.default_rng(2).permutation(len(ds.images))
    whole = _stream(ds, dets, SPEC, rows=rows, fmt="xywh").compute()
    a = _stream(ds, dets, SPEC, rows=rows[:30], fmt="xywh")
    b = _stream(ds, dets, SPEC, rows=rows[30:], fmt="xywh")
    c = a + b  # a new evaluator; a and b unchanged
    assert len(a) == 30 and len(c) == len(ds.images)
    assert text(c.compute()) == text(whole)
    assert text(b.merge(a).compute()) == text(whole)
    assert_same_numbers(whole, offline)
    a.reset()
    assert len(a) == 0 and a.n_detections == 0


def test_state_dict_round_trip(mini79: dict) -> None:
    ds, (_, dets, _) = mini79["ds"], mini79["ssd-inception-v2"]
    m = _stream(ds, dets, SPEC, fmt="xywh")
    restored = DetectionCalibration(SPEC, box_format="xywh", categories=ds.categories)
    restored.load_state_dict(m.state_dict())
    assert text(restored.compute()) == text(m.compute())


def test_torch_tensors_equal_numpy_and_numpy_never_imports_torch(mini79: dict) -> None:
    torch = pytest.importorskip("torch")
    ds, (_, dets, _) = mini79["ds"], mini79["rfcn-resnet-101"]
    a = DetectionCalibration(SPEC, box_format="xywh", categories=ds.categories)
    b = DetectionCalibration(SPEC, box_format="xywh", categories=ds.categories)
    for preds, targets in from_records(ds, dets, batch=8, box_format="xywh"):
        a.update(preds, targets)
        tp = [{k: torch.as_tensor(v) for k, v in p.items()} for p in preds]
        tt = [{k: torch.as_tensor(v) if k != "image_id" else torch.tensor([v]) for k, v in t.items()} for t in targets]
        b.update(tp, tt)
    assert text(a.compute()) == text(b.compute())
    code = (
        "import sys, numpy as np; from detcal.integrations.evaluator import DetectionCalibration as D; "
        "m = D(); m.update([{'boxes': np.zeros((1, 4)), 'scores': np.ones(1), 'labels': np.ones(1)}], "
        "[{'boxes': np.zeros((0, 4)), 'labels': np.zeros(0)}]); assert 'torch' not in sys.modules"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_float32_input_is_kept_at_float32_and_gives_its_float64_values() -> None:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 200, (50, 2)).astype(np.float32)
    box = np.concatenate([xy, xy + rng.uniform(5, 50, (50, 2)).astype(np.float32)], axis=1)
    score = rng.uniform(0, 1, 50).astype(np.float32)
    pred = {"boxes": box, "scores": score, "labels": np.ones(50, np.int64)}
    tgt = {
        "boxes": box[:10].astype(np.float64),
        "labels": np.ones(10, np.int64),
        "image_id": 3,
        "width": 300,
        "height": 300,
    }
    m32, m64 = DetectionCalibration(SPEC), DetectionCalibration(SPEC)
    m32.update([pred], [tgt])
    m64.update([{**pred, "boxes": box.astype(np.float64), "scores": score.astype(np.float64)}], [tgt])
    assert m32.state_bytes()["per_detection"] == 16 + 4 + 4
    assert text(m32.compute()) == text(m64.compute())
