"""Tests of detcal.data.classmap and configs/classmap/coco_kitti_v1.yaml."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_TYPES, Dataset, Detections, GroundTruth, Images
from detcal.data.classmap import DEFAULT_CLASS_MAP, load_class_map


def test_default_map_choices() -> None:
    cm = load_class_map()
    assert cm.version == 1 and cm.source == str(DEFAULT_CLASS_MAP)
    assert cm.coco_to_kitti("person") == "Pedestrian"
    assert cm.coco_to_kitti("bicycle") == "Cyclist"
    assert cm.coco_to_kitti("car") == "Car"
    assert cm.coco_to_kitti("truck") == "Truck"
    assert cm.coco_to_kitti("train") == "Tram"
    assert cm.coco_to_kitti("bus") is None and cm.coco_to_kitti("motorcycle") is None
    assert cm.coco_to_kitti("dog") is None  # not in the map at all
    for t in ("Van", "Person_sitting", "Misc", "DontCare"):
        assert cm.kitti_to_coco(t) is None
    assert cm.kitti_to_coco("pedestrian") == "person"  # case-insensitive like the devkit
    with pytest.raises(DetcalInputError):
        cm.kitti_to_coco("Bus")


def test_every_choice_is_commented() -> None:
    text = DEFAULT_CLASS_MAP.read_text()
    assert "version: 1" in text
    lines = text.splitlines()
    # each of these entries is preceded by a comment line explaining it
    for entry in (
        "person: Pedestrian",
        "bicycle: Cyclist",
        "bus: null",
        "train: Tram",
        "motorcycle: null",
        "Van: null",
        "Person_sitting: null",
        "Misc: null",
        "DontCare: null",
    ):
        i = next(k for k, line in enumerate(lines) if line.strip() == entry)
        assert lines[i - 1].strip().startswith("#"), entry


def _kitti_dataset() -> Dataset:
    # categories: Car=1, Van=2, Pedestrian=4, Person_sitting=5, Cyclist=6, DontCare=9
    gt = GroundTruth(
        image_id=[0, 0, 1, 1, 1, 2],
        box=np.tile([0, 0, 10, 10], (6, 1)),
        category=[1, 2, 4, 5, 6, 9],
        ignore=[0, 0, 1, 0, 0, 1],
        id=[1, 2, 3, 4, 5, 6],
    )
    images = Images(id=[0, 1, 2], width=[100] * 3, height=[100] * 3)
    return Dataset(images=images, gt=gt, categories={i + 1: n for i, n in enumerate(KITTI_TYPES)})


def test_remap_dataset_kitti_to_coco() -> None:
    out = load_class_map().remap_dataset(_kitti_dataset(), "kitti_to_coco")
    # kept: Car -> car (3), Pedestrian -> person (1), Cyclist -> bicycle (2); Van, Person_sitting, DontCare dropped
    np.testing.assert_array_equal(out.gt.category, [3, 1, 2])
    np.testing.assert_array_equal(out.gt.id, [1, 3, 5])
    np.testing.assert_array_equal(out.gt.ignore, [False, True, False])
    assert len(out.images) == 3  # images are kept, even image 2 which lost its only box
    assert out.categories == {1: "person", 2: "bicycle", 3: "car", 7: "train", 8: "truck"}


def test_remap_detections_coco_to_kitti() -> None:
    coco_cats = {1: "person", 2: "bicycle", 3: "car", 4: "motorcycle", 6: "bus", 18: "dog"}
    dets = Detections(
        image_id=[0, 0, 1, 1, 2, 2],
        box=np.tile([0, 0, 5, 5], (6, 1)),
        score=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4],
        category=[3, 6, 1, 18, 2, 4],
        box_std=np.ones((6, 4)),
    )
    out = load_class_map().remap_detections(dets, coco_cats, "coco_to_kitti")
    # car -> Car (1), person -> Pedestrian (4), bicycle -> Cyclist (6); bus, dog, motorcycle dropped
    np.testing.assert_array_equal(out.category, [1, 4, 6])
    np.testing.assert_array_equal(out.score, [0.9, 0.7, 0.5])
    assert out.box_std.shape == (3, 4)
    with pytest.raises(DetcalInputError) as info:
        load_class_map().remap_detections(dets, {1: "person"}, "coco_to_kitti")
    assert info.value.record == 0 and info.value.field == "detections.category"
    with pytest.raises(DetcalInputError):
        load_class_map().remap_detections(dets, coco_cats, "kitti_to_kitti")


def _write_map(tmp_path: Path, edit) -> Path:
    doc = yaml.safe_load(DEFAULT_CLASS_MAP.read_text())
    edit(doc)
    p = tmp_path / "map.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_invalid_maps(tmp_path: Path) -> None:
    cases = [
        (lambda d: d.update(version=2), "(top level)", "version"),
        (lambda d: d["coco_to_kitti"].update(bus="Bus"), "coco_to_kitti", "bus"),
        (lambda d: d["kitti_to_coco"].pop("Misc"), "kitti_to_coco", "Misc"),
        (lambda d: d["kitti_to_coco"].update(Van="car"), "kitti_to_coco", "Van"),  # car -> Car, not Van
        (lambda d: d["kitti_to_coco"].update(Misc="kite"), "kitti_to_coco", "Misc"),  # no COCO id
    ]
    for edit, record, field in cases:
        p = _write_map(tmp_path, edit)
        with pytest.raises(DetcalInputError) as info:
            load_class_map(p)
        assert (info.value.file, info.value.record, info.value.field) == (str(p), record, field)
