"""Automatic block reading of COCO results (``data.chunk_bytes=null``) and the typed instances decoder.

Blocks are decoded in place; a file small enough to have been read whole reports a bad file with
the whole-file reader's error; the usual instances file is decoded straight into columns."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.data import _fast_results, coco_source
from detcal.data.coco import load_coco_instances
from detcal.data.coco_source import load_coco


def _files(tmp_path: Path, n: int = 400) -> tuple[Path, list[dict]]:
    rng = np.random.default_rng(7)
    images = [{"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"} for i in range(1, 21)]
    anns = [
        {"id": k + 1, "image_id": 1 + k % 20, "category_id": 1 + k % 3, "bbox": [1.5, 2, 30, 40.25], "area": 1207.5}
        for k in range(60)
    ]
    cats = [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)]
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    recs = [
        {
            "image_id": int(rng.integers(1, 21)),
            "category_id": int(rng.integers(1, 4)),
            "bbox": [round(float(v), 2) for v in rng.uniform(0, 300, 4)],
            "score": round(float(rng.random()), 4),
        }
        for _ in range(n)
    ]
    return gt, recs


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coco_source, "AUTO_CHUNK_ABOVE", 1000)
    monkeypatch.setattr(coco_source, "AUTO_CHUNK_BYTES", 700)


def _error(gt: Path, res: Path, **kw) -> str:
    with pytest.raises(DetcalInputError) as e:
        load_coco(gt, res, **kw)
    return str(e.value)


def test_automatic_blocks_give_the_whole_load(tmp_path: Path, small_blocks: None) -> None:
    gt, recs = _files(tmp_path)
    res = tmp_path / "r.json"
    res.write_text(json.dumps(recs, indent=1))
    auto, whole = load_coco(gt, res), load_coco(gt, res, chunk_bytes=0)
    for f in ("image_id", "category", "box", "score", "wh"):
        np.testing.assert_array_equal(getattr(auto.detections, f), getattr(whole.detections, f), err_msg=f)


@pytest.mark.parametrize("damage", ["syntax", "uncertainty", "value"])
def test_a_file_read_in_automatic_blocks_reports_the_whole_file_error(
    tmp_path: Path, small_blocks: None, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    gt, recs = _files(tmp_path)
    if damage == "uncertainty":
        for r in recs[250:]:
            r["bbox_std"] = [1.0, 1.0, 1.0, 1.0]
    if damage == "value":
        recs[321]["score"] = 1.5
    text = json.dumps(recs)
    if damage == "syntax":
        text = text[: len(text) // 2 + 7] + "}," + text[len(text) // 2 + 7 :]
    res = tmp_path / "r.json"
    res.write_text(text)
    whole = _error(gt, res, chunk_bytes=0)
    assert _error(gt, res) == whole  # automatic blocks, a file under WHOLE_FILE_ERRORS_UP_TO
    blocks = _error(gt, res, chunk_bytes=700)  # blocks asked for: the block reader's own error
    monkeypatch.setattr(coco_source, "WHOLE_FILE_ERRORS_UP_TO", 100)
    assert _error(gt, res) == blocks
    if damage == "value":
        assert blocks == whole and "record 321" in whole
    else:
        assert blocks != whole


def test_the_usual_instances_file_is_decoded_into_columns(tmp_path: Path) -> None:
    gt, _ = _files(tmp_path)
    data = gt.read_bytes()
    typed = _fast_results.decode_instances(data)
    assert typed is not None and typed.columns is not None
    ds = load_coco_instances(gt)
    saved = _fast_results.decode_instances
    _fast_results.decode_instances = lambda data: None  # the general reader
    try:
        general = load_coco_instances(gt)
    finally:
        _fast_results.decode_instances = saved
    for f in ("image_id", "box", "category", "iscrowd", "ignore", "id", "wh", "area"):
        np.testing.assert_array_equal(getattr(ds.gt, f), getattr(general.gt, f), err_msg=f)
    # an annotation outside the usual types (an id written as a float) is read value by value
    doc = json.loads(data)
    doc["annotations"][3]["id"] = 4.0
    loose = _fast_results.decode_instances(json.dumps(doc).encode())
    assert loose is not None and loose.columns is None
