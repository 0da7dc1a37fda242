"""Training data, two-stage training, checkpoint/resume and prediction (detcal.training)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, GroundTruth, Images
from detcal.models import build_rfcn
from detcal.training import (
    DetectionDataset,
    IterationBatchSampler,
    LabelMap,
    TrainingStopped,
    iteration_batch,
    learning_rate,
    load_checkpoint,
    read_checkpoint,
    scale_delta_std,
    toy_scenes,
    train_stage,
)
from detcal.training.predict import predict

torch.set_num_threads(2)
UNC = "head.unc_conv."


def _dataset_with_exclusions() -> Dataset:
    images = Images(id=[10, 20], width=[40, 40], height=[30, 30], file_name=["a.png", "b.png"])
    gt = GroundTruth(
        image_id=[10, 10, 10, 20, 20, 20],
        box=[[1, 1, 10, 10], [2, 2, 12, 12], [0, 0, 5, 5], [3, 3, 9, 9], [5, 5, 5, 9], [1, 2, 20, 25]],
        category=[1, 9, 4, 6, 1, 1],
        iscrowd=[False, False, False, True, False, False],
        ignore=[False, False, True, False, False, False],
    )
    return Dataset(images, gt, {1: "Car", 4: "Pedestrian", 6: "Cyclist", 9: "DontCare"}, source="mem.json")


def test_label_map_and_training_targets() -> None:
    ds = _dataset_with_exclusions()
    lm = LabelMap.from_dataset(ds)
    # trainable (not ignore/crowd): categories 1 and 9; DontCare is excluded by name -> only Car
    assert lm.category_ids == (1,)
    lm = LabelMap((6, 1, 4))
    assert lm.to_labels(np.array([1, 4, 6, 9])).tolist() == [2, 3, 1, -1]
    assert lm.to_categories(np.array([1, 2, 3])).tolist() == [6, 1, 4]
    with pytest.raises(DetcalInputError):
        LabelMap((1, 1))
    with pytest.raises(DetcalInputError):
        LabelMap.from_dataset(ds, categories=[3])

    render = lambda i: np.zeros((30, 40, 3), np.uint8)  # noqa: E731
    data = DetectionDataset(ds, render, lm)
    _, t0 = data[0]
    _, t1 = data[(1, 99)]
    # image 10: row 0 Car kept, row 1 DontCare (not in map) out, row 2 ignored out
    assert t0["boxes"].tolist() == [[1.0, 1.0, 10.0, 10.0]] and t0["labels"].tolist() == [2]
    # image 20: crowd out, zero-width box out, last Car kept
    assert t1["boxes"].tolist() == [[1.0, 2.0, 20.0, 25.0]] and t1["labels"].tolist() == [2] and int(t1["seed"]) == 99
    assert data.n_excluded == 4


def test_image_sources_and_errors(tmp_path) -> None:
    from PIL import Image

    ds = _dataset_with_exclusions()
    lm = LabelMap((1,))
    arr = np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)
    Image.fromarray(arr).save(tmp_path / "a.png")
    Image.fromarray(arr[:20]).save(tmp_path / "b.png")
    data = DetectionDataset(ds, tmp_path, lm)
    img, _ = data[0]
    assert img.shape == (3, 30, 40) and img.dtype == torch.float32
    np.testing.assert_allclose(img.permute(1, 2, 0).numpy() * 255, arr, atol=1e-3)
    with pytest.raises(DetcalInputError) as e:
        data[1]  # 40x20 on disk, 40x30 in the record
    assert e.value.record == 20 and e.value.field == "width/height" and "b.png" in str(e.value)
    (tmp_path / "a.png").unlink()
    with pytest.raises(DetcalInputError, match="a.png"):
        DetectionDataset(ds, tmp_path, lm)[0]
    with pytest.raises(DetcalInputError):
        DetectionDataset(ds, tmp_path / "nope", lm)


def test_hflip_moves_boxes() -> None:
    ds = _dataset_with_exclusions()
    render = lambda i: np.arange(30 * 40 * 3, dtype=np.int64).reshape(30, 40, 3).astype(np.uint8)  # noqa: E731
    data = DetectionDataset(ds, render, LabelMap((1,)), hflip=True)
    flips = {}
    for seed in range(20):
        _, t = data[(0, seed)]
        flips[tuple(t["boxes"][0].tolist())] = seed
    # box [1, 1, 10, 10] in a 40-wide image flips to [40-10, 1, 40-1, 10] = [30, 1, 39, 10]
    assert set(flips) == {(1.0, 1.0, 10.0, 10.0), (30.0, 1.0, 39.0, 10.0)}


def test_iteration_batches_are_deterministic_permutations() -> None:
    n, b = 10, 4
    a = [iteration_batch(n, b, 3, it) for it in range(5)]
    again = [iteration_batch(n, b, 3, it) for it in range(5)]
    assert all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, again))
    seq = np.concatenate([x[0] for x in a])  # positions 0..19 = epochs 0 and 1
    assert sorted(seq[:10].tolist()) == list(range(10)) and sorted(seq[10:20].tolist()) == list(range(10))
    assert not np.array_equal(seq[:10], seq[10:20])
    full = list(IterationBatchSampler(n, b, 3, 2, 4))
    shards = [list(IterationBatchSampler(n, b, 3, 2, 4, rank=r, world_size=2)) for r in range(2)]
    assert len(full) == 2
    for it in range(2):
        assert shards[0][it] + shards[1][it] == full[it] and len(shards[0][it]) == 2


def test_learning_rate_schedule() -> None:
    # warmup from lr/1000 over 10 iterations, then steps at 20 and 30 with gamma 0.1
    assert learning_rate(0, 0.02, 10) == pytest.approx(0.02 * 1e-3)
    assert learning_rate(5, 0.02, 10) == pytest.approx(0.02 * (1e-3 * 0.5 + 0.5))
    assert learning_rate(10, 0.02, 10, (20, 30)) == pytest.approx(0.02)
    assert learning_rate(25, 0.02, 10, (20, 30)) == pytest.approx(0.002)
    assert learning_rate(30, 0.02, 10, (20, 30)) == pytest.approx(0.0002)


def _model(seed: int = 0, norm: str = "bn", category_ids=(1, 4, 6)):
    torch.manual_seed(seed)
    return build_rfcn(
        len(category_ids),
        category_ids=list(category_ids),
        norm=norm,
        rpn_post_nms_top_n_train=100,
        roi_batch_size_per_image=32,
    )


TRAIN = dict(lr=0.01, momentum=0.9, weight_decay=1e-4, seed=5, progress=False, log_every=1)


@pytest.mark.slow
def test_kill_and_resume_gives_identical_weights(tmp_path) -> None:
    ds, render = toy_scenes(12, 0)
    full = _model(0)
    final_a = train_stage(full, ds, render, 1, tmp_path / "a", 7, 2, checkpoint_every=3, **TRAIN)

    def kill_at_5(done: int, losses: dict) -> None:
        if done == 5:
            raise TrainingStopped

    killed = _model(0)
    with pytest.raises(TrainingStopped):
        train_stage(killed, ds, render, 1, tmp_path / "b", 7, 2, checkpoint_every=3, callback=kill_at_5, **TRAIN)
    assert (tmp_path / "b" / "stage1_last.pt").is_file() and not (tmp_path / "b" / "stage1_final.pt").exists()
    assert read_checkpoint(tmp_path / "b" / "stage1_last.pt")["iteration"] == 3
    resumed = _model(123)  # different initial weights: everything must come from the checkpoint
    final_b = train_stage(resumed, ds, render, 1, tmp_path / "b", 7, 2, checkpoint_every=3, **TRAIN)
    sa, sb = full.state_dict(), resumed.state_dict()
    assert set(sa) == set(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    ca, cb = read_checkpoint(final_a), read_checkpoint(final_b)
    for k in ca["model"]:
        assert torch.equal(ca["model"][k], cb["model"][k]), k
    assert {"model", "optimizer", "rng", "sampler", "iteration", "model_config"} <= set(cb)
    assert cb["iteration"] == 7 and cb["sampler"]["next_iteration"] == 7 and cb["sampler"]["position"] == 14
    la = [json.loads(x) for x in (tmp_path / "a" / "stage1_log.jsonl").read_text().splitlines()]
    lb = [json.loads(x) for x in (tmp_path / "b" / "stage1_log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in lb] == list(range(1, 8))  # the killed run's 4, 5 were cut back and redone
    assert [r["losses"] for r in la] == [r["losses"] for r in lb]
    assert not list((tmp_path / "b").glob("*.tmp"))
    # asking again returns the final checkpoint and loads its weights
    again = _model(7)
    assert train_stage(again, ds, render, 1, tmp_path / "b", 7, 2, checkpoint_every=3, **TRAIN) == final_b
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in sb.items())
    with pytest.raises(DetcalInputError, match="batch_size"):
        train_stage(_model(0), ds, render, 1, tmp_path / "b", 9, 4, checkpoint_every=3, **TRAIN)


def _nll_on(model, ds, render, rows) -> float:
    data = DetectionDataset(ds, render, LabelMap(tuple(model.category_ids.tolist())))
    items = [data[(r, 1000 + r)] for r in rows]
    model.eval()
    with torch.no_grad():
        return float(model([i[0] for i in items], [i[1] for i in items], 2)["loss_nll"])


@pytest.mark.slow
def test_stage2_changes_only_the_uncertainty_branch_and_lowers_nll(tmp_path) -> None:
    ds, render = toy_scenes(16, 1)
    model = _model(0, norm="bn")
    stage1 = train_stage(model, ds, render, 1, tmp_path, 25, 4, checkpoint_every=100, **{**TRAIN, "lr": 0.02})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert any(k.endswith("running_mean") and not torch.all(v == 0) for k, v in before.items())  # BN stats were trained
    nll0 = _nll_on(model, ds, render, range(8))
    model2 = load_checkpoint(stage1)
    train_stage(
        model2,
        ds,
        render,
        2,
        tmp_path,
        30,
        4,
        checkpoint_every=100,
        lr=0.01,
        momentum=0.9,
        weight_decay=0.0,
        seed=2,
        progress=False,
    )
    after = model2.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all(k.startswith(UNC) for k in changed), changed
    assert {UNC + "weight", UNC + "bias"} <= set(changed)
    nll1 = _nll_on(model2, ds, render, range(8))
    assert nll1 < nll0 - 0.05, (nll0, nll1)
    log = [json.loads(x) for x in (tmp_path / "stage2_log.jsonl").read_text().splitlines()]
    assert set(log[0]["losses"]) == {"loss_nll"} and log[-1]["iteration"] == 30


def test_predict_exports_aligned_delta_records(tmp_path) -> None:
    ds, render = toy_scenes(6, 2)
    model = _model(0, category_ids=(6, 1, 4))
    with torch.no_grad():
        model.head.unc_conv.weight.zero_()
        model.head.unc_conv.bias.fill_(0.0)  # logvar 0 -> std = 1 / (10, 10, 5, 5)
    res = predict(model, ds, render, batch_size=4, score_threshold=0.2, progress=False)
    d = res.detections
    assert res.score_threshold == 0.2 and res.describe()["score_threshold"] == 0.2
    assert d.uncertainty_kind == "delta" and len(d) > 0
    assert np.all(d.score > 0.2) and set(np.unique(d.category)) <= {1, 4, 6}
    assert np.all(np.diff(ds.images.index_of(d.image_id)) >= 0)  # image order
    np.testing.assert_allclose(d.delta_std, np.tile([0.1, 0.1, 0.2, 0.2], (len(d), 1)), rtol=1e-6)
    for f in ("box", "proposal", "delta_mean"):
        assert getattr(d, f).shape == (len(d), 4) and getattr(d, f).dtype == np.float64
    scaled = scale_delta_std(d, np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(scaled.delta_std[:, 3], 0.8)
    with pytest.raises(DetcalInputError):
        scale_delta_std(d, np.array([1.0, -1.0, 1.0, 1.0]))


@pytest.mark.slow
def test_tiny_model_learns_toy_scenes(tmp_path) -> None:
    """~1-2 min: 250 stage-1 iterations; AP50 (pycocotools) on fresh toy images must be clearly non-trivial."""
    import contextlib
    import io

    from pycocotools.cocoeval import COCOeval

    from detcal.data.coco import results_to_pycocotools, to_pycocotools

    ds, render = toy_scenes(200, 0)
    model = build_rfcn(3, category_ids=[1, 4, 6])
    train_stage(
        model,
        ds,
        render,
        1,
        tmp_path,
        250,
        4,
        0.02,
        0.9,
        1e-4,
        0,
        1000,
        progress=False,
        warmup_iters=50,
        max_grad_norm=10.0,
    )
    val, vrender = toy_scenes(40, 1)
    res = predict(model, val, vrender, batch_size=8, progress=False)
    gt = to_pycocotools(val)
    ev = COCOeval(gt, results_to_pycocotools(gt, res.detections), "bbox")
    with contextlib.redirect_stdout(io.StringIO()):
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert ev.stats[1] > 0.5, ev.stats


def _touch(path: str) -> str:
    """What the pickle payload below runs when unpickled: creates ``path``."""
    Path(path).write_text("payload ran")
    return path


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (_touch, (self.marker,))


def test_checkpoint_with_a_pickle_payload_is_refused_and_the_code_does_not_run(tmp_path) -> None:
    from detcal.training.trainer import CHECKPOINT_FORMAT

    marker = tmp_path / "ran.txt"
    bad = tmp_path / "evil.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "model": {}, "iteration": 0, "x": _Payload(marker)}, bad)
    with pytest.raises(DetcalInputError, match="refused") as e:
        read_checkpoint(bad)
    assert "evil.pt" in str(e.value)
    with pytest.raises(DetcalInputError, match="refused"):
        load_checkpoint(bad)
    assert not marker.exists()
    # the payload is live: an unrestricted torch.load would have run it
    torch.load(bad, weights_only=False)
    assert marker.read_text() == "payload ran"


def test_checkpoints_load_weights_only_and_restore_rng_states(tmp_path) -> None:
    import random

    from detcal.training.trainer import _rng_state, _set_rng_state, save_checkpoint

    np.random.seed(11)
    random.seed(12)
    torch.manual_seed(13)
    np.random.standard_normal()  # leaves a cached Gaussian in numpy's legacy state
    state = _rng_state()
    save_checkpoint(tmp_path / "rng.pt", {"rng": state})
    loaded = torch.load(tmp_path / "rng.pt", weights_only=True)["rng"]
    expect = (np.random.standard_normal(3), random.random(), torch.rand(2))
    np.random.seed(0)
    random.seed(0)
    torch.manual_seed(0)
    _set_rng_state(loaded)
    again = (np.random.standard_normal(3), random.random(), torch.rand(2))
    np.testing.assert_array_equal(expect[0], again[0])
    assert expect[1] == again[1] and torch.equal(expect[2], again[2])
