"""docs/api.md's plain-loop example of the streaming evaluator runs word for word (a stand-in model
that returns the bundled detector's results for the loader's images), and gives detcal.evaluate's
numbers on the same files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.integrations.evaluator import from_records

REPO = Path(__file__).resolve().parents[2]


def _plain_loop_block() -> str:
    text = (REPO / "docs" / "api.md").read_text()
    section = text[text.index("## During training") :]
    after = section[section.index("Plain PyTorch loop") :]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_plain_loop_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    ds = load_coco_instances(bundled.path("coco_mini79"))
    dets = load_coco_results(bundled.path("coco_mini79", "rfcn-resnet-101"))
    by_image, loader = {}, []
    for preds, targets in from_records(ds, dets, batch=4):  # xyxy pixels, as torchvision's detectors give
        for p, t in zip(preds, targets):
            by_image[t["image_id"]] = {k: torch.as_tensor(v) for k, v in p.items()}
        images = torch.tensor([t["image_id"] for t in targets])  # stand-in images: their ids
        loader.append((images, [{**{k: torch.as_tensor(v) for k, v in t.items()}} for t in targets]))

    class Model(torch.nn.Module):
        def forward(self, images):
            return [by_image[int(i)] for i in images]

    monkeypatch.chdir(tmp_path)
    exec(_plain_loop_block(), {"model": Model(), "val_loader": loader})
    written = json.loads((tmp_path / "calibration" / "epoch_3" / "metrics.json").read_text())
    offline = detcal.evaluate(str(bundled.path("coco_mini79")), str(bundled.path("coco_mini79", "rfcn-resnet-101")))
    assert np.isclose(written["headline"]["ece"]["value"], offline.headline["ece"]["value"], rtol=1e-12, atol=1e-12)
    assert written["data"]["counts"]["detections"] == len(dets)
