"""report.html of ``detcal-study study=kueppers2020``: D-ECE before and after each calibrator, over splits.

First screen: findings sentences (per detector, the D-ECE over (conf, cx, cy, w, h) before calibration and
with the best calibrator, mean ± std over the splits; whether position-dependent calibration helps) and
the mean ± std table of that feature set. Then the full table (every detector, IoU and feature set; the
lowest mean of each row marked), the position gain, the figure, the provenance. The per-split values stay
in metrics.json. Every number shown is a number of metrics.json (``data-v``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from detcal.reports.html.fmt import esc, is_number, num, num_attr, table

__all__ = ["study_body", "mean_std"]

_FULL = "conf,cx,cy,w,h"


def mean_std(r: Mapping[str, Any], scale: float = 100.0) -> str:
    """``mean ± std`` (times ``scale``, as the paper prints D-ECE in percent), each with its exact value."""
    m, s = r.get("mean"), r.get("std")
    if not isinstance(m, (int, float)):
        return "–"
    out = f"<span class=n{num_attr(m)}>{scale * m:.2f}</span>"
    if isinstance(s, (int, float)):
        out += f" ± <span class=n{num_attr(s)}>{scale * s:.2f}</span>"
    return out


def _rows(m: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in m.get("rows") or [] if isinstance(r, Mapping)]


def _groups(m: Mapping[str, Any]) -> dict[tuple[str, float, str], dict[str, Mapping[str, Any]]]:
    """(detector, iou, features) -> {calibrator: row}."""
    out: dict[tuple[str, float, str], dict[str, Mapping[str, Any]]] = {}
    for r in _rows(m):
        out.setdefault((str(r.get("detector")), float(r.get("iou", 0)), str(r.get("features"))), {})[
            str(r.get("calibrator"))
        ] = r
    return out


def _calibrators(m: Mapping[str, Any]) -> list[str]:
    names = list(dict.fromkeys(str(r.get("calibrator")) for r in _rows(m)))
    return sorted(names, key=lambda n: (n != "uncalibrated", names.index(n)))


def _best(cal: Mapping[str, Mapping[str, Any]]) -> str | None:
    done = {k: v["mean"] for k, v in cal.items() if k != "uncalibrated" and is_number(v.get("mean"))}
    return min(done, key=lambda k: done[k]) if done else None


def findings(m: Mapping[str, Any]) -> list[str]:
    """Per detector at the first IoU with every box feature: before -> the best calibrator."""
    p = m.get("params") or {}
    ious = p.get("ious") or []
    out = []
    n = p.get("n_splits")
    for (det, iou, fs), cal in _groups(m).items():
        if fs != _FULL or (ious and iou != float(ious[0])):
            continue
        before, best = cal.get("uncalibrated"), _best(cal)
        if before is None or best is None:
            continue
        word = "lowers" if cal[best]["mean"] < before["mean"] else "does not lower"
        out.append(
            f"<b>{esc(det)}</b> (IoU {num(iou, 2)}): D-ECE over ({esc(fs)}) {mean_std(before)} before; the best "
            f"calibrator, {esc(best)}, {word} it to {mean_std(cal[best])} (×100, mean ± std over {num(n)} splits)."
        )
    gains = [g for g in m.get("position_gain") or [] if isinstance(g, Mapping)]
    if gains:
        helped = [g for g in gains if isinstance(g.get("diff_mean"), (int, float)) and g["diff_mean"] < 0]
        out.append(
            f"A position-dependent calibrator has the lower mean D-ECE than its confidence-only counterpart "
            f"(position_logistic against platt, position_beta against beta) in {len(helped)} of {len(gains)} "
            "comparisons (the position gain table below)."
        )
    if isinstance(n, int) and n < 20:
        out.append(
            f"<b>{num(n)} splits</b>: the paper averages over 20; the std of so few splits is rough "
            "(n_splits=20 for the full protocol, tens of minutes on 2 cores)."
        )
    out.append(
        "The paper's own table is of its detectors' runs and is not bundled with detcal; these are the bundled "
        "TF-zoo detectors on COCO val2017 under the paper's protocol (docs/real_detectors.md)."
    )
    return out


def study_table(m: Mapping[str, Any], feature_sets: Sequence[str] | None = None, title: str = "") -> str:
    """Rows (detector, IoU, features), columns the calibrators: D-ECE ×100 mean ± std over the splits; the
    lowest mean of each row in bold."""
    cals = _calibrators(m)
    body = []
    for (det, iou, fs), cal in _groups(m).items():
        if feature_sets is not None and fs not in feature_sets:
            continue
        best = _best(cal)
        tds = [f"<td>{esc(det)}</td><td class=n{num_attr(iou)}>{iou:.2f}</td><td>{esc(fs)}</td>"]
        for c in cals:
            r = cal.get(c)
            text = mean_std(r) if r is not None else "–"
            tds.append(f"<td class='n nw'>{'<b>' + text + '</b>' if c == best else text}</td>")
        body.append("".join(tds))
    if not body:
        return ""
    return title + table(["detector", "IoU", "features", *cals], body, raw=True)


def gain_table(m: Mapping[str, Any]) -> str:
    gains = [g for g in m.get("position_gain") or [] if isinstance(g, Mapping)]
    if not gains:
        return ""
    cols = list(dict.fromkeys(k for g in gains for k in g))
    return "<h2 id=gain>Position gain</h2>" + table(cols, [[g.get(c) for c in cols] for g in gains])


def study_body(m: Mapping[str, Any], figures: str, provenance: str) -> str:
    """The study page's body (module docstring)."""
    p = m.get("params") or {}
    facts = "".join(f"<li>{f}</li>" for f in findings(m))
    first = study_table(
        m,
        [_FULL],
        f"<h2 id=table>D-ECE ×100 over ({_FULL}), mean ± std over {num(p.get('n_splits'))} splits</h2>"
        "<p class=note>Bold: the lowest mean of the row. Per-split values: metrics.json <code>rows[].values</code>."
        "</p>",
    )
    every = study_table(m, None, "<h2 id=all>Every feature set</h2>")
    return (
        "<section class=top><div class=left><h2 id=findings>Findings</h2><ul class=findings>"
        + facts
        + "</ul></div><div class=right>"
        + first
        + "</div></section>"
        + every
        + gain_table(m)
        + figures
        + provenance
    )
