"""The detectron2 and mmdetection adapters turn those frameworks' outputs into ``update`` calls.

detectron2 is not installed: stand-ins with exactly the fields of detectron2 0.6's ``Instances``
(``pred_boxes.tensor``, ``scores``, ``pred_classes``, probdet's ``pred_boxes_covariance``; inputs with
``image_id``, ``height``, ``width`` and optionally ``instances.gt_boxes`` / ``gt_classes``).
mmengine is installed (test extra): the mmdet adapter runs inside mmengine's own ``Evaluator``, fed
``BaseDataElement`` / ``InstanceData`` samples with mmdet 3.x's field names."""

from __future__ import annotations

import numpy as np
import pytest
from support.streaming_common import assert_same_numbers, text

from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.integrations.evaluator import DetectionCalibration, from_records
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

torch = pytest.importorskip("torch")

SPEC = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5]), bootstrap=BootstrapSpec(n=0))


class Boxes:  # detectron2.structures.Boxes: the xyxy tensor as .tensor
    def __init__(self, tensor):
        self.tensor = tensor


class Instances:  # detectron2.structures.Instances: fields as attributes, has() / get()
    def __init__(self, **fields):
        self._fields = fields

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._fields[name]

    def has(self, name):
        return name in self._fields

    def get(self, name):
        return self._fields[name]


@pytest.fixture(scope="module")
def mini79():
    ds = load_coco_instances(bundled.path("coco_mini79"))
    dets = load_coco_results(bundled.path("coco_mini79", "ssd-resnet-50-v1"))
    return ds, dets, sorted(ds.categories)


def _cov(n: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).normal(size=(n, 4, 4))
    return np.einsum("nij,nkj->nik", a, a) + 4 * np.eye(4)


def test_detectron2_adapter_equals_the_evaluator(mini79) -> None:
    from detcal.integrations.detectron2 import DetectionCalibrationEvaluator

    ds, dets, ids = mini79
    ref = DetectionCalibration(SPEC, ground_truth=ds)
    from_gt = DetectionCalibrationEvaluator(ds, SPEC, class_ids=ids)
    from_inputs = DetectionCalibrationEvaluator(None, SPEC, class_ids=ids, categories=ds.categories)
    for preds, targets in from_records(ds, dets, batch=4):
        contiguous = [torch.as_tensor(np.searchsorted(ids, p["labels"])) for p in preds]
        outputs = [
            {
                "instances": Instances(
                    pred_boxes=Boxes(torch.as_tensor(p["boxes"])), scores=torch.as_tensor(p["scores"]), pred_classes=c
                )
            }
            for p, c in zip(preds, contiguous)
        ]
        inputs = [{"image_id": t["image_id"], "height": t["height"], "width": t["width"]} for t in targets]
        from_gt.process(inputs, outputs)
        gt_in = [
            {
                **i,
                "instances": Instances(
                    gt_boxes=Boxes(torch.as_tensor(t["boxes"])),
                    gt_classes=torch.as_tensor(np.searchsorted(ids, t["labels"])),
                ),
            }
            for i, t in zip(inputs, targets)
        ]
        from_inputs.process(gt_in, outputs)
        ref.update([{**p, "image_id": t["image_id"]} for p, t in zip(preds, targets)])
    out = from_gt.evaluate()
    assert text(from_gt.result) == text(ref.compute())
    assert out["calibration"]["ece"] == ref.compute().headline["ece"]["value"]
    # GT from the inputs (no crowd flags or mask areas there): its own stream, the same detections
    alt = DetectionCalibration(SPEC, categories=ds.categories)
    for preds, targets in from_records(ds, dets, batch=4):
        alt.update(preds, [{k: t[k] for k in ("boxes", "labels", "image_id", "width", "height")} for t in targets])
    from_inputs.evaluate()
    assert text(from_inputs.result) == text(alt.compute())
    from_gt.reset()
    assert len(from_gt._ev) == 0


def test_detectron2_probdet_covariance_is_read_over_the_corners(mini79) -> None:
    from detcal.integrations.detectron2 import DetectionCalibrationEvaluator

    ds, dets, ids = mini79
    ev = DetectionCalibrationEvaluator(ds, SPEC, class_ids=ids)
    ref = DetectionCalibration(SPEC, ground_truth=ds)
    for k, (preds, targets) in enumerate(from_records(ds, dets, batch=8)):
        for p, t in zip(preds, targets):
            c = _cov(len(p["scores"]), k)  # over (x1, y1, x2, y2)
            inst = Instances(
                pred_boxes=Boxes(torch.as_tensor(p["boxes"])),
                scores=torch.as_tensor(p["scores"]),
                pred_classes=torch.as_tensor(np.searchsorted(ids, p["labels"])),
                pred_boxes_covariance=torch.as_tensor(c),
            )
            ev.process([{"image_id": t["image_id"], "height": t["height"], "width": t["width"]}], [{"instances": inst}])
            # by hand: (x, y, w, h) = (x1, y1, x2 - x1, y2 - y1), each a signed sum of corner coordinates
            terms = [[(0, 1.0)], [(1, 1.0)], [(2, 1.0), (0, -1.0)], [(3, 1.0), (1, -1.0)]]
            xywh = np.zeros_like(c)
            for i in range(4):
                for j in range(4):
                    for u, su in terms[i]:
                        for v, sv in terms[j]:
                            xywh[:, i, j] += su * sv * c[:, u, v]
            ref.update([{**p, "image_id": t["image_id"], "box_cov": xywh}])
    ev.evaluate()
    r = ref.compute()
    assert ev.result.record["regression"]["_sample"]["n"] > 100
    assert_same_numbers(ev.result, r)  # the same covariances up to the order of the sums


def test_mmdet_metric_inside_mmengines_evaluator(mini79) -> None:
    mmengine = pytest.importorskip("mmengine")
    from mmengine.evaluator import BaseMetric, Evaluator
    from mmengine.registry import METRICS
    from mmengine.structures import BaseDataElement, InstanceData

    from detcal.integrations.mmdet import MMDetCalibrationMetric

    ds, dets, ids = mini79
    metric = METRICS.build(
        {"type": "MMDetCalibrationMetric", "spec": SPEC, "class_ids": ids, "categories": ds.categories}
    )
    assert isinstance(metric, BaseMetric) and isinstance(metric, MMDetCalibrationMetric) and mmengine.__version__
    evaluator = Evaluator(metric)
    ref = DetectionCalibration(SPEC, categories=ds.categories)
    for preds, targets in from_records(ds, dets, batch=8):
        samples = []
        for p, t in zip(preds, targets):
            pred = InstanceData(
                bboxes=torch.as_tensor(p["boxes"]),
                scores=torch.as_tensor(p["scores"]),
                labels=torch.as_tensor(np.searchsorted(ids, p["labels"])),
            )
            inst = [
                {"bbox": b.tolist(), "bbox_label": int(np.searchsorted(ids, lab)), "ignore_flag": int(c)}
                for b, lab, c in zip(t["boxes"], t["labels"], t["iscrowd"])
            ]
            samples.append(
                BaseDataElement(
                    pred_instances=pred, img_id=t["image_id"], ori_shape=(t["height"], t["width"]), instances=inst
                )
            )
        evaluator.process(samples)
        ref.update(
            preds, [{k: t[k] for k in ("boxes", "labels", "iscrowd", "image_id", "width", "height")} for t in targets]
        )
    out = evaluator.evaluate(len(ds.images))
    expected = ref.compute()
    assert text(metric.result) == text(expected)
    assert out["detcal/ece"] == expected.headline["ece"]["value"]


def test_mmdet_adapter_without_mmengine_has_the_same_shape() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "class _No:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('mmengine', 'torch'):\n"
        "            raise ImportError('blocked by the test')\n"
        "sys.meta_path.insert(0, _No())\n"
        "import numpy as np\n"
        "from detcal.integrations.mmdet import MMDetCalibrationMetric\n"
        "m = MMDetCalibrationMetric(class_ids=[5, 9])\n"
        "box = np.array([[0.0, 0, 10, 10], [20, 20, 30, 30]])\n"
        "s = {'pred_instances': {'bboxes': box, 'scores': np.array([0.9, 0.4]), 'labels': np.array([0, 1])},\n"
        "     'img_id': 3, 'ori_shape': (40, 50), 'instances': [{'bbox': [0, 0, 10, 10], 'bbox_label': 0, 'ignore_flag': 0}]}\n"
        "m.process(None, [s])\n"
        "out = m.compute_metrics(m.results)\n"
        "assert m.prefix == 'detcal' and len(m.results) == 1\n"
        "assert m.result.record['detections']['per_threshold']['iou=0.50']['true_positives'] == 1\n"
        "assert 'torch' not in sys.modules and 'ece' in out\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
