"""The results file decoded block by block straight into the file's columns (issue 29, loading).

``coco_chunks.read_result_columns`` decodes every block into one set of columns; ``load_coco`` checks
them once and, on any error, reads again with the block reader (``iter_coco_results``) for its own
error. Each test compares the new path with the one it replaces: the block reader alone (the new
reader switched off), at block sizes that cut the file everywhere."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Images
from detcal.data import coco_chunks, coco_source
from detcal.data._fast_results import decode_results
from detcal.data.coco import results_from_decoded
from detcal.data.coco_source import load_coco

BLOCKS = (64, 150, 333, 1000, 1 << 20)


def _gt(tmp_path: Path, n_images: int = 20) -> Path:
    images = [{"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"} for i in range(1, n_images + 1)]
    anns = [
        {"id": k + 1, "image_id": 1 + k % n_images, "category_id": 1 + k % 3, "bbox": [1, 2, 30, 40]} for k in range(30)
    ]
    cats = [{"id": c, "name": f"c{c}"} for c in (1, 2, 3)]
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return gt


def _records(n: int = 300, seed: int = 3, std: bool = False) -> list[dict]:
    rng = np.random.default_rng(seed)
    recs = []
    for _ in range(n):
        x, y, w, h = (float(v) for v in rng.uniform(0, 300, 4) / rng.choice([1, 3, 7]))  # full-precision floats
        rec = {"score": float(rng.random()), "bbox": [x, y, w, h], "category_id": int(rng.integers(1, 4))}
        rec["image_id"] = int(rng.integers(1, 21))  # keys in an unusual order
        if std:
            rec["bbox_std"] = [float(v) for v in rng.uniform(0.5, 4, 4)]
        recs.append(rec)
    return recs


def _write(path: Path, recs: list, indent: int | None = None) -> Path:
    path.write_text(json.dumps(recs, indent=indent))
    return path


def _old_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coco_chunks, "read_result_columns", lambda path, chunk_bytes: None)


def _same(a: object, b: object) -> None:
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (x is None) == (y is None), f.name
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("indent", [None, 1])
def test_columns_equal_the_whole_file_decode(tmp_path: Path, block: int, indent: int | None) -> None:
    res = _write(tmp_path / "r.json", _records(std=True), indent)
    got = coco_chunks.read_result_columns(res, block)
    whole = decode_results(res.read_bytes())
    assert got is not None and whole is not None
    assert got[1] == whole[1] == ("bbox_std",)
    assert sorted(got[0]) == sorted(whole[0])
    for k, v in whole[0].items():
        assert got[0][k].dtype == v.dtype and got[0][k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("std", [False, True])
def test_load_equals_the_block_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, std: bool) -> None:
    gt, res = _gt(tmp_path), _write(tmp_path / "r.json", _records(std=std))
    recs = _records(std=std)
    recs[5]["category_id"] = 9  # dropped and counted, as by the block reader
    res = _write(tmp_path / "r.json", recs)
    new = load_coco(gt, res, chunk_bytes=block)
    new_shard = load_coco(gt, res, chunk_bytes=block, shard=(1, 3))
    _old_path(monkeypatch)
    old = load_coco(gt, res, chunk_bytes=block)
    old_shard = load_coco(gt, res, chunk_bytes=block, shard=(1, 3))
    _same(new.detections, old.detections)
    _same(new_shard.detections, old_shard.detections)
    assert new.dropped == old.dropped == {"unknown_category": 1}
    assert new_shard.shard is not None and old_shard.shard is not None
    assert new_shard.shard.tolist() == old_shard.shard.tolist()


def _bad_files(tmp_path: Path) -> dict[str, list]:
    recs = _records()
    out = {}
    r = [dict(x) for x in recs]
    r[250]["score"] = 1.5  # a bad value late in the file ...
    r[3]["image_id"] = 999  # ... and an unknown image early: the block reader reports the first block's
    out["score_late_image_early"] = r
    r = [dict(x) for x in recs]
    r[40]["bbox"] = [1, 2, -3, 4]
    out["negative_width"] = r
    r = [dict(x) for x in recs]
    r[100]["category_id"] = 7
    out["unknown_category"] = r
    r = [dict(x) for x in recs]
    r[120]["bbox"] = [1, 2, 3, 1e300]
    out["out_of_range"] = r
    r = [dict(x) for x in recs]
    r[7]["score"] = None  # declined by the fast decoder: the block reader's type error
    out["null_score"] = r
    r = [dict(x) for x in recs]
    r[200]["bbox_std"] = [1, 1, 1, 1]  # in one record only
    out["field_in_one_record"] = r
    return out


@pytest.mark.parametrize("block", (150, 1000, 1 << 20))
@pytest.mark.parametrize(
    "case",
    [
        "score_late_image_early",
        "negative_width",
        "unknown_category",
        "out_of_range",
        "null_score",
        "field_in_one_record",
    ],
)
def test_bad_files_give_the_block_readers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, case: str
) -> None:
    gt = _gt(tmp_path)
    res = _write(tmp_path / "r.json", _bad_files(tmp_path)[case])
    kw = {"chunk_bytes": block, "unknown_category": "error"}
    with pytest.raises(DetcalInputError) as new:
        load_coco(gt, res, **kw)
    _old_path(monkeypatch)
    with pytest.raises(DetcalInputError) as old:
        load_coco(gt, res, **kw)
    assert str(new.value) == str(old.value)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"annotations": [{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}]}',
        '[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": true}]',
        '[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5, "bbox_covar": []}]',
        '[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3], "score": 0.5}]',
        '[{"image_id": 1.5, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}]',
        '[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5},]',
        "",
    ],
)
def test_unusual_files_are_left_to_the_block_reader(tmp_path: Path, text: str) -> None:
    res = tmp_path / "r.json"
    res.write_text(text)
    assert coco_chunks.read_result_columns(res, 64) is None
    assert coco_chunks.read_result_columns(tmp_path / "missing.json", 64) is None


def test_optional_fields_changing_between_blocks_are_left_to_the_block_reader(tmp_path: Path) -> None:
    recs = _records(40) + _records(40, std=True)
    res = _write(tmp_path / "r.json", recs)
    assert coco_chunks.read_result_columns(res, 200) is None
    assert coco_chunks.read_result_columns(res, 1 << 20) is None  # one block: the fast decoder declines it too


def test_byte_order_mark_and_growth_past_the_size_guess(tmp_path: Path) -> None:
    recs = [{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}] * 50
    res = tmp_path / "r.json"
    res.write_bytes(b"\xef\xbb\xbf" + json.dumps(recs, separators=(",", ":")).encode())  # ~60 bytes a record
    got = coco_chunks.read_result_columns(res, 100)
    assert got is not None and len(got[0]["score"]) == 50 and got[0]["bbox"].shape == (50, 4)
    assert got[0]["image_id"].tolist() == [1] * 50


def test_boxes_to_corners_in_place_give_the_same_numbers() -> None:
    rng = np.random.default_rng(0)
    bbox = rng.uniform(-1e3, 1e3, (500, 4)) / rng.choice([1, 3, 7, 1e-3], (500, 4))
    bbox[:, 2:4] = np.abs(bbox[:, 2:4])
    bbox[:3] = [[-0.0, 0.0, 0.0, -0.0], [0.1, 0.2, 0.30000000000000004, 1e-300], [1e15, 3.0, 0.5, 0.25]]
    cols = {
        "image_id": np.arange(500, dtype=np.int64),
        "category_id": np.ones(500, dtype=np.int64),
        "bbox": bbox,
        "score": rng.random(500),
    }
    copy = {k: v.copy() for k, v in cols.items()}
    written = bbox.copy()
    given = results_from_decoded((cols, ()), "r.json", own=True)
    kept = results_from_decoded((copy, ()), "r.json")
    _same(given, kept)
    assert np.shares_memory(given.box, cols["bbox"])  # no second box array
    assert copy["bbox"].tobytes() == written.tobytes()  # without own, the caller's column is left as it was
    assert np.array_equal(given.wh, written[:, 2:4])


def _searched(ids: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The row lookup by stable sort and binary search (the lookup before the table)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    out = np.full(query.shape, -1, dtype=np.int64)
    if len(ids):
        pos = np.clip(np.searchsorted(sorted_ids, query), 0, len(ids) - 1)
        ok = sorted_ids[pos] == query
        out[ok] = order[pos[ok]]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_index_of_table_equals_the_search(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    span = [n, 2 * n, 4 * n + 1024, 10**6, 2**62][seed % 5]
    ids = rng.integers(-5, span, n) if seed != 5 else rng.permutation(n) + 7
    if seed % 2:
        ids[: n // 4] = ids[n // 4 : 2 * (n // 4)]  # repeated ids: the first row is returned
    big = np.iinfo(np.int64)
    query = np.concatenate([ids, rng.integers(-10, span + 10, 500), [big.min, big.max, -1, 0]])
    images = Images(id=ids, width=np.ones(n), height=np.ones(n))
    assert images.index_of(query).tolist() == _searched(ids, query).tolist()
    assert images.index_of(query[:0]).tolist() == []
    assert Images(id=[], width=[], height=[]).index_of(query).tolist() == [-1] * len(query)


def test_index_of_at_the_ends_of_int64() -> None:
    big = np.iinfo(np.int64)
    for ids in ([big.max - 3, big.max - 1, big.max], [big.min, big.min + 2], [big.min, big.max]):
        a = np.array(ids, dtype=np.int64)
        query = np.array([big.min, big.min + 1, big.min + 2, -1, 0, big.max - 3, big.max - 2, big.max], dtype=np.int64)
        assert (
            Images(id=a, width=np.ones(len(a)), height=np.ones(len(a))).index_of(query).tolist()
            == _searched(a, query).tolist()
        )


def test_index_of_follows_a_new_id_array() -> None:
    images = Images(id=[5, 6, 7], width=np.ones(3), height=np.ones(3))
    assert images.index_of(np.array([7, 5, 9])).tolist() == [2, 0, -1]
    images.id = np.array([9, 5, 1000000], dtype=np.int64)
    assert images.index_of(np.array([7, 5, 9, 1000000])).tolist() == [-1, 1, 0, 2]


def test_automatic_blocks_still_use_the_automatic_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gt, res = _gt(tmp_path), _write(tmp_path / "r.json", _records())
    seen: list[int] = []
    real = coco_chunks.read_result_columns
    monkeypatch.setattr(coco_chunks, "read_result_columns", lambda p, b: seen.append(b) or real(p, b))
    monkeypatch.setattr(coco_source, "AUTO_CHUNK_ABOVE", 1000)
    load_coco(gt, res)
    assert seen == [coco_source.AUTO_CHUNK_BYTES]


def _instances(tmp_path: Path, images: list, anns: list) -> Path:
    gt = tmp_path / "gt.json"
    cats = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    gt.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return gt


def _load_both(gt: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """(the fast decoder's result or error text, the general parser's)."""
    from detcal.data import _fast_results
    from detcal.data.coco import load_coco_instances

    out = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(_fast_results, "decode_instances", lambda data: None)
        try:
            out.append(load_coco_instances(gt))
        except DetcalInputError as e:
            out.append(str(e))
    return out[0], out[1]


IMAGES = [{"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"} for i in (1, 2, 3)]


@pytest.mark.parametrize(
    "where, value",
    [("id", True), ("width", False), ("height", True), ("file_name", True), ("cat", True), (None, None)],
)
def test_instances_booleans_checked_without_the_text_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str | None, value: object
) -> None:
    images = [dict(im) for im in IMAGES]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "area": 12.0, "iscrowd": 0}]
    if where in ("id", "width", "height", "file_name"):
        images[1][where] = value
    gt = _instances(tmp_path, images, anns)
    if where == "cat":
        gt.write_text(gt.read_text().replace('{"id": 2, "name": "b"}', '{"id": true, "name": "b"}'))
    fast, general = _load_both(gt, monkeypatch)
    if isinstance(general, str):
        assert fast == general and "expected" in general
    else:
        assert not isinstance(fast, str)
        _same(fast.images, general.images)  # type: ignore[attr-defined]
        _same(fast.gt, general.gt)  # type: ignore[attr-defined]


@pytest.mark.parametrize("areas", [(12.0, 5), (12.0, None), (None, None), (0, 1e300)])
def test_instances_area_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, areas: tuple) -> None:
    anns = []
    for k, a in enumerate(areas):
        ann = {"id": k + 1, "image_id": 1 + k, "category_id": 1, "bbox": [1, 2, 3, 4], "iscrowd": 0}
        if a is not None:
            ann["area"] = a
        anns.append(ann)
    fast, general = _load_both(_instances(tmp_path, IMAGES, anns), monkeypatch)
    assert (fast.gt.area is None) == (general.gt.area is None) == (None in areas)  # type: ignore[attr-defined]
    _same(fast.gt, general.gt)  # type: ignore[attr-defined]
