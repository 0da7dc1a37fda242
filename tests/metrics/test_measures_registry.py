"""The registry of confidence measures (detcal.metrics.measures): one entry per measure, iterated everywhere.

A toy measure added through the public registry (one definition, one ``register`` call) reaches
metrics.json (its value, per-class means, bootstrap interval, headline entry) and report.html of an
evaluation; every built-in entry equals its plain reference formula; the bins are normalised once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.binning import BinGrid
from detcal.binning.cells import CellSums
from detcal.core.errors import DetcalInputError
from detcal.metrics import MEASURES, ConfidenceMetric, Display, Measure, register, suite, unregister
from detcal.metrics.confidence_compute import MeasureSettings, cell_summary, ratio
from detcal.metrics.confidence_suite import SuiteBinning, confidence_metrics
from detcal.metrics.measures import headline_names
from detcal.metrics.reference import confidence_gaps
from detcal.pipeline.spec import BootstrapSpec, DataSpec, DeceBinningSpec, EvaluationSpec

# ---------------------------------------------------------------------------- the toy measure


def toy_gap_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """Unweighted mean gap over the kept confidence cells (every cell counts once, whatever its size)."""
    summ = cell_summary(s, m.sample_threshold, m.policy)
    kept = summ["kept"]
    return ratio(np.where(kept, np.nan_to_num(summ["gap"]), 0.0).sum(axis=-1), kept.sum(axis=-1))


def toy_gap_reference(p: np.ndarray, y: np.ndarray, features: np.ndarray | None, m: object) -> float:
    """The same, one cell at a time."""
    n_c, gap = confidence_gaps(p, y, None, m.bins, m.edges)  # type: ignore[attr-defined]
    kept = n_c >= m.sample_threshold  # type: ignore[attr-defined]
    return float(gap[kept].mean()) if kept.any() else float("nan")


TOY = Measure(
    "toy_gap",
    toy_gap_values,
    toy_gap_reference,
    grid="confidence",
    display=Display("toy gap", fmt=".3f"),
    headline=True,
    defaults={"sample_threshold": 1},
)


@pytest.fixture
def toy():
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def _sample(res: detcal.EvaluationResult, i: int = 0) -> tuple[np.ndarray, np.ndarray]:
    mr = res.match
    rows = np.flatnonzero(mr.considered & ~mr.ignored[i])
    return res.data.detections.score[rows], mr.matched[i, rows]


def test_a_toy_measure_reaches_metrics_json_and_the_report(toy: Measure, tmp_path: Path) -> None:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=30))
    res = detcal.evaluate(DataSpec(n_images=40), spec=spec, workdir=tmp_path)
    res.write(tmp_path / "out", plots=False, csv=False, report=True)
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    block = m["confidence"]["iou=0.50"]
    p, y = _sample(res)
    bins = spec.dece_binning.ece_bins
    node = block["toy_gap"]
    assert node["params"]["bins"] == [bins] and node["params"]["sample_threshold"] == 1
    want = toy_gap_reference(p, y, None, suite(SuiteBinning(confidence=bins))["toy_gap"])
    assert node["value"] == pytest.approx(want, rel=1e-12)
    assert len(node["ci"]) == 2 and node["ci_level"] == 0.95  # the bootstrap iterates the registry too
    assert "toy_gap_per_class" in block
    assert m["headline"]["toy_gap"]["source"] == "confidence/iou=0.50/toy_gap"
    assert list(m["headline"])[:5] == ["ece", "dece", "mce", "nll", "brier"]  # built-ins keep their order
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<code>toy_gap</code>" in html and "toy gap ↓" in html
    assert f">{node['value']:.3f} " in html  # the entry's own format


def test_unregistered_the_toy_measure_is_gone(tmp_path: Path) -> None:
    assert "toy_gap" not in MEASURES and "toy_gap" not in headline_names()
    with pytest.raises(DetcalInputError, match=r"unknown measure\(s\) \['toy_gap'\]"):
        suite(params={"toy_gap": {"q": 2}})
    with pytest.raises(DetcalInputError, match="unknown confidence metric 'toy_gap'"):
        ConfidenceMetric("toy_gap")


# ---------------------------------------------------------------------------- every entry = its formula


@pytest.mark.parametrize("policy", ["drop", "netcal"])
def test_every_registered_measure_equals_its_reference(policy: str) -> None:
    rng = np.random.default_rng(11)
    n = 900
    p = np.round(rng.random(n), 2)  # values on bin edges
    y = rng.random(n) < p**1.5
    f = rng.random((n, 2))
    measures = suite(SuiteBinning(confidence=10, position=(4, 3, 2), sample_threshold=5, policy=policy))
    got = confidence_metrics(p, y, f, measures=measures, n_boot=0)
    assert list(got) == list(MEASURES)
    for name, metric in measures.items():
        ref = metric.entry.reference(p, y, f if metric.use_features else None, metric)
        v = got[name].value
        assert (math.isnan(v) and math.isnan(ref)) or v == pytest.approx(ref, rel=1e-12, abs=1e-15), name


def test_registry_refuses_bad_entries() -> None:
    with pytest.raises(DetcalInputError, match="registered already"):
        register(MEASURES["ece"])
    with pytest.raises(DetcalInputError, match="grid"):
        Measure("x", toy_gap_values, toy_gap_reference, grid="cells", display=Display("x"))
    with pytest.raises(DetcalInputError, match="unknown parameter"):
        Measure("x", toy_gap_values, toy_gap_reference, grid="total", display=Display("x"), defaults={"bins": 3})
    with pytest.raises(DetcalInputError, match="_per_class"):
        Measure("x_per_class", toy_gap_values, toy_gap_reference, grid="total", display=Display("x"))
    with pytest.raises(DetcalInputError, match="better"):
        Display("x", better="up")
    assert headline_names() == ("ece", "dece", "mce", "nll", "brier")


# ---------------------------------------------------------------------------- bins normalised once


def test_the_configured_grid_is_passed_down_not_renormalised() -> None:
    b = DeceBinningSpec(bins=[4, 3, 2, 2, 3])
    grid = b.grid()
    assert isinstance(grid, BinGrid) and grid == (4, 3, 2, 2, 3) and grid.n_cells == 144
    assert BinGrid.of(grid, 5) is grid  # a grid of the right size is returned as it is
    measures = suite(b.suite_binning())
    assert measures["dece"].bins == grid and isinstance(measures["dece"].bins, BinGrid)
    assert measures["ece"].bins == (15,)
    with pytest.raises(ValueError, match="entries"):
        BinGrid.of(grid, 3)
    assert BinGrid.of(5, 2) == (5, 5)
