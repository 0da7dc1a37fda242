"""A line-by-line Python reading of the KITTI object devkit (evaluate_object.cpp), for the tests.

Plain loops on purpose: it follows ``cleanData``, ``computeStatistics``,
``getThresholds`` and ``eval_class`` statement by statement (2-D image boxes
only, no AOS), independently of detcal's vectorised code. It reads the label
and result lines itself (``fscanf``-like whitespace split). Two additions for
the tests: ``computeStatistics`` also reports, per detection, which box took
it and whether a DontCare region took it; classes other than car/pedestrian/
cyclist are evaluated with the same rules (no neighbour class).
"""

from __future__ import annotations

import math

MIN_HEIGHT = {"easy": 40, "moderate": 25, "hard": 25}
MAX_OCCLUSION = {"easy": 0, "moderate": 1, "hard": 2}
MAX_TRUNCATION = {"easy": 0.15, "moderate": 0.3, "hard": 0.5}
MIN_OVERLAP = {"car": 0.7, "pedestrian": 0.5, "cyclist": 0.5}
NEIGHBOUR = {"car": "van", "pedestrian": "person_sitting"}
N_SAMPLE_PTS = 41
NO_DETECTION = -10000000


def parse_labels(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        t = line.split()
        if len(t) != 15:
            continue
        out.append(
            {
                "type": t[0],
                "truncation": float(t[1]),
                "occlusion": int(float(t[2])),
                "x1": float(t[4]),
                "y1": float(t[5]),
                "x2": float(t[6]),
                "y2": float(t[7]),
            }
        )
    return out


def parse_results(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        t = line.split()
        if len(t) != 16:
            continue
        out.append(
            {
                "type": t[0],
                "x1": float(t[4]),
                "y1": float(t[5]),
                "x2": float(t[6]),
                "y2": float(t[7]),
                "thresh": float(t[15]),
            }
        )
    return out


def image_box_overlap(a: dict, b: dict, criterion: int = -1) -> float:
    x1 = max(a["x1"], b["x1"])
    y1 = max(a["y1"], b["y1"])
    x2 = min(a["x2"], b["x2"])
    y2 = min(a["y2"], b["y2"])
    w = x2 - x1
    h = y2 - y1
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    a_area = (a["x2"] - a["x1"]) * (a["y2"] - a["y1"])
    b_area = (b["x2"] - b["x1"]) * (b["y2"] - b["y1"])
    if criterion == -1:
        return inter / (a_area + b_area - inter)
    if criterion == 0:
        return inter / a_area
    return inter / b_area


def clean_data(cls: str, gt: list[dict], det: list[dict], difficulty: str):
    ignored_gt, dc, ignored_det = [], [], []
    n_gt = 0
    for g in gt:
        height = g["y2"] - g["y1"]
        if g["type"].lower() == cls:
            valid_class = 1
        elif cls == "pedestrian" and g["type"].lower() == "person_sitting":
            valid_class = 0
        elif cls == "car" and g["type"].lower() == "van":
            valid_class = 0
        else:
            valid_class = -1
        ignore = (
            g["occlusion"] > MAX_OCCLUSION[difficulty]
            or g["truncation"] > MAX_TRUNCATION[difficulty]
            or height <= MIN_HEIGHT[difficulty]
        )
        if valid_class == 1 and not ignore:
            ignored_gt.append(0)
            n_gt += 1
        elif valid_class == 0 or (ignore and valid_class == 1):
            ignored_gt.append(1)
        else:
            ignored_gt.append(-1)
    for g in gt:
        if g["type"].lower() == "dontcare":
            dc.append(g)
    for d in det:
        valid_class = 1 if d["type"].lower() == cls else -1
        height = int(math.fabs(d["y1"] - d["y2"]))  # int32_t conversion truncates toward zero
        if height < MIN_HEIGHT[difficulty]:
            ignored_det.append(1)
        elif valid_class == 1:
            ignored_det.append(0)
        else:
            ignored_det.append(-1)
    return ignored_gt, dc, ignored_det, n_gt


def compute_statistics(cls, gt, det, dc, ignored_gt, ignored_det, compute_fp, min_overlap, thresh=0.0):
    """Returns (tp, fp, fn, v, took, in_dc): ``took[j]`` the box index that took detection j (-1),
    ``in_dc[j]`` True when a DontCare region took it."""
    tp = fp = fn = 0
    v = []
    assigned_detection = [False] * len(det)
    took = [-1] * len(det)
    in_dc = [False] * len(det)
    ignored_threshold = [False] * len(det)
    if compute_fp:
        for i in range(len(det)):
            if det[i]["thresh"] < thresh:
                ignored_threshold[i] = True
    for i in range(len(gt)):
        if ignored_gt[i] == -1:
            continue
        det_idx = -1
        valid_detection = NO_DETECTION
        max_overlap = 0.0
        assigned_ignored_det = False
        for j in range(len(det)):
            if ignored_det[j] == -1:
                continue
            if assigned_detection[j]:
                continue
            if ignored_threshold[j]:
                continue
            overlap = image_box_overlap(det[j], gt[i], -1)
            if not compute_fp and overlap > min_overlap and det[j]["thresh"] > valid_detection:
                det_idx = j
                valid_detection = det[j]["thresh"]
            elif (
                compute_fp
                and overlap > min_overlap
                and (overlap > max_overlap or assigned_ignored_det)
                and ignored_det[j] == 0
            ):
                max_overlap = overlap
                det_idx = j
                valid_detection = 1
                assigned_ignored_det = False
            elif compute_fp and overlap > min_overlap and valid_detection == NO_DETECTION and ignored_det[j] == 1:
                det_idx = j
                valid_detection = 1
                assigned_ignored_det = True
        if valid_detection == NO_DETECTION and ignored_gt[i] == 0:
            fn += 1
        elif valid_detection != NO_DETECTION and (ignored_gt[i] == 1 or ignored_det[det_idx] == 1):
            assigned_detection[det_idx] = True
            took[det_idx] = i
        elif valid_detection != NO_DETECTION:
            tp += 1
            v.append(det[det_idx]["thresh"])
            assigned_detection[det_idx] = True
            took[det_idx] = i
    if compute_fp:
        for i in range(len(det)):
            if not (assigned_detection[i] or ignored_det[i] == -1 or ignored_det[i] == 1 or ignored_threshold[i]):
                fp += 1
        nstuff = 0
        for i in range(len(dc)):
            for j in range(len(det)):
                if assigned_detection[j]:
                    continue
                if ignored_det[j] == -1 or ignored_det[j] == 1:
                    continue
                if ignored_threshold[j]:
                    continue
                overlap = image_box_overlap(det[j], dc[i], 0)
                if overlap > min_overlap:
                    assigned_detection[j] = True
                    in_dc[j] = True
                    nstuff += 1
        fp -= nstuff
    return tp, fp, fn, v, took, in_dc


def get_thresholds(v: list[float], n_groundtruth: float) -> list[float]:
    t = []
    v = sorted(v, reverse=True)
    current_recall = 0.0
    for i in range(len(v)):
        l_recall = (i + 1) / n_groundtruth
        if i < len(v) - 1:
            r_recall = (i + 2) / n_groundtruth
        else:
            r_recall = l_recall
        if (r_recall - current_recall) < (current_recall - l_recall) and i < len(v) - 1:
            continue
        t.append(v[i])
        current_recall += 1.0 / (N_SAMPLE_PTS - 1.0)
    return t


def eval_class(
    cls: str,
    groundtruth: list[list[dict]],
    detections: list[list[dict]],
    difficulty: str,
    min_overlap: float | None = None,
) -> dict:
    """Precision [41] (and the counts per score threshold) as eval_class computes them."""
    mo = MIN_OVERLAP.get(cls, 0.5) if min_overlap is None else min_overlap
    n_gt = 0
    v = []
    ignored_gt, ignored_det, dontcare = [], [], []
    for i in range(len(groundtruth)):
        i_gt, dc, i_det, n = clean_data(cls, groundtruth[i], detections[i], difficulty)
        n_gt += n
        ignored_gt.append(i_gt)
        ignored_det.append(i_det)
        dontcare.append(dc)
        _, _, _, vv, _, _ = compute_statistics(cls, groundtruth[i], detections[i], dc, i_gt, i_det, False, mo)
        v.extend(vv)
    thresholds = get_thresholds(v, n_gt) if n_gt > 0 else []
    pr = [[0, 0, 0] for _ in thresholds]
    for i in range(len(groundtruth)):
        for t in range(len(thresholds)):
            tp, fp, fn, _, _, _ = compute_statistics(
                cls, groundtruth[i], detections[i], dontcare[i], ignored_gt[i], ignored_det[i], True, mo, thresholds[t]
            )
            pr[t][0] += tp
            pr[t][1] += fp
            pr[t][2] += fn
    precision = [0.0] * N_SAMPLE_PTS
    for i in range(len(thresholds)):
        tp, fp = pr[i][0], pr[i][1]
        precision[i] = tp / (tp + fp) if tp + fp > 0 else math.nan
    for i in range(len(thresholds)):
        largest = precision[i]  # std::max_element: the first element not less than any other
        for x in precision[i + 1 :]:
            if largest < x:
                largest = x
        precision[i] = largest
    return {
        "precision": precision,
        "thresholds": thresholds,
        "n_gt": n_gt,
        "tp": [p[0] for p in pr],
        "fp": [p[1] for p in pr],
        "fn": [p[2] for p in pr],
    }


def outcomes(
    cls: str, gt: list[dict], det: list[dict], difficulty: str, thresh: float = 0.0, min_overlap: float | None = None
) -> list[tuple[int, str, int]]:
    """Per detection j of class ``cls`` in one frame: (j, 'tp'|'fp'|'ignored'|'below', box index or -1)."""
    mo = MIN_OVERLAP.get(cls, 0.5) if min_overlap is None else min_overlap
    i_gt, dc, i_det, _ = clean_data(cls, gt, det, difficulty)
    _, _, _, _, took, in_dc = compute_statistics(cls, gt, det, dc, i_gt, i_det, True, mo, thresh)
    out = []
    for j, d in enumerate(det):
        if d["type"].lower() != cls:
            continue
        if d["thresh"] < thresh:
            out.append((j, "below", -1))
        elif i_det[j] == 1:
            out.append((j, "ignored", took[j]))
        elif took[j] >= 0:
            out.append((j, "tp" if i_gt[took[j]] == 0 else "ignored", took[j]))
        elif in_dc[j]:
            out.append((j, "ignored", -1))
        else:
            out.append((j, "fp", -1))
    return out
