"""The accuracy of the dataset protocols in report.html (docs/formats.md): LVIS AP with the calibration per
frequency group, Open Images mAP and AP per class, VOC AP in its 11-point and area variants.

Every number is a number of metrics.json ``accuracy`` (written through :func:`cell` / :func:`num`, with its
exact value beside the rounded text); every string goes through :func:`esc` / :func:`text`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detcal.core.results import AccuracyBlock, Results, as_results
from detcal.reports.html.fmt import cell, esc, num, table, text

__all__ = ["protocol_accuracy"]

_LVIS_KEYS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "APr", "APc", "APf")
_LVIS_MEANING = {
    "AP": "mean over IoU 0.50:0.95 and the categories",
    "AP50": "at IoU 0.5",
    "AP75": "at IoU 0.75",
    "APs": "small boxes (area < 32²)",
    "APm": "medium boxes (32² to 96²)",
    "APl": "large boxes (area > 96²)",
    "APr": "rare categories",
    "APc": "common categories",
    "APf": "frequent categories",
}
_GROUPS = {"all": "all categories", "r": "rare", "c": "common", "f": "frequent"}
_VOC_VARIANTS = {"voc07_11pt": "11-point (VOC2007)", "area": "area (VOC2010 onwards)"}


def _names(m: Mapping[str, Any]) -> Mapping[str, Any]:
    """{category id as written in metrics.json: name} from ``data.counts.categories`` (empty when absent)."""
    data = m.get("data")
    counts = data.get("counts") if isinstance(data, Mapping) else None
    cats = counts.get("categories") if isinstance(counts, Mapping) else None
    return cats if isinstance(cats, Mapping) else {}


def _id_cells(key: Any, names: Mapping[str, Any]) -> list[str]:
    """The category id (text: an id, not a measured number) and its name, escaped."""
    return [f"<td>{esc(key)}</td>", f"<td>{esc(names.get(str(key), ''))}</td>"]


def _lvis(acc: Mapping[str, Any]) -> str:
    ap = acc.get("lvis_ap")
    out = []
    if isinstance(ap, Mapping) and ap:
        keys = [k for k in _LVIS_KEYS if k in ap] + [k for k in ap if k not in _LVIS_KEYS]
        rows = [[f"<td>{esc(k)}</td>", cell(ap[k]), f"<td>{esc(_LVIS_MEANING.get(k, ''))}</td>"] for k in keys]
        out.append(
            "<h3>LVIS AP (LVISEval's federated rules, 300 detections per image)</h3>"
            + table(["key", "value", "meaning"], rows, sortable=False, raw=True)
        )
    freq = acc.get("calibration_by_frequency")
    if isinstance(freq, Mapping) and freq:
        cols = ("n", "n_positive", "ece", "dece", "laece")
        rows = [
            [f"<td>{esc(_GROUPS.get(str(g), g))}</td>", *[cell(e.get(c)) for c in cols]]
            for g, e in freq.items()
            if isinstance(e, Mapping)
        ]
        out.append(
            "<h3>Calibration per frequency group (IoU 0.5, the LVIS sample)</h3>"
            + table(["group", "detections", "positives", "ECE", "D-ECE", "LaECE"], rows, sortable=False, raw=True)
        )
    return "".join(out)


def _openimages(acc: Mapping[str, Any], names: Mapping[str, Any]) -> str:
    e = acc.get("openimages_ap")
    if not isinstance(e, Mapping) or not e:
        return ""
    pc = e.get("per_class")
    per: Mapping[str, Any] = pc if isinstance(pc, Mapping) else {}
    rows = [[*_id_cells(k, names), cell(v)] for k, v in per.items()]
    return (
        f"<h3>Open Images AP at IoU {text(e.get('iou_threshold'), 2)} (the challenge's rules, "
        f"{esc(e.get('variant', ''))})</h3><p>mAP@0.5 {num(e.get('mAP'))} over {esc(len(rows))} classes with "
        "boxes</p>"
        + (
            f"<details><summary>AP per class ({esc(len(rows))})</summary>"
            + table(["id", "class", "AP"], rows, raw=True)
            + "</details>"
            if rows
            else ""
        )
    )


def _voc(acc: Mapping[str, Any], names: Mapping[str, Any]) -> str:
    voc = acc.get("voc_ap")
    if not isinstance(voc, Mapping) or not voc:
        return ""
    variants = [v for v in voc if isinstance(voc[v], Mapping)]
    head = [[f"<td>{esc(_VOC_VARIANTS.get(v, v))}</td>", cell(voc[v].get("mAP"))] for v in variants]
    out = [
        "<h3>VOC AP at IoU 0.5 (the devkit's rules)</h3>" + table(["variant", "mAP"], head, sortable=False, raw=True)
    ]
    pers = {v: voc[v].get("per_class") if isinstance(voc[v].get("per_class"), Mapping) else {} for v in variants}
    ids = list(dict.fromkeys(k for v in variants for k in pers[v]))
    if ids:
        rows = [[*_id_cells(k, names), *[cell(pers[v].get(k)) for v in variants]] for k in ids]
        out.append(
            f"<details><summary>AP per class ({esc(len(ids))}; – where the class has no non-difficult box)"
            "</summary>"
            + table(["id", "class", *[_VOC_VARIANTS.get(v, v) for v in variants]], rows, raw=True)
            + "</details>"
        )
    return "".join(out)


def protocol_accuracy(results: Results | Mapping[str, Any]) -> str:
    """The protocol blocks of ``accuracy`` (``lvis_ap``, ``calibration_by_frequency``, ``openimages_ap``,
    ``voc_ap``) with their definition, or empty when the run has none."""
    res = as_results(results)
    acc = res.accuracy
    if not isinstance(acc, AccuracyBlock):
        return ""
    names, proto = _names(res.content), acc.protocol()
    body = _lvis(proto) + _openimages(proto, names) + _voc(proto, names)
    if not body:
        return ""
    definition = acc.get("definition")
    note = f"<p class=note>{esc(definition)}</p>" if isinstance(definition, str) else ""
    return "<h2 id=protocol-accuracy>Accuracy under the dataset's protocol</h2>" + note + body
