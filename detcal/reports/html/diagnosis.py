"""The diagnosis section of report.html: why the detector is miscalibrated (docs/report.md, docs/metrics.md
#diagnostics). TIDE's dAP bars, the calibration error split by error type, the confusion matrix as a heat map,
precision / recall / F1 against the score threshold, the operating points and the likely label errors (with
thumbnails from the image folder when one is given). Drawn as inline SVG from metrics.json numbers only."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.results import DiagnosticsBlock, Results, as_results
from detcal.reports.html.fmt import cell, esc, is_number, num, num_attr, table, text
from detcal.reports.html.svg import curve_svg
from detcal.reports.html.thumbs import find_image, thumbnail

__all__ = ["diagnosis_section", "bars_svg", "confusion_svg"]

_PAD = 120
_TYPE_LABELS = {
    "cls": "classification",
    "loc": "localisation",
    "both": "class and box",
    "dupe": "duplicate",
    "bkg": "background",
    "miss": "missed",
    "fp": "false positives",
    "fn": "false negatives",
    "tp": "true positives",
    "other": "other false positives",
}


def bars_svg(items: Sequence[tuple[str, Any]], title: str, xlabel: str) -> str:
    """Horizontal bars, one per (label, value), signed values from a zero line; each bar carries its value."""
    vals = [v for _, v in items if is_number(v) and math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = min(min(vals), 0.0), max(max(vals), 0.0)
    span = (hi - lo) or 1.0
    w, bh = 240, 18
    h = bh * len(items) + 10
    x0 = _PAD + (0 - lo) / span * w
    out = [
        f'<svg class="fig" role="img" viewBox="0 0 {_PAD + w + 70} {h + 40}" width="{_PAD + w + 70}" '
        f'height="{h + 40}"><title>{esc(title)}</title>',
        f'<line x1="{x0:.1f}" y1="4" x2="{x0:.1f}" y2="{h}" class="diag"/>',
    ]
    for k, (label, v) in enumerate(items):
        y = 8 + k * bh
        out.append(f'<text x="{_PAD - 6}" y="{y + 12}" class="tick" text-anchor="end">{esc(label)}</text>')
        if not (is_number(v) and math.isfinite(v)):
            continue
        x1 = _PAD + (v - lo) / span * w
        left, width = min(x0, x1), max(abs(x1 - x0), 0.5)
        cls = "bar" if v >= 0 else "gap"
        out.append(
            f'<rect x="{left:.1f}" y="{y + 2}" width="{width:.1f}" height="{bh - 5}" class="{cls}"{num_attr(v)}>'
            f"<title>{esc(label)}: {text(v)}</title></rect>"
        )
        out.append(f'<text x="{max(x0, x1) + 4:.1f}" y="{y + 12}" class="tick">{text(v, 2)}</text>')
    out.append(f'<text x="{_PAD + w / 2}" y="{h + 28}" class="lab" text-anchor="middle">{esc(xlabel)}</text>')
    out.append("</svg>")
    return "".join(out)


def _count_matrix(matrix: Sequence[Sequence[Any]]) -> np.ndarray | None:
    """``matrix`` as a square integer array, or None when it is not one (then the cells are read one by one)."""
    try:
        arr = np.asarray(matrix)
    except ValueError:  # ragged rows
        return None
    n = len(matrix)
    return arr if arr.shape == (n, n) and arr.dtype.kind in "iub" else None


def _nonzero_cells(matrix: Sequence[Sequence[Any]], arr: np.ndarray | None, keep: Sequence[int]) -> list[list[int]]:
    """Per kept row, the positions in ``keep`` of its kept columns whose count is not zero (a 366-class matrix
    holds some 134k cells, a few thousand of them filled); ``arr``: :func:`_count_matrix` of ``matrix``."""
    if arr is None:
        return [[b for b, j in enumerate(keep) if matrix[i][j]] for i in keep]
    k = np.asarray(keep, dtype=np.intp)
    sub = arr[np.ix_(k, k)] != 0
    rows, cols = np.nonzero(sub)
    cuts = np.searchsorted(rows, np.arange(1, len(keep)))
    return [c.tolist() for c in np.split(cols, cuts)]


def _kept(matrix: Sequence[Sequence[Any]], arr: np.ndarray | None) -> list[int]:
    """The rows (and columns) of the heat map: those with a count in their row or column, and the last."""
    n = len(matrix)
    if arr is None:
        return [i for i in range(n) if any(matrix[i]) or any(matrix[r][i] for r in range(n)) or i == n - 1]
    used = (arr != 0).any(axis=1) | (arr != 0).any(axis=0)
    used[n - 1] = True
    return np.flatnonzero(used).tolist()


def confusion_svg(matrix: Sequence[Sequence[Any]], labels: Sequence[str], title: str) -> str:
    """The confusion matrix as a heat map (rows ground truth, columns prediction, background last), shading on
    a log scale of the count; rows and columns that are empty everywhere are left out."""
    return _confusion_svg(matrix, _count_matrix(matrix), labels, title)


def _confusion_svg(matrix: Sequence[Sequence[Any]], arr: np.ndarray | None, labels: Sequence[str], title: str) -> str:
    """:func:`confusion_svg` with ``arr``, :func:`_count_matrix` of ``matrix``."""
    n = len(matrix)
    if n == 0:
        return ""
    keep = _kept(matrix, arr)
    names = [esc(x) for x in labels]  # each label escaped once (a 366-class matrix has thousands of filled cells)
    vmax = (max((v for r in matrix for v in r), default=1) if arr is None else int(arr.max())) or 1
    cs = max(4.0, min(16.0, 480 / max(len(keep), 1)))
    size = cs * len(keep)
    lab = 110 if cs >= 8 else 6  # names only where they fit (each cell's tooltip names its classes)
    out = [
        f'<svg class="fig" role="img" viewBox="0 0 {lab + size + 20} {lab + size + 20}" '
        f'width="{lab + size + 20}" height="{lab + size + 20}"><title>{esc(title)}</title>'
    ]
    for a, (i, filled) in enumerate(zip(keep, _nonzero_cells(matrix, arr, keep))):
        y = lab + a * cs
        if cs >= 8:
            out.append(f'<text x="{lab - 3}" y="{y + cs - 2:.1f}" class="tick" text-anchor="end">{names[i]}</text>')
            xx = lab + a * cs + cs - 2
            out.append(
                f'<text x="{xx:.1f}" y="{lab - 3}" class="tick" transform="rotate(-90 {xx:.1f} {lab - 3})">'
                f"{names[i]}</text>"
            )
        for b in filled:
            j = keep[b]
            v = matrix[i][j]
            t = math.log1p(v) / math.log1p(vmax)
            fill = (
                f"rgb({int(255 * (1 - t))},{int(255 * (1 - 0.6 * t))},255)"
                if i != j
                else f"rgb(0,{int(90 + 80 * (1 - t))},0)"
            )
            out.append(
                f'<rect x="{lab + b * cs:.1f}" y="{y:.1f}" width="{cs:.1f}" height="{cs:.1f}" fill="{fill}" '
                f'class="cellr"{num_attr(v)}><title>true {names[i]}, predicted {names[j]}: {v}</title></rect>'
            )
    out.append(f'<rect x="{lab}" y="{lab}" width="{size:.1f}" height="{size:.1f}" class="frame nofill"/>')
    out.append("</svg>")
    return "".join(out)


def _confusions(mat: Sequence[Sequence[Any]], arr: np.ndarray | None, k: int) -> list[tuple[Any, int, int]]:
    """(count, true, predicted) of every filled cell off the diagonal among the ``k`` classes, most first
    (``arr``: :func:`_count_matrix` of ``mat``)."""
    cells: Iterable[tuple[int, int]]
    if arr is None or k > len(mat):
        cells = ((i, j) for i in range(k) for j in range(k) if i != j and mat[i][j])
    else:
        sub = arr[:k, :k] != 0
        np.fill_diagonal(sub, False)
        rows, cols = np.nonzero(sub)
        cells = zip(rows.tolist(), cols.tolist())
    return sorted(((mat[i][j], i, j) for i, j in cells), reverse=True)


def _names(m: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (((m.get("data") or {}).get("counts") or {}).get("categories") or {}).items()}


def _tide(t: Mapping[str, Any]) -> str:
    items = [(_TYPE_LABELS[k], t["dap"][k]) for k in ("cls", "loc", "both", "dupe", "bkg", "miss")]
    special = [(_TYPE_LABELS[k], t["special_dap"][k]) for k in ("fp", "fn")]
    bars = bars_svg(items, "TIDE main errors: AP gained by fixing each type alone", "dAP (AP points)")
    sp = bars_svg(special, "TIDE special errors", "dAP (AP points)")
    counts = table(["", *[_TYPE_LABELS[k] for k in t["counts"]]], [["errors", *t["counts"].values()]], sortable=False)
    return (
        f"<h3>TIDE error types (AP {num(t['ap'], 2)} at IoU {num(t['pos_threshold'], 2)}; "
        f"{esc(t.get('reference', ''))})</h3><div class=figs>"
        f"<figure>{bars}<figcaption>AP gained by fixing each error type alone</figcaption></figure>"
        f"<figure>{sp}<figcaption>every false positive below every true positive; every missed box "
        f"counted as found</figcaption></figure></div>{counts}"
    )


def _by_type(cb: Mapping[str, Any]) -> str:
    types = cb["types"]
    rows = [
        [
            f"<td>{esc(_TYPE_LABELS.get(k, k))}</td>",
            *(
                cell(v[f])
                for f in (
                    "n",
                    "mean_confidence",
                    "accuracy",
                    "ece_contribution",
                    "ece_share",
                    "dece_contribution",
                    "dece_share",
                )
            ),
        ]
        for k, v in types.items()
    ]
    key = "dece_contribution" if cb.get("dece_from_contributions") is not None else "ece_contribution"
    what = "D-ECE" if key == "dece_contribution" else "ECE"
    bars = bars_svg([(_TYPE_LABELS.get(k, k), v[key]) for k, v in types.items()], f"{what} by error type", what)
    return (
        f"<h3>Calibration error by error type at {esc(cb['iou'])}</h3>"
        f"<p class=note>Each detection's signed contribution to the ECE ({num(cb['ece'])}) and the D-ECE "
        f"({num(cb['dece'])}), summed by its TIDE type; true positives in over-confident cells take away "
        "(docs/metrics.md#calibration_by_error_type).</p><div class=figs>"
        f"<figure>{bars}<figcaption>contribution to the {what}</figcaption></figure></div>"
        + table(
            ["group", "N", "mean confidence", "accuracy", "ECE part", "ECE share", "D-ECE part", "D-ECE share"],
            rows,
            raw=True,
        )
    )


def _confusion(c: Mapping[str, Any], names: Mapping[str, str]) -> str:
    labels = [names.get(str(k), str(k)) for k in c["categories"]] + ["background"]
    arr = _count_matrix(c["matrix"])  # read once, for the heat map and the most frequent confusions
    svg = _confusion_svg(c["matrix"], arr, labels, "confusion matrix")
    facts = table(
        ["matched", "matched to another class", "background detections", "missed boxes"],
        [[c["n_matched"], c["n_matched_other_class"], c["n_background_detections"], c["n_missed_boxes"]]],
        sortable=False,
    )
    pairs = _confusions(c["matrix"], arr, len(c["categories"]))
    if pairs:
        facts += "<h4>Most frequent confusions</h4>" + table(
            ["ground truth", "predicted", "detections"], [[labels[i], labels[j], v] for v, i, j in pairs[:10]]
        )
    return (
        f"<h3>Confusion matrix (class-agnostic matching at IoU {num(c['iou'], 2)}, score &ge; "
        f"{num(c['score_threshold'], 2)})</h3><div class=figs><figure>{svg}<figcaption>rows: ground truth; "
        "columns: prediction; background last; green the diagonal; darker more (log scale); empty rows and "
        f"columns left out</figcaption></figure></div>{facts}"
    )


def _operating(op: Mapping[str, Any], names: Mapping[str, str]) -> str:
    g, p = op["grid"], op["pooled"]
    pooled = curve_svg(
        {"precision": (g, p["precision"]), "recall": (g, p["recall"]), "F1": (g, p["f1"])},
        "precision, recall, F1 vs score threshold",
        "score threshold",
        "value",
        diagonal=False,
    )
    per = {names.get(k, k): (g, v["f1"]) for k, v in list((op.get("per_class_curves") or {}).items())[:6]}
    per_svg = curve_svg(per, "F1 vs score threshold per class", "score threshold", "F1", diagonal=False)
    best, e = p["f1_optimal"], op["ece_kept"]
    kept = table(
        ["detections kept", "N", "ECE"],
        [
            ["all", e["all"]["n"], e["all"]["ece"]],
            ["F1-optimal, one threshold", e["f1_optimal_pooled"]["n"], e["f1_optimal_pooled"]["ece"]],
            ["F1-optimal per class", e["f1_optimal_per_class"]["n"], e["f1_optimal_per_class"]["ece"]],
            ["LRP-optimal per class", e["lrp_optimal_per_class"]["n"], e["lrp_optimal_per_class"]["ece"]],
        ],
        sortable=False,
    )
    pc = op["per_class"]
    rows = [
        [
            pc["category"][i],
            pc["name"][i],
            pc["n_gt"][i],
            pc["f1_threshold"][i],
            pc["f1"][i],
            pc["lrp_threshold"][i],
            pc["olrp"][i],
        ]
        for i in range(len(pc["category"]))
    ]
    return (
        f"<h3>Operating points at {esc(op['iou'])}</h3><p>One score threshold of {num(best['threshold'])} "
        f"maximises F1 ({num(best['f1'])}, precision {num(best['precision'])}, recall {num(best['recall'])}).</p>"
        f"<div class=figs><figure>{pooled}<figcaption>all classes pooled</figcaption></figure>"
        f"<figure>{per_svg}<figcaption>the classes with most boxes</figcaption></figure></div>{kept}"
        "<details><summary>Per class: F1- and LRP-optimal thresholds</summary>"
        + table(["category", "name", "boxes", "F1 threshold", "F1", "LRP threshold", "oLRP"], rows)
        + "</details>"
    )


def _inside(image_dir: Path, p: Path | None) -> Path | None:
    """``p`` when it lies inside the image folder (after resolving links and ``..``), else None."""
    if p is None:
        return None
    try:
        root = image_dir.resolve()
        q = p.resolve()
    except OSError:
        return None
    return q if q.is_relative_to(root) else None


def _label_errors(le: Mapping[str, Any], image_dir: Path | None) -> str:

    prm = le["params"]
    out = [
        f"<h3>Likely label errors</h3><p class=note>{num(le['n_unannotated'])} detections with score &ge; "
        f"{num(prm['min_score'], 2)} overlap no box at all (an object may lack its box); "
        f"{num(le['n_class_disagreement'])} matched pairs with IoU &ge; {num(prm['min_iou'], 2)} disagree in class "
        "(the box may carry the wrong class). Ranked by score.</p>"
    ]
    for key, title in (
        ("unannotated", "Confident detections on no box"),
        ("class_disagreement", "Class disagreements"),
    ):
        rows = le.get(key) or []
        if not rows:
            continue
        body = [[r["image_id"], r["class"], r["score"], r.get("gt_class", "–"), r.get("iou")] for r in rows]
        out.append(f"<h4>{title}</h4>" + table(["image", "class", "score", "box class", "IoU"], body))
        if image_dir is None:
            continue
        thumbs = []
        for r in rows:
            p = _inside(image_dir, find_image(image_dir, r.get("file_name", ""), int(r["image_id"])))
            t = thumbnail(p, r) if p is not None else ""
            if t:  # marked apart from the worst-detections thumbnails
                t = t.replace("<svg class=thumb ", '<svg class="thumb label-error" ', 1)
                t = t.replace('class="detbox"', 'class="detbox label-error"')
                cap = f"{esc(r['class'])} {num(r['score'], 2)}" + (
                    f" on {esc(r['gt_class'])}" if "gt_class" in r else ""
                )
                thumbs.append(f"<figure class=th>{t}<figcaption>{cap}</figcaption></figure>")
        if thumbs:
            out.append("<div class=thumbs>" + "".join(thumbs) + "</div>")
    return "".join(out)


def diagnosis_section(results: Results | Mapping[str, Any], image_dir: Path | None) -> str:
    """The diagnosis section ("" when the run has no ``diagnostics``, or they were skipped)."""
    res = as_results(results)
    d = res.diagnostics
    if not isinstance(d, DiagnosticsBlock) or not d.entries:
        return ""
    names = _names(res.content)
    parts = ["<h2 id=diagnosis>Diagnosis: why is it miscalibrated?</h2>"]
    if d.get("findings"):
        parts.append("<ul class=findings>" + "".join(f"<li>{esc(f)}</li>" for f in d["findings"]) + "</ul>")
    if d.get("tide"):
        parts.append(_tide(d["tide"]))
    if d.get("calibration_by_error_type"):
        parts.append(_by_type(d["calibration_by_error_type"]))
    # the longer parts folded (the page stays a few screens; a click opens each)
    if d.get("confusion"):
        parts.append(_folded("Confusion matrix", _confusion(d["confusion"], names)))
    if d.get("operating_points"):
        parts.append(_folded("Operating points", _operating(d["operating_points"], names)))
    if d.get("label_errors"):
        parts.append(_folded("Likely label errors", _label_errors(d["label_errors"], image_dir)))
    return "".join(parts)


def _folded(title: str, body: str) -> str:
    """``body`` inside a closed ``<details>`` whose summary is ``title``."""
    return f"<details class=diag-more><summary>{esc(title)}</summary>{body}</details>"
