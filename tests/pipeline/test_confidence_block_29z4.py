"""The confidence block of the ninth speed pass (issue 29, 29z4): the D-ECE maps summed from the D-ECE grid's
statistics equal the maps binned from their own cells; the missing-size check names the same detection."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import detcal.pipeline.confidence_block as cb
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data.synthetic import write_synthetic
from detcal.metrics.confidence_suite import confidence_metrics
from detcal.pipeline.evaluation import _missing_sizes, as_loaded, evaluate, match_data, relative_box_features
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import BootstrapSpec, ConfidenceSpec, EvaluationSpec


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_maps_from_the_grid_equal_the_maps_binned_anew() -> None:
    spec = EvaluationSpec()
    rng = np.random.default_rng(0)
    s = 6000
    p, f = rng.random(s), rng.random((s, 4))
    f[:40] = np.round(f[:40] * 5) / 5  # on the edges
    y = rng.random(s) < p
    measures = cb.spec_suite(spec)
    feats = cb.sample_features(spec, f, None)
    grid_stats: dict = {}
    confidence_metrics(p, y, feats, None, measures, grid_stats=grid_stats)
    key = next(k for k in grid_stats if k[2])  # the D-ECE grid
    names = list(spec.dece_binning.features)
    derived = {}
    for pair in spec.confidence.maps:
        metric = cb._map_metric(spec, pair)
        dims = [1 + names.index(n) for n in pair]
        derived[f"{pair[0]}_{pair[1]}"] = cb.sub_grid_stats(grid_stats[key], dims, metric.required_stats)
    assert derived  # the default maps are sub-grids of the D-ECE grid
    got = cb.dece_maps(spec, p, y, f, None, derived)
    want = cb.dece_maps(spec, p, y, f)  # binned from the features
    assert _same(got, want)


def _same(a: object, b: object) -> bool:
    """Equal, arrays bit for bit (NaN where NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, z = np.asarray(a), np.asarray(b)
        return x.dtype == z.dtype and x.shape == z.shape and bool(np.all((x == z) | ((x != x) & (z != z))))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b


def _boxes_in_images(seed: int, n_img: int, nd: int) -> LoadedData:
    """``nd`` random boxes of one class in ``n_img`` images of 100 x 80 pixels, the first ``n_img`` also GT."""
    rng = np.random.default_rng(seed)
    images = Images(id=np.arange(n_img), width=np.full(n_img, 100.0), height=np.full(n_img, 80.0))
    xy = rng.uniform(0, 60, (nd, 2))
    box = np.column_stack([xy, xy + rng.uniform(1, 30, (nd, 2))])
    dets = Detections(
        image_id=rng.integers(0, n_img, nd), category=np.ones(nd, np.int64), score=rng.random(nd), box=box
    )
    gt = GroundTruth(image_id=np.arange(n_img), category=np.ones(n_img, np.int64), box=box[:n_img])
    return as_loaded(Dataset(images=images, gt=gt, categories={1: "a"}), dets)


def test_shared_cells_hold_no_map_cells_for_sub_grids() -> None:
    data = _boxes_in_images(seed=1, n_img=12, nd=400)
    spec = EvaluationSpec()
    mr, _, _ = match_data(data, spec, False)
    feats = relative_box_features(data, needed=True)[0]
    shared = cb._shared_cells(spec, cb.spec_suite(spec), data, mr, feats, None)
    assert shared is not None and shared.map_cells == {}
    assert set(shared.map_dims) == {f"{a}_{b}" for a, b in spec.confidence.maps}
    assert _missing_sizes(data, feats) is None


def test_missing_sizes_names_the_first_detection_without_a_size() -> None:
    images = Images(id=np.array([1, 2, 3]), width=np.array([10.0, 10, 10]), height=np.array([10.0, 10, 10]))
    dets = Detections(
        image_id=np.array([1, 3, 2]), category=np.ones(3, np.int64), score=np.full(3, 0.5), box=np.ones((3, 4))
    )
    gt = GroundTruth(image_id=np.array([1]), category=np.ones(1, np.int64), box=np.ones((1, 4)))
    data = as_loaded(Dataset(images=images, gt=gt, categories={1: "a"}, source="gt.json"), dets)
    feats = np.full((3, 4), 0.5)
    assert _missing_sizes(data, feats) is None
    assert _missing_sizes(data, np.zeros((0, 4))) is None
    for bad in (np.nan, np.inf, -np.inf):
        f = feats.copy()
        f[1, 2] = bad
        msg = _missing_sizes(data, f)
        assert msg is not None and "image 3" in msg and "1 detections" in msg


def test_a_map_over_one_feature_twice_is_binned_not_summed(tmp_path: Path) -> None:
    """A map's statistics are summed from the D-ECE grid's only over two distinct dimensions; ``cx`` against
    ``cx`` takes its cells from the grid's cells (as before the sums) and the run completes."""
    data = _boxes_in_images(seed=2, n_img=10, nd=300)
    spec = EvaluationSpec(confidence=ConfidenceSpec(maps=[["cx", "cx"], ["cx", "cy"]]))
    mr, _, _ = match_data(data, spec, False)
    feats = relative_box_features(data, needed=True)[0]
    shared = cb._shared_cells(spec, cb.spec_suite(spec), data, mr, feats, None)
    assert shared is not None and set(shared.map_dims) == {"cx_cy"} and set(shared.map_cells) == {"cx_cx"}
    files = write_synthetic(tmp_path, n_images=20, seed=1, render=False)
    quiet = EvaluationSpec(bootstrap=BootstrapSpec(n=0), confidence=ConfidenceSpec(maps=[["cx", "cx"]]))
    out = evaluate(str(files["coco_instances"]), str(files["coco_results"]), quiet)
    maps = out.to_dict()["dece_maps"]
    assert maps and all("cx_cx" in m for m in maps.values())
