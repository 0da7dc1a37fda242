"""report.html of the main job (``detcal-main``): the page a reviewer of Levi et al. 2019 reads in a minute.

First screen: findings sentences (the conclusion per coordinate with its interval, what got worse, the
caveat that synthetic magnitudes are not the paper's KITTI numbers) and Table 1 beside the paper's with
the direction of each change marked. Then the paired changes with their intervals, reliability diagrams
(RMSE against RMV) per coordinate before and after, the detections, the fitted calibrators summarised
(their raw values stay in table1.json), the stage timings and the provenance. Every number shown is a
number of table1.json (``data-v``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from detcal.reports.html.fmt import esc, fmt, is_number, num, num_attr, table
from detcal.reports.html.svg import curve_svg

__all__ = ["main_body", "pct", "seeds_table"]

_VARIANT_ROW = {"std_scaling": "ENCE after std scaling", "kuleshov_isotonic": "ENCE after isotonic (Kuleshov)"}
_BEFORE_ROW = "ENCE before calibration"


def pct(v: Any, signed: bool = False) -> str:
    """A share as ``12.3%`` (``+1.2 pts`` when ``signed``), carrying its exact value in ``data-v``."""
    if not is_number(v):
        return "<span>–</span>"
    text = f"{100 * v:+.1f} pts" if signed else f"{100 * v:.1f}%"
    return f"<span class=n{num_attr(v)}>{text.replace('-', '−')}</span>"


def _pct_ci(ci: Any) -> str:
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(is_number(x) for x in ci):
        return ""
    return f"[{pct(ci[0], True)}, {pct(ci[1], True)}]"


def _coords(m: Mapping[str, Any]) -> list[str]:
    return [str(c) for c in m.get("columns") or []]


def _change_sentences(m: Mapping[str, Any]) -> list[str]:
    """Per variant: the ENCE change per coordinate with its interval; then what got worse."""
    out, worse = [], []
    for variant, per in (m.get("ence_change") or {}).items():
        ence = (per or {}).get("ence") or {}
        parts = []
        for c in _coords(m) or list(ence):
            e = ence.get(c)
            if not isinstance(e, Mapping):
                continue
            d = e.get("difference")
            item = f"{esc(c)} {pct(e.get('a'))} → {pct(e.get('b'))} ({pct(d, True)} {_pct_ci(e.get('ci'))})"
            parts.append(item)
            if isinstance(d, (int, float)) and d > 0:
                zero = "its interval excludes 0" if e.get("excludes_zero") else "its interval includes 0"
                worse.append(f"<b>{esc(variant)}</b> made {item} worse; {zero}")
        if parts:
            boot = next((e.get("bootstrap") for e in ence.values() if isinstance(e, Mapping)), None) or {}
            how = f" (paired bootstrap over {fmt(boot.get('n_images'))} val images)" if boot.get("n_images") else ""
            out.append(f"<b>{esc(variant)}</b>: ENCE " + "; ".join(parts) + how + ".")
    if worse:
        out += [w + "." for w in worse]
    elif out:
        out.append("No coordinate's ENCE got worse under either recalibration.")
    return out


def _paper_directions(m: Mapping[str, Any]) -> str:
    """Where this run's direction of change differs from the paper's (booleans, no new numbers)."""
    rows, paper = m.get("rows") or {}, m.get("paper") or {}
    diff = []
    for variant, row in _VARIANT_ROW.items():
        mine, theirs = rows.get(row) or {}, paper.get(row) or {}
        b_mine, b_theirs = rows.get(_BEFORE_ROW) or {}, paper.get(_BEFORE_ROW) or {}
        for c in _coords(m):
            vals = (mine.get(c), b_mine.get(c), theirs.get(c), b_theirs.get(c))
            f = [float(v) for v in vals if isinstance(v, (int, float))]
            if len(f) == 4 and (f[0] < f[1]) != (f[2] < f[3]):
                diff.append(f"{variant} on {c}")
    if not diff:
        return "The direction of every change agrees with the paper's Table 1." if paper and rows else ""
    return "The direction differs from the paper's Table 1 for " + esc(", ".join(diff)) + "."


def _caveat(m: Mapping[str, Any]) -> str:
    data = m.get("data") or {}
    synthetic = any(isinstance(v, Mapping) and v.get("source") == "synthetic" for v in data.values())
    if not synthetic:
        return ""
    before = (m.get("rows") or {}).get(_BEFORE_ROW) or {}
    worst = max(((c, v) for c, v in before.items() if is_number(v)), key=lambda cv: cv[1], default=None)
    example = f" (ENCE {esc(worst[0])} {pct(worst[1])} before)" if worst else ""
    return (
        f"<b>Synthetic scenes</b>: the magnitudes{example} are not comparable with the paper's KITTI numbers "
        "printed beside them; compare the directions of change."
    )


def findings(m: Mapping[str, Any]) -> list[str]:
    """The main job's findings sentences."""
    out = []
    c = m.get("conclusion") or {}
    if c.get("claim"):
        out.append(f"<b>{esc(c['claim'])}: {'holds' if c.get('holds') else 'does not hold'}</b> on this run.")
    out += _change_sentences(m)
    if c.get("cv_unchanged") and all((c.get("cv_unchanged") or {}).values()):
        out.append(
            f"C_v is unchanged by both recalibrations (to a relative {num(c.get('cv_rtol'))}): they multiply σ "
            "by one constant per coordinate, so the spread of σ relative to its mean stays."
        )
    out += [s for s in (_paper_directions(m), _caveat(m)) if s]
    det = (m.get("detection") or {}).get("val") or {}
    conf = det.get("confidence") or {}
    if det:
        out.append(
            f"val at {esc(det.get('iou', ''))}: {num(det.get('detections'))} detections, precision "
            f"{num(det.get('precision'), 3)}, ECE {num(conf.get('ece'))}, D-ECE {num(conf.get('dece'))} "
            "(confidence, before recalibration)."
        )
    t = m.get("timing_s") or {}
    if is_number(t.get("total")):
        slow = max(((k, v) for k, v in t.items() if k != "total" and is_number(v)), key=lambda kv: kv[1], default=None)
        longest = f", the longest stage {esc(slow[0])} {num(slow[1], 1)} s" if slow else ""
        out.append(f"The run took {num(t['total'], 1)} s{longest}.")
    return out


def _mark(v: Any, before: Any) -> str:
    if not (is_number(v) and is_number(before)) or v == before:
        return ""
    return (
        " <span class=better title='lower than before'>▼</span>"
        if v < before
        else (" <span class=worse title='higher than before'>▲</span>")
    )


def table1_beside(m: Mapping[str, Any]) -> str:
    """Table 1 of this run beside the paper's, each change from the row before calibration marked."""
    rows, paper = m.get("rows") or {}, m.get("paper") or {}
    paper = paper.get("rows", paper) if isinstance(paper, Mapping) else {}
    if not isinstance(rows, Mapping) or not rows:
        return ""
    cols = _coords(m)
    keys = list(dict.fromkeys([*rows, *paper]))
    head = "".join(f"<th>{esc(c)}: run</th><th>{esc(c)}: paper</th>" for c in cols)
    body = []
    for k in keys:
        mine, theirs = rows.get(k) or {}, paper.get(k) or {}
        tds = [f"<td>{esc(k)}</td>"]
        for c in cols:
            for src, v in ((rows, mine.get(c)), (paper, theirs.get(c))):
                before = (src.get(_BEFORE_ROW) or {}).get(c) if k.startswith("ENCE after") else None
                shown = pct(v) if k.startswith("ENCE") else num(v, 3)
                tds.append(f"<td class='n nw'>{shown}{_mark(v, before)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    title = esc(m.get("table", "Table 1"))
    where = f" ({esc(m.get('split', ''))}, N = {num(m.get('n_tp_val'))} TP)" if m.get("split") else ""
    return (
        f"<h2 id=table1>{title}{where}</h2>"
        "<p class=note>Beside each number of this run, The paper's Table 1 (Levi et al. 2019, KITTI val, "
        "R-FCN). ▼ lower than before calibration (better), ▲ higher (worse).</p>"
        f"<table><thead><tr><th>row</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def change_table(m: Mapping[str, Any]) -> str:
    """ENCE before / after / paired difference with its interval, per variant and coordinate."""
    rows, notes = [], []
    for variant, per in (m.get("ence_change") or {}).items():
        for c, e in ((per or {}).get("ence") or {}).items():
            if not isinstance(e, Mapping):
                continue
            rows.append(
                [
                    f"<td>{esc(variant)}</td><td>{esc(c)}</td>",
                    f"<td class=n>{pct(e.get('a'))}</td><td class=n>{pct(e.get('b'))}</td>",
                    f"<td class=n>{pct(e.get('difference'), True)}</td><td>{_pct_ci(e.get('ci')) or '–'}</td>",
                    f"<td>{'yes' if e.get('excludes_zero') else 'no'}</td>",
                ]
            )
            if e.get("ci_note"):
                notes.append(f"{variant} {c}: {e['ci_note']}")
    if not rows:
        return ""
    out = "<h2 id=change>ENCE before and after, paired over val images</h2>" + table(
        ["variant", "coordinate", "before", "after", "difference", "interval", "excludes 0"], rows, raw=True
    )
    if notes:
        out += (
            f"<details><summary>Interval notes ({len(notes)})</summary><ul>"
            + "".join(f"<li>{esc(n)}</li>" for n in notes)
            + "</ul></details>"
        )
    return out


def reliability_figures(m: Mapping[str, Any]) -> str:
    """RMSE against RMV per σ bin, one diagram per coordinate with every variant."""
    rel = m.get("reliability") or {}
    figs = []
    for c in _coords(m):
        series = {
            v: (per[c]["rmv"], per[c]["rmse"])
            for v, per in rel.items()
            if isinstance(per, Mapping) and isinstance(per.get(c), Mapping) and "rmv" in per[c]
        }
        svg = curve_svg(series, f"RMSE against RMV, {c}", "RMV", "RMSE") if series else ""
        if svg:
            figs.append(
                f"<figure>{svg}<figcaption>{esc(c)}: RMSE against RMV per σ bin ({esc(m.get('binning', ''))}, "
                f"{num(m.get('bins'))} bins); on the diagonal the σ are calibrated.</figcaption></figure>"
            )
    return (
        "<h2 id=reliability>Reliability per coordinate</h2><div class=figs>" + "".join(figs) + "</div>" if figs else ""
    )


def detection_table(m: Mapping[str, Any]) -> str:
    det = m.get("detection") or {}
    rows = []
    for split, d in det.items():
        if isinstance(d, Mapping):
            conf = d.get("confidence") or {}
            rows.append(
                [split, d.get("iou"), d.get("detections"), d.get("true_positives"), d.get("false_positives")]
                + [d.get("precision"), conf.get("ece"), conf.get("dece")]
            )
    if not rows:
        return ""
    return "<h2 id=detection>Detections and confidence (before recalibration)</h2>" + table(
        ["split", "IoU", "detections", "TP", "FP", "precision", "ECE", "D-ECE"], rows, sortable=False
    )


def _fitted_summary(name: str, f: Mapping[str, Any], coords: list[str]) -> str:
    parts = []
    for key, v in f.items():
        if key == "fit_report_" and isinstance(v, Mapping):
            parts.append("fit " + ("ok" if v.get("ok") else "not ok") + (", converged" if v.get("converged") else ""))
        elif isinstance(v, list) and v and all(is_number(x) for x in v) and len(v) <= 8:
            named = coords if len(coords) == len(v) else [str(i) for i in range(len(v))]
            parts.append(f"{esc(key.rstrip('_'))} " + ", ".join(f"{esc(c)} {num(x, 3)}" for c, x in zip(named, v)))
        elif isinstance(v, list) and v and all(isinstance(x, list) for x in v):
            sizes = ", ".join(f"{esc(c)} {len(x)}" for c, x in zip(coords or map(str, range(len(v))), v))
            parts.append(f"{esc(key.rstrip('_'))}: {sizes} values (in table1.json)")
        elif is_number(v):
            parts.append(f"{esc(key.rstrip('_'))} {num(v)}")
    return "; ".join(parts)


def calibrators(m: Mapping[str, Any]) -> str:
    """The fitted calibrators, summarised (their raw arrays only in table1.json ``calibration``)."""
    methods = ((m.get("calibration") or {}).get("methods")) or {}
    rows = [
        [
            f"<td>{esc(n)}</td><td>{esc(d.get('method', ''))}</td>",
            f"<td>{_fitted_summary(n, d.get('fitted') or {}, _coords(m))}</td>",
        ]
        for n, d in methods.items()
        if isinstance(d, Mapping)
    ]
    if not rows:
        return ""
    fit_n = (m.get("calibration") or {}).get("n_recal_tp")
    return f"<h2 id=calibrators>Fitted calibrators (on {num(fit_n)} recal true positives)</h2>" + table(
        ["variant", "class", "fitted"], rows, raw=True, sortable=False
    )


def stages(m: Mapping[str, Any]) -> str:
    st = m.get("stages") or {}
    rows = [[k, v.get("seconds"), v.get("status")] for k, v in st.items() if isinstance(v, Mapping)]
    if not rows:
        return ""
    total = (m.get("timing_s") or {}).get("total")
    return f"<h2 id=stages>Stages ({num(total, 1)} s in all)</h2>" + table(
        ["stage", "seconds", "status"], rows, sortable=False
    )


def _mean_sd(vals: list[float], percent: bool) -> str:
    """``mean ± sd`` (sample sd) of ``vals``, each with its exact value in ``data-v``."""

    mean, sd = statistics.fmean(vals), statistics.stdev(vals)
    scale, digits = (100.0, 1) if percent else (1.0, 3)
    unit = "%" if percent else ""
    return (
        f"<span class=n{num_attr(mean)}>{scale * mean:.{digits}f}{unit}</span> ± "
        f"<span class=n{num_attr(sd)}>{scale * sd:.{digits}f}{unit}</span>"
    )


def seeds_table(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """Table 1 of each training seed (``{seed label: table1.json content}``) and, per row and coordinate,
    the mean ± sample standard deviation over the seeds; empty for fewer than two seeds."""
    tables = {k: t for k, t in tables.items() if isinstance(t, Mapping) and isinstance(t.get("rows"), Mapping)}
    if len(tables) < 2:
        return ""
    first = next(iter(tables.values()))
    cols = _coords(first)
    keys = list(dict.fromkeys(k for t in tables.values() for k in t["rows"]))
    body = []
    for k in keys:
        percent = k.startswith("ENCE")
        vals: dict[str, list[float]] = {c: [] for c in cols}
        for seed, t in tables.items():
            row = t["rows"].get(k) or {}
            for c in cols:
                if is_number(row.get(c)):
                    vals[c].append(float(row[c]))
            shown = [pct(row.get(c)) if percent else num(row.get(c), 3) for c in cols]
            body.append([f"<td>{esc(k)}</td><td>{esc(seed)}</td>", *(f"<td class=n>{v}</td>" for v in shown)])
        summary = [_mean_sd(v, percent) if len(v) > 1 else "–" for v in vals.values()]
        body.append(
            [f"<td>{esc(k)}</td><td><b>mean ± std</b></td>", *(f"<td class=n><b>{v}</b></td>" for v in summary)]
        )
    holds = [bool((t.get("conclusion") or {}).get("holds")) for t in tables.values()]
    claim = (first.get("conclusion") or {}).get("claim")
    note = (
        f"<p class=note>Mean ± sample standard deviation over {num(len(tables))} seeds."
        + (f" '{esc(claim)}' holds on {num(sum(holds))} of {num(len(holds))} seeds." if claim else "")
        + "</p>"
    )
    return (
        "<h2 id=seeds>Table 1 per training seed</h2>"
        + note
        + table(["row", "seed", *cols], body, raw=True, sortable=False)
    )


def main_body(m: Mapping[str, Any], files_html: str, provenance: str) -> str:
    """The page body: findings and Table 1 first, then the sections of the module docstring."""
    facts = "".join(f"<li>{f}</li>" for f in findings(m))
    return (
        "<section class=top><div class=left><h2 id=findings>Findings</h2><ul class=findings>"
        + facts
        + "</ul></div><div class=right>"
        + table1_beside(m)
        + "</div></section>"
        + change_table(m)
        + reliability_figures(m)
        + detection_table(m)
        + calibrators(m)
        + stages(m)
        + files_html
        + provenance
    )
