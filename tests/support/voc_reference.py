"""An independent reference of the Pascal VOC detection evaluation, written for the tests from the
devkit's published algorithm (``VOCevaldet.m`` of the VOC2007/2012 development kit and its Python
port ``voc_eval.py``), working on the raw files the way the devkit does.

Per class: ground truth of each image from its XML (``difficult`` flags), ``npos`` the number of
non-difficult boxes; the class's result lines sorted by descending confidence; each detection,
in that order, looks at every box of its image and class, takes the one of largest overlap
(``+1`` pixel areas of the one-based inclusive boxes), and if that overlap is strictly above the
threshold: a difficult box leaves the detection out, a box not yet detected makes it a true
positive (and marks the box), a box detected before makes it a false positive; otherwise a false
positive (the devkit keeps a left-out detection as a step with neither). AP is the VOC2007 11-point mean of the interpolated precision, or the area under the
monotone precision envelope (VOC2010 onwards). Deliberately plain Python loops: it shares no code
with detcal. Ties in confidence are taken in file order (the tests avoid them).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def read_annotations(folder: Path) -> dict[str, list[dict]]:
    out = {}
    for p in sorted(folder.glob("*.xml")):
        objs = []
        for o in ET.parse(p).getroot().iter("object"):
            bb = o.find("bndbox")
            objs.append(
                {
                    "name": o.find("name").text.strip(),
                    "difficult": int(o.find("difficult").text) if o.find("difficult") is not None else 0,
                    "bbox": [float(bb.find(k).text) for k in ("xmin", "ymin", "xmax", "ymax")],
                }
            )
        out[p.stem] = objs
    return out


def _overlap(b: list[float], g: list[float]) -> float:
    iw = min(b[2], g[2]) - max(b[0], g[0]) + 1.0
    ih = min(b[3], g[3]) - max(b[1], g[1]) + 1.0
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    uni = (b[2] - b[0] + 1.0) * (b[3] - b[1] + 1.0) + (g[2] - g[0] + 1.0) * (g[3] - g[1] + 1.0) - inter
    return inter / uni


def ap_from_pr(rec: list[float], prec: list[float], use_07: bool) -> float:
    if use_07:
        ap = 0.0
        for k in range(11):
            t = k * 0.1  # the Python port's np.arange(0., 1.1, 0.1): 0.30000000000000004, ...
            ps = [p for r, p in zip(rec, prec) if r >= t]
            ap += (max(ps) if ps else 0.0) / 11.0
        return ap
    mrec = [0.0, *rec, 1.0]
    mpre = [0.0, *prec, 0.0]
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    return sum((mrec[i + 1] - mrec[i]) * mpre[i + 1] for i in range(len(mrec) - 1) if mrec[i + 1] != mrec[i])


def voc_eval(
    result_file: Path, annotations: dict[str, list[dict]], cls: str, thresh: float = 0.5, use_07: bool = False
) -> float | None:
    """AP of class ``cls`` (None when it has no non-difficult box)."""
    gts = {img: [o for o in objs if o["name"] == cls] for img, objs in annotations.items()}
    npos = sum(1 for objs in gts.values() for o in objs if not o["difficult"])
    taken = {img: [False] * len(objs) for img, objs in gts.items()}
    lines = [ln.split() for ln in result_file.read_text().splitlines() if ln.strip()] if result_file.exists() else []
    dets = sorted(
        ((float(t[1]), k, t[0], [float(x) for x in t[2:6]]) for k, t in enumerate(lines)), key=lambda d: (-d[0], d[1])
    )
    tp, fp = [], []
    for _, _, img, bb in dets:
        ovmax, jmax = -1.0, -1
        for j, g in enumerate(gts.get(img, [])):
            ov = _overlap(bb, g["bbox"])
            if ov > ovmax:
                ovmax, jmax = ov, j
        if ovmax > thresh:
            if gts[img][jmax]["difficult"]:  # the devkit leaves tp = fp = 0 at this position
                tp.append(0.0)
                fp.append(0.0)
            elif not taken[img][jmax]:
                taken[img][jmax] = True
                tp.append(1.0)
                fp.append(0.0)
            else:
                tp.append(0.0)
                fp.append(1.0)
        else:
            tp.append(0.0)
            fp.append(1.0)
    if npos == 0:
        return None
    ctp = cfp = 0.0
    rec, prec = [], []
    for a, b in zip(tp, fp):
        ctp += a
        cfp += b
        rec.append(ctp / npos)
        prec.append(ctp / max(ctp + cfp, 2.220446049250313e-16))
    return ap_from_pr(rec, prec, use_07)
