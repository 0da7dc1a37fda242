"""The load in blocks and slices (issue 29, ninth pass): each piece against the whole-file way it replaces.

* an instances file's ``annotations`` decoded a block at a time (``_fast_results._annotation_blocks``)
  against the whole typed decode, at block sizes that cut the list everywhere, with nested values holding
  ``},`` and with files it must leave to the whole decode;
* the results' value checks and corners a slice at a time (``coco._checked_corners``) against the checks
  one by one over whole columns (same numbers, same first error);
* ``input_checks.outside_share`` a slice at a time against the whole-column formula;
* the one column store (``json_blocks.ColumnStore``) and the digit-run search in slices.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.coco_annotations import annotations

from detcal.core.boxes import xywh_to_xyxy
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data import _fast_results, coco
from detcal.data._json import check_box, check_mask
from detcal.data.coco import load_coco_instances
from detcal.data.formats import LoadedData
from detcal.data.json_blocks import ColumnStore
from detcal.pipeline import input_checks
from detcal.pipeline.input_checks import OUTSIDE_TOLERANCE, outside_share

BLOCKS = (40, 97, 256, 1000, 1 << 18)


def _instances(anns: list[dict], indent: int | None = None) -> bytes:
    images = [{"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"} for i in range(1, 6)]
    cats = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    return json.dumps({"images": images, "annotations": anns, "categories": cats}, indent=indent).encode()


def _whole(data: bytes) -> _fast_results.AnnotationColumns | None:
    """The columns of the whole typed decode (the way before the blocks)."""
    doc = _fast_results._instances_decoder(True).decode(data)
    arrays = _fast_results._annotation_arrays(doc.annotations)
    return None if arrays is None else _fast_results._annotation_columns(arrays)


def _same_columns(a: _fast_results.AnnotationColumns, b: _fast_results.AnnotationColumns) -> None:
    for name in a._fields:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("indent", [None, 1])
def test_annotation_blocks_equal_the_whole_decode(
    monkeypatch: pytest.MonkeyPatch, block: int, nested: bool, indent: int | None
) -> None:
    monkeypatch.setattr(_fast_results, "ANNOTATION_BLOCK_BYTES", block)
    data = _instances(annotations(60, nested=nested), indent)
    got = _fast_results.decode_instances(data)
    whole = _whole(data)
    assert got is not None and got.columns is not None and whole is not None
    if block >= 97 or not nested:  # 40 bytes grown 4 times hold no whole nested record: decoded whole
        assert got.annotations == []  # the records became the columns block by block
    _same_columns(got.columns, whole)
    assert got.columns.area is None  # some annotations have no area, as in the whole decode


@pytest.mark.parametrize("n", [0, 1, 2])
def test_short_annotation_lists(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(_fast_results, "ANNOTATION_BLOCK_BYTES", 40)
    anns = [dict(a, area=1.5) for a in annotations(n)]
    data = _instances(anns)
    got = _fast_results.decode_instances(data)
    whole = _whole(data)
    assert got is not None and got.columns is not None and whole is not None
    _same_columns(got.columns, whole)
    assert len(got.columns.id) == n and got.columns.bbox.shape == (n, 4)


def test_whitespace_between_a_record_and_its_comma(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fast_results, "ANNOTATION_BLOCK_BYTES", 64)
    data = _instances(annotations(30)).replace(b"}, {", b"}\n ,\t{")
    got = _fast_results.decode_instances(data)
    whole = _whole(data)
    assert got is not None and got.columns is not None and whole is not None
    _same_columns(got.columns, whole)


def _load(data: bytes, path: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> object:
    path.write_bytes(data)
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(_fast_results, "decode_instances", lambda data: None)  # the general reader
        try:
            return load_coco_instances(path)
        except DetcalInputError as e:
            return str(e)


def _same_load(a: object, b: object) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert isinstance(a, Dataset) and isinstance(b, Dataset)
    for name in ("image_id", "box", "category", "iscrowd", "ignore", "id", "wh", "area"):
        x, y = getattr(a.gt, name), getattr(b.gt, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), name
    assert a.categories == b.categories and a.images.id.tolist() == b.images.id.tolist()


@pytest.mark.parametrize(
    "damage",
    ["float_id", "string_bbox", "huge_id", "no_image_id", "bad_flag", "annotations_not_a_list", "huge_record"],
)
def test_files_the_blocks_leave_to_the_whole_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A file the blocks decline is decoded whole, as before: the same dataset, or the same error, as the
    general reader."""
    monkeypatch.setattr(_fast_results, "ANNOTATION_BLOCK_BYTES", 97)
    anns = annotations(40)
    if damage == "float_id":
        anns[25]["id"] = 26.0
    elif damage == "string_bbox":
        anns[30]["bbox"] = ["1", 2, 3, 4]
    elif damage == "huge_id":
        anns[12]["id"] = 2**63 + 5
    elif damage == "no_image_id":
        del anns[33]["image_id"]
    elif damage == "bad_flag":
        anns[7]["iscrowd"] = 2
    elif damage == "huge_record":  # more inner cuts than tries, past the block's growth: decoded whole
        anns[20]["attributes"] = [{"k": i} for i in range(400)]
    doc = json.loads(_instances(anns))
    if damage == "annotations_not_a_list":
        doc["annotations"] = {"a": 1}
    data = json.dumps(doc).encode()
    fast = _load(data, tmp_path / "gt.json", True, monkeypatch)
    general = _load(data, tmp_path / "gt.json", False, monkeypatch)
    _same_load(fast, general)
    if damage == "huge_record":
        got = _fast_results.decode_instances(data)
        assert got is not None and got.columns is not None and len(got.annotations) == 40  # the whole decode's


@pytest.mark.parametrize("step", [1, 2, 5, 18, 19, 64])
def test_digit_runs_found_across_slices(step: int) -> None:
    rng = np.random.default_rng(step)
    for _ in range(300):
        text = bytes(rng.choice(list(b"0123456789 ,.e-"), int(rng.integers(0, 80))))
        whole = b"0" * 19 in text.translate(_fast_results._DIGITS)
        assert _fast_results._long_digit_run(text, 19, step) == whole


# --------------------------------------------------------------------------- results: checks and corners
def _checked_one_by_one(bbox: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The checks and conversion before the slices: each over the whole columns, in their order."""
    check_box(bbox, file="r.json", field="bbox")
    check_mask(~np.isfinite(score), score, "score must be finite", file="r.json", field="score")
    check_mask((score < 0) | (score > 1), score, "score must be in [0, 1]", file="r.json", field="score")
    return xywh_to_xyxy(bbox), bbox[:, 2:4].copy()


def _columns(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    bbox = rng.uniform(-1e3, 1e3, (n, 4)) / rng.choice([1, 3, 7, 1e-3], (n, 4))
    bbox[:, 2:4] = np.abs(bbox[:, 2:4])
    if n > 3:
        bbox[:3] = [[-0.0, 0.0, 0.0, -0.0], [0.1, 0.2, 0.30000000000000004, 1e-300], [1e15, 3.0, 0.5, 0.25]]
    score = rng.random(n)
    score[: min(n, 2)] = [0.0, 1.0][: min(n, 2)]
    return bbox, score


@pytest.mark.parametrize("rows", [1, 7, 64, 1 << 14])
@pytest.mark.parametrize("own", [False, True])
def test_corners_a_slice_at_a_time_give_the_same_numbers(monkeypatch: pytest.MonkeyPatch, rows: int, own: bool) -> None:
    monkeypatch.setattr(coco, "CHECK_ROWS", rows)
    for n in (0, 1, 5, 100):
        bbox, score = _columns(n, n)
        box0, wh0 = _checked_one_by_one(bbox.copy(), score)
        given = bbox.copy()
        box, wh = coco._checked_corners(given, score, "r.json", own)
        assert box.tobytes() == box0.tobytes() and wh.tobytes() == wh0.tobytes()
        assert wh.flags.c_contiguous and wh.dtype == np.float64
        assert np.shares_memory(box, given) == (own and n > 0)
        if not own:
            assert given.tobytes() == bbox.tobytes()  # the caller's column as it was


BAD = {
    "nan_x": ("bbox", (0, float("nan"))),
    "inf_w": ("bbox", (2, float("inf"))),
    "huge_y": ("bbox", (1, 1e31)),
    "negative_h": ("bbox", (3, -0.5)),
    "nan_score": ("score", float("nan")),
    "inf_score": ("score", float("inf")),
    "score_above": ("score", 1.0000000000000002),
    "score_below": ("score", -1e-300),
}


@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("own", [False, True])
def test_a_bad_value_gives_the_first_error_of_the_checks_in_order(
    monkeypatch: pytest.MonkeyPatch, rows: int, case: str, own: bool
) -> None:
    monkeypatch.setattr(coco, "CHECK_ROWS", rows)
    bbox, score = _columns(100, 4)
    field, what = BAD[case]
    for at in (0, 6, 7, 63, 64, 99):
        b, s = bbox.copy(), score.copy()
        if field == "bbox":
            b[at, what[0]] = what[1]  # type: ignore[index]
        else:
            s[at] = what
        b[90, 2] = -1.0 if case.endswith("score") and at < 90 else b[90, 2]  # a box error later wins over the score
        with pytest.raises(DetcalInputError) as old:
            _checked_one_by_one(b.copy(), s)
        with pytest.raises(DetcalInputError) as new:
            coco._checked_corners(b, s, "r.json", own)
        assert str(new.value) == str(old.value)


# --------------------------------------------------------------------------- outside_share, the column store
def _outside_whole(data: LoadedData) -> tuple[int, int]:
    """The whole-column formula before the slices."""
    ds, dets = data.dataset, data.detections
    row = ds.images.index_of(dets.image_id)
    ok = row >= 0
    w = np.where(ok, ds.images.width[np.maximum(row, 0)], np.nan)
    h = np.where(ok, ds.images.height[np.maximum(row, 0)], np.nan)
    sized = np.isfinite(w) & np.isfinite(h) & (w > 0) & (h > 0)
    b, tol = dets.box, OUTSIDE_TOLERANCE
    with np.errstate(invalid="ignore"):
        out = (b[:, 0] < -tol * w) | (b[:, 1] < -tol * h) | (b[:, 2] > (1 + tol) * w) | (b[:, 3] > (1 + tol) * h)
    return int((out & sized).sum()), int(sized.sum())


@pytest.mark.parametrize("rows", [1, 3, 64, 1 << 16])
@pytest.mark.parametrize("seed", range(4))
def test_outside_share_a_slice_at_a_time(monkeypatch: pytest.MonkeyPatch, rows: int, seed: int) -> None:
    monkeypatch.setattr(input_checks, "OUTSIDE_ROWS", rows)
    rng = np.random.default_rng(seed)
    m, n = 12, 500
    width = rng.choice([640.0, 1.0, 0.0, -3.0, np.nan, np.inf], m, p=[0.6, 0.1, 0.1, 0.05, 0.1, 0.05])
    height = rng.choice([480.0, 2.0, np.nan], m, p=[0.8, 0.1, 0.1])
    images = Images(id=np.arange(10, 10 + m), width=width, height=height)
    xy = rng.uniform(-60, 700, (n, 2))
    box = np.concatenate([xy, xy + rng.uniform(0, 200, (n, 2))], axis=1)
    box[:5] = [[-32.0, 0, 10, 10], [-31.9, 0, 10, 10], [0, -24.0, 10, 10], [0, 0, 672.0, 10], [0, 0, 672.1, 504.1]]
    image_id = rng.integers(8, 10 + m + 2, n)  # some unknown
    dets = Detections(image_id=image_id, box=box, score=rng.random(n), category=np.ones(n, dtype=np.int64))
    gt = GroundTruth(image_id=np.array([10]), box=np.array([[0.0, 0, 1, 1]]), category=np.array([1]))
    data = LoadedData(Dataset(images=images, gt=gt, categories={1: "a"}), dets, None, {})
    assert outside_share(data) == _outside_whole(data)


def test_column_store_grows_keeps_none_and_cuts_to_length() -> None:
    store = ColumnStore(3)
    for k in (2, 0, 4, 1):
        store.add({"a": np.arange(k, dtype=np.int64), "b": np.ones((k, 4)) * k, "c": None})
    assert len(store) == 7
    out = store.result()
    assert out["c"] is None
    assert out["a"] is not None and out["a"].tolist() == [0, 1, 0, 1, 2, 3, 0]
    assert out["b"] is not None and out["b"].shape == (7, 4) and out["b"][:, 0].tolist() == [2, 2, 4, 4, 4, 4, 1]
    assert len(ColumnStore(5)) == 0 and ColumnStore(5).result() == {}
