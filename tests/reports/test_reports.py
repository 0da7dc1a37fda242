"""Reports: PNG diagrams (valid images for normal, empty and single-bin inputs),
Markdown/CSV tables with bootstrap intervals, the D-ECE map marginalisation,
and detcal-gather on a hand-made sweep directory."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from detcal.apps import gather as gather_app
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.reports import gather as gather_mod, plots, tables


def _assert_png(path: Path, min_size: tuple[int, int] = (100, 100)) -> None:
    assert path.is_file()
    with Image.open(path) as im:
        im.verify()  # raises on a corrupt file
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size[0] >= min_size[0] and im.size[1] >= min_size[1]
        arr = np.asarray(im.convert("L"))
        assert arr.std() > 0  # something was drawn
    # atomic write leaves no temporary sibling behind
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]


# ----------------------------------------------------------------------------- plots


def test_reliability_diagram_normal_empty_single(tmp_path: Path) -> None:
    conf = np.array([0.05, 0.15, np.nan, 0.35, 0.9])
    prec = np.array([0.0, 0.2, np.nan, 0.5, 0.7])
    cnt = np.array([10, 20, 0, 5, 40])
    _assert_png(plots.reliability_diagram(tmp_path / "rel.png", conf, prec, cnt, ece=0.123))
    _assert_png(plots.reliability_diagram(tmp_path / "empty.png", [], [], []))
    _assert_png(plots.reliability_diagram(tmp_path / "allzero.png", [np.nan] * 3, [np.nan] * 3, [0, 0, 0]))
    _assert_png(plots.reliability_diagram(tmp_path / "one.png", [0.6], [0.4], [7], ece=0.2))


def test_reliability_diagram_validates_lengths(tmp_path: Path) -> None:
    with pytest.raises(DetcalInputError, match="precision"):
        plots.reliability_diagram(tmp_path / "bad.png", [0.1, 0.2], [0.1], [1, 2])
    assert not (tmp_path / "bad.png").exists()


def test_dece_heatmaps_normal_empty_single(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    gap = rng.uniform(0, 0.3, (5, 5))
    gap[0, 0] = np.nan
    cnt = rng.integers(0, 40, (5, 5)).astype(float)
    maps = {
        "cx_cy": {"gap": gap, "count": cnt, "axes": ("cx", "cy")},
        "w_h": {"gap": gap.T, "count": cnt.T, "axes": ("w", "h")},
    }
    _assert_png(plots.dece_heatmaps(tmp_path / "maps.png", maps, sample_threshold=8, dece=0.05))
    _assert_png(plots.dece_heatmaps(tmp_path / "empty.png", {}))
    one = {"cx_cy": {"gap": np.array([[0.1]]), "count": np.array([[3.0]]), "axes": ("cx", "cy")}}
    _assert_png(plots.dece_heatmaps(tmp_path / "one.png", one, sample_threshold=8))  # single, sparse cell
    zero = {"cx_cy": {"gap": np.zeros((0, 0)), "count": np.zeros((0, 0)), "axes": ("cx", "cy")}}
    _assert_png(plots.dece_heatmaps(tmp_path / "zero.png", zero))
    with pytest.raises(DetcalInputError, match="gap"):
        plots.dece_heatmaps(tmp_path / "bad.png", {"x": {"gap": np.zeros((2, 2)), "count": np.zeros((3, 2))}})


def test_rmse_rmv_diagram_normal_log_empty_single(tmp_path: Path) -> None:
    rmv = np.linspace(0.05, 0.5, 10)
    tabs = {
        k: {"rmv": rmv, "rmse": rmv * s, "count": np.full(10, 30)}
        for k, s in zip(("tx", "ty", "tw", "th"), (1.0, 1.1, 0.5, 2.0))
    }
    ence = {"tx": 0.0, "ty": 0.1, "tw": 0.5, "th": 1.0}
    _assert_png(plots.rmse_rmv_diagram(tmp_path / "lin.png", tabs, ence=ence))
    _assert_png(plots.rmse_rmv_diagram(tmp_path / "log.png", tabs, ence=ence, log=True))
    _assert_png(plots.rmse_rmv_diagram(tmp_path / "empty.png", {}))
    _assert_png(plots.rmse_rmv_diagram(tmp_path / "emptybins.png", {"tx": {"rmv": [], "rmse": [], "count": []}}))
    _assert_png(plots.rmse_rmv_diagram(tmp_path / "one.png", {"tx": {"rmv": [0.2], "rmse": [0.2], "count": [5]}}))


def test_qce_and_retention_diagrams(tmp_path: Path) -> None:
    tau = np.linspace(0.05, 0.95, 19)
    cov = {"tx": tau, "ty": tau**0.8, "tw": tau**2, "th": np.sqrt(tau), "joint": tau**1.2}
    _assert_png(plots.qce_coverage_diagram(tmp_path / "qce.png", tau, cov, mqce={"tx": 0.0, "joint": 0.05}))
    _assert_png(plots.qce_coverage_diagram(tmp_path / "qce_empty.png", [], {}))
    _assert_png(plots.qce_coverage_diagram(tmp_path / "qce_one.png", [0.5], {"tx": [0.4]}))
    r = np.linspace(0.01, 1, 50)
    curves = {"tx": {"retained": r, "error": r**2, "auc": 0.33, "oracle": r**3}, "ty": {"retained": r, "error": r}}
    _assert_png(plots.retention_diagram(tmp_path / "ret.png", curves))
    _assert_png(plots.retention_diagram(tmp_path / "ret_empty.png", {}))
    _assert_png(plots.retention_diagram(tmp_path / "ret_one.png", {"tx": {"retained": [1.0], "error": [0.3]}}))
    with pytest.raises(DetcalInputError, match="coverage.tx"):
        plots.qce_coverage_diagram(tmp_path / "bad.png", tau, {"tx": tau[:3]})


def test_marginal_gap_map_by_hand() -> None:
    # grid (conf, cx, cy) = (2, 2, 2), flat index = conf*4 + cx*2 + cy; threshold 8
    count = np.array([10, 5, 0, 8, 30, 20, 0, 8], float)
    conf = np.array([0.2, 0.3, np.nan, 0.5, 0.8, 0.7, np.nan, 0.9])
    prec = np.array([0.1, 0.9, np.nan, 0.5, 0.5, 0.6, np.nan, 0.4])
    m = plots.marginal_gap_map(count, conf, prec, (2, 2, 2), keep_axes=(1, 2), sample_threshold=8)
    # (cx0, cy0): cells 0 (N 10, gap .1) and 4 (N 30, gap .3): (10*.1 + 30*.3) / 40 = 0.25
    # (cx0, cy1): cell 1 (N 5 < 8, dropped), cell 5 (N 20, gap .1): 0.1; all samples 25, kept 20
    # (cx1, cy0): empty -> NaN
    # (cx1, cy1): cells 3 (N 8, gap 0) and 7 (N 8, gap .5): (0 + 4) / 16 = 0.25
    np.testing.assert_allclose(m["gap"], [[0.25, 0.1], [np.nan, 0.25]])
    np.testing.assert_array_equal(m["count"], [[40, 25], [0, 16]])
    np.testing.assert_array_equal(m["kept_count"], [[40, 20], [0, 16]])
    mt = plots.marginal_gap_map(count, conf, prec, (2, 2, 2), keep_axes=(2, 1), sample_threshold=8)
    np.testing.assert_allclose(mt["gap"], m["gap"].T)
    with pytest.raises(DetcalInputError, match="keep_axes"):
        plots.marginal_gap_map(count, conf, prec, (2, 2, 2), keep_axes=(1, 1))
    with pytest.raises(DetcalInputError, match="count"):
        plots.marginal_gap_map(count[:3], conf, prec, (2, 2, 2), keep_axes=(1, 2))


# ----------------------------------------------------------------------------- tables


def test_format_value_with_ci() -> None:
    assert tables.format_value(0.03121, (0.02812, 0.03449)) == "0.0312 [0.0281, 0.0345]"
    assert tables.format_value(0.5) == "0.5000"
    assert tables.format_value(float("nan"), (float("nan"), 1.0)) == "nan [no interval]"
    assert tables.format_value(0.2, (None, None)) == "0.2000 [no interval]"
    assert tables.format_value(None) == "nan"
    assert tables.format_value(3.2e-7) == "3.200e-07"
    assert tables.format_value(1.23456, digits=2) == "1.23"
    with pytest.raises(DetcalInputError, match="ci"):
        tables.format_value(0.1, (0.0, 0.1, 0.2))


def _tree() -> dict:
    ece = MetricResult(
        name="ece",
        value=0.03121,
        variant="equal_width",
        params={"bins": 15},
        table={"count": np.arange(3)},
        ci=(0.02812, 0.03449),
        ci_level=0.95,
    )
    return {
        "confidence": {"iou=0.50": {"ece": ece.to_dict(), "nll": {"value": 0.4, "params": {}}}},
        "regression": {
            "ence": {
                "tx": {
                    "value": 0.1,
                    "variant": "equal_count",
                    "params": {"bins": 10},
                    "table": {"rmv": [1, 2]},
                    "extra": {"value": 9.0},
                }
            }
        },
        "data": {"n_images": 200},
        "headline": {"ece": {"value": 0.03121, "ci": [0.02812, 0.03449]}},
    }


def test_flatten_metrics_and_markdown_table() -> None:
    flat = tables.flatten_metrics(_tree())
    assert flat == {
        "confidence/iou=0.50/ece": pytest.approx(0.03121),
        "confidence/iou=0.50/nll": 0.4,
        "regression/ence/tx": 0.1,
        "headline/ece": pytest.approx(0.03121),
    }
    # MetricResult objects are metric nodes too
    assert tables.flatten_metrics({"a": MetricResult(name="x", value=2.0)}) == {"a": 2.0}
    md = tables.metrics_table(_tree(), title="Summary")
    lines = md.strip().splitlines()
    assert lines[0] == "### Summary"
    assert lines[2] == "| metric | value [CI] | variant | parameters |"
    assert "| confidence/iou=0.50/ece | 0.0312 [0.0281, 0.0345] | equal_width | bins=15 |" in lines
    assert "| regression/ence/tx | 0.1000 | equal_count | bins=10 |" in lines
    assert len([ln for ln in lines if ln.startswith("| ") and "---" not in ln]) == 1 + 4


def test_comparison_table_and_csv() -> None:
    rows = {"a=1": {"ece": {"value": 0.1, "ci": [0.05, 0.15]}, "dece": 0.2}, "a=2": {"ece": 0.3}}
    md = tables.comparison_table(rows, ["ece", "dece"])
    assert md.splitlines()[2] == "| a=1 | 0.1000 [0.0500, 0.1500] | 0.2000 |"
    assert md.splitlines()[3] == "| a=2 | 0.3000 | - |"
    got = list(csv.reader(io.StringIO(tables.comparison_csv(rows, ["ece", "dece"]))))
    assert got[0] == ["run", "ece", "ece_ci_low", "ece_ci_high", "dece", "dece_ci_low", "dece_ci_high"]
    assert got[1] == ["a=1", "0.1", "0.05", "0.15", "0.2", "", ""]
    assert got[2] == ["a=2", "0.3", "", "", "", "", ""]


def test_write_table_prints_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    p = tables.write_table(tmp_path / "t.md", "| a |\n")
    assert p.read_text() == "| a |\n" and capsys.readouterr().out == "| a |\n"


# ----------------------------------------------------------------------------- gather


def _fake_run(d: Path, overrides: list[str], ece: float) -> None:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (d / "metrics.json").write_text(
        json.dumps(
            {
                "headline": {"ece": {"value": ece, "ci": [ece - 0.01, ece + 0.01]}, "ence_tx": {"value": 2 * ece}},
                "confidence": {"x": {"ece": {"value": ece}}},
            }
        )
    )


def test_gather_fake_sweep(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for i, (thr, e) in enumerate([("0.5", 0.1), ("0.75", 0.2), ("0.9", 0.3)]):
        _fake_run(
            tmp_path / str(i if i < 2 else 10),
            ["data.n_images=20", f"matching.iou_thresholds=[{thr}]", f"output.progress={i % 2 == 0}"],
            e,
        )
    res = gather_mod.gather(tmp_path)
    assert res.columns == ["ece", "ence_tx"]
    # the shared override is left out of the labels; natural order puts 10 after 1
    assert list(res.rows) == [
        "matching.iou_thresholds=[0.5]",
        "matching.iou_thresholds=[0.75]",
        "matching.iou_thresholds=[0.9]",
    ]
    assert "| matching.iou_thresholds=[0.75] | 0.2000 [0.1900, 0.2100] | 0.4000 |" in res.markdown
    assert gather_app.main([str(tmp_path), "--out", str(tmp_path / "cmp.md"), "--quiet"]) == 0
    assert (tmp_path / "cmp.md").read_text() == res.markdown
    rows = list(csv.reader((tmp_path / "cmp.csv").open()))
    assert len(rows) == 4 and rows[3][1] == "0.3"
    res2 = gather_mod.gather(tmp_path, metrics=["confidence/*"])
    assert res2.columns == ["confidence/x/ece"]


def test_gather_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DetcalInputError, match="no metrics.json"):
        gather_mod.gather(tmp_path)
    assert gather_app.main([str(tmp_path / "missing")]) == 2
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.json").write_text("{not json")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "metrics.json").write_bytes(b"\xff\xfe{}")
    _fake_run(tmp_path / "t", ["a=1"], 0.1)
    res = gather_mod.gather(tmp_path)  # unreadable files are skipped with a warning
    assert list(res.rows) == ["a=1"]
    assert "skipping" in caplog.text


def test_gather_reads_one_sweep(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import os

    for k, sweep in enumerate(("10-00-00-aaaaaa", "11-00-00-bbbbbb")):
        root = tmp_path / "2026-01-01" / sweep
        root.mkdir(parents=True)
        (root / "multirun.yaml").write_text("hydra: {}\n")
        os.utime(root / "multirun.yaml", (1000 + k, 1000 + k))
        for i in range(2):
            _fake_run(root / str(i), [f"calibrator=c{k}{i}"], 0.1 * (i + 1))
    res = gather_mod.gather(tmp_path)
    assert list(res.rows) == ["calibrator=c10", "calibrator=c11"]  # the most recent sweep only
    assert "11-00-00-bbbbbb" in caplog.text
    assert list(gather_mod.gather(tmp_path / "2026-01-01" / "10-00-00-aaaaaa").rows) == [
        "calibrator=c00",
        "calibrator=c01",
    ]


def test_before_after_dece_maps_share_one_colour_scale_and_counts_can_be_log_scaled(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from unittest import mock

    calls: list[float] = []
    real = plots.dece_heatmaps

    def spy(path, maps, **kw):  # record the colour-scale top each panel gets
        calls.append(dict(kw.get("vmax") or {}))
        return real(path, maps, **kw)

    import detcal
    from detcal.pipeline.spec import BootstrapSpec, ConfidenceSpec, DataSpec, EvaluationSpec

    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), confidence=ConfidenceSpec(log_counts=True))
    res = detcal.calibrate(DataSpec(n_images=120), spec, regression=None, workdir=tmp_path)
    with mock.patch.object(plots, "dece_heatmaps", spy):
        res.write(tmp_path / "out", plots=True)
    assert len(calls) == 2 and calls[0] == calls[1] and calls[0]
    fig_path = plots.reliability_diagram(tmp_path / "r.png", [0.1, 0.5], [0.2, 0.4], [1000, 3], log_counts=True)
    assert Path(fig_path).is_file()
