"""A generator of KITTI-like frames for the devkit agreement tests.

Each frame has crowds of heavily overlapping pedestrians (with Person_sitting
boxes among them), cars with vans beside and on them, cyclists, DontCare
regions, truncation and occlusion codes across all difficulty limits,
heights around the 25 / 40 px limits, and label lines in random order (so a
neighbour-class or ignored box often comes first). Detections: 0-2 per box
with jittered corners (Pedestrian on Person_sitting, Car on Van), false
positives, some inside DontCare regions, 2-decimal scores (many ties) and
2-decimal coordinates, in random file order. Everything is written as the
text lines of KITTI ``label_2`` and result files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

_W, _H = 1242.0, 375.0


def _line(kind: str, trunc: float, occ: int, box: np.ndarray) -> str:
    trunc_s = "-1" if kind == "DontCare" else f"{trunc:.2f}"
    occ_s = "-1" if kind == "DontCare" else str(occ)
    tail = "-1 -1 -1 -1000 -1000 -1000 -10" if kind == "DontCare" else "1.50 1.60 3.90 1.00 1.50 20.00 0.10"
    return f"{kind} {trunc_s} {occ_s} -10 {box[0]:.2f} {box[1]:.2f} {box[2]:.2f} {box[3]:.2f} {tail}"


def _det_line(kind: str, box: np.ndarray, rng: np.random.Generator) -> str:
    """A result line: truncation/occlusion -1, a 2-decimal score."""
    score = round(float(rng.uniform(0, 1)), 2)
    return f"{kind} -1 -1 -10 {box[0]:.2f} {box[1]:.2f} {box[2]:.2f} {box[3]:.2f} 1.50 1.60 3.90 1.00 1.50 20.00 0.10 {score:.2f}"


def _clip(b: np.ndarray) -> np.ndarray:
    b = np.round(b, 2)
    b[0], b[2] = np.clip(b[0], 0, _W - 2), np.clip(b[2], 0, _W)
    b[1], b[3] = np.clip(b[1], 0, _H - 2), np.clip(b[3], 0, _H)
    b[2] = max(b[2], b[0] + 1.0)
    b[3] = max(b[3], b[1] + 1.0)
    return b


def make_frame(rng: np.random.Generator) -> tuple[list[str], list[str]]:
    """(label lines, result lines) of one frame."""
    objs: list[tuple[str, np.ndarray]] = []
    for _ in range(rng.integers(0, 4)):  # pedestrian crowds
        cx, base = rng.uniform(50, _W - 50), rng.uniform(150, _H)
        h0 = rng.choice([rng.uniform(18, 50), rng.uniform(20, 130)])
        for _ in range(rng.integers(2, 7)):
            h = max(6.0, h0 * rng.uniform(0.85, 1.15))
            w = h * rng.uniform(0.35, 0.45)
            x = cx + rng.normal(0, 0.25 * w)
            y2 = base + rng.normal(0, 0.03 * h)
            kind = "Person_sitting" if rng.random() < 0.2 else "Pedestrian"
            objs.append((kind, _clip(np.array([x - w / 2, y2 - h, x + w / 2, y2]))))
    for _ in range(rng.integers(0, 5)):  # cars, vans
        h = rng.choice([rng.uniform(20, 45), rng.uniform(25, 150)])
        w = h * rng.uniform(1.2, 2.5)
        x1, y2 = rng.uniform(0, _W - w), rng.uniform(140, _H)
        objs.append(("Van" if rng.random() < 0.25 else "Car", _clip(np.array([x1, y2 - h, x1 + w, y2]))))
        if rng.random() < 0.3:  # a second vehicle on the first
            s = rng.normal(0, 0.12, 4) * np.array([w, h, w, h])
            b = objs[-1][1] + s
            objs.append(("Van" if rng.random() < 0.5 else "Car", _clip(b)))
    for _ in range(rng.integers(0, 3)):
        h = rng.uniform(20, 110)
        w = h * rng.uniform(0.6, 1.0)
        x1, y2 = rng.uniform(0, _W - w), rng.uniform(140, _H)
        objs.append(("Cyclist", _clip(np.array([x1, y2 - h, x1 + w, y2]))))
    for _ in range(rng.integers(0, 2)):
        objs.append(
            ("Truck" if rng.random() < 0.5 else "Misc", _clip(np.array([0, 100, 80, 180]) + rng.uniform(0, 900)))
        )

    labels: list[tuple[str, str, np.ndarray]] = []
    for kind, b in objs:
        trunc = float(rng.choice([0.0, 0.0, 0.0, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7]))
        occ = int(rng.choice([0, 0, 1, 1, 2, 3]))
        labels.append((kind, _line(kind, trunc, occ, b), b))
    dcs = []
    for _ in range(rng.integers(0, 3)):
        if objs and rng.random() < 0.6:  # over a crowd
            b = objs[rng.integers(len(objs))][1]
            pad = rng.uniform(-5, 30, 4) * np.array([-1, -1, 1, 1])
            dc = _clip(b + pad)
        else:
            x1, y1 = rng.uniform(0, _W - 120), rng.uniform(100, 300)
            dc = _clip(np.array([x1, y1, x1 + rng.uniform(20, 120), y1 + rng.uniform(15, 60)]))
        dcs.append(dc)
        labels.append(("DontCare", _line("DontCare", -1, -1, dc), dc))
    order = rng.permutation(len(labels))
    label_lines = [labels[i][1] for i in order]

    dets: list[str] = []
    for kind, b in objs:
        if kind in ("Truck", "Misc"):
            continue
        dkind = {"Person_sitting": "Pedestrian", "Van": "Car" if rng.random() < 0.6 else "Van"}.get(kind, kind)
        if kind == "Cyclist" and rng.random() < 0.2:
            dkind = "Pedestrian"
        w, h = b[2] - b[0], b[3] - b[1]
        for _ in range(int(rng.choice([0, 1, 1, 1, 2, 2, 3]))):
            s = rng.normal(0, rng.choice([0.04, 0.1, 0.2]), 4) * np.array([w, h, w, h])
            dets.append(_det_line(dkind, _clip(b + s), rng))
    for _ in range(rng.integers(0, 5)):  # false positives, some inside DontCare regions
        kind = str(rng.choice(["Car", "Pedestrian", "Cyclist"]))
        if dcs and rng.random() < 0.5:
            dc = dcs[rng.integers(len(dcs))]
            w, h = (dc[2] - dc[0]) * rng.uniform(0.2, 0.9), (dc[3] - dc[1]) * rng.uniform(0.3, 1.0)
            x1, y1 = rng.uniform(dc[0] - 0.3 * w, dc[2] - 0.7 * w), rng.uniform(dc[1] - 0.2 * h, dc[3] - 0.8 * h)
            b = _clip(np.array([x1, y1, x1 + w, y1 + h]))
        else:
            h = rng.uniform(10, 120)
            x1, y1 = rng.uniform(0, _W - h), rng.uniform(0, _H - h)
            b = _clip(np.array([x1, y1, x1 + h * rng.uniform(0.4, 2), y1 + h]))
        dets.append(_det_line(kind, b, rng))
    det_lines = [dets[i] for i in rng.permutation(len(dets))]
    return label_lines, det_lines


def make_frames(n: int, seed: int = 0) -> list[tuple[list[str], list[str]]]:
    """``n`` frames of (label lines, result lines)."""
    rng = np.random.default_rng(seed)
    return [make_frame(rng) for _ in range(n)]


def write_frames(frames: list[tuple[list[str], list[str]]], root: Path) -> tuple[Path, Path]:
    """Write ``label_2/<frame>.txt`` and ``results/<frame>.txt`` under ``root``; returns the two directories."""
    lab, res = root / "label_2", root / "results"
    lab.mkdir(parents=True, exist_ok=True)
    res.mkdir(parents=True, exist_ok=True)
    for i, (ll, dl) in enumerate(frames):
        (lab / f"{i:06d}.txt").write_text("".join(x + "\n" for x in ll))
        (res / f"{i:06d}.txt").write_text("".join(x + "\n" for x in dl))
    return lab, res
