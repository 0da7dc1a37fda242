"""Strict numbers in the COCO reader: booleans, huge ids, overflow, extreme scales, deep nesting.

Every case used to load silently (or crash with a non-detcal exception); each
must now be a DetcalInputError naming file, record and field, with the value
as written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import detcal.data._json as json_mod
from detcal.core.errors import DetcalInputError
from detcal.data.coco import load_coco_instances, load_coco_results

GOOD = {"image_id": 1, "category_id": 1, "bbox": [10.0, 20.0, 30.0, 40.0], "score": 0.5}
EYE4 = [[1.0 if i == j else 0.0 for j in range(4)] for i in range(4)]


@pytest.fixture(params=["orjson", "json"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each case with orjson and with the stdlib fallback."""
    if request.param == "json":
        monkeypatch.setattr(json_mod, "_orjson", None)
    return request.param


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _results(tmp_path: Path, *records: dict) -> Path:
    return _write_text(tmp_path / "r.json", json.dumps(list(records)))


def _err(path: Path, record, field: str, loader=load_coco_results) -> DetcalInputError:
    with pytest.raises(DetcalInputError) as info:
        loader(path)
    err = info.value
    assert err.file == str(path) and str(path) in str(err)
    assert err.record == record, str(err)
    assert err.field == field, str(err)
    return err


@pytest.mark.parametrize(
    "field, bad",
    [
        ("image_id", True),
        ("category_id", False),
        ("score", True),
        ("bbox", [10.0, 20.0, True, 40.0]),
        ("bbox_std", [1.0, 1.0, 1.0, False]),
        ("bbox_covar", [row[:3] + [True] if i == 3 else row for i, row in enumerate(EYE4)]),
    ],
)
def test_boolean_in_a_numeric_field_is_an_error(tmp_path: Path, parser: str, field: str, bad) -> None:
    extra = {} if field in GOOD else {field: EYE4 if field == "bbox_covar" else [1.0, 1.0, 1.0, 1.0]}
    first = {**GOOD, **extra}
    second = {**first, field: bad}
    err = _err(_results(tmp_path, first, first, second), 2, field)
    assert "true" in str(err).lower() or "false" in str(err).lower()


def test_boolean_in_gt_width_and_ids_is_an_error(tmp_path: Path, parser: str) -> None:
    doc = {
        "images": [{"id": 1, "width": 640, "height": 480}, {"id": 2, "width": True, "height": 480}],
        "annotations": [],
        "categories": [{"id": 1, "name": "a"}],
    }
    _err(_write_text(tmp_path / "gt.json", json.dumps(doc)), "images[1]", "width", load_coco_instances)
    doc["images"][1]["width"] = 640
    doc["annotations"] = [{"id": 1, "image_id": 1, "category_id": True, "bbox": [0, 0, 1, 1]}]
    _err(_write_text(tmp_path / "gt.json", json.dumps(doc)), "annotations[0]", "category_id", load_coco_instances)


def test_true_flag_and_the_word_true_in_strings_are_fine(tmp_path: Path, parser: str) -> None:
    doc = {
        "images": [{"id": 1, "width": 640, "height": 480, "file_name": "true_false.jpg"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": True},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5], "iscrowd": False},
        ],
        "categories": [{"id": 1, "name": "true"}],
    }
    ds = load_coco_instances(_write_text(tmp_path / "gt.json", json.dumps(doc)))
    assert ds.gt.iscrowd.tolist() == [True, False]
    np.testing.assert_array_equal(ds.gt.box, [[0, 0, 5, 5], [1, 1, 6, 6]])


@pytest.mark.parametrize("big", [2**63, 2**64, 2**70])
def test_ids_beyond_int64_are_errors_with_the_value_as_written(tmp_path: Path, parser: str, big: int) -> None:
    err = _err(_results(tmp_path, GOOD, {**GOOD, "image_id": big}), 1, "image_id")
    assert "-9223372036854775808" not in str(err)
    if big < 2**64 or parser == "json":  # orjson reads integers >= 2**64 as floats
        assert str(big) in str(err)


def test_int64_extremes_load_exactly(tmp_path: Path, parser: str) -> None:
    lo, hi = -(2**63), 2**63 - 1
    dets = load_coco_results(_results(tmp_path, {**GOOD, "image_id": lo}, {**GOOD, "image_id": hi}))
    assert dets.image_id.tolist() == [lo, hi]


def test_float_ids_beyond_2_pow_53_are_errors(tmp_path: Path, parser: str) -> None:
    # 2**60 + 1 written next to a float becomes 2**60 in float64: refused instead of silently changed
    path = _write_text(
        tmp_path / "r.json",
        '[{"image_id": 1.0, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5},'
        ' {"image_id": 1152921504606846977, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}]',
    )
    err = _err(path, 1, "image_id")
    assert "1152921504606846977" in str(err)
    path = _write_text(
        tmp_path / "r.json", '[{"image_id": 1e17, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}]'
    )
    _err(path, 0, "image_id")
    # an integral float in range is still an id
    path = _write_text(tmp_path / "r.json", '[{"image_id": 7.0, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}]')
    assert load_coco_results(path).image_id.tolist() == [7]


def test_box_whose_corner_overflows_is_an_error(tmp_path: Path, parser: str) -> None:
    err = _err(_results(tmp_path, GOOD, {**GOOD, "bbox": [1e308, 0.0, 1e308, 1.0]}), 1, "bbox")
    assert "1e+308" in str(err)


def test_huge_covariance_is_an_error_not_linalgerror(tmp_path: Path, parser: str) -> None:
    huge = [[1e308 if i == j else 0.0 for j in range(4)] for i in range(4)]
    _err(_results(tmp_path, {**GOOD, "bbox_covar": EYE4}, {**GOOD, "bbox_covar": huge}), 1, "bbox_covar")
    tiny = [[1e-200 if i == j else 0.0 for j in range(4)] for i in range(4)]
    _err(_results(tmp_path, {**GOOD, "bbox_covar": EYE4}, {**GOOD, "bbox_covar": tiny}), 1, "bbox_covar")


def test_psd_test_is_scale_free(tmp_path: Path, parser: str) -> None:
    """A large but valid covariance loads; the same matrix made indefinite is refused at any scale."""
    for s in (1e-20, 1.0, 1e50):
        good = [[2 * s, s, 0, 0], [s, 2 * s, 0, 0], [0, 0, s, 0], [0, 0, 0, s]]
        dets = load_coco_results(_results(tmp_path, {**GOOD, "bbox_covar": good}))
        np.testing.assert_array_equal(dets.box_cov[0], good)
        bad = [[s, 2 * s, 0, 0], [2 * s, s, 0, 0], [0, 0, s, 0], [0, 0, 0, s]]  # eigenvalue -s
        _err(_results(tmp_path, {**GOOD, "bbox_covar": bad}), 0, "bbox_covar")


@pytest.mark.parametrize("std", [1e-200, 1e308, 1e31, 0.0])
def test_std_out_of_range_is_an_error(tmp_path: Path, parser: str, std: float) -> None:
    ok = {**GOOD, "bbox_std": [1.0, 2.0, 3.0, 4.0]}
    _err(_results(tmp_path, ok, {**ok, "bbox_std": [1.0, std, 3.0, 4.0]}), 1, "bbox_std")


def test_std_at_the_documented_limits_is_accepted(tmp_path: Path, parser: str) -> None:
    dets = load_coco_results(_results(tmp_path, {**GOOD, "bbox_std": [1e-30, 1e30, 1.0, 1.0]}))
    assert dets.box_std.tolist() == [[1e-30, 1e30, 1.0, 1.0]]


def test_delta_record_extremes_are_errors(tmp_path: Path, parser: str) -> None:
    ok = {**GOOD, "proposal": [10.0, 20.0, 30.0, 40.0], "delta_mean": [0.1, 0.1, 0.0, 0.0], "delta_std": [0.1] * 4}
    _err(_results(tmp_path, ok, {**ok, "delta_mean": [1e308, 0.0, 0.0, 0.0]}), 1, "delta_mean")
    _err(_results(tmp_path, ok, {**ok, "delta_std": [1e-200, 0.1, 0.1, 0.1]}), 1, "delta_std")
    _err(_results(tmp_path, ok, {**ok, "proposal": [10.0, 20.0, 1e-300, 40.0]}), 1, "proposal")
    lv = {k: v for k, v in ok.items() if k != "delta_std"}
    _err(
        _results(tmp_path, {**lv, "delta_logvar": [0.0] * 4}, {**lv, "delta_logvar": [-1000.0, 0, 0, 0]}),
        1,
        "delta_logvar",
    )


def test_deep_nesting_is_a_clear_error(tmp_path: Path, parser: str) -> None:
    path = _write_text(tmp_path / "r.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(DetcalInputError) as info:
        load_coco_results(path)
    assert info.value.file == str(path)


def test_byte_order_mark_is_accepted(tmp_path: Path, parser: str) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([GOOD]).encode())
    assert load_coco_results(path).score.tolist() == [0.5]


def test_image_size_out_of_range(tmp_path: Path, parser: str) -> None:
    doc = {"images": [{"id": 1, "width": 1e-300, "height": 480}], "annotations": [], "categories": []}
    _err(_write_text(tmp_path / "gt.json", json.dumps(doc)), "images[0]", "width", load_coco_instances)
