"""Tests of detcal.data.kitti: difficulty and ignore flags, lossless round trips, sizes, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_CATEGORIES, Dataset, Detections, GroundTruth, Images
from detcal.data.kitti import (
    kitti_difficulty,
    kitti_rules,
    load_kitti_labels,
    load_kitti_results,
    read_image_size,
    write_kitti_labels,
    write_kitti_results,
)

FIXTURE = Path(__file__).parents[1] / "data" / "kitti" / "label_2"

# Hand derivation for tests/data/kitti/label_2 (rows in frame, line order).
# Level L holds a box when occluded <= maxocc(L), truncated <= maxtrunc(L) and
# height = bottom - top > minh(L): easy 0/0.15/40, moderate 1/0.30/25, hard 2/0.50/25.
#  frame 000000
#   0 Pedestrian  t=0.00 o=0 h=307.92-143.00=164.92            -> easy (0)
#   1 Car         t=0.00 o=0 h=200.12-173.33=26.79 (<=40, >25)  -> moderate (1)
#   2 Car         t=0.45 o=2 h=240.80-180.50=60.30 (o>1, t>0.3) -> hard (2)    [truncated box, x1=0]
#   3 Van         t=0.88 o=3 (t > 0.5)                          -> none (-1)
#   4 DontCare                                                  -> -1, always ignored
#  frame 000001
#   5 Cyclist     t=0.15 o=0 h=140-100=40.00 (not > 40; t=0.15 is allowed) -> moderate (1)
#   6 Person_sit. t=0.00 o=1 h=225-200=25.00 (not > 25)         -> none (-1)
#   7 Pedestrian  t=0.31 o=1 h=200-150=50 (t > 0.30, <= 0.50)   -> hard (2)
#   8 Truck       t=0.00 o=0 h=150-10=140                       -> easy (0)
#   9 Tram        t=0.00 o=1 h=124.99-100=24.99 (<= 25)         -> none (-1)
#  10 Misc        t=0.10 o=0 h=100-50=50                        -> easy (0)
#  11 DontCare                                                  -> -1
#  frame 000002: empty (an image without objects)
EXPECTED_DIFFICULTY = [0, 1, 2, -1, -1, 1, -1, 2, 0, -1, 0, -1]
# ignore = outside the evaluated level: difficulty == -1 or difficulty > level
EXPECTED_IGNORE = {
    "easy": [0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 1],
    "moderate": [0, 0, 1, 1, 1, 0, 1, 1, 0, 1, 0, 1],
    "hard": [0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1],
}
# Car=1 Van=2 Truck=3 Pedestrian=4 Person_sitting=5 Cyclist=6 Tram=7 Misc=8 DontCare=9
EXPECTED_CATEGORY = [4, 1, 1, 2, 9, 6, 5, 4, 3, 7, 8, 9]


def _assert_error(info: pytest.ExceptionInfo, file: Path, record, field: str | None) -> None:
    err = info.value
    assert isinstance(err, DetcalInputError)
    assert err.file == str(file)
    assert err.record == record
    assert err.field == field
    assert str(file) in str(err) and f"'{field}'" in str(err)


def _copy_fixture(tmp_path: Path) -> Path:
    d = tmp_path / "label_2"
    shutil.copytree(FIXTURE, d)
    return d


def _label_dir(tmp_path: Path, files: dict[str, str], name: str = "labels") -> Path:
    d = tmp_path / name
    d.mkdir()
    for name, text in files.items():
        (d / f"{name}.txt").write_text(text)
    return d


GOOD = "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59\n"


# --------------------------------------------------------------------------- labels
@pytest.mark.parametrize("level", ["easy", "moderate", "hard"])
def test_difficulty_and_ignore_per_row(level: str) -> None:
    ds = load_kitti_labels(FIXTURE, difficulty=level)
    np.testing.assert_array_equal(ds.gt.difficulty, EXPECTED_DIFFICULTY)
    np.testing.assert_array_equal(ds.gt.ignore, np.array(EXPECTED_IGNORE[level], bool))
    np.testing.assert_array_equal(ds.gt.category, EXPECTED_CATEGORY)


def test_fields_of_the_fixture() -> None:
    ds = load_kitti_labels(FIXTURE)
    np.testing.assert_array_equal(ds.images.id, [0, 1, 2])
    assert ds.images.file_name == ["000000.png", "000001.png", "000002.png"]
    assert np.isnan(ds.images.width).all()  # no images and no sizes given
    np.testing.assert_array_equal(ds.gt.image_id, [0] * 5 + [1] * 7)
    np.testing.assert_array_equal(ds.gt.box[2], [0.00, 180.50, 150.32, 240.80])
    np.testing.assert_array_equal(ds.gt.box[4], [503.89, 169.71, 590.61, 190.13])
    np.testing.assert_array_equal(ds.gt.occlusion, [0, 0, 2, 3, -1, 0, 1, 1, 0, 1, 0, -1])
    # DontCare truncation -1 is "unknown": NaN in the records
    assert np.isnan(ds.gt.truncation[[4, 11]]).all()
    np.testing.assert_array_equal(ds.gt.truncation[[0, 2, 3, 5]], [0.0, 0.45, 0.88, 0.15])
    np.testing.assert_array_equal(ds.gt.dimensions[0], [1.89, 0.48, 1.20])
    np.testing.assert_array_equal(ds.gt.location[4], [-1000, -1000, -1000])
    assert ds.gt.rotation_y[4] == -10 and ds.gt.alpha[4] == -10
    assert np.signbit(ds.gt.alpha[9])  # "-0.00" keeps its sign
    assert not ds.gt.iscrowd.any()
    assert ds.categories == KITTI_CATEGORIES


def test_kitti_difficulty_function() -> None:
    # height 41 > 40 easy; height exactly 40 -> moderate; occlusion 3 -> none; NaN truncation -> none
    box = np.array([[0, 0, 1, 41], [0, 0, 1, 40], [0, 0, 1, 100], [0, 0, 1, 100]], float)
    out = kitti_difficulty(box, np.array([0.0, 0.0, 0.0, np.nan]), np.array([0, 0, 3, 0]))
    np.testing.assert_array_equal(out, [0, 1, -1, -1])


def test_labels_round_trip_is_byte_for_byte(tmp_path: Path) -> None:
    ds = load_kitti_labels(FIXTURE)
    out = tmp_path / "out"
    write_kitti_labels(out, ds)
    names = sorted(p.name for p in FIXTURE.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        assert (out / name).read_bytes() == (FIXTURE / name).read_bytes(), name


def test_labels_records_round_trip_at_full_precision(tmp_path: Path) -> None:
    """Values that %.2f would not reproduce are written at repr precision."""
    rng = np.random.default_rng(0)
    g = 30
    xy = rng.uniform(0, 1000, (g, 2))
    box = np.concatenate([xy, xy + rng.uniform(1, 200, (g, 2))], axis=1)
    gt = GroundTruth(
        image_id=rng.integers(0, 5, g),
        box=box,
        category=rng.integers(1, 9, g),
        truncation=rng.uniform(0, 1, g),
        occlusion=rng.integers(0, 4, g),
        alpha=rng.uniform(-3, 3, g),
        dimensions=rng.uniform(1, 5, (g, 3)),
        location=rng.uniform(-20, 60, (g, 3)),
        rotation_y=rng.uniform(-3, 3, g),
    )
    ds = Dataset(
        images=Images(id=np.arange(6), width=np.full(6, 1242.0), height=np.full(6, 375.0)),
        gt=gt,
        categories=dict(KITTI_CATEGORIES),
    )
    write_kitti_labels(tmp_path / "l", ds)
    assert (tmp_path / "l" / "000005.txt").read_text() == ""  # an image without boxes still gets a file
    back = load_kitti_labels(tmp_path / "l", difficulty="hard")
    order = np.argsort(gt.image_id, kind="stable")  # files are read by frame, then line
    for name in ("box", "category", "truncation", "occlusion", "alpha", "dimensions", "location", "rotation_y"):
        np.testing.assert_array_equal(getattr(back.gt, name), getattr(gt, name)[order], err_msg=name)


def test_coco_style_dataset_gets_devkit_sentinels(tmp_path: Path) -> None:
    gt = GroundTruth(image_id=[7], box=[[1.5, 2.0, 30.25, 40.0]], category=[1])
    ds = Dataset(images=Images(id=[7], width=[100], height=[100]), gt=gt, categories={1: "Car"})
    write_kitti_labels(tmp_path / "l", ds)
    # truncation NaN and occlusion -1 (unknown), no 3-D fields -> the integer sentinels
    assert (
        tmp_path / "l" / "000007.txt"
    ).read_text() == "Car -1 -1 -10 1.50 2.00 30.25 40.00 -1 -1 -1 -1000 -1000 -1000 -10\n"


def test_kitti_rules() -> None:
    assert kitti_rules("easy").min_height == 40.0
    r = kitti_rules("hard")
    assert r.difficulty == "hard" and r.min_height == 25.0
    assert r.neighbours == {1: (2,), 4: (5,)} and r.dontcare_category == 9 and r.strict
    assert r.class_thresholds == {1: 0.7, 4: 0.5, 6: 0.5}
    with pytest.raises(DetcalInputError):
        kitti_rules("medium")


def test_image_ids_restriction(tmp_path: Path) -> None:
    ds = load_kitti_labels(FIXTURE, image_ids=[1, "000002"])
    np.testing.assert_array_equal(ds.images.id, [1, 2])
    assert len(ds.gt) == 7
    split = tmp_path / "val.txt"
    split.write_text("000000\n000002\n")
    ds = load_kitti_labels(FIXTURE, image_ids=split)
    np.testing.assert_array_equal(ds.images.id, [0, 2])
    assert len(ds.gt) == 5
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(FIXTURE, image_ids=[0, 9])
    _assert_error(info, FIXTURE / "000009.txt", "frame 9", "image_ids")


# --------------------------------------------------------------------------- sizes
def test_sizes_from_png_and_jpeg_headers(tmp_path: Path) -> None:
    from PIL import Image

    images = tmp_path / "image_2"
    images.mkdir()
    Image.new("RGB", (37, 21)).save(images / "000000.png")
    Image.new("RGB", (50, 30)).save(images / "000001.jpg")
    Image.new("RGB", (64, 8)).save(images / "000002.png")
    ds = load_kitti_labels(FIXTURE, image_dir=images)
    np.testing.assert_array_equal(ds.images.width, [37, 50, 64])
    np.testing.assert_array_equal(ds.images.height, [21, 30, 8])
    assert ds.images.file_name == ["000000.png", "000001.jpg", "000002.png"]


def test_png_size_needs_only_the_header(tmp_path: Path) -> None:
    from PIL import Image

    full = tmp_path / "full.png"
    Image.new("RGB", (1242, 375)).save(full)
    cut = tmp_path / "cut.png"
    cut.write_bytes(full.read_bytes()[:40])  # header only: PIL could not decode the pixels
    assert read_image_size(cut) == (1242, 375)
    with pytest.raises(DetcalInputError) as info:
        read_image_size(tmp_path / "missing.png")
    assert info.value.file == str(tmp_path / "missing.png") and info.value.field == "image header"


def test_sizes_from_dict_and_file(tmp_path: Path) -> None:
    ds = load_kitti_labels(FIXTURE, sizes={0: (1242, 375), 1: (1224, 370), 2: (1238, 374)})
    np.testing.assert_array_equal(ds.images.width, [1242, 1224, 1238])
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("000000 1242 375\n000001 1224 370\n\n000002 1238 374\n")
    ds = load_kitti_labels(FIXTURE, sizes=sizes)
    np.testing.assert_array_equal(ds.images.height, [375, 370, 374])
    sizes.write_text("000000 1242 375\n000001 1224\n")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(FIXTURE, sizes=sizes)
    _assert_error(info, sizes, "line 2", "columns")
    sizes.write_text("000000 1242 375\n000001 1224 370\n")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(FIXTURE, sizes=sizes)
    _assert_error(info, sizes, "frame 000002", "sizes")


def test_missing_image_file(tmp_path: Path) -> None:
    images = tmp_path / "image_2"
    images.mkdir()
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(FIXTURE, image_dir=images)
    _assert_error(info, images / "000000.png", "frame 000000", "image")


# --------------------------------------------------------------------------- results
RESULTS = {
    "000003": "Car -1 -1 -10 10.00 20.00 110.00 80.00 -1 -1 -1 -1000 -1000 -1000 -10 0.95\n"
    "Pedestrian -1 -1 -10 5.50 6.25 25.75 66.00 -1 -1 -1 -1000 -1000 -1000 -10 0.1234\n",
    "000001": "Cyclist 0.00 0 1.20 300.00 100.00 350.00 140.00 1.70 0.60 1.80 2.00 1.60 20.00 1.10 0.50\n",
}


def test_results_order_and_fields(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, RESULTS)
    dets = load_kitti_results(d)
    # sorted by frame (1 before 3), then line order
    np.testing.assert_array_equal(dets.image_id, [1, 3, 3])
    np.testing.assert_array_equal(dets.category, [6, 1, 4])
    np.testing.assert_array_equal(dets.score, [0.50, 0.95, 0.1234])
    np.testing.assert_array_equal(dets.box[2], [5.50, 6.25, 25.75, 66.00])
    np.testing.assert_array_equal(dets.occlusion, [0, -1, -1])
    assert np.isnan(dets.truncation[1]) and dets.truncation[0] == 0.0
    np.testing.assert_array_equal(dets.location[0], [2.00, 1.60, 20.00])


def test_results_round_trip_is_byte_for_byte(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, RESULTS)
    out = tmp_path / "out"
    write_kitti_results(out, load_kitti_results(d))
    for name in RESULTS:
        assert (out / f"{name}.txt").read_text() == RESULTS[name]


def test_results_with_dataset(tmp_path: Path) -> None:
    ds = load_kitti_labels(FIXTURE)  # frames 0, 1, 2
    d = _label_dir(tmp_path, {"000001": RESULTS["000001"]})
    dets = load_kitti_results(d, dataset=ds)  # frames 0 and 2 have no file: no detections
    assert len(dets) == 1
    out = tmp_path / "out"
    write_kitti_results(out, dets, dataset=ds)
    assert sorted(p.name for p in out.iterdir()) == ["000000.txt", "000001.txt", "000002.txt"]
    assert (out / "000000.txt").read_text() == "" and (out / "000001.txt").read_text() == RESULTS["000001"]
    d3 = _label_dir(tmp_path, RESULTS, name="more")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_results(d3, dataset=ds)
    _assert_error(info, d3 / "000003.txt", "frame 000003", "image_id")


def test_results_without_kitti_fields_get_devkit_defaults(tmp_path: Path) -> None:
    dets = Detections(image_id=[4, 4], box=[[1, 2, 3, 4], [0.125, 0, 10, 10]], score=[0.5, 1 / 3], category=[2, 6])
    write_kitti_results(tmp_path / "r", dets)
    lines = (tmp_path / "r" / "000004.txt").read_text().splitlines()
    assert lines[0] == "Van -1 -1 -10 1.00 2.00 3.00 4.00 -1 -1 -1 -1000 -1000 -1000 -10 0.50"
    # 0.125 and 1/3 are not exact at 2 decimals: written at repr precision
    assert lines[1] == "Cyclist -1 -1 -10 0.125 0.00 10.00 10.00 -1 -1 -1 -1000 -1000 -1000 -10 0.3333333333333333"
    back = load_kitti_results(tmp_path / "r")
    np.testing.assert_array_equal(back.box, dets.box)
    np.testing.assert_array_equal(back.score, dets.score)


def test_results_custom_category_names(tmp_path: Path) -> None:
    dets = Detections(image_id=[0], box=[[1, 2, 3, 4]], score=[0.5], category=[3])
    write_kitti_results(tmp_path / "r", dets, categories={3: "Car"})
    assert (tmp_path / "r" / "000000.txt").read_text().startswith("Car ")
    write_kitti_results(tmp_path / "r2", dets)  # default names: 3 is Truck
    assert (tmp_path / "r2" / "000000.txt").read_text().startswith("Truck ")
    with pytest.raises(DetcalInputError) as info:
        write_kitti_results(tmp_path / "r3", dets, categories={1: "Car"})
    assert info.value.field == "category" and info.value.record == 0


# --------------------------------------------------------------------------- malformed input
def test_wrong_column_count(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000005": GOOD + "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12\n"})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000005.txt", "line 2", "columns")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_results(_label_dir(tmp_path, {"000001": GOOD}, name="results"))
    assert info.value.field == "columns" and info.value.record == "line 1"  # labels have 15, results need 16


def test_non_numeric_field(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD, "000001": GOOD + GOOD.replace("173.33", "17x.33")})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000001.txt", "line 2", "top")
    assert "17x.33" in str(info.value)


def test_non_finite_field(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD.replace("46.70", "nan")})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000000.txt", "line 1", "z")


def test_unknown_type(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD + GOOD.replace("Car", "Bus")})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000000.txt", "line 2", "type")


def test_type_names_are_case_insensitive(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD.replace("Car", "car") + GOOD.replace("Car", "dontcare")})
    np.testing.assert_array_equal(load_kitti_labels(d).gt.category, [1, 9])


def test_negative_box_size(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD.replace("614.12", "580.00")})  # right < left
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000000.txt", "line 1", "right")
    d2 = _label_dir(tmp_path, {"000000": GOOD.replace("200.12", "170.00")}, name="b")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d2)
    _assert_error(info, d2 / "000000.txt", "line 1", "bottom")


@pytest.mark.parametrize("occ", ["4", "-1", "1.5"])
def test_occlusion_outside_range(tmp_path: Path, occ: str) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD.replace("0.00 0 -1.58", f"0.00 {occ} -1.58")})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000000.txt", "line 1", "occluded")


def test_truncation_outside_range(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"000000": GOOD.replace("Car 0.00", "Car 1.20")})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "000000.txt", "line 1", "truncated")


def test_bad_frame_name(tmp_path: Path) -> None:
    d = _label_dir(tmp_path, {"frame_a": GOOD})
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)
    _assert_error(info, d / "frame_a.txt", "file name", "frame")


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(tmp_path / "nope")
    assert info.value.file == str(tmp_path / "nope")


def test_labels_from_a_results_style_directory(tmp_path: Path) -> None:
    # results=True reads 16-column files as ground truth; the score column is dropped
    d = _label_dir(tmp_path, {"000001": RESULTS["000001"]})
    ds = load_kitti_labels(d, results=True)
    np.testing.assert_array_equal(ds.gt.box, [[300.0, 100.0, 350.0, 140.0]])
    assert ds.gt.difficulty[0] == 1  # truncation 0, occlusion 0, height 40 (not > 40) -> moderate
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(d)  # 15 columns expected
    _assert_error(info, d / "000001.txt", "line 1", "columns")


def test_bad_frame_in_split_file(tmp_path: Path) -> None:
    split = tmp_path / "val.txt"
    split.write_text("000000\nframe1\n")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_labels(FIXTURE, image_ids=split)
    _assert_error(info, split, 1, "image_ids")
