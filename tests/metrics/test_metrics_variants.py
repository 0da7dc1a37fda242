"""Named source variants (issue 13 item 2): each checked by hand or against an independent implementation."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.metrics import confidence as C, regression as R
from detcal.metrics.confidence_suite import dece_by_class

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


# ----------------------------------------------------------------------------- Guo's bin edges


def test_ece_guo_edges_by_hand():
    p = np.array([0.2, 0.2, 0.3, 0.6])
    y = np.array([1, 0, 0, 1])
    # [a, b): {0.2, 0.2, 0.3} in [0.2, 0.4): gap |1/3 - 0.7/3| = 0.1; {0.6} in [0.6, 0.8): 0.4
    assert C.ece(p, y, bins=5).value == pytest.approx(0.75 * 0.1 + 0.25 * 0.4, abs=1e-15)
    # Guo ((m-1)/M, m/M]: {0.2, 0.2} in (0, 0.2]: |0.5 - 0.2|; {0.3} in (0.2, 0.4]: 0.3; {0.6} in (0.4, 0.6]: 0.4
    r = C.ece(p, y, bins=5, edges="guo")
    assert r.value == pytest.approx(0.5 * 0.3 + 0.25 * 0.3 + 0.25 * 0.4, abs=1e-15)
    assert r.params["edges"] == "guo" and r.variant == "drop+edges=guo"
    np.testing.assert_array_equal(r.table["count"], [2, 1, 1, 0, 0])


def _guo_reference(p: np.ndarray, y: np.ndarray, m: int) -> float:
    """Guo et al.'s ECE from their definition: exact interval tests on the rational each score stands for."""
    from fractions import Fraction

    total = 0.0
    for k in range(1, m + 1):
        lo, hi = Fraction(k - 1, m), Fraction(k, m)
        q = [Fraction(v).limit_denominator(10**6) for v in p.tolist()]
        inside = np.array([(lo < v <= hi) or (k == 1 and v == 0) for v in q], dtype=bool)
        if inside.any():
            total += inside.sum() / len(p) * abs(y[inside].mean() - p[inside].mean())
    return total


def test_ece_guo_edges_against_definition():
    rng = np.random.default_rng(3)
    p = np.concatenate([np.round(rng.random(400), 2), [0.0, 1.0]])  # 2-decimal scores, some on edges
    p = np.concatenate([p, np.arange(16) / 15])  # exact edges too
    y = rng.random(len(p)) < p
    assert C.ece(p, y, 15, edges="guo").value == pytest.approx(_guo_reference(p, y, 15), abs=1e-12)
    # continuous scores never sit on an edge: both rules agree
    q = rng.random(5000)
    yq = rng.random(5000) < q
    assert C.ece(q, yq, 15, edges="guo").value == pytest.approx(C.ece(q, yq, 15).value, abs=1e-15)


def test_bad_edge_rule():
    with pytest.raises(DetcalInputError, match="edge_rule"):
        C.ece([0.5], [1], edges="left")


# ----------------------------------------------------------------------------- homogeneity as a variance


def test_homogeneity_variance_is_weighted_variance():
    rng = np.random.default_rng(1)
    n = 4000
    p = rng.random(n)
    y = rng.random(n) < p**1.5
    f = rng.random((n, 1))
    std = C.homogeneity(p, y, f, bins=3, sample_threshold=1)
    var = C.homogeneity(p, y, f, bins=3, sample_threshold=1, spread="variance")
    # independent: gaps per cell from np.histogramdd, weights N_c / N
    edges = [np.linspace(0, 1, 4)] * 2
    x = np.column_stack([p, f[:, 0]])
    n_c, _ = np.histogramdd(x, bins=edges)
    s_p, _ = np.histogramdd(x, bins=edges, weights=p)
    s_y, _ = np.histogramdd(x, bins=edges, weights=y.astype(float))
    ok = n_c > 0
    gap = np.abs(s_y[ok] - s_p[ok]) / n_c[ok]
    w = n_c[ok] / n
    mean = np.sum(w * gap)
    want = np.sum(w * (gap - mean) ** 2)
    assert var.value == pytest.approx(want, abs=1e-14)
    assert std.value == pytest.approx(np.sqrt(want), abs=1e-14)
    assert var.variant == "drop+variance" and var.params["spread"] == "variance"
    assert "N_kept" in var.params["weights"]


# ----------------------------------------------------------------------------- D-ECE and the class label


def _dece_class_dimension_reference(p, y, f, cat, bins, threshold):
    """Class as the first histogram dimension, drop policy, written with np.histogramdd."""
    cats = np.unique(cat)
    x = np.column_stack([np.searchsorted(cats, cat), p, f])
    edges = [np.arange(len(cats) + 1) - 0.5] + [np.linspace(0, 1, bins + 1)] * (1 + f.shape[1])
    n_c, _ = np.histogramdd(x, bins=edges)
    s_p, _ = np.histogramdd(x, bins=edges, weights=p)
    s_y, _ = np.histogramdd(x, bins=edges, weights=y.astype(float))
    kept = n_c >= threshold
    gap = np.abs(s_y[kept] - s_p[kept]) / n_c[kept]
    return float(np.sum(n_c[kept] * gap) / n_c[kept].sum())


def test_dece_class_dimension_against_histogramdd_and_weighted_mean():
    rng = np.random.default_rng(5)
    n = 3000
    p = rng.random(n) * 0.999
    y = rng.random(n) < p
    f = rng.random((n, 2)) * 0.999
    cat = rng.choice([3, 7, 11], n, p=[0.6, 0.3, 0.1])
    for thr in (1, 8):
        got = dece_by_class(p, y, f, cat, bins=4, sample_threshold=thr)
        assert got.value == pytest.approx(_dece_class_dimension_reference(p, y, f, cat, 4, thr), abs=1e-13)
        assert got.params["bins"] == [3, 4, 4, 4] and got.variant == "drop+class_dimension"
    # weighted mean of per-class D-ECE, by hand from per-class calls
    per = [C.dece(p[cat == c], y[cat == c], f[cat == c], 4, 8).value for c in (3, 7, 11)]
    w = np.array([(cat == c).sum() for c in (3, 7, 11)]) / n
    wm = dece_by_class(p, y, f, cat, bins=4, sample_threshold=8, mode="weighted_mean")
    assert wm.value == pytest.approx(float(np.dot(w, per)), abs=1e-13)
    # without dropped cells the two definitions coincide
    a = dece_by_class(p, y, f, cat, bins=4, sample_threshold=1)
    b = dece_by_class(p, y, f, cat, bins=4, sample_threshold=1, mode="weighted_mean")
    assert a.value == pytest.approx(b.value, abs=1e-13)
    assert wm.value != pytest.approx(dece_by_class(p, y, f, cat, bins=4, sample_threshold=8).value, abs=1e-6)


# ----------------------------------------------------------------------------- LL-FU log base, MWSE normalisation


def test_ll_fu_log_base_by_hand():
    mu = np.zeros(3)
    sigma = np.array([1.0, 0.1, 3.0])
    y = np.array([0.0, 0.1, 3.0])
    # first term 0.5 log(2 pi sigma^2), floored at 0; second e^2 / (2 sigma^2)
    ln = [0.5 * np.log(2 * np.pi), 0.0 + 0.5, 0.5 * np.log(2 * np.pi * 9) + 0.5]
    lg = [0.5 * np.log10(2 * np.pi), 0.0 + 0.5, 0.5 * np.log10(2 * np.pi * 9) + 0.5]
    np.testing.assert_allclose(R.ll_fu_scores(mu, sigma, y), ln, atol=1e-15)
    np.testing.assert_allclose(R.ll_fu_scores(mu, sigma, y, log_base="10"), lg, atol=1e-15)
    r = R.ll_fu(mu, sigma, y, log_base="10")
    assert r.value == pytest.approx(np.mean(lg), abs=1e-15) and r.variant == "log10"
    assert R.ll_fu(mu, sigma, y).variant == "ln"
    with pytest.raises(DetcalInputError, match="log_base"):
        R.ll_fu(mu, sigma, y, log_base="2")


def test_mwse_total_normalisation_by_hand():
    # sigma ascending [1, 2, 3, 4], e = 1 each: weights e^2 sigma^2 = [1, 4, 9, 16]
    mu = np.zeros(4)
    sigma = np.array([3.0, 1.0, 4.0, 2.0])
    y = np.ones(4)
    f = [0.0, 0.25, 0.5, 0.75]
    a = R.mwse(mu, sigma, y, rejected=f)
    b = R.mwse(mu, sigma, y, rejected=f, normalise="total")
    np.testing.assert_allclose(a.table["mwse"], [30 / 4, 14 / 3, 5 / 2, 1 / 1])
    np.testing.assert_allclose(b.table["mwse"], [30 / 4, 14 / 4, 5 / 4, 1 / 4])
    assert a.value == b.value == 7.5
    assert b.variant == "variance+total" and b.params["normalise"] == "total"


def test_regression_suite_passes_variants():
    rng = np.random.default_rng(0)
    from detcal.metrics.spaces import RegressionSample

    n = 200
    s = RegressionSample(
        mu=np.zeros((n, 4)),
        sigma=rng.uniform(0.5, 2, (n, 4)),
        y=rng.normal(size=(n, 4)),
        rows=np.arange(n),
        image_id=np.arange(n),
        space="delta",
    )
    out = R.regression_metrics(s, ll_fu_log_base="10", mwse_normalise="total", with_joint=False)
    assert out["ll_fu"]["tx"].variant == "log10"
    assert out["mwse"]["tw"].params["normalise"] == "total"


def test_docs_have_a_section_per_metric():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    heads = {line[3:].split(" ")[0] for line in text.splitlines() if line.startswith("## ")}
    names = [
        "lence",
        "ll_fu",
        "mwse",
        "homogeneity",
        "outliers",
        "interval_ce",
        "r_auc",
        "f1_auc",
        "picp",
        "mpiw",
        "pinball",
        "crps",
        "ence",
        "uce",
        "cv",
        "m_qce",
        "c_qce",
        "nll",
        "ece",
        "ece_q",
        "mce",
        "dece",
        "brier",
        "sharpness",
        "overconfidence",
        "underconfidence",
        "rmse_rmv",
    ]
    assert not [n for n in names if n not in heads]
    from detcal.metrics.confidence_suite import suite

    assert set(suite()) <= heads


def test_sources_registry_selects_each_variant():
    from detcal.metrics.confidence_suite import confidence_metrics, suite
    from detcal.metrics.sources import SOURCES, source_kwargs, suite_kwargs
    from detcal.metrics.spaces import RegressionSample

    rng = np.random.default_rng(2)
    n = 600
    p = np.round(rng.random(n), 2)
    y = rng.random(n) < p
    f = rng.random((n, 1))  # a 5 x 5 grid: cells keep >= 8 samples
    cat = rng.integers(0, 3, n)
    mu, s, t = np.zeros(n), rng.uniform(0.5, 2, n), rng.normal(size=n)
    fns = {
        "ece": lambda **k: C.ece(p, y, **k),
        "mce": lambda **k: C.mce(p, y, **k),
        "dece": lambda **k: dece_by_class(p, y, f, cat, **k) if "mode" in k else C.dece(p, y, f, **k),
        "homogeneity": lambda **k: C.homogeneity(p, y, f, **k),
        "ence": lambda **k: R.ence(mu, s, t, **k),
        "lence": lambda **k: R.lence(mu, s, t, **k),
        "uce": lambda **k: R.uce(mu, s, t, **k),
        "c_qce": lambda **k: R.c_qce(mu, s, t, **k),
        "ll_fu": lambda **k: R.ll_fu(mu, s, t, **k),
        "mwse": lambda **k: R.mwse(mu, s, t, **k),
        "r_auc": lambda **k: R.retention_curve(mu, s, t, **k),
    }
    for source, table in SOURCES.items():
        for metric, kw in table.items():
            assert np.isfinite(fns[metric](**kw).value), (source, metric)
    assert C.ece(p, y, **source_kwargs("guo2017", "ece")).params["edges"] == "guo"
    assert R.ll_fu(mu, s, t, **source_kwargs("lakara2022_code", "ll_fu")).variant == "log10"
    conf_kw, reg_kw = suite_kwargs("thetis")
    out = confidence_metrics(p, y, f, measures=suite(**conf_kw), n_boot=0)
    assert out["homogeneity"].params["spread"] == "variance" and out["ece"].params["bins"] == [20]
    assert out["dece"].params["sample_threshold"] == 1
    smp = RegressionSample(
        mu=np.zeros((n, 4)),
        sigma=rng.uniform(0.5, 2, (n, 4)),
        y=rng.normal(size=(n, 4)),
        rows=np.arange(n),
        image_id=np.arange(n),
    )
    reg = R.regression_metrics(smp, with_joint=False, **suite_kwargs("lakara2022_code")[1])
    assert reg["mwse"]["tx"].params["normalise"] == "total"
    out_g = confidence_metrics(p, y, f, measures=suite(**suite_kwargs("guo2017")[0]), n_boot=0)
    assert out_g["ece"].value == pytest.approx(C.ece(p, y, 15, edges="guo").value, abs=1e-15)
    with pytest.raises(DetcalInputError, match="source"):
        source_kwargs("kitti", "ece")
