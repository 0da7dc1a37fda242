"""The fast results reader (msgspec into columns) against the general path (orjson records).

Every file either reads to the same Detections on both paths, or raises the
same error (message, file, record, field); the fast path may only decline."""
from __future__ import annotations

import json

import numpy as np
import pytest

from detcal.data import _fast_results
from detcal.data.coco import results_from_bytes
from detcal.errors import DetcalInputError

FIELDS = ("image_id", "box", "score", "category", "wh", "box_std", "box_cov", "corner_cov", "proposal",
          "delta_mean", "delta_std")


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
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_fast_and_general_paths_agree(i):
    _same(json.dumps(CASES[i]).encode())


def test_the_usual_file_takes_the_fast_path():
    assert _same(json.dumps(CASES[0]).encode())
    assert _same(json.dumps(CASES[2]).encode())
    assert _same(json.dumps(CASES[3]).encode())
    assert not _same(json.dumps(CASES[5]).encode())  # covariances: the general path


def test_text_level_cases_agree():
    base = json.dumps([_rec(), _rec(image_id=3)])
    for text in (base, "\ufeff" + base, base.replace(", ", ","), base.replace("0.5", "NaN"), base + " x",
                 base[:-1] + ",]", base.replace('"image_id": 3', '"image_id": 3, "image_id": 4'),
                 base.replace("1.5", "1.50000000000000000000000000001"), base.replace("1.5", "1e400"),
                 base.replace('"image_id"', '"image\\u005fid"'), "[" + base + "]", "{}", "3", "",
                 base.replace("0.5", "5e-1").replace("2.0", "0.2E+1")):
        _same(text.encode("utf-8"))


def test_random_files_agree_exactly():
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(1, 200))
        recs = []
        for _ in range(n):
            x = rng.uniform(-10, 1000, 4)
            x[2:] = np.abs(x[2:])
            r = {"image_id": int(rng.integers(-5, 10**12)), "category_id": int(rng.integers(1, 90)),
                 "bbox": [float(v) if rng.random() < 0.8 else int(v) for v in x],
                 "score": float(rng.random()) if rng.random() < 0.9 else int(rng.integers(0, 2))}
            if trial % 3 == 1:
                r["bbox_std"] = rng.uniform(0.1, 5, 4).tolist()
            recs.append(r)
        assert _same(json.dumps(recs).encode())
