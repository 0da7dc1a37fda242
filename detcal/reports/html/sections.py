"""The sections of report.html, each a function of the metrics.json content (and the run directory)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detcal.core.results import (
    AccuracyBlock,
    CalibrationEvaluationBlock,
    ConfidenceBlock,
    LocalisationBlock,
    Results,
    as_results,
    is_description,
    shown,
)
from detcal.core.types import MetricResult, Skipped
from detcal.reports.html.fmt import cell, ci_text, esc, num, table
from detcal.reports.html.svg import curve_svg, heatmap_svg, reliability_svg

__all__ = [
    "headline",
    "confidence_figures",
    "per_class",
    "regression",
    "accuracy",
    "change",
    "compare",
    "table1",
    "KNOWN_KEYS",
]

KNOWN_KEYS = {
    "schema_version",
    "detcal_version",
    "command",
    "created",
    "run_dir",
    "overrides",
    "config",
    "spec",
    "headline",
    "confidence",
    "dece_maps",
    "regression",
    "accuracy",
    "localisation",
    "per_class",
    "warnings",
    "files",
    "worst_detections",
    "diagnostics",
    "variants",
    "data",
    "matching",
    "detections",
    "features",
    "timing_s",
    "evaluation",
    "table",
    "differences",
    "per_size",
    "params",
    "detectors",
    "null_reasons",
    "report",
    "rows",
    "paper",
    "columns",
    "intervals",
}


def _fig(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{caption}</figcaption></figure>" if svg else ""


def headline(m: Mapping[str, Any]) -> str:
    """Headline numbers with their intervals and where each comes from."""
    h = m.get("headline") or {}
    if not h:
        return ""
    rows = []
    for name, e in h.items():
        if not isinstance(e, Mapping):
            continue
        ci = e.get("ci")
        rows.append(
            [
                f"<td>{esc(name)}</td>",
                cell(e.get("value")),
                f"<td>{ci_text(ci) or '–'}</td>",
                cell(e.get("ci_level")),
                f"<td>{esc(e.get('source', ''))}</td>",
            ]
        )
    return "<h2 id=headline>Headline</h2>" + table(["metric", "value", "interval", "level", "source"], rows, raw=True)


def _conf_stages(res: Results) -> dict[str, dict[str, Any]]:
    """{stage label: {iou label: ECE leaf}}: evaluate has one stage, calibrate two (before, after)."""
    if res.confidence:
        return {"": {lbl: b.metric("ece") for lbl, b in res.confidence.items() if isinstance(b, ConfidenceBlock)}}
    ev = res.evaluation
    if not isinstance(ev, CalibrationEvaluationBlock):
        return {}
    stages = (("before", ev.before("confidence")), ("after", ev.after("confidence")))
    return {stage: {"": got.get("ece")} for stage, got in stages if got}


def _ci(m: MetricResult) -> list[Any] | None:
    """A leaf's interval as metrics.json writes it (None where an end is undefined)."""
    return None if m.ci is None else [shown(x) for x in m.ci]


def confidence_figures(results: Results | Mapping[str, Any], part: str = "all") -> str:
    """Reliability diagram per threshold (and stage) and the D-ECE maps. ``part``: ``first`` (the first
    threshold / stage only, for the first screen), ``rest`` (the others) or ``all``."""
    res = as_results(results)
    m = res.content
    figs = []
    for stage, eces in _conf_stages(res).items():  # the first threshold of each stage (before, after) first
        k = 0
        for label, ece in eces.items():
            if not isinstance(ece, MetricResult) or not ece.table:
                continue
            k += 1
            if (part == "first" and k > 1) or (part == "rest" and k == 1):
                continue
            name = " ".join(x for x in (stage, label) if x)
            figs.append(
                _fig(
                    reliability_svg({c: shown(v) for c, v in ece.table.items()}, f"reliability {name}"),
                    f"Reliability {esc(name)}: precision per confidence bin (blue), gap (red), detections "
                    f"per bin (grey). ECE {num(shown(ece.value))} {ci_text(_ci(ece))}",
                )
            )
    for j, (label, per) in enumerate((m.get("dece_maps") or {}).items()):
        if (part == "first" and j > 0) or (part == "rest" and j == 0):
            continue
        for name, mp in (per or {}).items():
            if isinstance(mp, Mapping) and "gap" in mp:
                figs.append(
                    _fig(
                        heatmap_svg(
                            mp.get("signed_gap", mp["gap"]),
                            mp.get("count"),
                            mp.get("axes", ["f1", "f2"]),
                            f"D-ECE map {name} {label}",
                        ),
                        f"D-ECE map ({esc(', '.join(mp.get('axes', [])))}) {esc(label)}: "
                        + (
                            "signed gap conf − prec per cell, red over-confident, blue under-confident"
                            if "signed_gap" in mp
                            else "mean |gap| per cell"
                        )
                        + f"; grid D-ECE {num(mp.get('dece'))}",
                    )
                )
    if not figs:
        return ""
    head = "<h2 id=more-figures>More reliability diagrams and D-ECE maps</h2>" if part == "rest" else ""
    return head + "<div class=figs>" + "".join(figs) + "</div>"


def per_class(m: Mapping[str, Any], class_figs: str = "") -> str:
    """The per-class table (sortable): evaluate's ``per_class.rows``."""
    pc = m.get("per_class") or {}
    rows = pc.get("rows") if isinstance(pc, Mapping) else None
    if not rows:
        return ""
    cols = [k for k in dict.fromkeys(k for r in rows for k in r) if not is_description(k)]
    body = [[r.get(c) for c in cols] for r in rows]
    return (
        f"<h2 id=per-class>Per class at {esc(pc.get('iou', ''))}</h2><p class=note>Click a column to sort.</p>"
        + table(cols, body)
        + class_figs
    )


def regression(results: Results | Mapping[str, Any]) -> str:
    """Box-uncertainty metrics per coordinate, and the RMSE-vs-RMV / coverage / retention curves when present."""
    blk = as_results(results).regression
    if blk is None:
        return ""
    if isinstance(blk, Skipped):
        return f"<h2 id=box>Box uncertainty</h2><p>Skipped: {esc(blk.reason)}</p>"
    per_metric = blk.per_coordinate()
    if not per_metric:
        return "<h2 id=box>Box uncertainty</h2><p>Skipped: not computed</p>"
    coords = list(dict.fromkeys(c for per in per_metric.values() for c in per if not is_description(c)))
    rows = [[f"<td>{esc(name)}</td>"] + [cell(shown(per.get(c))) for c in coords] for name, per in per_metric.items()]
    figs = []
    for name, xk, yk, title in (
        ("ence", "rmv", "rmse", "RMSE against RMV per sigma bin"),
        ("m_qce", "tau", "coverage", "QCE coverage (observed against nominal)"),
        ("r_auc", "retained_fraction", "error", "retention: error on the retained fraction"),
    ):
        series = {}
        for c, leaf in (per_metric.get(name) or {}).items():
            t = leaf.table if isinstance(leaf, MetricResult) else {}
            if xk in t and yk in t:
                series[c] = (shown(t[xk]), shown(t[yk]))
        if series:
            figs.append(_fig(curve_svg(series, title, xk, yk, diagonal=name != "r_auc"), esc(title)))
    s = blk.sample
    return (
        f"<h2 id=box>Box uncertainty ({esc(s.get('space', ''))} space, N = {num(s.get('n'))})</h2>"
        + table(["metric", *coords], rows, raw=True)
        + ("<div class=figs>" + "".join(figs) + "</div>")
    )


def accuracy(results: Results | Mapping[str, Any]) -> str:
    """COCO AP/AR (per-size keys included) or KITTI AP, and the localisation-aware measures."""
    res = as_results(results)
    acc, loc = res.accuracy, res.localisation
    leaves = acc.metrics() if isinstance(acc, AccuracyBlock) else {}
    out = []
    if leaves:
        out.append(
            "<h2 id=accuracy>Accuracy and per-size breakdown</h2>"
            + table(
                ["key", "value", "definition"],
                [[k, shown(r), r.variant] for k, r in leaves.items()],
                sortable=False,
            )
        )
    kitti = acc.protocol().get("kitti_ap") if isinstance(acc, AccuracyBlock) else None
    if kitti:
        out.append(
            "<h2 id=accuracy>KITTI AP</h2>"
            + table(
                ["class", "difficulty", "AP11", "AP40"],
                [[r.get("class", r.get("category")), r.get("difficulty"), r.get("ap11"), r.get("ap40")] for r in kitti],
            )
        )
    ln = loc.metrics() if isinstance(loc, LocalisationBlock) else {}
    if ln:
        out.append(
            "<h3>Localisation-aware measures</h3>"
            + table(["key", "value"], [[k, shown(r)] for k, r in ln.items()], sortable=False)
        )
    return "".join(out)


def change(results: Results | Mapping[str, Any]) -> str:
    """Calibrate: before, after and the paired difference with its interval, per metric."""
    ev = as_results(results).evaluation
    if not isinstance(ev, CalibrationEvaluationBlock):
        return ""
    out = []
    for part in ev.PARTS:
        ch = ev.change(part)
        rows = [
            [name, c.get("a"), c.get("b"), c.get("difference"), c.get("ci"), c.get("excludes_zero")]
            for name, c in ch.items()
            if isinstance(c, Mapping)
        ]
        if rows:
            out.append(
                f"<h3>{part}: before / after (paired bootstrap over images)</h3>"
                + table(["metric", "before", "after", "difference", "interval", "excludes 0"], rows)
            )
    return "<h2 id=change>Before and after calibration</h2>" + "".join(out) if out else ""


def table1(m: Mapping[str, Any]) -> str:
    """The main job's Table 1 analogue (ENCE per coordinate per variant) beside the paper's numbers."""
    if not isinstance(m.get("table"), str) or not isinstance(m.get("rows"), Mapping):
        return ""
    cols = list(m.get("columns") or [])
    out = [
        f"<h2 id=table1>{esc(m['table'])} ({esc(m.get('split', ''))}, N = {num(m.get('n_tp_val'))} TP)</h2>",
        table(["row", *cols], [[k, *[(v or {}).get(c) for c in cols]] for k, v in m["rows"].items()]),
    ]
    paper = m.get("paper")
    prow = paper.get("rows", paper) if isinstance(paper, Mapping) else None
    if isinstance(prow, Mapping) and all(isinstance(v, Mapping) for v in prow.values()):
        out.append(
            "<h3>The paper's Table 1</h3>"
            + table(["row", *cols], [[k, *[v.get(c) for c in cols]] for k, v in prow.items()])
        )
    out.append(_intervals(m.get("intervals"), cols))
    return "".join(out)


def _pct_ci(v: Any, ci: Any) -> str:
    """``90.1% [88.0, 92.3]`` (plain text; the cell escapes it)."""
    if not isinstance(v, (int, float)):
        return "–"
    band = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else ""
    return f"{100 * v:.1f}%{band}"


def _intervals(iv: Any, cols: list[str]) -> str:
    """Table 1's interval columns: coverage [interval], width, ENCE and interval CE per variant, and the claim."""
    if not isinstance(iv, Mapping) or not isinstance(iv.get("variants"), Mapping):
        return ""
    lv = float(iv.get("level", 0.9))
    rows = []
    for v, d in iv["variants"].items():
        cis = d.get("coverage_ci") or {}
        rows.append([f"{v}: coverage", *[_pct_ci(d["coverage"].get(c), cis.get(c)) for c in cols]])
        rows.append([f"{v}: width", *[d["width"].get(c) for c in cols]])
        rows.append([f"{v}: ENCE", *[d["ence"].get(c) for c in cols]])
        rows.append([f"{v}: interval CE", *[d["interval_ce"].get(c) for c in cols]])
    claim = iv.get("claim") or {}
    verdict = "holds" if claim.get("holds") else "does not hold"
    return (
        f"<h3>Intervals at {lv:.0%}: std scaling, isotonic and split conformal on val</h3>"
        + table(["variant", *cols], rows)
        + f"<p>Claim: {esc(claim.get('statement', ''))}: {verdict} on this run.</p>"
    )


def compare(m: Mapping[str, Any]) -> str:
    """Compare: the detector table, the paired differences and the per-size / per-class tables."""
    out = []
    for key, title in (
        ("table", "Detectors"),
        ("differences", "Paired differences from the baseline"),
        ("per_size", "Per object size"),
    ):
        rows = m.get(key)
        if isinstance(rows, list) and rows and isinstance(rows[0], Mapping):
            skip: tuple[str, ...] = ("ci_notes", "ci_note", "bootstrap")
            if key == "table" and isinstance(m.get("per_size"), list) and m["per_size"]:
                skip += ("AP_small", "AP_medium", "AP_large")  # in the per-size table below
            every = list(dict.fromkeys(k for r in rows for k in r))
            cols = [
                c
                for c in every
                if not is_description(c) and c not in skip and not (c.endswith("_ci") and c[:-3] in every)
            ]
            body = [
                [
                    f"<td class='n nw'>{num(r.get(c))}<br><small>{ci_text(r.get(c + '_ci')) or 'no interval: see the notes'}</small></td>"
                    if c + "_ci" in every
                    else cell(r.get(c))
                    for c in cols
                ]
                for r in rows
            ]
            out.append(f"<h2 id={key.replace('_', '-')}>{title}</h2>" + table(cols, body, raw=True))
            grouped: dict[str, list[str]] = {}  # each distinct note once per table, with where it applies
            for r in rows:
                for k, v in ((r.get("ci_notes") or {}) | ({"": r["ci_note"]} if r.get("ci_note") else {})).items():
                    where = f"{r.get('detector', '')} {r.get('metric', '')} {k}".replace("  ", " ").strip()
                    grouped.setdefault(str(v), []).append(where)
            if grouped:
                out.append(
                    f"<details><summary>Interval notes ({len(grouped)})</summary><ul>"
                    + "".join(
                        f"<li>{esc(n)} <span class=note>({esc(', '.join(w))})</span></li>" for n, w in grouped.items()
                    )
                    + "</ul></details>"
                )
    pcs = m.get("per_class")
    if isinstance(pcs, Mapping) and all(isinstance(v, list) for v in pcs.values()):
        for det, rows in pcs.items():
            if rows:
                cols = [k for k in dict.fromkeys(k for r in rows for k in r) if not is_description(k)]
                out.append(f"<h3>Per class: {esc(det)}</h3>" + table(cols, [[r.get(c) for c in cols] for r in rows]))
    return "".join(out)
