"""The vectorised per-detection CSV is byte-identical to the previous per-cell writer; Parquet holds the same table."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

import detcal.reports.detections_csv as mod
from detcal.core.types import Detections, MatchResult
from detcal.reports.detections_csv import (
    detections_columns,
    detections_csv,
    evaluation_columns,
    format_csv,
    write_detections_parquet,
)

# ------------------------------------------------------------------ the previous writer (the oracle), per cell
FEATURES = ("cx", "cy", "w", "h")


def _names(result, per_class):
    tags = ["kitti"] if per_class else [f"{t:g}" for t in result.iou_thresholds]
    names = ["image_id", "category", "score", "considered", "iou"]
    for tag in tags:
        names += [f"matched@{tag}", f"ignored@{tag}", f"gt_id@{tag}"]
    return names


def old_format_csv(dets, result, gt_ids, per_class=False):
    zero_one = np.array(["0", "1"])
    cols = [
        list(map(str, dets.image_id.tolist())),
        list(map(str, dets.category.tolist())),
        list(map(repr, dets.score.tolist())),
        zero_one[result.considered.astype(np.int64)].tolist(),
        list(map(repr, result.iou.tolist())),
    ]
    for t in range(result.matched.shape[0]):
        gi = result.gt_index[t]
        ids = np.where(gi >= 0, gt_ids[np.maximum(gi, 0)] if len(gt_ids) else -1, -1)
        cols += [
            zero_one[result.matched[t].astype(np.int64)].tolist(),
            zero_one[result.ignored[t].astype(np.int64)].tolist(),
            list(map(str, ids.tolist())),
        ]
    header = ",".join(_names(result, per_class))
    body = "\n".join(map(",".join, zip(*cols)))
    return header + "\n" + body + ("\n" if body else "")


def old_detections_csv(data, mr, feats, clipped):
    dets = data.detections
    per_class = not bool(np.all(np.isfinite(mr.iou_thresholds)))
    base = old_format_csv(dets, mr, data.dataset.gt.id, per_class).splitlines()
    extra_cols = [dets.box[:, 0], dets.box[:, 1], dets.box[:, 2], dets.box[:, 3], *feats.T]
    text_cols = [list(map(repr, c.tolist())) for c in extra_cols] + [list(map(str, clipped.astype(int).tolist()))]
    header = "x1,y1,x2,y2," + ",".join(f"rel_{n}" for n in FEATURES) + ",clipped"
    extra = [header] + list(map(",".join, zip(*text_cols)))
    return "\n".join(map(",".join, zip(base, extra))) + "\n"


# ------------------------------------------------------------------ inputs
EDGE = [
    0.0,
    -0.0,
    1e-4,
    9.999999999999999e-05,
    1e-5,
    5e-324,
    1e16,
    9999999999999998.0,
    1e22,
    1.7976931348623157e308,
    -1e-7,
    0.1 + 0.2,
    1.0,
    3.0,
    123456.789,
    np.nan,
    np.inf,
    -np.inf,
    2.5e-300,
]


def _floats(rng, n):
    kinds = rng.integers(0, 4, n)
    v = np.where(
        kinds == 0, rng.random(n), np.where(kinds == 1, rng.normal(0, 500, n), 10.0 ** rng.uniform(-12, 20, n))
    )
    v = np.where(kinds == 3, np.round(v), v)
    v[rng.integers(0, n, min(n, len(EDGE)))] = EDGE[: min(n, len(EDGE))]
    return v


def _case(seed: int, n: int, t: int, n_gt: int, per_class: bool = False):
    rng = np.random.default_rng(seed)
    dets = Detections(
        image_id=rng.integers(-5, 2**62, n),
        box=np.sort(rng.uniform(0, 640, (n, 4)), axis=1),
        score=rng.random(n),
        category=rng.integers(1, 91, n),
    )
    dets.box[: min(n, 4)] = np.array(
        [[1e-5, 0.0, 1e16, 1e17], [-0.0, 2.0, 3.0, 4.5], [0.1, 0.2, 0.3, 0.4], [5e-324, 1, 2, 3]]
    )[: min(n, 4)]
    dets.score[: min(n, 3)] = [0.0, 1e-5, 1.0][: min(n, 3)]
    thresholds = np.array([np.nan]) if per_class else np.round(np.linspace(0.5, 0.95, t), 2)
    gi = np.where(rng.random((len(thresholds), n)) < 0.5, rng.integers(0, max(n_gt, 1), (len(thresholds), n)), -1)
    if n_gt == 0:
        gi[:] = -1
    mr = MatchResult(
        iou_thresholds=thresholds,
        matched=gi >= 0,
        ignored=rng.random((len(thresholds), n)) < 0.1,
        gt_index=gi,
        iou=_floats(rng, n),
        considered=rng.random(n) < 0.9,
    )
    gt_ids = rng.integers(0, 2**63 - 1, n_gt)
    feats = _floats(rng, 4 * n).reshape(n, 4)
    clipped = rng.random(n) < 0.2
    data = types.SimpleNamespace(detections=dets, dataset=types.SimpleNamespace(gt=types.SimpleNamespace(id=gt_ids)))
    return dets, mr, gt_ids, data, feats, clipped


@pytest.fixture(params=["orjson", "repr"])
def formatter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "repr":
        monkeypatch.setattr(mod, "_orjson", None)
    return request.param


@pytest.mark.parametrize(
    "seed, n, t, n_gt, per_class",
    [(0, 2000, 10, 300, False), (1, 37, 2, 5, False), (2, 500, 1, 40, True), (3, 1, 1, 0, False), (4, 0, 10, 3, False)],
)
def test_byte_identical_to_the_previous_writer(
    formatter: str, seed: int, n: int, t: int, n_gt: int, per_class: bool
) -> None:
    dets, mr, gt_ids, data, feats, clipped = _case(seed, n, t, n_gt, per_class)
    assert format_csv(dets, mr, gt_ids, per_class) == old_format_csv(dets, mr, gt_ids, per_class)
    assert detections_csv(data, mr, feats, clipped) == old_detections_csv(data, mr, feats, clipped)


def test_every_float_is_repr(formatter: str) -> None:
    """Each float cell equals repr() and parses back to the same float, over many magnitudes."""
    rng = np.random.default_rng(7)
    v = np.concatenate([10.0 ** rng.uniform(-320, 308, 20000) * rng.choice([-1, 1], 20000), np.array(EDGE)])
    got = mod._float_text(v)
    assert got == [repr(x) for x in v.tolist()]


def test_hand_made_rows() -> None:
    dets = Detections(image_id=[7, 9], box=[[0, 0, 10, 10], [1, 2, 3, 4]], score=[0.5, 1e-05], category=[3, 1])
    mr = MatchResult(
        iou_thresholds=np.array([0.5, 0.75]),
        matched=np.array([[1, 0], [0, 0]], bool),
        ignored=np.array([[0, 1], [0, 0]], bool),
        gt_index=np.array([[1, -1], [-1, -1]]),
        iou=np.array([0.8, 0.0]),
        considered=np.array([True, False]),
    )
    assert format_csv(dets, mr, np.array([100, 200])) == (
        "image_id,category,score,considered,iou,matched@0.5,ignored@0.5,gt_id@0.5,matched@0.75,ignored@0.75,gt_id@0.75\n"
        "7,3,0.5,1,0.8,1,0,200,0,0,-1\n"
        "9,1,1e-05,0,0.0,0,1,-1,0,0,-1\n"
    )


def test_parquet_holds_the_same_table(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    dets, mr, gt_ids, data, feats, clipped = _case(5, 300, 3, 50)
    cols = evaluation_columns(data, mr, feats, clipped)
    write_detections_parquet(tmp_path / "d.parquet", cols)
    table = pq.read_table(tmp_path / "d.parquet")
    assert table.column_names == list(cols)
    for name, v in cols.items():
        back = table.column(name).to_numpy()
        assert back.dtype == v.dtype, name
        np.testing.assert_array_equal(back, v)
    # the CSV header is the same column list
    assert detections_csv(data, mr, feats, clipped).split("\n", 1)[0] == ",".join(table.column_names)
    assert list(detections_columns(dets, mr, gt_ids)) == list(cols)[: len(detections_columns(dets, mr, gt_ids))]


def test_blocks_and_file_writer_give_the_same_bytes(tmp_path: Path) -> None:
    dets, mr, gt_ids, data, feats, clipped = _case(6, 1000, 3, 80)
    cols = evaluation_columns(data, mr, feats, clipped)
    whole = detections_csv(data, mr, feats, clipped).encode()
    assert b"".join(mod.iter_csv_bytes(cols, block=7)) == whole
    mod.write_columns_csv(tmp_path / "d.csv", cols)
    assert (tmp_path / "d.csv").read_bytes() == whole == old_detections_csv(data, mr, feats, clipped).encode()
