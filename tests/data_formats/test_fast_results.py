"""The fast results reader (msgspec into columns) against the general path (orjson records).

Every file either reads to the same Detections on both paths, or raises the
same error (message, file, record, field); the fast path may only decline."""

from __future__ import annotations

import json

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.data import _fast_results
from detcal.data.coco import results_from_bytes

FIELDS = (
    "image_id",
    "box",
    "score",
    "category",
    "wh",
    "box_std",
    "box_cov",
    "corner_cov",
    "proposal",
    "delta_mean",
    "delta_std",
)


def _general(data: bytes, file: str = "r.json"):
    """The general path: results_from_bytes with the fast decoder declining."""
    saved = _fast_results.decode_results
    _fast_results.decode_results = lambda data: None
    try:
        return results_from_bytes(data, file)
    finally:
        _fast_results.decode_results = saved


def _outcome(fn, data: bytes):
    try:
        d = fn(data)
    except DetcalInputError as e:
        return ("error", str(e))
    return ("ok", {k: (None if getattr(d, k) is None else getattr(d, k).tolist()) for k in FIELDS})


def _same(data: bytes) -> bool:
    """Both paths agree; returns whether the fast path took the file."""
    fast = _outcome(lambda b: results_from_bytes(b, "r.json"), data)
    slow = _outcome(_general, data)
    assert fast == slow, (data[:300], fast, slow)
    return _fast_results.decode_results(data) is not None


def _rec(**kw):
    r = {"image_id": 1, "category_id": 2, "bbox": [1.5, 2.0, 3.25, 4.0], "score": 0.5}
    r.update(kw)
    return r


CASES = [
    [_rec()],
    [_rec(), _rec(image_id=2, score=1, bbox=[0, 0, 1, 1])],
    [_rec(bbox_std=[1, 2, 3, 4])] * 3,
    [_rec(proposal=[0, 0, 5, 5], delta_mean=[0.1, 0, 0, 0], delta_std=[1, 1, 1, 1])] * 2,
    [_rec(proposal=[0, 0, 5, 5], delta_mean=[0.1, 0, 0, 0], delta_logvar=[-1, 0, 1, 2])] * 2,
    [_rec(bbox_covar=np.eye(4).tolist())],
    [_rec(extra={"nested": [1, {"x": True}]}, name="a")],
    [_rec(image_id=True)],
    [_rec(score=False)],
    [_rec(image_id=1.0)],
    [_rec(image_id=2**63)],
    [_rec(image_id=-(2**63) - 1)],
    [_rec(image_id=2**64 + 5)],
    [_rec(score=1.5)],
    [_rec(score=-0.0)],
    [_rec(bbox=[1, 2, -3, 4])],
    [_rec(bbox=[1, 2, 3])],
    [_rec(bbox=[1, 2, 3, 4, 5])],
    [_rec(bbox=[1, 2, 3, None])],
    [_rec(bbox="1,2,3,4")],
    [_rec(score=None)],
    [_rec(), {"image_id": 1, "category_id": 2, "bbox": [1, 2, 3, 4]}],
    [_rec(bbox_std=[1, 2, 3, 4]), _rec()],
    [_rec(), _rec(bbox_std=[1, 2, 3, 4])],
    [_rec(bbox_std=[1, 2, 0, 4])],
    [_rec(bbox_std=None)],
    [_rec(delta_mean=[0, 0, 0, 0])],
    [_rec(proposal=[0, 0, 5, 5], delta_mean=[0, 0, 0, 0])],
    [_rec(bbox=[1e308, 0, 1e308, 1])],
    [_rec(bbox=[1e31, 0, 1, 1])],
    [],
    {"annotations": [_rec()]},
    [_rec(), 3],
    [_rec(file_name="caf\u00e9")],
    [_rec(file_name="a\\\"b")],
    [_rec(id=5, segmentation_id=None), _rec(), _rec(id=7)],
    [_rec(), _rec(foo=[1, {"a": 2}])],
    [_rec(bbox_std=[1, 2, 3, 4]), _rec(bbox_std=[1, 2, 3, 4], bbox_covar=np.eye(4).tolist())],
    [_rec(), _rec(covars=[[[1, 0], [0, 1]], [[1, 0], [0, 1]]])],
    # first-record keys a record type cannot name (found by the large fuzz budget): the general path
    [_rec(**{"catego y_id": 1}), _rec(**{"catego y_id": 2})],
    [_rec(**{"__init__": 1})],
    [_rec(**{"1a": 1, "__x": 2})],
    [{"category_id": 1}, 0],
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_fast_and_general_paths_agree(i):
    _same(json.dumps(CASES[i]).encode())


def test_the_usual_file_takes_the_fast_path():
    assert _same(json.dumps(CASES[0]).encode())
    assert _same(json.dumps(CASES[2]).encode())
    assert _same(json.dumps(CASES[3]).encode())
    assert not _same(json.dumps(CASES[5]).encode())  # covariances: the general path
    assert _same(json.dumps(CASES[-8]).encode())  # extra keys of the first record: read, then left out
    assert not _same(json.dumps(CASES[-7]).encode())  # a key the first record lacks: the general path
    for case in CASES[-4:-1]:  # keys that are no identifiers: declined, then read by the general path
        assert _fast_results.decode_results(json.dumps(case).encode()) is None


def test_text_level_cases_agree():
    base = json.dumps([_rec(), _rec(image_id=3)])
    for text in (
        base,
        "\ufeff" + base,
        base.replace(", ", ","),
        base.replace("0.5", "NaN"),
        base + " x",
        base[:-1] + ",]",
        base.replace('"image_id": 3', '"image_id": 3, "image_id": 4'),
        base.replace("1.5", "1.50000000000000000000000000001"),
        base.replace("1.5", "1e400"),
        base.replace('"image_id"', '"image\\u005fid"'),
        "[" + base + "]",
        "{}",
        "3",
        "",
        base.replace("0.5", "5e-1").replace("2.0", "0.2E+1"),
    ):
        _same(text.encode("utf-8"))


def test_random_files_agree_exactly():
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(1, 200))
        recs = []
        for _ in range(n):
            x = rng.uniform(-10, 1000, 4)
            x[2:] = np.abs(x[2:])
            r = {
                "image_id": int(rng.integers(-5, 10**12)),
                "category_id": int(rng.integers(1, 90)),
                "bbox": [float(v) if rng.random() < 0.8 else int(v) for v in x],
                "score": float(rng.random()) if rng.random() < 0.9 else int(rng.integers(0, 2)),
            }
            if trial % 3 == 1:
                r["bbox_std"] = rng.uniform(0.1, 5, 4).tolist()
            recs.append(r)
        assert _same(json.dumps(recs).encode())


# --------------------------------------------------------------------------- instances
def _instances_outcome(data: bytes, fast: bool, tmp_path):
    from detcal.data.coco import load_coco_instances

    path = tmp_path / "i.json"
    path.write_bytes(data)
    saved = _fast_results.decode_instances
    if not fast:
        _fast_results.decode_instances = lambda data: None
    try:
        ds = load_coco_instances(path)
    except DetcalInputError as e:
        return ("error", str(e))
    finally:
        _fast_results.decode_instances = saved
    gt, im = ds.gt, ds.images
    return (
        "ok",
        im.id.tolist(),
        repr(im.width.tolist()),
        repr(im.height.tolist()),
        list(im.file_name),
        gt.image_id.tolist(),
        gt.box.tolist(),
        gt.category.tolist(),
        gt.iscrowd.tolist(),
        gt.ignore.tolist(),
        gt.id.tolist(),
        None if gt.area is None else gt.area.tolist(),
        sorted(ds.categories.items()),
    )


def _doc(**changes):
    doc = {
        "info": {"description": "x"},
        "licenses": [],
        "images": [
            {"id": 1, "width": 640, "height": 480, "file_name": "a.jpg"},
            {"id": 2, "width": 320.5, "height": 200, "file_name": "b.jpg"},
        ],
        "annotations": [
            {
                "id": 10,
                "image_id": 1,
                "category_id": 3,
                "bbox": [1, 2, 30.5, 40],
                "area": 1220.0,
                "iscrowd": 0,
                "segmentation": [[1, 2, 3, 4, 5, 6]],
            },
            {
                "id": 11,
                "image_id": 2,
                "category_id": 3,
                "bbox": [5, 5, 10, 10],
                "area": 100,
                "iscrowd": 1,
                "segmentation": {"counts": "abc1", "size": [200, 320]},
            },
        ],
        "categories": [{"id": 3, "name": "car", "supercategory": "vehicle"}],
    }
    for path, value in changes.items():
        node = doc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if value is _DELETE:
            if isinstance(node, list):
                del node[int(last)]
            else:
                del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return doc


_DELETE = object()
INSTANCE_CASES = [
    {},
    {"annotations.0.iscrowd": True},
    {"annotations.0.iscrowd": 2},
    {"annotations.0.iscrowd": None},
    {"annotations.0.iscrowd": _DELETE},
    {"annotations.1.ignore": 1},
    {"annotations.0.area": _DELETE},
    {"annotations.0.area": True},
    {"annotations.0.area": -1.0},
    {"annotations.0.area": None},
    {"images.0.width": None},
    {"images.0.width": _DELETE},
    {"images.0.width": True},
    {"images.0.width": "640"},
    {"images.0.width": -3},
    {"images.1.file_name": None},
    {"images.1.file_name": 7},
    {"images.1.file_name": _DELETE},
    {"images.0.id": 1.0},
    {"images.0.id": 2},
    {"images.0.id": None},
    {"images.0.id": 2**63},
    {"annotations.0.bbox": [1, 2, 3]},
    {"annotations.0.bbox": [1, 2, -3, 4]},
    {"annotations.0.bbox": [1, 2, True, 4]},
    {"annotations.0.image_id": 99},
    {"annotations.0.category_id": 99},
    {"annotations.1.id": 10},
    {"categories.0.name": 5},
    {"categories.0.name": _DELETE},
    {"categories": "x"},
    {"images": _DELETE},
    {"annotations.0": 3},
    {"categories.0.name": "caf\u00e9"},
    {"images.0.file_name": "a\\b.jpg"},
]


@pytest.mark.parametrize("i", range(len(INSTANCE_CASES)))
def test_instances_fast_and_general_paths_agree(i, tmp_path):
    data = json.dumps(_doc(**INSTANCE_CASES[i]), ensure_ascii=i % 2 == 0).encode()
    assert _instances_outcome(data, True, tmp_path) == _instances_outcome(data, False, tmp_path)


def test_instances_text_level_cases_agree(tmp_path):
    base = json.dumps(_doc())
    took = []
    for text in (
        base,
        "\ufeff" + base,
        base.replace("640", "NaN"),
        base.replace("640", "1e400"),
        base + " x",
        base.replace('"id": 1,', '"id": 1, "id": 5,', 1),
        base.replace("30.5", "30.50000000000000000000001"),
        "[]",
        "{}",
        base.replace('"images"', '"imag\\u0065s"'),
    ):
        data = text.encode("utf-8")
        assert _instances_outcome(data, True, tmp_path) == _instances_outcome(data, False, tmp_path), text[:80]
        took.append(_fast_results.decode_instances(data[3:] if data.startswith(b"\xef\xbb\xbf") else data) is not None)
    assert took[0] and took[1] and not took[2] and not took[6]
