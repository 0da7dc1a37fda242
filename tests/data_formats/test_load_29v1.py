"""The load, eleventh pass (issue 29, 29v1): each change against the way it replaces.

* an instances file read with its ``annotations`` text scanned once (``_fast_results._spliced_decode``:
  the rest of the file decoded with a placeholder where the list was, the list block by block) against
  the file decoded with the list kept as its text, for the key orders and layouts it takes and those it
  must leave to that decode (and cheaply: without decoding the whole list first);
* the results' corners and checks column by column (``coco._checked_corners``), the ground truth's
  corners (``coco._corners``), ``_json.check_box`` and ``_json._all_within``: the same numbers, bit for
  bit, and the same first error;
* the relative box features with the image sizes gathered a block at a time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.coco_annotations import annotations

from detcal.core.boxes import xywh_to_xyxy
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data import _fast_results, coco
from detcal.data._json import check_bounded, check_box
from detcal.data.formats import LoadedData
from detcal.pipeline.evaluation import relative_box_features

IMAGES = [{"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"} for i in range(1, 6)]
CATEGORIES = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


def _file(order: tuple[str, ...], anns: list[dict], indent: int | None = None, **extra: object) -> bytes:
    parts = {"images": IMAGES, "annotations": anns, "categories": CATEGORIES, **extra}
    return json.dumps({k: parts[k] for k in order}, indent=indent).encode()


def _unspliced(data: bytes, monkeypatch: pytest.MonkeyPatch) -> _fast_results.DecodedInstances | None:
    with monkeypatch.context() as m:
        m.setattr(_fast_results, "_spliced_decode", lambda data: None)
        return _fast_results.decode_instances(data)


def _same(a: _fast_results.DecodedInstances | None, b: _fast_results.DecodedInstances | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    assert [tuple(getattr(r, k) for k in r.__struct_fields__) for r in a.images] == [
        tuple(getattr(r, k) for k in r.__struct_fields__) for r in b.images
    ]
    assert [(r.id, r.name) for r in a.categories] == [(r.id, r.name) for r in b.categories]
    assert (a.columns is None) == (b.columns is None)
    if a.columns is not None and b.columns is not None:
        for x, y in zip(a.columns, b.columns):
            assert (x is None) == (y is None)
            if x is not None:
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize(
    ("order", "taken"),
    [
        (("images", "annotations", "categories"), True),  # COCO's own order
        (("categories", "images", "annotations"), True),  # the list last
        (("annotations", "images", "categories"), False),  # the guess reaches into the images: left
    ],
)
@pytest.mark.parametrize("n", [0, 1, 2, 300])
def test_spliced_decode_equals_the_decode_with_the_list_as_text(
    monkeypatch: pytest.MonkeyPatch, order: tuple[str, ...], taken: bool, indent: int | None, n: int
) -> None:
    monkeypatch.setattr(_fast_results, "ANNOTATION_BLOCK_BYTES", 97)  # many blocks
    data = _file(order, annotations(n), indent)
    spliced = _fast_results._spliced_decode(data)
    assert (spliced is not None) == taken
    if taken:
        _same(spliced, _unspliced(data, monkeypatch))
    _same(_fast_results.decode_instances(data), _unspliced(data, monkeypatch))


def test_other_layouts_are_left_to_the_decode_with_the_list_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    anns = annotations(50)
    licenses = [{"id": 1, "name": "x", "url": "u"}]
    cases = [
        # LVIS's order: a guess that reaches into the images and licenses
        _file(("annotations", "images", "licenses", "categories"), anns, licenses=licenses),
        # a list that is not the last before the categories
        _file(("images", "annotations", "licenses", "categories"), anns, licenses=licenses),
        # another key after the list, which is last but for it
        _file(("categories", "images", "annotations", "info"), anns, info={"year": 2024}),
        # an "annotations" key with a list value inside the info, before the top-level one
        _file(("info", "images", "annotations", "categories"), anns, info={"annotations": [1, 2]}),
    ]
    blocks = []
    real = _fast_results._annotation_blocks
    monkeypatch.setattr(_fast_results, "_annotation_blocks", lambda raw: blocks.append(len(raw)) or real(raw))
    for data in cases:
        blocks.clear()
        assert _fast_results._spliced_decode(data) is None
        assert not blocks or max(blocks) < 100  # never the whole list decoded in vain
        _same(_fast_results.decode_instances(data), _unspliced(data, monkeypatch))


def test_duplicate_and_odd_files_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    anns = annotations(20)
    text = _file(("images", "annotations", "categories"), anns).decode()
    cases = [
        text[:-1] + ', "annotations": []}',  # the key twice: the last one counts
        text.replace('"annotations": [', '"annotations": [{"id": 1, "bbox": [1, 2]}, ', 1),  # a record of other types
        text.replace('"annotations"', '"annotations"' + " " * 80, 1),  # spaces past the look-ahead
        text[:-2],  # not JSON
        text.replace('"categories"', '"categorie"'),  # no categories
    ]
    for case in cases:
        data = case.encode()
        _same(_fast_results.decode_instances(data), _unspliced(data, monkeypatch))


def test_spliced_load_gives_the_same_errors(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    anns = annotations(30)
    anns[7]["bbox"] = [1.0, 2.0, -3.0, 4.0]
    anns[9]["image_id"] = 99
    path = tmp_path / "instances.json"
    path.write_bytes(_file(("images", "annotations", "categories"), anns))
    with pytest.raises(DetcalInputError) as spliced:
        coco.load_coco_instances(path)
    monkeypatch.setattr(_fast_results, "_spliced_decode", lambda data: None)
    with pytest.raises(DetcalInputError) as before:
        coco.load_coco_instances(path)
    assert str(spliced.value) == str(before.value)
    assert "annotations[7]" in str(spliced.value)


def _boxes(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.uniform(-50, 700, (n, 4)) / rng.choice([1.0, 3.0, 7.0], (n, 1))
    b[:, 2:] = np.abs(b[:, 2:])
    b[::7, 2] = -0.0  # a negative zero width passes, and x + -0.0 keeps x's bits
    b[::11, 0] = -0.0
    return b


@pytest.mark.parametrize("rows", [1, 5, 1 << 14])
def test_corners_column_by_column_bit_for_bit(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(coco, "CHECK_ROWS", rows)
    given = _boxes(103, 1)
    score = np.linspace(0, 1, 103)
    box, wh = coco._checked_corners(given.copy(), score, "r.json", own=True)
    assert box.tobytes() == xywh_to_xyxy(given).tobytes()
    assert wh.tobytes() == given[:, 2:4].copy().tobytes()
    gt_box, gt_wh = coco._corners(given)
    assert gt_box.tobytes() == xywh_to_xyxy(given).tobytes() and gt_wh.tobytes() == given[:, 2:4].copy().tobytes()


@pytest.mark.parametrize(
    ("row", "col", "value", "message"),
    [
        (4, 3, -1.0, "negative box width or height"),
        (6, 2, -1e-300, "negative box width or height"),
        (2, 0, np.nan, "non-finite box coordinate"),
        (5, 1, 2e30, "out of range"),
        (3, 1, -2e30, "out of range"),
        (1, 2, np.inf, "non-finite box coordinate"),
    ],
)
def test_box_checks_first_row_as_before(row: int, col: int, value: float, message: str) -> None:
    b = _boxes(9, 2)
    b[row, col] = value
    b[row + 2, 3] = -5.0  # a later bad row: the first is named
    with pytest.raises(DetcalInputError, match=message) as e:
        check_box(b, file="f.json", field="bbox")
    assert e.value.record == row
    with pytest.raises(DetcalInputError) as e:
        coco._checked_corners(b.copy(), np.full(9, 0.5), "r.json", own=True)
    assert e.value.record == row and message in str(e.value)
    check_bounded(np.zeros((0, 4)), "x", file="f", field="x")  # nothing to check


def _loaded(width: list[float], height: list[float], n: int, seed: int) -> LoadedData:
    rng = np.random.default_rng(seed)
    images = Images(id=np.array([10, 30, 20]), width=np.array(width), height=np.array(height))
    ds = Dataset(
        images=images,
        gt=GroundTruth(np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0, np.int64)),
        categories={1: "a"},
    )
    xy = rng.uniform(-20, 600, (n, 2))
    box = np.concatenate([xy, xy + rng.uniform(1, 200, (n, 2))], axis=1)
    dets = Detections(rng.choice([10, 20, 30], n), box, rng.uniform(0, 1, n), np.ones(n, np.int64))
    return LoadedData(ds, dets, None, {})


def test_box_features_with_sizes_gathered_by_block() -> None:
    data = _loaded([640.0, 500.0, 320.0], [480.0, 375.0, 240.0], 1000, 3)
    feats, n_clipped, clipped = relative_box_features(data, needed=False)
    row = data.dataset.images.index_of(data.detections.image_id)
    w, h = data.dataset.images.width[row][:, None], data.dataset.images.height[row][:, None]
    b = data.detections.box
    raw = np.concatenate([(b[:, :2] + 0.5 * (b[:, 2:] - b[:, :2])), b[:, 2:] - b[:, :2]], axis=1)
    raw /= np.concatenate([w, h, w, h], axis=1)[:, [0, 1, 2, 3]]
    assert feats.tobytes() == np.clip(raw, 0, 1).tobytes()
    assert np.array_equal(clipped, ((raw < 0) | (raw > 1)).any(axis=1)) and n_clipped == int(clipped.sum())


def test_box_features_of_an_unsized_image() -> None:
    data = _loaded([640.0, np.nan, 320.0], [480.0, 375.0, 240.0], 50, 4)
    feats, n_clipped, clipped = relative_box_features(data, needed=False)
    assert np.isnan(feats).all() and n_clipped == 0 and not clipped.any()
    with pytest.raises(DetcalInputError, match="image 30 has no width/height"):
        relative_box_features(data, needed=True)
