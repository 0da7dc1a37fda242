"""The figures of a run are sent to its figure process as soon as what they show is computed
(:class:`detcal.pipeline.result.EarlyFigures`): the same files as figures drawn at the end, the
figure process busy before the other measures end, and nothing left behind by a run that fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import detcal
from detcal.pipeline import evaluation
from detcal.pipeline.result import EarlyFigures
from detcal.pipeline.spec import BootstrapSpec, ConfidenceSpec, DataSpec, EvaluationSpec
from detcal.reports.plots import import_matplotlib_for_drawing
from detcal.utils import background

pytestmark = pytest.mark.skipif(not background.forking(), reason="forking is off here")

SKIP = {"metrics.json", "report.html"}  # both carry the time of the run


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name not in SKIP}


def _early(out: Path) -> EarlyFigures:
    worker = background.prestart(import_matplotlib_for_drawing)
    assert worker is not None
    return EarlyFigures(out, worker)


@pytest.mark.parametrize(
    "confidence",
    [ConfidenceSpec(), ConfidenceSpec(per_class_top_n=0), ConfidenceSpec(per_class=False, maps=[])],
    ids=["default", "no-per-class-rows", "no-per-class-no-maps"],
)
def test_early_figures_equal_the_figures_drawn_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, confidence: ConfidenceSpec
) -> None:
    monkeypatch.delenv("DETCAL_INLINE_WRITERS", raising=False)
    data = DataSpec(n_images=60, seed=3)
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), confidence=confidence)
    late = detcal.evaluate(data, spec=spec, workdir=tmp_path / "w1")
    late_content = late.write(tmp_path / "late", plots=True)

    early = _early(tmp_path / "early")
    res = detcal.evaluate(data, spec=spec, workdir=tmp_path / "w2", figures=early)
    assert early.job is not None and not early.worker.waiting  # sent before the result came back
    assert res.early_figures is early
    content = res.write(tmp_path / "early", plots=True)
    assert early.job is None  # taken (and joined) by the writer

    assert content["files"] == late_content["files"]
    pngs = [f for f in content["files"] if f.endswith(".png")]
    assert "reliability_iou0.50.png" in pngs and "rmse_rmv.png" in pngs  # confidence and box-uncertainty figures
    assert ("reliability_per_class.png" in pngs) is (confidence.per_class and confidence.per_class_top_n != 0)
    assert any(f.startswith("dece_maps") for f in pngs) is bool(confidence.maps)
    assert _files(tmp_path / "early") == _files(tmp_path / "late")


def test_early_figures_written_elsewhere_are_removed_and_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DETCAL_INLINE_WRITERS", raising=False)
    data = DataSpec(n_images=40, seed=1)
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    early = _early(tmp_path / "first")
    res = detcal.evaluate(data, spec=spec, workdir=tmp_path / "w", figures=early)
    content = res.write(tmp_path / "second", plots=True)
    pngs = [f for f in content["files"] if f.endswith(".png")]
    assert pngs and all((tmp_path / "second" / f).is_file() for f in pngs)
    assert not list((tmp_path / "first").glob("*.png"))  # the early drawing, waited for and removed


def _app(overrides: list[str]) -> Any:
    from detcal.apps._hydra import register_schema
    from detcal.apps.schema import EvaluateApp
    from detcal.pipeline.registry import config_dir

    GlobalHydra.instance().clear()
    register_schema("evaluate", EvaluateApp)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("evaluate", overrides=overrides)
    return OmegaConf.to_object(cfg), cfg


def test_a_run_that_fails_after_its_figures_were_sent_leaves_no_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from detcal.apps._hydra import AppContext
    from detcal.apps.evaluate import task

    monkeypatch.delenv("DETCAL_INLINE_WRITERS", raising=False)
    sent: list[EarlyFigures] = []
    real = evaluation._early_figures

    def early_then_fail(figures: EarlyFigures, *args: Any) -> None:
        real(figures, *args)
        sent.append(dataclasses.replace(figures))  # what was sent (names, job) before the failure below
        raise RuntimeError("a later stage failed")

    monkeypatch.setattr(evaluation, "_early_figures", early_then_fail)
    overrides = ["data.n_images=40", "bootstrap.n=0", "output.progress=false", "output.print_summary=false"]
    app, cfg = _app(overrides)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="a later stage failed"):
        task(app, AppContext("detcal-evaluate", out, overrides, {}, cfg))
    assert sent and sent[0].job is not None and "reliability_iou0.50.png" in sent[0].names
    assert not list(out.glob("*.png")) and not (out / "metrics.json").exists()
