"""Tests of detcal.data.coco: round trips, pycocotools parity, malformed input."""

from __future__ import annotations

import contextlib
import io
import json
import types
from pathlib import Path

import numpy as np
import pytest
from pycocotools.coco import COCO

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data.coco import (
    dataset_to_coco_dict,
    load_coco_instances,
    load_coco_results,
    results_to_pycocotools,
    to_pycocotools,
    write_coco_instances,
    write_coco_results,
)


# --------------------------------------------------------------------------- fixtures
def _instances_dict(seed: int = 0, n_images: int = 12, n_anns: int = 150) -> dict:
    """A seeded COCO instances dict written by hand (not by detcal), with crowd and ignore flags."""
    rng = np.random.default_rng(seed)
    images = [{"id": 100 + i, "width": 640, "height": 480, "file_name": f"{i:012d}.jpg"} for i in range(n_images)]
    cats = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]
    anns = []
    for k in range(n_anns):
        x, y = rng.uniform(0, 500, 2).round(2)
        w, h = rng.uniform(0.0, 120, 2).round(2)
        ann = {
            "id": 1000 + 7 * k,
            "image_id": int(100 + rng.integers(n_images)),
            "category_id": int(rng.choice([1, 3, 18])),
            "bbox": [float(x), float(y), float(w), float(h)],
            "area": float(w * h),
            "iscrowd": int(rng.random() < 0.1),
        }
        if k % 5 == 0:
            ann["ignore"] = int(rng.random() < 0.5)
        anns.append(ann)
    return {"images": images, "annotations": anns, "categories": cats}


def _write(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


def _assert_error(info: pytest.ExceptionInfo, file: Path, record, field: str | None) -> None:
    err = info.value
    assert isinstance(err, DetcalInputError)
    assert err.file == str(file)
    assert err.record == record
    assert err.field == field
    assert str(file) in str(err)
    if field is not None:
        assert f"'{field}'" in str(err)


def _dataset() -> Dataset:
    images = Images(id=[1, 2, 3], width=[640, 320.5, 100], height=[480, 200, 50], file_name=["a.jpg", "b.jpg", ""])
    gt = GroundTruth(
        image_id=[1, 1, 2, 3],
        box=[[0, 0, 10, 20], [5.5, 6.25, 105.5, 56.25], [1, 2, 3, 4], [0, 0, 0, 0]],
        category=[1, 2, 1, 2],
        iscrowd=[False, True, False, False],
        ignore=[False, False, True, False],
        id=[11, 12, 13, 14],
    )
    return Dataset(images=images, gt=gt, categories={1: "person", 2: "bicycle"})


def _detections(kind: str | None, seed: int = 0, d: int = 40) -> Detections:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 300, (d, 2))
    wh = rng.uniform(1, 100, (d, 2))
    box = np.concatenate([xy, xy + wh], axis=1)
    kw = {}
    if kind == "box_std":
        kw["box_std"] = rng.uniform(0.1, 5, (d, 4))
    elif kind == "box_cov":
        a = rng.normal(size=(d, 4, 4))
        kw["box_cov"] = a @ np.swapaxes(a, 1, 2) + 0.1 * np.eye(4)
    elif kind == "corner_cov":
        a = rng.normal(size=(d, 2, 2, 2))
        kw["corner_cov"] = a @ np.swapaxes(a, -1, -2)
    elif kind == "delta":
        pxy = rng.uniform(0, 300, (d, 2))
        kw["proposal"] = np.concatenate([pxy, pxy + rng.uniform(1, 100, (d, 2))], axis=1)
        kw["delta_mean"] = rng.normal(0, 0.1, (d, 4))
        kw["delta_std"] = rng.uniform(0.01, 1, (d, 4))
    return Detections(
        image_id=rng.integers(1, 4, d), box=box, score=rng.uniform(0, 1, d), category=rng.integers(1, 3, d), **kw
    )


# --------------------------------------------------------------------------- instances
def test_instances_match_pycocotools_view(tmp_path: Path) -> None:
    path = _write(tmp_path / "instances.json", _instances_dict())
    ds = load_coco_instances(path)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = COCO(str(path))
    anns = ref.loadAnns(ref.getAnnIds())  # file order (pycocotools keeps insertion order)
    assert len(anns) == len(ds.gt) == 150
    ref_xywh = np.array([a["bbox"] for a in anns])
    expected_xyxy = np.concatenate([ref_xywh[:, :2], ref_xywh[:, :2] + ref_xywh[:, 2:]], axis=1)
    np.testing.assert_array_equal(ds.gt.box, expected_xyxy)
    np.testing.assert_array_equal(ds.gt.iscrowd, [bool(a["iscrowd"]) for a in anns])
    np.testing.assert_array_equal(ds.gt.category, [a["category_id"] for a in anns])
    np.testing.assert_array_equal(ds.gt.image_id, [a["image_id"] for a in anns])
    np.testing.assert_array_equal(ds.gt.id, [a["id"] for a in anns])
    np.testing.assert_array_equal(ds.gt.ignore, [bool(a.get("ignore", 0)) for a in anns])
    assert ds.categories == {c["id"]: c["name"] for c in ref.loadCats(ref.getCatIds())}
    np.testing.assert_array_equal(ds.images.id, ref.getImgIds())
    assert ds.source == str(path)


def test_instances_round_trip(tmp_path: Path) -> None:
    ds = _dataset()
    write_coco_instances(tmp_path / "gt.json", ds)
    back = load_coco_instances(tmp_path / "gt.json")
    for name in ("image_id", "box", "category", "iscrowd", "ignore", "id"):
        np.testing.assert_array_equal(getattr(back.gt, name), getattr(ds.gt, name), err_msg=name)
    np.testing.assert_array_equal(back.images.id, ds.images.id)
    np.testing.assert_array_equal(back.images.width, ds.images.width)
    np.testing.assert_array_equal(back.images.height, ds.images.height)
    assert back.images.file_name == ds.images.file_name
    assert back.categories == ds.categories
    # integral sizes are written as ints, as in COCO files; 320.5 stays a float
    raw = json.loads((tmp_path / "gt.json").read_text())
    assert raw["images"][0]["width"] == 640 and isinstance(raw["images"][0]["width"], int)
    assert raw["images"][1]["width"] == 320.5
    # area = w * h of the box: 100 * 50 = 5000 for the second annotation
    assert raw["annotations"][1]["area"] == 5000.0


def test_to_pycocotools_in_memory_agrees_with_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "instances.json", _instances_dict(seed=3))
    ds = load_coco_instances(path)
    mem = to_pycocotools(ds)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = COCO(str(path))
    assert sorted(mem.getAnnIds()) == sorted(ref.getAnnIds())
    for a, b in zip(mem.loadAnns(ref.getAnnIds()), ref.loadAnns(ref.getAnnIds())):
        assert a["image_id"] == b["image_id"] and a["category_id"] == b["category_id"]
        assert a["iscrowd"] == b["iscrowd"]
        np.testing.assert_allclose(a["bbox"], b["bbox"], rtol=0, atol=1e-9)


def test_instances_missing_sizes_are_nan(tmp_path: Path) -> None:
    d = {"images": [{"id": 1}], "annotations": [], "categories": [{"id": 1, "name": "a"}]}
    ds = load_coco_instances(_write(tmp_path / "g.json", d))
    assert np.isnan(ds.images.width[0]) and np.isnan(ds.images.height[0])
    assert len(ds.gt) == 0 and ds.gt.box.shape == (0, 4)


# --------------------------------------------------------------------------- results
@pytest.mark.parametrize("kind", [None, "box_std", "box_cov", "corner_cov", "delta"])
def test_results_round_trip_each_uncertainty_kind(tmp_path: Path, kind: str | None) -> None:
    dets = _detections(kind)
    write_coco_results(tmp_path / "res.json", dets)
    back = load_coco_results(tmp_path / "res.json", dataset=_dataset())
    assert back.uncertainty_kind == kind
    np.testing.assert_array_equal(back.image_id, dets.image_id)
    np.testing.assert_array_equal(back.category, dets.category)
    np.testing.assert_array_equal(back.score, dets.score)  # repr precision: exact
    # x2 = x + (x2 - x): exact up to one ulp of the coordinate (module docstring)
    np.testing.assert_allclose(back.box, dets.box, rtol=4e-16, atol=0)
    for name in ("box_std", "box_cov", "corner_cov", "delta_mean", "delta_std"):
        if getattr(dets, name) is not None:
            np.testing.assert_array_equal(getattr(back, name), getattr(dets, name), err_msg=name)
        else:
            assert getattr(back, name) is None
    if kind == "delta":
        np.testing.assert_allclose(back.proposal, dets.proposal, rtol=4e-16, atol=0)


def test_results_dyadic_boxes_round_trip_exactly(tmp_path: Path) -> None:
    # quarter-pixel coordinates: x + w and x2 - x are exact in binary floating point
    box = np.array([[0.25, 10.5, 100.75, 50.0], [3.0, 4.0, 3.0, 4.0]])
    dets = Detections(image_id=[1, 2], box=box, score=[0.5, 1.0], category=[1, 2])
    write_coco_results(tmp_path / "r.json", dets)
    np.testing.assert_array_equal(load_coco_results(tmp_path / "r.json").box, box)
    # and the file holds COCO [x, y, w, h]: 100.75 - 0.25 = 100.5, 50 - 10.5 = 39.5
    assert json.loads((tmp_path / "r.json").read_text())[0]["bbox"] == [0.25, 10.5, 100.5, 39.5]


def test_results_file_order_and_pycocotools_loadres(tmp_path: Path) -> None:
    ds = load_coco_instances(_write(tmp_path / "gt.json", _instances_dict()))
    rng = np.random.default_rng(1)
    recs = [
        {
            "image_id": int(100 + rng.integers(12)),
            "category_id": int(rng.choice([1, 3, 18])),
            "bbox": [float(v) for v in rng.uniform(1, 200, 4).round(2)],
            "score": round(float(rng.random()), 3),
        }
        for _ in range(60)
    ]
    path = _write(tmp_path / "res.json", recs)
    dets = load_coco_results(path, dataset=ds)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = to_pycocotools(ds).loadRes(str(path))
    anns = ref.loadAnns(list(range(1, 61)))  # loadRes numbers results 1..n in file order
    xywh = np.array([a["bbox"] for a in anns])
    np.testing.assert_array_equal(dets.box, np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1))
    np.testing.assert_array_equal(dets.score, [a["score"] for a in anns])
    np.testing.assert_array_equal(dets.image_id, [r["image_id"] for r in recs])
    # the in-memory helper gives the same records
    res2 = results_to_pycocotools(to_pycocotools(ds), dets)
    for a, b in zip(res2.loadAnns(list(range(1, 61))), anns):
        assert a["image_id"] == b["image_id"] and a["score"] == b["score"]
        np.testing.assert_allclose(a["bbox"], b["bbox"], rtol=0, atol=1e-9)


def test_results_delta_logvar_and_dict_form(tmp_path: Path) -> None:
    recs = [
        {
            "image_id": 1,
            "category_id": 1,
            "bbox": [0, 0, 10, 10],
            "score": 0.9,
            "proposal": [1, 1, 8, 8],
            "delta_mean": [0.1, -0.1, 0.0, 0.2],
            "delta_logvar": [0.0, -2.0, 2.0, -7.0],
        },
    ]
    dets = load_coco_results(_write(tmp_path / "r.json", {"annotations": recs}))
    # sigma = exp(0.5 * logvar): exp(0) = 1, exp(-1), exp(1), exp(-3.5)
    np.testing.assert_allclose(dets.delta_std[0], [1.0, np.exp(-1.0), np.exp(1.0), np.exp(-3.5)], rtol=1e-15)
    # proposal [x, y, w, h] = [1, 1, 8, 8] -> xyxy [1, 1, 9, 9]
    np.testing.assert_array_equal(dets.proposal[0], [1, 1, 9, 9])
    assert dets.uncertainty_kind == "delta"


def test_results_empty_list(tmp_path: Path) -> None:
    dets = load_coco_results(_write(tmp_path / "r.json", []))
    assert len(dets) == 0 and dets.box.shape == (0, 4)
    write_coco_results(tmp_path / "r2.json", dets)
    assert json.loads((tmp_path / "r2.json").read_text()) == []


def test_orjson_path_gives_the_same_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The optional orjson parser and the json fallback give identical records and errors
    (the general path, taken when the fast columns decoder declines)."""
    import detcal.data._fast_results as fast

    monkeypatch.setattr(fast, "decode_results", lambda data: None)
    write_coco_results(tmp_path / "r.json", _detections("box_std"))
    via_json = load_coco_results(tmp_path / "r.json")
    calls = []

    def fake_loads(data: bytes):
        calls.append(len(data))
        return json.loads(data)

    import detcal.data._json as json_mod

    monkeypatch.setattr(json_mod, "_orjson", None)  # stdlib json path
    via_json = load_coco_results(tmp_path / "r.json")
    monkeypatch.setattr(json_mod, "_orjson", types.SimpleNamespace(loads=fake_loads))
    via_fake = load_coco_results(tmp_path / "r.json")
    assert calls, "the orjson branch was not taken"
    for name in ("image_id", "box", "score", "category", "box_std"):
        np.testing.assert_array_equal(getattr(via_fake, name), getattr(via_json, name))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2,")
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(bad)
    assert info.value.file == str(bad) and str(info.value.record).startswith("line 1")


def test_results_mixed_presence_is_an_error(tmp_path: Path) -> None:
    recs = [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5, "bbox_std": [1, 1, 1, 1]}] * 2
    recs = recs + [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}]
    path = _write(tmp_path / "r.json", recs)
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 2, "bbox_std")


def test_results_delta_needs_a_complete_record(tmp_path: Path) -> None:
    recs = [
        {
            "image_id": 1,
            "category_id": 1,
            "bbox": [0, 0, 1, 1],
            "score": 0.5,
            "delta_mean": [0, 0, 0, 0],
            "delta_std": [1, 1, 1, 1],
        }
    ]
    path = _write(tmp_path / "r.json", recs)
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 0, "proposal")


# --------------------------------------------------------------------------- malformed input
def _good_result(**over) -> dict:
    rec = {"image_id": 1, "category_id": 1, "bbox": [1.0, 2.0, 3.0, 4.0], "score": 0.5}
    rec.update(over)
    return rec


def test_not_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('[{"image_id": 1,\n  "bbox": [1, 2, 3, 4] oops}]')
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    # the syntax error is at line 2, column 24 (after the bbox list)
    _assert_error(info, path, "line 2, column 24", None)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    assert info.value.file == str(path) and info.value.record == "line 2, column 24"


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b'[{"a": "\xff"}]')
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    assert info.value.file == str(path) and info.value.record == "byte 8"


def test_missing_top_level_key(tmp_path: Path) -> None:
    d = _instances_dict()
    del d["categories"]
    path = _write(tmp_path / "g.json", d)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    _assert_error(info, path, "(top level)", "categories")


def test_missing_annotation_key(tmp_path: Path) -> None:
    d = _instances_dict()
    del d["annotations"][4]["bbox"]
    path = _write(tmp_path / "g.json", d)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    _assert_error(info, path, "annotations[4]", "bbox")


def test_missing_result_key(tmp_path: Path) -> None:
    recs = [_good_result(), _good_result(), {"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1]}]
    path = _write(tmp_path / "r.json", recs)
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 2, "score")


def test_result_not_a_list(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.json", 42)
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, "(top level)", None)


def test_negative_box_width(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.json", [_good_result(), _good_result(bbox=[5, 5, -1, 3])])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 1, "bbox")
    assert "negative" in str(info.value)
    d = _instances_dict()
    d["annotations"][7]["bbox"][3] = -0.5
    path = _write(tmp_path / "g.json", d)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    _assert_error(info, path, "annotations[7]", "bbox")


def test_non_finite_and_malformed_bbox(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text('[{"image_id": 1, "category_id": 1, "bbox": [0, 0, Infinity, 1], "score": 0.5}]')
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 0, "bbox")
    path = _write(tmp_path / "r2.json", [_good_result(), _good_result(bbox=[1, 2, 3])])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 1, "bbox")
    path = _write(tmp_path / "r3.json", [_good_result(bbox=[1, 2, "3", 4])])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 0, "bbox")


def test_nan_score(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps([_good_result(), _good_result(), _good_result(score=float("nan"))]))
    assert "NaN" in path.read_text()
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 2, "score")


def test_score_out_of_range(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.json", [_good_result(score=1.0000001)])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 0, "score")


def test_unknown_image_id(tmp_path: Path) -> None:
    ds = _dataset()  # images 1, 2, 3
    path = _write(tmp_path / "r.json", [_good_result(image_id=3), _good_result(image_id=4)])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path, dataset=ds)
    _assert_error(info, path, 1, "image_id")
    load_coco_results(path)  # without a dataset the id is not checked
    d = _instances_dict()
    d["annotations"][9]["image_id"] = 5
    path = _write(tmp_path / "g.json", d)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    _assert_error(info, path, "annotations[9]", "image_id")


def test_unknown_category_id(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.json", [_good_result(category_id=7)])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path, dataset=_dataset())
    _assert_error(info, path, 0, "category_id")
    d = _instances_dict()
    d["annotations"][0]["category_id"] = 2
    path = _write(tmp_path / "g.json", d)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    _assert_error(info, path, "annotations[0]", "category_id")


def test_duplicate_annotation_id(tmp_path: Path) -> None:
    d = _instances_dict()
    d["annotations"][6]["id"] = d["annotations"][2]["id"]
    path = _write(tmp_path / "g.json", d)
    with pytest.raises(DetcalInputError) as info:
        load_coco_instances(path)
    _assert_error(info, path, "annotations[6]", "id")


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_std_not_positive(tmp_path: Path, bad: float) -> None:
    recs = [_good_result(bbox_std=[1, 1, 1, 1]), _good_result(bbox_std=[1, 1, bad, 1])]
    path = _write(tmp_path / "r.json", recs)
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 1, "bbox_std")


def test_std_nan(tmp_path: Path) -> None:
    rec = dict(proposal=[0, 0, 5, 5], delta_mean=[0, 0, 0, 0])
    recs = [_good_result(delta_std=[1, 1, 1, 1], **rec), _good_result(delta_std=[1, float("nan"), 1, 1], **rec)]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recs))
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 1, "delta_std")


def test_logvar_underflowing_to_zero_std(tmp_path: Path) -> None:
    # exp(0.5 * -2000) = exp(-1000) underflows to 0.0 in float64: sigma would be 0
    rec = dict(proposal=[0, 0, 5, 5], delta_mean=[0, 0, 0, 0], delta_logvar=[0, 0, -2000, 0])
    path = _write(tmp_path / "r.json", [_good_result(**rec)])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 0, "delta_logvar")


def test_non_psd_box_covariance(tmp_path: Path) -> None:
    good = np.eye(4).tolist()
    # symmetric but indefinite: [[1, 2], [2, 1]] block has eigenvalues 3 and -1
    bad = [[1, 2, 0, 0], [2, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    path = _write(
        tmp_path / "r.json",
        [_good_result(bbox_covar=good), _good_result(bbox_covar=good), _good_result(bbox_covar=bad)],
    )
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 2, "bbox_covar")
    assert "positive semi-definite" in str(info.value)


def test_non_psd_and_asymmetric_corner_covariance(tmp_path: Path) -> None:
    ok = [[[4, 1], [1, 4]], [[0, 0], [0, 0]]]  # PSD (the zero matrix too, as PDQ allows)
    bad = [[[4, 1], [1, 4]], [[1, 0], [0, -0.01]]]  # eigenvalue -0.01
    path = _write(tmp_path / "r.json", [_good_result(covars=ok), _good_result(covars=bad)])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 1, "covars")
    asym = [[[4, 1], [0, 4]], [[1, 0], [0, 1]]]
    path = _write(tmp_path / "r2.json", [_good_result(covars=asym)])
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    _assert_error(info, path, 0, "covars")
    assert "symmetric" in str(info.value)


def test_writer_refuses_non_finite(tmp_path: Path) -> None:
    dets = Detections(image_id=[1], box=[[0, 0, 1, 1]], score=[np.nan], category=[1])
    with pytest.raises(DetcalInputError) as info:
        write_coco_results(tmp_path / "r.json", dets)
    _assert_error(info, tmp_path / "r.json", 0, "score")
    assert not (tmp_path / "r.json").exists()


def test_dataset_to_coco_dict_writes_ignore_only_when_used() -> None:
    ds = _dataset()
    assert "ignore" in dataset_to_coco_dict(ds)["annotations"][0]
    ds.gt.ignore[:] = False
    assert "ignore" not in dataset_to_coco_dict(ds)["annotations"][0]
