"""Fuzzer over COCO instances, COCO results and KITTI directories.

Every generated input must either load with finite values (and the derived
quantities the metrics use finite too) or raise a DetcalInputError naming the
file; any other exception is a failure. The normal suite runs a small,
derandomised budget; the ``slow`` test runs a larger random one.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.data.kitti import load_kitti_labels, load_kitti_results

# ------------------------------------------------------------------ value pools
TRICKY_INTS = [0, 1, -1, 7, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30]
TRICKY_FLOATS = [
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    1e-320,
    1e-200,
    1e-30,
    1e30,
    1e31,
    1e200,
    1e308,
    -1e308,
    math.nan,
    math.inf,
    -math.inf,
    2.0**53,
    2.0**63,
    640.0,
]
SCALARS = st.one_of(
    st.sampled_from(TRICKY_INTS),
    st.sampled_from(TRICKY_FLOATS),
    st.integers(-5, 700),
    st.floats(-1e3, 1e3, allow_nan=False),
    st.booleans(),
    st.none(),
    st.sampled_from(["1", "", "x", "true"]),
)
NUMBERS = st.one_of(st.integers(0, 600), st.floats(0, 600, allow_nan=False), SCALARS)


def vector(n: int) -> st.SearchStrategy:
    return st.one_of(st.lists(NUMBERS, min_size=n, max_size=n), st.lists(NUMBERS, max_size=n + 1), SCALARS)


def matrix(shape: tuple[int, ...]) -> st.SearchStrategy:
    if len(shape) == 1:
        return vector(shape[0])
    return st.one_of(st.lists(matrix(shape[1:]), min_size=shape[0], max_size=shape[0]), SCALARS)


SPD = [[2.0, 0.5, 0.0, 0.0], [0.5, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
FIELD = {
    "image_id": st.one_of(st.sampled_from([1, 2, 3]), SCALARS),
    "category_id": st.one_of(st.sampled_from([1, 2]), SCALARS),
    "bbox": st.one_of(st.just([10, 20, 30, 40]), vector(4)),
    "score": st.one_of(st.floats(0, 1), SCALARS),
    "bbox_std": st.one_of(st.just([1.0, 2.0, 3.0, 4.0]), vector(4)),
    "bbox_covar": st.one_of(st.just(SPD), matrix((4, 4))),
    "covars": st.one_of(st.just([SPD[0][:2], SPD[1][:2]] and [[[2.0, 0.5], [0.5, 2.0]]] * 2), matrix((2, 2, 2))),
    "proposal": st.one_of(st.just([12, 22, 28, 38]), vector(4)),
    "delta_mean": st.one_of(st.just([0.1, -0.1, 0.0, 0.2]), vector(4)),
    "delta_std": st.one_of(st.just([0.1, 0.1, 0.2, 0.2]), vector(4)),
    "delta_logvar": st.one_of(st.just([-2.0, -2.0, -1.0, -1.0]), vector(4)),
}
UNCERTAINTY = ["bbox_std", "bbox_covar", "covars", "proposal", "delta_mean", "delta_std", "delta_logvar"]


@st.composite
def result_records(draw) -> list:
    keys = ["image_id", "category_id", "bbox", "score"] + draw(
        st.lists(st.sampled_from(UNCERTAINTY), max_size=3, unique=True)
    )
    n = draw(st.integers(0, 4))
    records = []
    for _ in range(n):
        rec = {k: draw(FIELD[k]) for k in keys if draw(st.integers(0, 30)) > 0}  # a key now and then goes missing
        records.append(rec)
    if draw(st.integers(0, 10)) == 0:
        records.append(draw(SCALARS))
    return records


@st.composite
def instances_doc(draw) -> object:
    images = [
        {
            "id": draw(st.one_of(st.just(i + 1), SCALARS)),
            "width": draw(st.one_of(st.just(640), NUMBERS)),
            "height": draw(st.one_of(st.just(480), NUMBERS)),
            "file_name": draw(st.sampled_from(["a.jpg", "true", ""])),
        }
        for i in range(draw(st.integers(0, 3)))
    ]
    anns = [
        {
            "id": draw(st.one_of(st.just(k + 1), SCALARS)),
            "image_id": draw(FIELD["image_id"]),
            "category_id": draw(FIELD["category_id"]),
            "bbox": draw(FIELD["bbox"]),
            "iscrowd": draw(st.one_of(st.sampled_from([0, 1, True, False]), SCALARS)),
        }
        for k in range(draw(st.integers(0, 4)))
    ]
    cats = [
        {"id": 1, "name": "a"},
        {"id": draw(st.one_of(st.just(2), SCALARS)), "name": draw(st.sampled_from(["b", 3]))},
    ]
    doc = {"images": images, "annotations": anns, "categories": cats}
    for key in ("images", "annotations", "categories"):
        if draw(st.integers(0, 20)) == 0:
            doc[key] = draw(SCALARS)
    return doc


def _text(doc: object, draw_bytes: bytes) -> bytes:
    text = json.dumps(doc, allow_nan=True).encode()
    mode = draw_bytes[0] % 8 if draw_bytes else 0
    if mode == 1:
        return b"\xef\xbb\xbf" + text
    if mode == 2:  # truncate
        return text[: max(len(text) - 1 - draw_bytes[-1] % 10, 0)]
    if mode == 3:  # flip one byte
        i = int.from_bytes(draw_bytes[1:3] or b"\x00", "big") % max(len(text), 1)
        return text[:i] + bytes([draw_bytes[-1]]) + text[i + 1 :]
    return text


# ------------------------------------------------------------------ checks
def _assert_finite_detections(dets: Detections) -> None:
    for name in ("box", "score", "box_std", "box_cov", "corner_cov", "proposal", "delta_mean", "delta_std"):
        v = getattr(dets, name)
        if v is not None:
            assert np.isfinite(v).all(), name
    assert (dets.box[:, 2:] >= dets.box[:, :2]).all()
    with np.errstate(all="raise"):  # what the metrics derive must not overflow either
        span = float(np.abs(dets.box).max(initial=0.0)) * 2 + 1
        for std in (dets.box_std, dets.delta_std):
            if std is not None and std.size:
                assert np.isfinite(span**2 / std.min() ** 2) and np.isfinite((std.max() ** 2) * 1e7)
        if dets.box_cov is not None and dets.box_cov.size:
            assert np.isfinite(np.abs(dets.box_cov).max() * 1e7)


def _assert_finite_dataset(ds: Dataset) -> None:
    assert np.isfinite(ds.gt.box).all()
    assert (ds.gt.box[:, 2:] >= ds.gt.box[:, :2]).all()
    for size in (ds.images.width, ds.images.height):
        known = size[~np.isnan(size)]
        assert np.isfinite(known).all() and (known > 0).all()
        if len(known) and len(ds.gt):
            with np.errstate(all="raise"):
                assert np.isfinite(np.abs(ds.gt.box).max() / known.min())


def _load_or_clear_error(load, path: Path):
    try:
        return load(path)
    except DetcalInputError as e:
        assert e.file is not None and str(Path(e.file)).startswith(str(path)), f"error does not name the file: {e}"
        return None


def check_results(records: list, raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "results.json"
        path.write_bytes(_text(records, raw))
        dets = _load_or_clear_error(load_coco_results, path)
        if dets is not None:
            _assert_finite_detections(dets)


def check_instances(doc: object, raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "instances.json"
        path.write_bytes(_text(doc, raw))
        ds = _load_or_clear_error(load_coco_instances, path)
        if ds is not None:
            _assert_finite_dataset(ds)


# ------------------------------------------------------------------ KITTI
KITTI_TOKENS = st.one_of(
    st.sampled_from(
        [
            "Car",
            "car",
            "Pedestrian",
            "Person_sitting",
            "DontCare",
            "Truck",
            "Bus",
            "",
            "0",
            "1",
            "-1",
            "-10",
            "-1000",
            "0.5",
            "1_0",
            "0x1",
            "nan",
            "inf",
            "1e31",
            "1e308",
            "1e-320",
            "\u00b2",
            "1\u00a0",
            "\u0661",
            "2.5e",
            ".5",
            "+3",
            "100.00",
            "300.50",
            "3",
        ]
    ),
    st.floats(-1e3, 1e3, allow_nan=False).map(lambda v: f"{v:.2f}"),
)
SEPARATORS = st.sampled_from([" ", " ", " ", "\t", "  ", "\u00a0", "\u2028", "\x0b", "\x1c"])
GOOD_ROW = "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59"


@st.composite
def kitti_file(draw, ncols: int) -> bytes:
    lines = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            row = GOOD_ROW + (" 0.5" if ncols == 16 else "")
            tokens = row.split(" ")
            i = draw(st.integers(0, len(tokens) - 1))
            tokens[i] = draw(KITTI_TOKENS)
        else:
            tokens = [draw(KITTI_TOKENS) for _ in range(draw(st.integers(ncols - 1, ncols + 1)))]
        sep = draw(SEPARATORS)
        lines.append(sep.join(tokens))
    text = draw(st.sampled_from(["\n", "\r\n", "\r", "\u2028"])).join(lines)
    data = text.encode("utf-8")
    if draw(st.integers(0, 5)) == 0:
        data = b"\xef\xbb\xbf" + data
    if draw(st.integers(0, 10)) == 0:
        data += b"\xff"
    return data


FRAME_NAMES = st.one_of(
    st.sampled_from(
        ["000000", "000001", "99999999999999999999", "9223372036854775807", "\u00b2", "\u0661", "1a", "00001"]
    ),
    st.integers(0, 50).map(lambda i: f"{i:06d}"),
)


def check_kitti(files: dict[str, bytes], results: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "dir"
        root.mkdir()
        for name, data in files.items():
            (root / f"{name}.txt").write_bytes(data)
        load = load_kitti_results if results else load_kitti_labels
        out = _load_or_clear_error(load, root)
        if out is None:
            return
        if results:
            _assert_finite_detections(out)
        else:
            _assert_finite_dataset(out)
            assert np.isfinite(out.gt.alpha).all() and np.isfinite(out.gt.location).all()


def kitti_dirs(ncols: int) -> st.SearchStrategy:
    return st.dictionaries(FRAME_NAMES, kitti_file(ncols), max_size=3)


# ------------------------------------------------------------------ tests
FAST = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@FAST
@given(result_records(), st.binary(max_size=4))
def test_fuzz_coco_results(records: list, raw: bytes) -> None:
    check_results(records, raw)


@FAST
@given(instances_doc(), st.binary(max_size=4))
def test_fuzz_coco_instances(doc: object, raw: bytes) -> None:
    check_instances(doc, raw)


@FAST
@given(kitti_dirs(15))
def test_fuzz_kitti_labels(files: dict[str, bytes]) -> None:
    check_kitti(files, results=False)


@FAST
@given(kitti_dirs(16))
def test_fuzz_kitti_results(files: dict[str, bytes]) -> None:
    check_kitti(files, results=True)


@pytest.mark.slow
@SLOW
@given(
    st.one_of(
        st.tuples(st.just("results"), result_records(), st.binary(max_size=4)),
        st.tuples(st.just("instances"), instances_doc(), st.binary(max_size=4)),
        st.tuples(st.just("labels"), kitti_dirs(15), st.just(b"")),
        st.tuples(st.just("kitti_results"), kitti_dirs(16), st.just(b"")),
    )
)
def test_fuzz_all_formats_large_budget(case: tuple) -> None:
    kind, value, raw = case
    if kind == "results":
        check_results(value, raw)
    elif kind == "instances":
        check_instances(value, raw)
    else:
        check_kitti(value, results=kind == "kitti_results")
