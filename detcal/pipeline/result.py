"""Typed results of the API: what :func:`detcal.evaluate` and :func:`detcal.calibrate` return.

Each result holds the plain record (every number with its variant and
parameters) and offers ``to_dict()`` (the metrics.json content, strict JSON),
``to_markdown()`` (summary.md) and ``write(out_dir, plots=...)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detcal.reports import results_json
from detcal.reports.tables import comparison_table, format_value, metrics_table
from detcal.utils.io import write_text

__all__ = ["Result", "EvaluationResult"]


@dataclass
class Result:
    """Base of the API results: ``record`` (plain dict, may hold numpy and NaN) plus writers."""

    record: dict[str, Any]
    command: str = field(default="detcal", init=False)
    _plain_cache: Any = field(default=None, init=False, repr=False, compare=False)

    def plain(self) -> dict[str, Any]:
        """``record`` as strict JSON types (without ``files``), computed once while its keys are unchanged."""
        key = tuple(k for k in self.record if k != "files")
        if self._plain_cache is None or self._plain_cache[0] != key:
            self._plain_cache = (key, results_json.strict({k: v for k, v in self.record.items() if k != "files"}))
        return self._plain_cache[1]

    @property
    def headline(self) -> dict[str, Any]:
        """Flat headline numbers ``{name: {"value", "ci", "source"}}``."""
        return self.to_dict().get("headline", {})

    def to_dict(self, **header: Any) -> dict[str, Any]:
        """The metrics.json content: strict JSON (``null`` + reason for what cannot be computed)."""
        files = self.record.get("files")
        return {
            **results_json.strict(results_json.header(self.command, **header)),
            **self.plain(),
            **({"files": [str(f) for f in files]} if files else {}),
        }

    def to_markdown(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def _write_extra(self, out_dir: Path, plots: bool, csv: bool) -> list[str]:
        return []

    def _start_figures(self, out_dir: Path, plots: bool) -> tuple[list[str], Any]:
        """The figure file names and a started job drawing them (``None``: no figures of their own)."""
        return [], None

    def _markdown(self, content: Mapping[str, Any]) -> str:
        """summary.md from the written metrics.json content (with its ``files``)."""
        return self.to_markdown()

    def write(
        self,
        out_dir: str | Path,
        *,
        plots: bool = True,
        csv: bool = True,
        echo: bool = False,
        header: Mapping[str, Any] | None = None,
        report: bool = False,
        image_dir: str | Path | None = None,
    ) -> dict[str, Any]:
        """Write metrics.json, summary.md and the command's other files under ``out_dir``.

        ``header``: provenance fields added to metrics.json (the apps pass the
        run directory, command-line overrides and the resolved config).
        ``report``: also write report.html (:mod:`detcal.reports.html`; thumbnails
        of the worst-calibrated detections from ``image_dir`` when given).
        ``echo``: print the short end-of-run text (headline, left out, warnings,
        run directory, files, report path; the full tables are in summary.md).
        The figures are drawn in a forked child while the other files are
        written and the text printed (:mod:`detcal.utils.background`;
        ``DETCAL_INLINE_WRITERS=1``: inline); report.html, which embeds them,
        comes last. Every file is written when this returns, and an error of
        the drawing is raised here. Returns the written metrics.json content."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        figures, job = self._start_figures(out, plots)  # drawn meanwhile (a forked child where possible)
        try:
            extra = self._write_extra(out, plots, csv) + figures
            self.record["files"] = ["metrics.json", "summary.md"] + extra + (["report.html"] if report else [])
            content = self.to_dict(**dict(header or {}))
            content = results_json.write_metrics(out / "metrics.json", content, plain=True)
            write_text(out / "summary.md", self._markdown(content))
            if echo:  # the numbers first, while the figures are finished
                from detcal.reports.console import console_summary

                print(console_summary(content, out), flush=True)
        except BaseException:
            if job is not None:  # the first error is the one reported; the child is still waited for
                with contextlib.suppress(BaseException):
                    job.join()
            raise
        if job is not None:
            job.join()
        if report:  # embeds the figures: after them
            from detcal.reports.html import write_report

            write_report(out, content, image_dir=image_dir)
        return content


@dataclass
class EvaluationResult(Result):
    """The result of :func:`detcal.evaluate`: ``record`` plus the matched data it came from."""

    data: Any = None
    match: Any = None
    features: np.ndarray | None = None
    clipped: np.ndarray | None = None
    spec: Any = None
    detections_format: str = "csv"
    per_image: Any = None
    diagnostics_columns: dict[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        self.command = "detcal-evaluate"

    def detections_csv(self) -> str:
        """One row per detection: match outcome per threshold, box, relative features."""
        from detcal.reports.detections_csv import detections_csv

        assert self.features is not None and self.clipped is not None
        return detections_csv(self.data, self.match, self.features, self.clipped)

    def _write_extra(self, out: Path, plots: bool, csv: bool) -> list[str]:
        files: list[str] = []
        if csv:
            from detcal.reports.detections_csv import evaluation_columns, write_columns_csv, write_detections_parquet

            assert self.features is not None and self.clipped is not None
            cols = evaluation_columns(self.data, self.match, self.features, self.clipped)
            cols.update(self.diagnostics_columns or {})  # tide_error (docs/metrics.md#tide)
            if self.detections_format == "parquet":
                write_detections_parquet(out / "detections.parquet", cols)
                files.append("detections.parquet")
            else:
                write_columns_csv(out / "detections.csv", cols)
                files.append("detections.csv")
        if self.per_image is not None and self.spec is not None and self.spec.oce.per_image_csv:
            write_text(out / "oce_per_image.csv", per_image_csv(self.per_image))
            files.append("oce_per_image.csv")
        return files

    def _start_figures(self, out: Path, plots: bool) -> tuple[list[str], Any]:
        """The PNG figures (:mod:`detcal.reports.evaluation_plots` and the per-class diagram), drawn in a
        forked child while the caller writes the other files (:mod:`detcal.utils.background`)."""
        if not plots:
            return [], None
        from detcal.reports.evaluation_plots import evaluation_plots, plan_evaluation_plots
        from detcal.utils.background import start

        m = self.plain()
        names = [name for name, _ in plan_evaluation_plots(out, m, self.spec)]
        pc = self.record.get("per_class") or {}
        names += ["reliability_per_class.png"] if pc.get("rows") else []

        def draw() -> None:
            evaluation_plots(out, m, self.spec)
            self._per_class_plot(out)

        return names, start(draw)

    def _per_class_plot(self, out: Path) -> list[str]:
        pc = self.record.get("per_class") or {}
        if not pc.get("rows"):
            return []
        from detcal.reports.per_class import plot_per_class_reliability

        i = [f"iou={t:.2f}" for t in self.match.iou_thresholds].index(pc["iou"]) if pc["iou"] != "iou=kitti" else 0
        keep = np.flatnonzero(self.match.considered & ~self.match.ignored[i])
        d = self.data.detections
        plot_per_class_reliability(
            {"detections": (d.score[keep], self.match.matched[i, keep], d.category[keep])},
            self.data.dataset.categories,
            top_n=int(pc["top_n"]),
            path=out / "reliability_per_class.png",
        )
        return ["reliability_per_class.png"]

    def to_markdown(self) -> str:
        return evaluation_summary({**results_json.strict(results_json.header(self.command)), **self.plain()})

    def _markdown(self, content: Mapping[str, Any]) -> str:
        return evaluation_summary(content)


def per_image_csv(cols: Mapping[str, np.ndarray]) -> str:
    """oce_per_image.csv: one row per image (image_id, OCE of the kept detections, Conf+, Conf-,
    contrastive confidence with the fitted lambda, validation half or not); empty for NaN."""
    names = ["image_id", "oce", "conf_pos", "conf_neg", "contrastive_conf", "validation"]
    lines = [",".join(names)]
    vals = [np.asarray(cols[n]) for n in names]
    for row in zip(*vals):
        lines.append(
            ",".join(
                str(int(v)) if i in (0, 5) else ("" if not np.isfinite(v) else repr(float(v)))
                for i, v in enumerate(row)
            )
        )
    return "\n".join(lines) + "\n"


def _oce_md(o: Mapping[str, Any], u: Mapping[str, Any]) -> list[str]:
    """OCE, what it does not see, the image-level reliability and the uq_detr variants."""
    out: list[str] = []
    if "oce" in o:
        p = o["oce"]["params"]
        out += [
            f"### Object-level calibration (OCE, Park et al. 2026; docs/newest_measures.md; Brier: {p['brier']})",
            "",
            comparison_table({"detector": o["by_aggregation"]}, list(o["by_aggregation"]), label="aggregation"),
            f"IoU thresholds {p['iou_thresholds']}; objects: {p['objects']}. Not seen by OCE: "
            + ", ".join(f"{k}: {v}" for k, v in o["not_seen"]["n_overlapping_no_object"].items())
            + f" of {o['not_seen']['n_detections']} detections overlap no object.",
            "",
        ]
        r = o.get("image_reliability") or {}
        if r.get("lambda") is not None:
            out += [
                f"Image-level reliability (contrastive confidence, {r['method']} {r['param']}): lambda "
                f"{r['lambda']} fitted on {r['n_validation']} images (Pearson {format_value(r['pearson_validation'])}"
                f"), Pearson with minus the per-image OCE on the other {r['n_test']}: "
                f"{format_value(r['pearson_test'])}" + (f" -- WARNING: {r['warning']}" if r.get("warning") else ""),
                "",
            ]
    if "lrp" in u:
        out += [
            "### D-ECE, LaECE, LRP with uq-detr's conventions (uq_detr variants)",
            "",
            comparison_table({"detector": u}, ["dece", "laece", "lrp"], label=""),
            "",
        ]
    return out


def evaluation_summary(m: Mapping[str, Any]) -> str:
    """summary.md of an evaluation (from the strict metrics.json content)."""
    parts = _header_md(m)
    head = {k: {"value [CI]": v, "source": v.get("source", "")} for k, v in m["headline"].items()}
    if head:
        parts += ["", "## Headline", "", comparison_table(head, ["value [CI]", "source"], label="metric")]
    parts += _diagnosis_md(m.get("diagnostics") or {})
    parts += _confidence_md(m["confidence"])
    reg = {k: v for k, v in m["regression"].items() if not k.startswith("_")}
    s = m["regression"]["_sample"]
    if reg:
        coords = list(dict.fromkeys(c for per in reg.values() for c in per))
        parts += [
            f"### Box-uncertainty calibration ({s['space']} space, N = {s['n']} TP at IoU {s['iou_threshold']})",
            "",
            comparison_table(reg, coords, label="metric"),
            "",
        ]
    else:
        parts += ["### Box-uncertainty calibration", "", f"skipped: {s.get('skipped')}", ""]
    parts += _accuracy_md(m.get("accuracy") or {}, m.get("localisation") or {})
    parts += _oce_md(m.get("oce") or {}, m.get("uq_detr") or {})
    pc = m.get("per_class") or {}
    if pc.get("rows"):
        from detcal.reports.per_class import table_markdown

        parts += [
            f"### Per class at {pc['iou']} (the {min(pc['top_n'], len(pc.get('rows') or []))} most frequent classes)",
            "",
            table_markdown(pc["rows"]),
            "",
        ]
    for label, mp in (m.get("dece_maps") or {}).items():
        for name, spec in mp.items():
            g = np.asarray([[np.nan if v is None else v for v in row] for row in spec["gap"]], dtype=float)
            parts.append(
                f"- D-ECE map {name} at {label}: grid {list(g.shape)}, "
                f"max gap {format_value(np.nanmax(g) if np.isfinite(g).any() else None)}"
            )
    parts += [
        "",
        "Definitions: docs/metrics.md; matching rules: docs/matching.md.",
        "Files: " + ", ".join(m.get("files") or []),
        "",
    ]
    return "\n".join(parts)


def _diagnosis_md(diag: Mapping[str, Any]) -> list[str]:
    """The two leading diagnostics findings (metrics.json ``diagnostics.findings`` has them and the rest)."""
    from detcal.reports.diagnosis_facts import miscalibration_sentence, tide_sentence

    lines = [f"- {s}" for s in (miscalibration_sentence(diag), tide_sentence(diag)) if s]
    return ["", "## Findings", "", *lines, ""] if lines else []


def _header_md(m: Mapping[str, Any]) -> list[str]:
    """The title and the data / matching / detection-accounting / variants lines of summary.md."""
    parts = [f"# detcal-evaluate summary (detcal {m['detcal_version']})", ""]
    d = m["data"]
    c = d["counts"]
    parts.append(
        f"- data: {d.get('source')} ({c['images']} images, {c['gt']} GT, {c['detections']} detections; "
        f"box uncertainty: {c['uncertainty'] or 'none'})"
    )
    mt = m["matching"]
    asked = [t for t in (mt.get("iou_thresholds") or []) if t not in (mt.get("regression_only_thresholds") or [])]
    parts.append(
        f"- matching: mode={mt['mode']}, IoU thresholds={asked if asked else mt.get('iou_thresholds')}"
        + (
            f" (+ {mt['regression_only_thresholds']} for the box-uncertainty sample only)"
            if mt.get("regression_only_thresholds")
            else ""
        )
        + f", class_agnostic={mt['class_agnostic']}, score_threshold={mt['score_threshold']}, "
        f"max_dets={mt['max_dets']}"
    )
    acc = m["detections"]
    left = acc.get("left_out_at_loading") or {}
    parts.append(
        f"- detections: {acc['input']} in the input; left out: "
        f"{left.get('unknown_category', 0)} with a category not in the ground truth, "
        f"{acc['below_score_threshold']} below the score threshold, {acc['beyond_max_dets']} beyond max_dets; "
        f"{acc['considered']} considered"
    )
    for label, pt in acc["per_threshold"].items():
        parts.append(
            f"  - at {label}: {pt['evaluated']} evaluated ({pt['true_positives']} TP, "
            f"{pt['false_positives']} FP), {pt['ignored_region']} in ignored regions (crowd, DontCare, "
            f"neighbour class) left out"
        )
    parts.append(f"- relative features clipped to [0, 1]: {m['features']['n_clipped']} detections")
    for k, v in m["variants"].items():
        parts.append(f"- {k}: {v}")
    for w in m.get("warnings") or []:
        parts.append(f"- WARNING: {w}")
    return parts


def _confidence_md(confidence: Mapping[str, Any]) -> list[str]:
    """The confidence-calibration tables of summary.md, one per IoU threshold, with the D-ECE grid's occupancy."""
    parts: list[str] = []
    for label, block in confidence.items():
        s = block["_sample"]
        if "skipped" in s:
            parts += [f"### Confidence calibration at {label}", "", f"skipped: {s['skipped']}", ""]
            continue
        shown = {k: v for k, v in block.items() if not k.startswith("_")}
        parts += [
            metrics_table(shown, title=f"Confidence calibration at {label} (N = {s['n']}, matched {s['n_matched']})")
        ]
        ex = (block.get("dece") or {}).get("extra") or {}
        if ex:
            parts.append(
                f"D-ECE grid: {ex.get('cells')} cells, {ex.get('occupied_cells')} occupied, "
                f"{ex.get('kept_cells')} kept (N_c >= threshold); sparse-sample fraction "
                f"{format_value(ex.get('sparse_fraction'))}, dropped fraction "
                f"{format_value(ex.get('dropped_fraction'))}"
                + (" -- WARNING: more cells than samples/10" if ex.get("sparse_warning") else "")
            )
        parts.append("")
    return parts


def _protocol_accuracy_md(acc: Mapping[str, Any]) -> list[str]:
    """VOC AP, LVIS AP with the per-frequency calibration, or Open Images AP (docs/formats.md)."""
    out: list[str] = []
    if acc.get("voc_ap"):
        rows = {v: {"mAP": e.get("mAP")} for v, e in acc["voc_ap"].items()}
        out += [
            "### Accuracy (VOC AP at IoU 0.5, the devkit's rules)",
            "",
            comparison_table(rows, ["mAP"], label="variant"),
            "",
        ]
    if acc.get("lvis_ap"):
        names = list(acc["lvis_ap"])
        out += [
            "### Accuracy (LVIS, equal to LVISEval)",
            "",
            comparison_table({"detector": acc["lvis_ap"]}, names, label=""),
            "",
        ]
    if acc.get("calibration_by_frequency"):
        cols = ["n", "n_positive", "ece", "dece", "laece"]
        out += [
            "### Calibration per LVIS frequency group (IoU 0.5, the LVIS sample)",
            "",
            comparison_table(dict(acc["calibration_by_frequency"]), cols, label="group"),
            "",
        ]
    if acc.get("openimages_ap"):
        e = acc["openimages_ap"]
        out += ["### Accuracy (Open Images AP at IoU 0.5, the challenge's rules)", "", f"mAP: {e.get('mAP')}", ""]
    return out


def _accuracy_md(acc: Mapping[str, Any], loc: Mapping[str, Any]) -> list[str]:
    """Accuracy beside calibration: COCO AP/AR or KITTI AP, and LRP / LaECE."""
    out: list[str] = []
    if "AP" in acc:
        names = [k for k in acc if not k.startswith("_") and isinstance(acc[k], Mapping) and "value" in acc[k]]
        row = {"value": {k: acc[k] for k in names}}
        out += [
            "### Accuracy (COCO AP/AR from detcal's matching; equal to pycocotools' summarize)",
            "",
            comparison_table({"detector": row["value"]}, names, label=""),
            f"GT areas: {acc.get('_areas')}",
            "",
        ]
    elif acc.get("kitti_ap"):
        rows = {
            f"{r.get('class', r['category'])} {r['difficulty']}": {"AP11": r.get("ap11"), "AP40": r.get("ap40")}
            for r in acc["kitti_ap"]
        }
        out += [
            "### Accuracy (KITTI AP, the devkit's eval_class)",
            "",
            comparison_table(rows, ["AP11", "AP40"], label="class, difficulty"),
            "",
        ]
    out += _protocol_accuracy_md(acc)
    if "lrp" in loc:
        names = [k for k in ("lrp", "olrp", "laece", "laace") if k in loc]
        out += [
            "### Localisation-aware measures (Kuzucu et al. 2024; docs/newest_measures.md)",
            "",
            comparison_table({"detector": {k: loc[k] for k in names}}, names, label=""),
            "LRP components (loc, FP, FN): "
            + ", ".join(format_value((loc["lrp"].get("extra") or {}).get(k)) for k in ("lrp_loc", "lrp_fp", "lrp_fn")),
            "",
        ]
    return out
