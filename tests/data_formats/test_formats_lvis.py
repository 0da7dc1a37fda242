"""LVIS v1: detcal's AP equals the official lvis package's LVISEval (bbox) to 1e-12 on generated
LVIS-format sets; the federated rules and the calibration sample follow LVISEval's ignores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.data.lvis import load_lvis
from detcal.matching.lvis import match_lvis
from detcal.metrics.lvis_ap import lvis_ap


def _generate(root: Path, seed: int, n_images: int = 30, n_cats: int = 12) -> tuple[Path, Path]:
    """An LVIS-format set: boxes with mask-like areas (not w*h), per-image verified-absent and
    not-exhaustive lists, r/c/f categories; detections near the boxes and elsewhere, distinct scores,
    one image with more than 300 detections (near its boxes)."""
    rng = np.random.default_rng(seed)
    cats = [{"id": c, "name": f"c{c}", "frequency": "rcf"[c % 3]} for c in range(1, n_cats + 1)]
    images, anns, dets = [], [], []
    crowded = False
    for i in range(1, n_images + 1):
        w, h = int(rng.integers(200, 640)), int(rng.integers(200, 640))
        present = sorted(set(rng.choice(n_cats, int(rng.integers(0, 4)), replace=False) + 1))
        absent = [c for c in range(1, n_cats + 1) if c not in present]
        neg = sorted(int(c) for c in rng.choice(absent, int(rng.integers(0, 4)), replace=False))
        nel = sorted(int(c) for c in present if rng.random() < 0.3)
        images.append({"id": i, "width": w, "height": h, "neg_category_ids": neg, "not_exhaustive_category_ids": nel})
        for c in present:
            for _ in range(int(rng.integers(1, 5))):
                bw, bh = rng.uniform(4, 150), rng.uniform(4, 150)
                x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
                anns.append({"id": len(anns) + 1, "image_id": i, "category_id": int(c), "bbox": [x, y, bw, bh],
                             "area": bw * bh * rng.uniform(0.4, 0.9), "segmentation": []})  # fmt: skip
                for _ in range(int(rng.integers(0, 4))):
                    j = rng.normal(0, 0.12, 4) * [bw, bh, bw, bh]
                    cc = int(c) if rng.random() < 0.8 else int(rng.integers(1, n_cats + 1))
                    dets.append({"image_id": i, "category_id": cc, "bbox": [x + j[0], y + j[1], bw + j[2], bh + j[3]]})
        mine = [a for a in anns if a["image_id"] == i]
        for _ in range(320 if mine and not crowded else 0):  # past the 300 cut: the cut drops true positives
            crowded = True
            a = mine[int(rng.integers(0, len(mine)))]
            j = rng.normal(0, 0.05, 4) * (a["bbox"][2:] * 2)
            dets.append({"image_id": i, "category_id": a["category_id"], "bbox": list(np.add(a["bbox"], j))})
        for _ in range(int(rng.integers(0, 6))):
            bw, bh = rng.uniform(4, 120), rng.uniform(4, 120)
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            dets.append({"image_id": i, "category_id": int(rng.integers(1, n_cats + 1)), "bbox": [x, y, bw, bh]})
    for d, s in zip(dets, rng.permutation(len(dets))):
        d["score"] = float((s + 1) / (len(dets) + 1))  # distinct scores: no ties for either side to break
        d["bbox"] = [float(v) for v in d["bbox"]]
        d["bbox"][2], d["bbox"][3] = max(d["bbox"][2], 1.0), max(d["bbox"][3], 1.0)
    gt_path, dt_path = root / f"lvis_{seed}.json", root / f"dets_{seed}.json"
    gt_path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    dt_path.write_text(json.dumps(dets))
    return gt_path, dt_path


def _official(gt: Path, dt: Path) -> dict[str, float]:
    lvis = pytest.importorskip("lvis")
    if not hasattr(np, "float"):  # lvis 0.5.3 calls np.float, removed in numpy 1.24
        np.float = float  # type: ignore[attr-defined]
    import logging

    logging.getLogger("lvis").setLevel(logging.WARNING)
    ev = lvis.LVISEval(str(gt), str(dt), iou_type="bbox")
    ev.run()
    return {k: float(v) for k, v in ev.get_results().items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lvis_ap_equals_lviseval(tmp_path: Path, seed: int) -> None:
    gt, dt = _generate(tmp_path, seed)
    want = _official(gt, dt)
    data = load_lvis(gt, dt)
    got = lvis_ap(data.detections, data.dataset, data.protocol)
    assert set(got) == set(want)
    for k, v in want.items():
        assert abs(got[k] - v) <= 1e-12, (k, got[k], v)
    assert want["APr"] > 0 and want["APs"] > -1


def test_federated_rules_and_the_calibration_sample(tmp_path: Path) -> None:
    """One image, category 1 present (not exhaustive), 2 verified absent, 3 unverified:
    a TP and an unmatched detection of 1 (ignored: boxes of 1 may be missing), a detection of 2 (FP)
    and one of 3 (not evaluated)."""
    gt = {
        "images": [{"id": 1, "width": 100, "height": 100, "neg_category_ids": [2], "not_exhaustive_category_ids": [1]}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "area": 400}],
        "categories": [{"id": c, "name": f"c{c}", "frequency": f} for c, f in ((1, "f"), (2, "c"), (3, "r"))],
    }
    dets = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20], "score": 0.9},
        {"image_id": 1, "category_id": 1, "bbox": [60, 60, 20, 20], "score": 0.8},
        {"image_id": 1, "category_id": 2, "bbox": [60, 60, 20, 20], "score": 0.7},
        {"image_id": 1, "category_id": 3, "bbox": [10, 10, 20, 20], "score": 0.6},
    ]
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "dt.json").write_text(json.dumps(dets))
    data = load_lvis(tmp_path / "gt.json", tmp_path / "dt.json")
    mr = match_lvis(data.detections, data.dataset.gt, (0.5,), data.protocol)
    assert mr.considered.tolist() == [True, True, True, False]
    assert mr.matched[0].tolist() == [True, False, False, False]
    assert mr.ignored[0].tolist() == [False, True, False, False]
    rows, y = mr.sample(0.5)
    assert rows.tolist() == [0, 2] and y.tolist() == [True, False]
    got = lvis_ap(data.detections, data.dataset, data.protocol)
    assert got["APf"] == pytest.approx(1.0) and got["APc"] == -1 and got["APr"] == -1
    if pytest.importorskip("lvis"):
        want = _official(tmp_path / "gt.json", tmp_path / "dt.json")
        assert {k: round(v, 12) for k, v in got.items()} == {k: round(v, 12) for k, v in want.items()}


def test_bad_lvis_fields_are_named(tmp_path: Path) -> None:
    gt = {
        "images": [{"id": 1, "width": 10, "height": 10, "neg_category_ids": [9], "not_exhaustive_category_ids": []}],
        "annotations": [],
        "categories": [{"id": 1, "name": "a", "frequency": "f"}],
    }
    (tmp_path / "dt.json").write_text("[]")
    cases: list[tuple[dict[str, Any], str]] = [
        (gt, r"record images\[0\], field 'neg_category_ids': unknown category id 9"),
        ({**gt, "categories": [{"id": 1, "name": "a", "frequency": "x"}]}, "categories.0., field 'frequency'"),
    ]
    for doc, msg in cases:
        (tmp_path / "gt.json").write_text(json.dumps(doc))
        with pytest.raises(DetcalInputError, match=msg):
            load_lvis(tmp_path / "gt.json", tmp_path / "dt.json")


def test_evaluate_with_lvis_rules_and_per_frequency_calibration(tmp_path: Path) -> None:
    """detcal.evaluate(data=lvis, matching=lvis): the confidence block's sample is the LVIS sample, and the
    per-frequency-group ECE is ECE of that sample's detections of the group's categories."""
    import detcal
    from detcal.metrics.confidence import ece
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec

    gt, dt = _generate(tmp_path, 1)
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), matching=MatchingSpec(mode="lvis", max_dets=300))
    res = detcal.evaluate(DataSpec(source="lvis", gt=str(gt), results=str(dt)), spec=spec, workdir=tmp_path / "run")
    m = res.to_dict()
    acc = m["accuracy"]
    assert acc["lvis_ap"] == pytest.approx(_official(gt, dt), abs=1e-12)
    groups = acc["calibration_by_frequency"]
    assert groups["all"]["ece"] == pytest.approx(m["confidence"]["iou=0.50"]["ece"]["value"], abs=1e-12)
    assert groups["all"]["n"] == m["confidence"]["iou=0.50"]["ece"]["params"]["n"]
    assert sum(groups[f]["n"] for f in "rcf") == groups["all"]["n"]
    data = load_lvis(gt, dt)
    mr = match_lvis(data.detections, data.dataset.gt, (0.5,), data.protocol)
    rows, y = mr.sample(0.5)
    rare = np.array([data.protocol.frequency[int(c)] == "r" for c in data.detections.category[rows]])
    assert groups["r"]["ece"] == pytest.approx(ece(data.detections.score[rows][rare], y[rare]).value, abs=1e-12)
