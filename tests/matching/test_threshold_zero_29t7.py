"""The tenth pass's short path of the matching at threshold 0 (LRP's default ``tau``): a layout walked under
its own GT flags drops each detection's pairs with the regular GTs of its group once its rank reaches their
number (every earlier rank took one of them). The outcome must be that of the full layout, array for array:
here against the same matching with the short path switched off, on scenes with crowd and ignored GTs,
duplicates, max-dets cuts, a score threshold, class-agnostic groups and several image chunks."""

from __future__ import annotations

import numpy as np
import pytest

import detcal.matching.engine as engine
from detcal.core.types import Detections, GroundTruth


def _scene(seed: int, n_img: int = 40) -> tuple[Detections, GroundTruth]:
    rng = np.random.default_rng(seed)
    n_gt, n_det = 6 * n_img, 30 * n_img
    g_xy = rng.random((n_gt, 2)) * 80
    g_box = np.concatenate([g_xy, g_xy + rng.random((n_gt, 2)) * 30 + 1], axis=1)
    gt = GroundTruth(
        image_id=rng.integers(0, n_img, n_gt),
        box=g_box,
        category=rng.integers(1, 4, n_gt),
        iscrowd=rng.random(n_gt) < 0.1,
        ignore=rng.random(n_gt) < 0.1,
    )
    src = rng.integers(0, n_gt, n_det)  # half the detections near a GT, half anywhere
    near = g_box[src] + rng.normal(0, 4, (n_det, 4))
    d_xy = rng.random((n_det, 2)) * 80
    far = np.concatenate([d_xy, d_xy + rng.random((n_det, 2)) * 30 + 1], axis=1)
    box = np.where((rng.random(n_det) < 0.5)[:, None], near, far)
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 0.5)
    score = np.round(rng.random(n_det), 2)  # ties
    dets = Detections(
        image_id=np.where(rng.random(n_det) < 0.5, gt.image_id[src], rng.integers(0, n_img, n_det)),
        box=box,
        score=score,
        category=np.where(rng.random(n_det) < 0.7, gt.category[src], rng.integers(1, 4, n_det)),
    )
    return dets, gt


def _without_short_path(monkeypatch: pytest.MonkeyPatch, f, *a, **k):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setattr(engine, "_drop_taken_regular", lambda *_a, **_k: None)
        return f(*a, **k)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"max_dets": 3},
        {"max_dets": None, "score_threshold": 0.3},
        {"class_agnostic": True, "max_dets": 5},
        {"gt_ignore": "ignore_or_crowd"},
    ],
)
def test_match_at_zero_equals_the_full_walk(monkeypatch: pytest.MonkeyPatch, kw: dict) -> None:
    dets, gt = _scene(len(kw))
    got = engine.match(dets, gt, (0.0,), **kw)
    want = _without_short_path(monkeypatch, engine.match, dets, gt, (0.0,), **kw)
    for name in ("matched", "ignored", "gt_index", "iou", "considered"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.matched.any() and got.ignored.any() and (~got.matched & got.considered).any()


def test_the_short_path_drops_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pruned layout holds fewer pairs (the check above has teeth) and walks to the same choices."""
    dets, gt = _scene(7)
    seen: list[int] = []
    real = engine._exclusive_layout

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        lay = real(*a, **k)
        seen.append(len(lay.pair_iou))
        return lay

    monkeypatch.setattr(engine, "_exclusive_layout", spy)
    engine.match(dets, gt, (0.0,))
    _without_short_path(monkeypatch, engine.match, dets, gt, (0.0,))
    assert seen[0] < seen[1]


def test_layout_and_match_at_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """COCO AP's layout (never pruned: walked under each area range's flags) and LRP's match at 0, in
    several image chunks, equal the full walk's."""
    dets, gt = _scene(11, n_img=60)
    monkeypatch.setattr(engine, "layout_chunk_size", lambda: 300)
    thr = np.linspace(0.5, 0.95, 10).tolist()
    lay, m = engine.layout_and_match(dets, gt, thr, (0.0,))
    lay0, m0 = _without_short_path(monkeypatch, engine.layout_and_match, dets, gt, thr, (0.0,))
    for a, b in zip(lay, lay0):
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
    for a, b in zip(m, m0):
        np.testing.assert_array_equal(a, b)
    assert m.matched.any() and m.ignored.any()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_walk_again_only_groups_with_a_mixed_choice(seed: int) -> None:
    """The groups walked again under other GT flags are those whose flags change and that have a segment
    choosing among GTs of different flags (under either set): fewer than the groups whose flags change,
    and the outcome is the full walk's under those flags, for flags of every mix."""
    dets, gt = _scene(20 + seed, n_img=50)
    layout = engine.exclusive_layout(dets, gt, [0.1, 0.3, 0.5, 0.7], max_dets=20)
    ref = engine.exclusive_walk(layout)
    rng = np.random.default_rng(seed)
    area = (gt.box[:, 2] - gt.box[:, 0]) * (gt.box[:, 3] - gt.box[:, 1])
    fewer = False
    for flags in (rng.random(len(gt)) < 0.3, area < 400.0, area > 900.0, np.ones(len(gt), bool)):
        flags = flags | gt.iscrowd
        ign_w = flags[layout.gt_row]
        want = engine.exclusive_walk(layout, ign_w)  # every group walked
        np.testing.assert_array_equal(engine.exclusive_walk(layout, ign_w, ref), want)
        idx, _ = engine.changed_walk(layout, ign_w)
        n_grp = int(layout.gt_grp[-1]) + 1
        flagged = np.bincount(layout.gt_grp, layout.gt_ign != ign_w, n_grp) > 0
        fewer |= len(idx) < int(flagged[layout.k_grp].sum())
    assert fewer  # the single-pair and same-flag segments' groups are not walked again


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_walk_order_pairs_equal_the_slot_expansion(seed: int) -> None:
    """The kept pairs in walk order from the kept pairs alone equal the expansion of every slot of the
    walking segments (the earlier construction), kept pairs filtered after."""
    rng = np.random.default_rng(seed)
    S = 300
    cnt = np.sort(rng.integers(1, 12, S))[::-1]  # slots per segment, falling (the engine's layout)
    n_slot = np.searchsorted(-cnt, -np.arange(int(cnt[0])), side="left")
    off = np.cumsum(n_slot) - n_slot
    keep = rng.random(int(n_slot.sum())) < 0.3
    n_kept = np.zeros(S, np.int64)
    for j, n in enumerate(n_slot.tolist()):
        n_kept[:n] += keep[off[j] : off[j] + n]
    k_ids = rng.permutation(np.flatnonzero(n_kept > 0))  # any walk order of the segments with a kept pair
    c = cnt[k_ids]
    kj = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
    ki = np.repeat(k_ids, c)
    kp = off[kj] + ki
    sel = keep[kp]
    got = engine._walk_order_pairs(keep, off, n_slot, k_ids)
    for a, b in zip(got, (kp[sel], ki[sel], kj[sel])):
        np.testing.assert_array_equal(a, b)
