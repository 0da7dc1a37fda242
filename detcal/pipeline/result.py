"""Typed results of the API: what :func:`detcal.evaluate` and :func:`detcal.calibrate` return.

Each result holds the plain record (every number with its variant and
parameters) and offers ``to_dict()`` (the metrics.json content, strict JSON),
``results()`` (the typed blocks, :mod:`detcal.core.results`), ``to_markdown()``
(summary.md, rendered in :mod:`detcal.reports.summary_md`) and
``write(out_dir, plots=...)``, which ends in :func:`detcal.reports.finish.finish_run`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from detcal.core.results import ConfidenceBlock, Results
from detcal.reports import results_json
from detcal.reports.finish import finish_run
from detcal.reports.summary_md import evaluation_summary
from detcal.utils.collector import collector_paused
from detcal.utils.io import write_text

if TYPE_CHECKING:
    from detcal.reports.per_class import PerClassPanels
    from detcal.utils.background import Job, Worker

__all__ = ["Result", "EarlyFigures", "EvaluationResult", "draw_figures"]


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

    def _write_extra(self, out_dir: Path, plots: bool, csv: bool) -> list[str]:
        return []

    def _start_figures(self, out_dir: Path, plots: bool) -> tuple[list[str], Any]:
        """The figure file names and a started job drawing them (``None``: no figures of their own)."""
        return [], None

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
        The figures are drawn in another process while the other files are
        written and the text printed (:attr:`EvaluationResult.figure_worker`
        when the run started one, else a child forked now:
        :mod:`detcal.utils.background`; ``DETCAL_INLINE_WRITERS=1``: inline); the run ends in
        :func:`detcal.reports.finish.finish_run`, which writes report.html last.
        Every file is written when this returns, and an error of the drawing
        is raised here. Returns the written metrics.json content."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        figures, job = self._start_figures(out, plots)  # drawn meanwhile (a forked child where possible)
        try:
            extra = self._write_extra(out, plots, csv) + figures
            self.record["files"] = ["metrics.json", "summary.md"] + extra + (["report.html"] if report else [])
            res = finish_run(
                out,
                self.to_dict(**dict(header or {})),
                self._summary,
                report=report,
                echo=echo,
                image_dir=image_dir,
                wait=None if job is None else job.join,
            )
        except BaseException:
            if job is not None:  # the first error is the one reported; the child is still waited for
                with contextlib.suppress(BaseException):
                    job.join()
            raise
        return res.content

    def results(self) -> Results:
        """The typed result blocks of :meth:`to_dict` (what metrics.json serialises)."""
        return Results.from_json(self.to_dict())

    def to_markdown(self) -> str:
        """summary.md of this result (without the file list of a written run)."""
        return self._summary(self.results())

    def _summary(self, results: Results) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


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
    figure_worker: Worker | None = None
    """A figure process started with the run (:func:`detcal.utils.background.prestart`, as detcal-evaluate
    does): the figures are drawn there; None: in a child forked when they are written."""
    early_figures: EarlyFigures | None = None
    """The figures already sent to a figure process by :func:`detcal.evaluate` (its ``figures``): :meth:`write`
    into that process's folder waits for them instead of drawing them again."""

    def __post_init__(self) -> None:
        self.command = "detcal-evaluate"

    def detections_csv(self) -> str:
        """One row per detection: match outcome per threshold, box, relative features."""

        from detcal.reports.detections_csv import detections_csv  # lazy: the CSV's writer only where it is written

        assert self.features is not None and self.clipped is not None
        return detections_csv(self.data, self.match, self.features, self.clipped)

    def _write_extra(self, out: Path, plots: bool, csv: bool) -> list[str]:
        files: list[str] = []
        if csv:
            # lazy: the CSV's writers only in a run that writes it (a lean run never imports them)
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
        """The PNG figures (:mod:`detcal.reports.evaluation_plots` and the per-class diagram), drawn in the
        run's pre-started figure process (:attr:`figure_worker`) or a child forked now, while the caller
        writes the other files (:mod:`detcal.utils.background`)."""
        if not plots:
            return [], None
        early = self.early_figures
        if early is not None and early.job is not None:
            if Path(out) == early.out_dir:
                return early.take()
            early.abandon()  # drawn into another folder: removed there, drawn again here
        # lazy: the figure modules only in a run with figures (a lean run never imports them)
        from detcal.reports.evaluation_plots import figure_inputs, plan_evaluation_plots
        from detcal.utils.background import run  # lazy: as above

        m = self.plain()
        names = [name for name, _ in plan_evaluation_plots(out, m, self.spec)]
        panels = self._per_class_panels()
        names += ["reliability_per_class.png"] if panels is not None else []
        # only what the figures read travels to the figure process (pickled, unpickled)
        return names, run(self.figure_worker, draw_figures, out, figure_inputs(m), self.spec, panels, os.getpid())

    def _per_class_panels(self) -> PerClassPanels | None:
        """The panels of reliability_per_class.png (None: no per-class table in the record)."""
        pc = self.record.get("per_class") or {}
        if not pc.get("rows"):
            return None

        i = [f"iou={t:.2f}" for t in self.match.iou_thresholds].index(pc["iou"]) if pc["iou"] != "iou=kitti" else 0
        keep = np.flatnonzero(self.match.considered & ~self.match.ignored[i])
        return panels_of(self.data, self.match, i, keep, int(pc["top_n"]))

    def _summary(self, results: Results) -> str:
        return evaluation_summary(results)


@dataclass
class EarlyFigures:
    """A run's figures sent to its waiting figure process (``worker``: :func:`detcal.utils.background.prestart`)
    as soon as what they show is computed, to be drawn into ``out_dir`` while the run computes its other
    measures, instead of after them (``detcal-evaluate``: the figures then cost no wall time after the
    measures). The same inputs reach :func:`draw_figures` as from :meth:`EvaluationResult.write` at the
    end (the record's confidence, D-ECE map and box-uncertainty parts, the per-class panels), so the
    PNG bytes are the same. :meth:`take` hands the started job to the writer; :meth:`abandon`, after an
    error (or a write into another folder), waits for the drawing and removes what it drew."""

    out_dir: Path
    worker: Worker
    names: list[str] = field(default_factory=list)
    job: Job | None = None

    def start(self, spec: Any, shown: Mapping[str, Any], panels: PerClassPanels | None) -> None:
        """Send the figures of ``shown`` (``confidence``, ``dece_maps``, ``regression``: the record's blocks) and
        ``panels`` to the worker; where the worker is gone, nothing is sent (the writer draws them as before)."""
        # lazy: the figure modules only in a run with figures (a lean run never imports them)
        from detcal.reports.evaluation_plots import figure_inputs, plan_evaluation_plots

        inputs = figure_inputs(results_json.strict(_figure_part(shown)))
        names = [name for name, _ in plan_evaluation_plots(self.out_dir, inputs, spec)]
        names += ["reliability_per_class.png"] if panels is not None else []
        if not self.worker.waiting:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.job = self.worker.submit(draw_figures, self.out_dir, inputs, spec, panels, os.getpid())
        except RuntimeError:  # the worker died: the figures are drawn at the end, in a child forked then
            return
        self.names = names

    def take(self) -> tuple[list[str], Job]:
        """The figure names and the started job, for the writer (which joins it); afterwards nothing to abandon."""
        assert self.job is not None
        job, self.job = self.job, None
        return self.names, job

    def abandon(self) -> None:
        """Wait for a drawing that no writer took (the run failed, or is written elsewhere) and remove the
        files it drew: a failed run leaves no figures of numbers it never wrote."""
        job, self.job = self.job, None
        if job is None:
            return
        with contextlib.suppress(BaseException):
            job.join()
        for name in self.names:
            with contextlib.suppress(OSError):
                (self.out_dir / name).unlink()


def panels_of(data: Any, mr: Any, i: int, keep: np.ndarray, top_n: int) -> PerClassPanels:
    """The per-class figure's panels: the detections ``keep`` evaluated at matching row ``i`` of ``mr``, the
    ``top_n`` most frequent classes (drawn at the end by the writer, or sent early by :class:`EarlyFigures`)."""
    from detcal.reports.per_class import per_class_panels  # lazy: only a run with figures draws the panels

    d = data.detections
    return per_class_panels(
        {"detections": (d.score[keep], mr.matched[i, keep], d.category[keep])},
        data.dataset.categories,
        top_n=top_n,
    )


def _figure_part(shown: Mapping[str, Any]) -> dict[str, Any]:
    """Of the record's ``confidence`` blocks, only the entries the figures read (``ece``, ``dece``): each entry is
    made strict on its own, so these entries come out as in the whole record, without the rest's work."""
    conf = {
        label: ConfidenceBlock({k: block.entries[k] for k in ("ece", "dece") if k in block.entries})
        if isinstance(block, ConfidenceBlock)
        else block
        for label, block in shown["confidence"].items()
    }
    return {**shown, "confidence": conf}


def draw_figures(out: Path, m: Mapping[str, Any], spec: Any, panels: PerClassPanels | None, parent: int) -> None:
    """Draw the figures of an evaluation into ``out``: :func:`evaluation_plots` of the metrics ``m`` and the
    per-class diagram of ``panels``. In a process other than ``parent`` (a figure process that ends after
    drawing), matplotlib is imported without its artists' ``set()`` signatures and docstrings
    (:func:`detcal.reports.plots.import_matplotlib_for_drawing`) and reads its font files through a memory
    map (:func:`detcal.reports.font_maps.map_font_files`)."""
    # lazy: the drawing modules, imported where the figures are drawn (the figure process)
    from detcal.reports.evaluation_plots import evaluation_plots
    from detcal.reports.font_maps import map_font_files  # lazy: as above
    from detcal.reports.per_class import draw_per_class_panels  # lazy: as above
    from detcal.reports.plots import import_matplotlib_for_drawing  # lazy: as above

    # many small objects, few cycles: no collections walking the run's objects (about 10% of the figures' CPU at 5k)
    with collector_paused():
        if os.getpid() != parent:
            import_matplotlib_for_drawing()
            map_font_files()
        evaluation_plots(out, m, spec)
        if panels is not None:
            draw_per_class_panels(panels, out / "reliability_per_class.png")


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
