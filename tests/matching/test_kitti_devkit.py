"""KITTI matching exactly as the official devkit decides it (mode="kitti"), detection by detection.

Hand-written label/result files with the devkit's outcome worked out from
``computeStatistics`` in the comments, and agreement on generated KITTI-like
frames with a line-by-line reading of the devkit (tests/support/devkit_reference.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import devkit_reference as ref
from support.kitti_like import make_frames, write_frames

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth
from detcal.data.kitti import kitti_rules, load_kitti_labels, load_kitti_results
from detcal.matching import match

_TAIL = "1.50 1.60 3.90 1.00 1.50 20.00 0.10"
_DC_TAIL = "-1 -1 -1 -1000 -1000 -1000 -10"

# One frame per case. Label rows: type trunc occ alpha left top right bottom (+ 3-D tail).
HAND_LABELS = {
    # frame 0, Pedestrian: the neighbour-class box comes first in the label file.
    # D0 [104,100,148,200]: IoU with L0 (Person_sitting) = 36*100 / (4400 + 4000 - 3600) = 0.75,
    # with L1 (Pedestrian) = 38*100 / (4400 + 4000 - 3800) = 0.826.
    # Devkit: L0 (ignored_gt = 1) is visited first, D0 is free with 0.75 > 0.5 -> L0 takes it, D0 is
    # ignored; L1 finds no free detection -> FN. (The COCO walk would give D0 to L1: TP.)
    0: [
        f"Person_sitting 0.00 0 -10 100.00 100.00 140.00 200.00 {_TAIL}",
        f"Pedestrian 0.00 0 -10 110.00 100.00 150.00 200.00 {_TAIL}",
    ],
    # frame 1: two detections on one box, the lower score with the higher IoU.
    # D0 score 0.90 [190,100,240,200]: IoU 4000/5000 = 0.80; D1 score 0.60 [198,100,240,200]: 4000/4200 = 0.952.
    # Devkit: L0 takes the free detection of highest overlap, D1 -> TP; D0 is left -> FP.
    1: [f"Pedestrian 0.00 0 -10 200.00 100.00 240.00 200.00 {_TAIL}"],
    # frame 2: as frame 1, plus a DontCare region [180,90,260,210] around both detections.
    # Devkit: D1 TP; the leftover D0 has intersection / own area = 5000/5000 = 1 > 0.5 with the region -> ignored.
    2: [
        f"Pedestrian 0.00 0 -10 200.00 100.00 240.00 200.00 {_TAIL}",
        f"DontCare -1 -1 -10 180.00 90.00 260.00 210.00 {_DC_TAIL}",
    ],
    # frame 3, Car: L0 has occlusion 2 (outside moderate, inside hard) and comes first.
    # D0 [300,100,402,160]: IoU with L0 = 6000/6120 = 0.980, with L1 = 5820/6300 = 0.924.
    # Devkit moderate: L0 (ignored) takes D0 -> ignored, L1 FN. Hard: L0 is valid -> D0 TP on L0.
    3: [f"Car 0.00 2 -10 300.00 100.00 400.00 160.00 {_TAIL}", f"Car 0.00 0 -10 305.00 100.00 405.00 160.00 {_TAIL}"],
    # frame 4: a Car detection 39.5 px high (int 39 < 40: ignored_det = 1 at easy in *every* class's walk)
    # on a 50 px Pedestrian: IoU 20*39.5 / (20*50) = 0.79. Easy: in the Car walk D0 is small -> ignored,
    # no box takes it; in the Pedestrian walk L0 has no regular candidate and takes D0 (not an FN).
    # Moderate (25 px): D0 is a regular Car detection with no Car box -> FP.
    4: [f"Pedestrian 0.00 0 -10 500.00 100.00 520.00 150.00 {_TAIL}"],
    # frame 5: two small Pedestrian detections at easy (heights 36.5 and 39.9 -> int 36, 39 < 40).
    # D0 score 0.3, IoU 36.5/50 = 0.73; D1 score 0.9, IoU 39.9/50 = 0.798.
    # Devkit easy: no regular candidate, so L0 takes the *first* small one in file order, D0 (not the
    # best overlap); both ignored, D1 taken by nothing. Moderate: both regular, L0 takes D1 (0.798) TP, D0 FP.
    5: [f"Pedestrian 0.00 0 -10 600.00 100.00 620.00 150.00 {_TAIL}"],
}
HAND_RESULTS = {
    0: [f"Pedestrian -1 -1 -10 104.00 100.00 148.00 200.00 {_TAIL} 0.80"],
    1: [
        f"Pedestrian -1 -1 -10 190.00 100.00 240.00 200.00 {_TAIL} 0.90",
        f"Pedestrian -1 -1 -10 198.00 100.00 240.00 200.00 {_TAIL} 0.60",
    ],
    2: [
        f"Pedestrian -1 -1 -10 190.00 100.00 240.00 200.00 {_TAIL} 0.90",
        f"Pedestrian -1 -1 -10 198.00 100.00 240.00 200.00 {_TAIL} 0.60",
    ],
    3: [f"Car -1 -1 -10 300.00 100.00 402.00 160.00 {_TAIL} 0.50"],
    4: [f"Car -1 -1 -10 500.00 105.00 520.00 144.50 {_TAIL} 0.70"],
    5: [
        f"Pedestrian -1 -1 -10 600.00 108.00 620.00 144.50 {_TAIL} 0.30",
        f"Pedestrian -1 -1 -10 600.00 103.00 620.00 142.90 {_TAIL} 0.90",
    ],
}
# Detection rows: f0 D0 = 0; f1 D0, D1 = 1, 2; f2 D0, D1 = 3, 4; f3 D0 = 5; f4 D0 = 6; f5 D0, D1 = 7, 8.
# GT rows: f0 L0, L1 = 0, 1; f1 L0 = 2; f2 L0, DontCare = 3, 4; f3 L0, L1 = 5, 6; f4 L0 = 7; f5 L0 = 8.
# Expected (state, GT row): T true positive, F false positive, I ignored.
EXPECTED = {
    "moderate": [("I", 0), ("F", -1), ("T", 2), ("I", -1), ("T", 3), ("I", 5), ("F", -1), ("F", -1), ("T", 8)],
    "easy": [("I", 0), ("F", -1), ("T", 2), ("I", -1), ("T", 3), ("I", 5), ("I", -1), ("I", 8), ("I", -1)],
    "hard": [("I", 0), ("F", -1), ("T", 2), ("I", -1), ("T", 3), ("T", 5), ("F", -1), ("F", -1), ("T", 8)],
}
# The score-ordered COCO walk with the same rules (mode="exclusive", the previous KITTI behaviour), moderate:
EXPECTED_SCORE_ORDER = [("T", 1), ("T", 2), ("F", -1), ("T", 3), ("I", -1), ("T", 6), ("F", -1), ("F", -1), ("T", 8)]


def _write(tmp_path: Path, labels: dict, results: dict) -> tuple[Path, Path]:
    lab, res = tmp_path / "label_2", tmp_path / "results"
    lab.mkdir()
    res.mkdir()
    for f, lines in labels.items():
        (lab / f"{f:06d}.txt").write_text("\n".join(lines) + "\n")
    for f, lines in results.items():
        (res / f"{f:06d}.txt").write_text("\n".join(lines) + "\n")
    return lab, res


def _states(r) -> list[tuple[str, int]]:
    m, i, g = r.matched[0], r.ignored[0], r.gt_index[0]
    return [("T" if m[k] else "I" if i[k] else "F", int(g[k])) for k in range(len(m))]


@pytest.mark.parametrize("difficulty", ["easy", "moderate", "hard"])
def test_hand_written_files_follow_the_devkit(tmp_path: Path, difficulty: str) -> None:
    lab, res = _write(tmp_path, HAND_LABELS, HAND_RESULTS)
    ds = load_kitti_labels(lab, difficulty=difficulty)
    dets = load_kitti_results(res, ds)
    r = match(dets, ds.gt, "kitti", mode="kitti", kitti=kitti_rules(difficulty), max_dets=None)
    assert _states(r) == EXPECTED[difficulty]
    assert r.considered.all() and r.mode == "kitti"
    assert "label-file order" in r.params["assignment"]


def test_score_ordered_option_is_the_coco_walk(tmp_path: Path) -> None:
    lab, res = _write(tmp_path, HAND_LABELS, HAND_RESULTS)
    ds = load_kitti_labels(lab, difficulty="moderate")
    dets = load_kitti_results(res, ds)
    r = match(dets, ds.gt, "kitti", mode="exclusive", kitti=kitti_rules("moderate"), max_dets=None)
    assert _states(r) == EXPECTED_SCORE_ORDER


def test_outcome_depends_on_the_score_threshold(tmp_path: Path) -> None:
    # frame 1 at score threshold 0.7: D1 (0.60) is out, so D0 (0.90, IoU 0.8) is the box's only candidate: TP.
    lab, res = _write(tmp_path, HAND_LABELS, HAND_RESULTS)
    ds = load_kitti_labels(lab, difficulty="moderate")
    dets = load_kitti_results(res, ds)
    r = match(dets, ds.gt, "kitti", mode="kitti", kitti=kitti_rules("moderate"), max_dets=None, score_threshold=0.7)
    s = _states(r)
    assert s[1] == ("T", 2) and not r.considered[2] and not r.matched[0, 2] and not r.ignored[0, 2]
    assert r.score_threshold == 0.7


def test_explicit_iou_rows(tmp_path: Path) -> None:
    # frame 1 at IoU 0.9 (strict): only D1 (0.952) qualifies -> TP, D0 FP; at 0.96 nothing matches.
    lab, res = _write(tmp_path, {1: HAND_LABELS[1]}, {1: HAND_RESULTS[1]})
    ds = load_kitti_labels(lab, difficulty="moderate")
    dets = load_kitti_results(res, ds)
    r = match(dets, ds.gt, [0.5, 0.9, 0.96], mode="kitti", kitti=kitti_rules("moderate"), max_dets=None)
    assert r.matched.tolist() == [[False, True], [False, True], [False, False]]
    assert r.gt_index.tolist() == [[-1, 0], [-1, 0], [-1, -1]]


def test_mode_kitti_input_errors() -> None:
    d = Detections(image_id=[1], box=[[0, 0, 10, 40]], score=[0.5], category=[4])
    g = GroundTruth(image_id=[1], box=[[0, 0, 10, 40]], category=[4])
    with pytest.raises(DetcalInputError, match="KittiRules"):
        match(d, g, [0.5], mode="kitti")
    with pytest.raises(DetcalInputError, match="class_agnostic"):
        match(d, g, [0.5], mode="kitti", kitti=kitti_rules(), class_agnostic=True)
    from dataclasses import replace

    with pytest.raises(DetcalInputError, match="strict"):
        match(d, g, [0.5], mode="kitti", kitti=replace(kitti_rules(), strict=False))


# --------------------------------------------------------------------------- agreement with the reading of the devkit


def _reference_states(frames, difficulty: str, thresh: float) -> list[tuple[str, int]]:
    """Devkit outcome of every detection (detcal row order: frame, then line), GT as detcal row."""
    out: list[tuple[str, int]] = []
    g_off = 0
    for labels, results in frames:
        gt = ref.parse_labels(labels)
        det = ref.parse_results(results)
        state: dict[int, tuple[str, int]] = {}
        for cls in sorted({d["type"].lower() for d in det}):
            for j, st, gi in ref.outcomes(cls, gt, det, difficulty, thresh):
                code = {"tp": "T", "fp": "F", "ignored": "I", "below": "-"}[st]
                state[j] = (code, g_off + gi if gi >= 0 else -1)
        out += [state[j] for j in range(len(det))]
        g_off += len(gt)
    return out


def _ours(lab: Path, res: Path, difficulty: str, thresh: float, mode: str = "kitti") -> list[tuple[str, int]]:
    ds = load_kitti_labels(lab, difficulty=difficulty)
    dets = load_kitti_results(res, ds)
    r = match(dets, ds.gt, "kitti", mode=mode, kitti=kitti_rules(difficulty), max_dets=None, score_threshold=thresh)
    s = _states(r)
    return [st if r.considered[k] else ("-", -1) for k, st in enumerate(s)]


@pytest.mark.parametrize("difficulty", ["easy", "moderate", "hard"])
@pytest.mark.parametrize("thresh", [0.0, 0.45])
def test_agrees_with_devkit_reading_on_kitti_like_frames(tmp_path: Path, difficulty: str, thresh: float) -> None:
    frames = make_frames(120, seed=7)
    lab, res = write_frames(frames, tmp_path)
    want = _reference_states(frames, difficulty, thresh)
    got = _ours(lab, res, difficulty, thresh)
    assert len(got) == len(want) > 1000
    bad = [(k, w, g) for k, (w, g) in enumerate(zip(want, got)) if w != g]
    assert not bad, f"{len(bad)} of {len(want)} decisions differ, e.g. {bad[:5]}"
    # the data exercise every outcome
    states = {w[0] for w in want}
    assert {"T", "F", "I"} <= states


def test_kitti_like_frames_separate_the_two_walks(tmp_path: Path) -> None:
    """The generated data have teeth: the score-ordered walk disagrees with the devkit on some decisions."""
    frames = make_frames(120, seed=7)
    lab, res = write_frames(frames, tmp_path)
    want = _reference_states(frames, "moderate", 0.0)
    old = _ours(lab, res, "moderate", 0.0, mode="exclusive")
    n_diff = sum(w != o for w, o in zip(want, old))
    assert n_diff >= 10


def test_empty_inputs() -> None:
    from detcal.matching.kitti_ap import kitti_ap

    d0 = Detections(image_id=np.zeros(0), box=np.zeros((0, 4)), score=np.zeros(0), category=np.zeros(0))
    g0 = GroundTruth(image_id=np.zeros(0), box=np.zeros((0, 4)), category=np.zeros(0))
    g1 = GroundTruth(image_id=[1], box=[[0, 0, 20, 50]], category=[4], difficulty=[0])
    d1 = Detections(image_id=[1], box=[[0, 0, 20, 50]], score=[0.5], category=[4])
    for d, g in ((d0, g0), (d0, g1), (d1, g0)):
        r = match(d, g, "kitti", mode="kitti", kitti=kitti_rules("easy"), max_dets=None)
        assert r.matched.shape == (1, len(d)) and not r.matched.any()
    r = match(d1, g0, "kitti", mode="kitti", kitti=kitti_rules("easy"), max_dets=None)
    assert not r.ignored.any()  # a detection with no box and no DontCare region is a false positive
    (ap,) = kitti_ap(d0, g1, categories=[4], difficulties=["easy"])
    assert ap.n_gt == 1 and ap.ap11 == 0.0 and ap.ap40 == 0.0 and ap.score_thresholds.size == 0
    (ap,) = kitti_ap(d1, g1, categories=[4], difficulties=["easy"])
    # one TP (recall 1) gives one score threshold; eval_class stores precision by threshold index, not by
    # recall, so precision = [1, 0, ..., 0]: AP11 = 1/11 and AP40 = 0 (the devkit's figures for this input)
    assert ap.precision[0] == 1.0 and not ap.precision[1:].any()
    assert ap.ap11 == 1.0 / 11 and ap.ap40 == 0.0
