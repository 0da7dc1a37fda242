"""``detcal-main`` as a Hydra-free pipeline: the R-FCN regression-calibration study of Levi et al. 2019
(section 4.2, Appendix A.2, Table 1) in one run directory.

    from detcal.training.job import run_main_job
    from detcal.training.spec import MainJobSpec
    from detcal.pipeline.registry import make_calibrator
    spec = MainJobSpec()
    table = run_main_job(spec, Path("out"), calibrators={m: make_calibrator(m) for m in spec.calibration.methods})

Stages, each logged with its wall time and recorded in ``stages.json``::

    data       train / recal / val splits (detcal.training.splits); recal and val GT written to splits/<name>/
    stage1     detector: RPN + R-FCN heads, uncertainty branch frozen        (train/stage1/stage1_*.pt)
    stage2     uncertainty branch only, Gaussian NLL of the deltas           (train/stage2/stage2_*.pt)
    predict    recal and val delta records, as COCO results with the delta fields
               (predictions/<split>/detections.json) and KITTI results (predictions/<split>/kitti/*.txt)
    calibrate  stage 3: each regression calibrator fitted on the recal true positives at
               calibration.iou_threshold, applied to val (calibration/val_<name>.json)
    evaluate   val before and after each calibrator, and recal before, with detcal.pipeline.evaluation.evaluate
               (eval/<split>_<variant>/metrics.json, summary.md, CSV, PNGs)
    report     table1.json / table1.md and the reliability diagrams reliability_<variant>.png

Reuse: training stages and predictions live in directories keyed on a
fingerprint (sha256 of the canonical JSON) of their settings and inputs: the
model spec, the stage spec, the training split's identity (content digest,
seeds, image files) and, downstream, the fingerprint of the stage they came
from. A rerun into the same directory reuses (or resumes) a stage only when
its fingerprint is unchanged; otherwise the directory is removed whole and
recomputed (``stages.json`` says which). Calibration, evaluation and the
report are cheap and always recomputed.

Nothing here imports torch or Hydra at module level.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from detcal._version import __version__
from detcal.calibration.base import RegressionCalibrator
from detcal.core.errors import DetcalInputError
from detcal.core.types import COORDS, Detections
from detcal.data.coco import load_coco_instances, load_coco_results, write_coco_results
from detcal.data.kitti import kitti_rules, load_kitti_labels
from detcal.metrics.spaces import regression_sample
from detcal.pipeline.evaluation import evaluate
from detcal.pipeline.matcher import run_match
from detcal.pipeline.registry import calibrator_names, make_calibrator
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import ConfigError, EvaluationSpec
from detcal.reports import plots
from detcal.reports.console import run_footer
from detcal.reports.html import write_report
from detcal.training import report, stages as st
from detcal.training.fingerprint import fingerprint
from detcal.training.intervals import interval_comparison
from detcal.training.spec import MainJobSpec
from detcal.training.splits import Split, gt_paths, prepare_splits
from detcal.utils.io import to_jsonable, write_json, write_text

__all__ = [
    "run_main_job",
    "make_calibrators",
    "load_delta_records",
    "regression_sample_of",
    "calibrated",
    "stage_fingerprints",
]

log = logging.getLogger("detcal.main")

# Settings that do not change what a stage computes (logging, checkpoint cadence) stay out of its fingerprint.
_NOT_IN_FINGERPRINT = ("log_every", "checkpoint_every")


class _Stages:
    """``stages.json``: status and wall time of every stage; one log line per stage."""

    def __init__(self, run_dir: Path, echo: bool = True) -> None:
        self.path = run_dir / "stages.json"
        self.record: dict[str, Any] = {}
        self.echo = echo

    def run(self, name: str, fn: Callable[[], tuple[Any, str]]) -> Any:
        log.info("[%s] start", name)
        t0 = time.perf_counter()
        out, status = fn()
        dt = time.perf_counter() - t0
        self.record[name] = {
            "status": status,
            "seconds": round(dt, 3),
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        write_json(self.path, self.record)
        log.info("[%s] %s in %.1f s", name, status, dt)
        if self.echo:  # the console's progress: one line per stage (the log file has them too)
            print(f"detcal-main [{name}] {status} in {dt:.1f} s", file=sys.stderr, flush=True)
        return out


def stage_fingerprints(spec: MainJobSpec, splits: Mapping[str, Split]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{stage: (fingerprint, description)}`` of the reusable stages: stage1, stage2, predict_recal, predict_val."""

    def stage_desc(st: Any) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(st).items() if k not in _NOT_IN_FINGERPRINT}

    model = {
        "model": dataclasses.asdict(spec.model),
        "categories": spec.train_data.categories,
        "train": splits["train"].identity,
        "detcal_version": __version__,
    }
    d1 = {**model, "stage": stage_desc(spec.stage1)}
    fp1 = fingerprint(d1)
    d2 = {"stage1": fp1, "stage": stage_desc(spec.stage2)}
    fp2 = fingerprint(d2)
    out: dict[str, tuple[str, dict[str, Any]]] = {"stage1": (fp1, d1), "stage2": (fp2, d2)}
    for name in ("recal", "val"):
        dp = {"stage2": fp2, "split": splits[name].identity, "predict": dataclasses.asdict(spec.predict)}
        out[f"predict_{name}"] = (fingerprint(dp), dp)
    return out


def load_delta_records(split: Split, results: Path, run_dir: Path) -> LoadedData:
    """The evaluation input of ``split``: its written ground truth (COCO instances, or KITTI label_2 +
    sizes with the devkit rules of its difficulty) and the delta-record COCO results file ``results``."""
    paths = gt_paths(split, run_dir)
    gt, res = Path(str(paths["gt"])), Path(results)
    for p, name in ((gt, "gt"), (res, "results")):
        if not p.exists():
            raise DetcalInputError("does not exist", file=p, field=f"data.{name}")
    rules = None
    if split.gt_format == "kitti":
        ds = load_kitti_labels(gt, sizes=paths["sizes"], difficulty=split.difficulty)
        rules = kitti_rules(split.difficulty)
    else:
        ds = load_coco_instances(gt)
    dets = load_coco_results(res, dataset=ds)
    prov = {
        "source": "detcal-main",
        "format": split.gt_format,
        "gt": str(gt.resolve()),
        "results": str(res.resolve()),
        "sizes": paths["sizes"],
        "difficulty": split.difficulty if split.gt_format == "kitti" else None,
    }
    return LoadedData(ds, dets, rules, prov)


def regression_sample_of(evaluation: EvaluationSpec, iou_threshold: float, split: Split, dets: Detections) -> Any:
    """TP regression sample (delta space) of ``dets`` at ``iou_threshold``, matched with the evaluation's
    matching rules (:func:`detcal.pipeline.matcher.run_match`; KITTI devkit rules for KITTI splits)."""
    rules = None
    if split.gt_format == "kitti":
        rules = kitti_rules(split.difficulty)
    t = float(iou_threshold)
    mr = run_match(evaluation.matching, dets, LoadedData(split.dataset, dets, rules), [t])
    return regression_sample(dets, split.dataset.gt, mr, iou_threshold=t, space="delta")


def calibrated(dets: Detections, calibrator: Any) -> Detections:
    """``dets`` with ``(delta_mean, delta_std)`` replaced by ``calibrator.transform`` (boxes, scores and
    proposals unchanged, so the same detections are matched)."""
    mu, sigma = calibrator.transform(dets.delta_mean, dets.delta_std)
    return dataclasses.replace(dets, delta_mean=mu, delta_std=sigma)


def _fit(
    spec: MainJobSpec, calibrators: Mapping[str, Any], recal: Split, dets: Detections
) -> tuple[dict[str, Any], dict[str, Any]]:
    sample = regression_sample_of(spec.evaluation, spec.calibration.iou_threshold, recal, dets)
    if len(sample) < 2:
        raise DetcalInputError(
            f"the recal split has {len(sample)} true positives at IoU {spec.calibration.iou_threshold}: "
            "too few to calibrate (train longer or use more images)",
            field="calibration",
        )
    fitted = {m: calibrators[m].fit(sample.mu, sample.sigma, sample.y) for m in spec.calibration.methods}
    info: dict[str, Any] = {
        "n_recal_tp": len(sample),
        "iou_threshold": float(spec.calibration.iou_threshold),
        "methods": {m: c.describe() for m, c in fitted.items()},
    }
    if "std_scaling" in fitted:
        info["s"] = dict(zip(COORDS, fitted["std_scaling"].scale_.tolist()))
    return fitted, info


def make_calibrators(names: list[str]) -> dict[str, Any]:
    """Fresh box-uncertainty calibrators by registry name (configs/calibrator/<name>.yaml), or a
    :class:`~detcal.pipeline.spec.ConfigError` on ``calibration.methods`` naming the bad one."""
    known = calibrator_names()
    out = {}
    for name in names:
        if name not in known:
            raise ConfigError(
                "calibration.methods", f"{name!r} is not a calibrator (configs/calibrator: {', '.join(known)})"
            )
        out[name] = make_calibrator(name)
    _check_regression(out)
    return out


def _check_regression(calibrators: Mapping[str, Any]) -> None:
    for name, c in calibrators.items():
        if not isinstance(c, RegressionCalibrator):
            raise ConfigError(
                "calibration.methods",
                f"{name!r} is a {type(c).__name__}, not a box-uncertainty calibrator "
                "(e.g. std_scaling, kuleshov_isotonic, std_scaling_sgd, sigma_histogram)",
            )


@dataclasses.dataclass
class _Job:
    """The state one run of the main job carries from stage to stage (each method is one stage)."""

    spec: MainJobSpec
    run_dir: Path
    calibrators: Mapping[str, Any]
    progress: bool
    header: Mapping[str, Any] | None
    splits: dict[str, Split] = dataclasses.field(default_factory=dict)
    fps: dict[str, tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    model: Any = None
    dets: dict[str, Detections] = dataclasses.field(default_factory=dict)
    summ: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    variant_files: dict[str, Path] = dataclasses.field(default_factory=dict)
    report_html: bool = True

    def data(self) -> tuple[dict[str, Split], str]:
        sp = prepare_splits(self.spec.data, self.spec.splits, self.spec.train_data, self.run_dir)
        write_json(self.run_dir / "splits" / "identity.json", {k: v.identity for k, v in sp.items()})
        return sp, "prepared " + ", ".join(
            f"{k} {len(v.dataset.images)} images / {len(v.dataset.gt)} boxes" for k, v in sp.items()
        )

    def predict_all(self) -> tuple[None, str]:
        msgs = []
        for name in ("recal", "val"):
            self.dets[name], msg = st.predict_split(
                self.model,
                self.splits[name],
                self.spec.predict,
                self.spec.trainer.device,
                self.run_dir / "predictions" / name,
                *self.fps[f"predict_{name}"],
                self.progress,
            )
            msgs.append(f"{name}: {msg}")
        return None, "; ".join(msgs)

    def calibrate(self) -> tuple[tuple[dict[str, Any], dict[str, Path], dict[str, Any]], str]:
        fitted, info = _fit(self.spec, self.calibrators, self.splits["recal"], self.dets["recal"])
        files = {"before": self.run_dir / "predictions" / "val" / "detections.json"}
        for m, c in fitted.items():
            files[m] = self.run_dir / "calibration" / f"val_{m}.json"
            write_coco_results(files[m], calibrated(self.dets["val"], c))
        write_json(self.run_dir / "calibration" / "calibrators.json", to_jsonable(info))
        s = info.get("s", {})
        return (info, files, fitted), (
            f"fitted on {info['n_recal_tp']} recal TPs"
            + ("; s = " + ", ".join(f"{k} {v:.3f}" for k, v in s.items()) if s else "")
        )

    def _evaluate(self, split: Split, results: Path, variant: str) -> dict[str, Any]:
        spec, run_dir = self.spec, self.run_dir
        result = evaluate(
            load_delta_records(split, results, run_dir), spec=spec.evaluation, workdir=run_dir, progress=self.progress
        )
        out = run_dir / "eval" / f"{split.name}_{variant}"
        return result.write(
            out,
            plots=spec.output.plots,
            csv=True,
            echo=spec.output.print_summary,
            header={**dict(self.header or {}), "variant": variant, "split": split.name},
            report=self.report_html,
        )

    def evaluate_all(self) -> tuple[None, str]:
        for v, path in self.variant_files.items():
            self.summ[v] = report.summaries(self._evaluate(self.splits["val"], path, v))
        recal = self.run_dir / "predictions" / "recal" / "detections.json"
        self.summ["_recal"] = report.summaries(self._evaluate(self.splits["recal"], recal, "before"))
        return None, "evaluated val " + ", ".join(self.variant_files) + " and recal before"

    def diagrams(self) -> list[str]:
        """The RMSE-vs-RMV diagram of each val variant; the files the report lists."""
        files = ["table1.json", "table1.md", "stages.json", "main_spec.json", "calibration/calibrators.json"]
        for v in self.variant_files:
            name = f"reliability_{v}.png"
            s = self.summ[v]
            plots.rmse_rmv_diagram(
                self.run_dir / name,
                s["ence_tables"],
                ence=s["ence"],
                title=f"val, {v.replace('_', ' ')}: RMSE vs RMV per coordinate ({s['n_tp']} TPs)",
            )
            files.append(name)
        return files + [f"eval/val_{v}/" for v in self.variant_files] + ["eval/recal_before/"]

    def ence_changes(self, fitted: dict[str, Any]) -> dict[str, Any]:
        """Per calibrator and coordinate, the val ENCE change with its paired bootstrap interval (empty when off)."""
        spec = self.spec
        sb, tb = spec.evaluation.sigma_binning, spec.table1.bootstrap
        if tb.n <= 0:
            return {}
        val_sample = regression_sample_of(
            spec.evaluation, spec.calibration.iou_threshold, self.splits["val"], self.dets["val"]
        )
        return report.ence_changes(
            val_sample,
            fitted,
            bins=int(sb.bins),
            binning=str(sb.scheme),
            n_boot=tb.n,
            level=tb.level,
            seed=tb.seed,
            method=tb.method,
        )

    def intervals(self, fitted: dict[str, Any]) -> dict[str, Any]:
        """Conformal intervals beside the fitted calibrators on val (detcal.training.intervals)."""
        spec = self.spec
        sb, tb, t = spec.evaluation.sigma_binning, spec.table1.bootstrap, spec.calibration.iou_threshold
        recal = regression_sample_of(spec.evaluation, t, self.splits["recal"], self.dets["recal"])
        val = regression_sample_of(spec.evaluation, t, self.splits["val"], self.dets["val"])
        return interval_comparison(
            recal,
            val,
            fitted,
            level=float(spec.evaluation.regression.coverage_level),
            bins=int(sb.bins),
            binning=str(sb.scheme),
            n_boot=int(tb.n),
            boot_level=float(tb.level),
            seed=int(tb.seed),
            method=str(tb.method),
        )

    def table1(
        self, calib_info: dict[str, Any], fitted: dict[str, Any], facts: Any, stages: _Stages
    ) -> tuple[dict[str, Any], str]:
        spec, summ, variants = self.spec, self.summ, self.variant_files
        files = self.diagrams()
        rows = {report.row_label(v): summ[v]["ence"] for v in variants}
        rows["C_v"] = summ["before"]["cv"]
        sb = spec.evaluation.sigma_binning
        changes = self.ence_changes(fitted)
        table = {
            "table": "Levi et al. 2019 Table 1 analogue",
            "detcal_version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "run_dir": str(self.run_dir.resolve()),
            "split": "val",
            "columns": list(COORDS),
            "rows": rows,
            "ence_change": changes,
            "conclusion": report.conclusion(changes) if changes else {"holds": None, "note": "table1.bootstrap.n=0"},
            "platform": facts,
            "ence": {v: summ[v]["ence"] for v in variants},
            "cv": {v: summ[v]["cv"] for v in variants},
            "std_scaling_s": calib_info.get("s"),
            "rmse_rmv_spearman": {v: summ[v]["rmse_rmv_spearman"] for v in variants},
            "reliability": {v: summ[v]["ence_tables"] for v in variants},
            "recal": {
                "n_tp": summ["_recal"]["n_tp"],
                "ence_before": summ["_recal"]["ence"],
                "cv_before": summ["_recal"]["cv"],
            },
            "n_tp_val": summ["before"]["n_tp"],
            "iou_threshold": float(spec.calibration.iou_threshold),
            "bins": int(sb.bins),
            "binning": str(sb.scheme),
            "definitions": dict(report.DEFINITIONS),
            "detection": {
                "val": report.detection_row("val", summ["before"]),
                "recal": report.detection_row("recal", summ["_recal"]),
            },
            "calibration": calib_info,
            "paper": report.PAPER_TABLE1,
            "data": {k: v.provenance for k, v in self.splits.items()},
            "fingerprints": {k: v[0] for k, v in self.fps.items()},
            "stages": stages.record,
            "files": files,
            "intervals": self.intervals(fitted),
        }
        return table, "wrote table1.json, table1.md and the reliability diagrams"


def _write_table1(
    run_dir: Path, table: dict[str, Any], header: Mapping[str, Any] | None, report_html: bool
) -> dict[str, Any]:
    """table1.json, table1.md, report.html (when asked); print the table, the run directory and its files."""
    if report_html:
        table["files"] = [*table["files"], "report.html"]
    table = to_jsonable(table)
    write_json(run_dir / "table1.json", table)
    md = report.table1_markdown(table)
    write_text(run_dir / "table1.md", md)
    if report_html:
        write_report(run_dir, {"command": "detcal-main", **dict(header or {}), **table})
    t = table.get("timing_s") or {}
    stages = "stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in t.items() if k != "total")
    stages += f"; total {t['total']:.1f} s" if "total" in t else ""
    # printed whatever print_summary says
    print(md + "\n" + stages + "\n" + "\n".join(run_footer(run_dir, table["files"])), flush=True)
    return table


def run_main_job(
    spec: MainJobSpec,
    run_dir: str | Path,
    *,
    calibrators: Mapping[str, Any],
    progress: bool = False,
    header: Mapping[str, Any] | None = None,
    report_html: bool = True,
) -> dict[str, Any]:
    """Run the whole pipeline of ``spec`` in ``run_dir``; return the Table 1 JSON (also written to table1.json).

    ``calibrators``: fresh regression calibrators by name (``fit(mu, sigma, y)``
    / ``transform(mu, sigma)`` / ``describe()``), one for each name of
    ``spec.calibration.methods`` (the app builds them from the registry,
    :func:`detcal.pipeline.registry.make_calibrator`). ``progress``: progress
    bars on stderr. ``header``: provenance fields for the evaluations' metrics.json. ``report_html``:
    report.html in the run directory and in each evaluation's (docs/report.md).

    Stages (each resumable, see :class:`_Stages`): data -> stage1 -> stage2 -> predict -> calibrate ->
    evaluate -> report.
    """
    missing = [m for m in spec.calibration.methods if m not in calibrators]
    if missing:
        raise DetcalInputError(f"no calibrator given for {missing} (calibration.methods)", field="calibration.methods")
    _check_regression({m: calibrators[m] for m in spec.calibration.methods})
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "main_spec.json", to_jsonable(dataclasses.asdict(spec)))
    stages = _Stages(run_dir, echo=progress)
    job = _Job(spec, run_dir, calibrators, progress, header, report_html=report_html)
    job.splits = stages.run("data", job.data)
    job.fps = stage_fingerprints(spec, job.splits)
    facts = st.torch_setup(spec.trainer)
    job.model = st.build_model(spec.model, job.splits["train"], spec.train_data.categories, spec.stage1.seed)
    train_dir = run_dir / "train"
    stages.run(
        "stage1",
        lambda: st.train(
            spec.stage1,
            spec.trainer,
            job.model,
            job.splits["train"],
            train_dir / "stage1",
            *job.fps["stage1"],
            progress,
        ),
    )
    stages.run(
        "stage2",
        lambda: st.train(
            spec.stage2,
            spec.trainer,
            job.model,
            job.splits["train"],
            train_dir / "stage2",
            *job.fps["stage2"],
            progress,
        ),
    )
    stages.run("predict", job.predict_all)
    calib_info, job.variant_files, fitted = stages.run("calibrate", job.calibrate)
    stages.run("evaluate", job.evaluate_all)
    table = stages.run("report", lambda: job.table1(calib_info, fitted, facts, stages))
    table["stages"] = stages.record
    table["timing_s"] = {k: v["seconds"] for k, v in stages.record.items()}
    table["timing_s"]["total"] = round(time.perf_counter() - t_start, 3)
    table = _write_table1(run_dir, table, header, report_html)
    log.info("detcal-main: done in %.1f s; results in %s", table["timing_s"]["total"], run_dir)
    return table
