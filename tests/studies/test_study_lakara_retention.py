"""The Lakara et al. retention study (detcal.studies.lakara_retention) on the synthetic detector."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.studies.lakara_retention import lakara_retention, synthetic_sample


@pytest.fixture(scope="module")
def sample():
    return synthetic_sample(n_images=120, seed=3)


def test_table_from_independent_formulas(sample, tmp_path):
    res = lakara_retention(sample, source="paper", figure=tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 1000
    assert set(res["table"]) == {"tx", "ty", "tw", "th"}
    for k, name in enumerate(sample.coords):
        row = res["table"][name]
        e = sample.y[:, k] - sample.mu[:, k]
        s = sample.sigma[:, k]
        assert row["rmse_rmv"] == pytest.approx(np.sqrt(np.mean(e**2) / np.mean(s**2)), rel=1e-12)
        cv = np.std(s, ddof=1) / np.mean(s)
        assert row["cv"] == pytest.approx(cv, rel=1e-12)
        assert row["lence"] == pytest.approx(np.log(abs(row["ence"] + 1 / cv)), rel=1e-12)
        assert row["mwse"] == pytest.approx(np.mean(e**2 * s**2), rel=1e-12)
        ll = np.maximum(0, 0.5 * np.log(2 * np.pi * s**2)) + e**2 / (2 * s**2)
        assert row["ll_fu"] == pytest.approx(ll.mean(), rel=1e-12)
        # Shifts R-AUC with sigma: mean over j = 0..N of sum_{i <= N-j} e^2_(i) / N (no ties in continuous sigma)
        e2s = (e**2)[np.argsort(s)]
        n = len(e2s)
        curve = np.append(np.cumsum(e2s)[::-1] / n, 0.0)
        assert row["r_auc_sigma"] == pytest.approx(curve.mean(), rel=1e-12)
        c = res["curves"][name]
        assert len(c["rmse_rmv"]) == len(c["mwse"]) == 100
        assert 0 <= row["f1_auc_ll_fu"] <= 1
    assert "tx" in res["text"] and res["variants"]["ll_fu"] == "ln" and res["params"]["synthetic"] is False


def test_source_variants_differ_as_documented(sample):
    code = lakara_retention(sample, source="code")
    paper = lakara_retention(sample, source="paper")
    k = 2
    e = sample.y[:, k] - sample.mu[:, k]
    s = sample.sigma[:, k]
    ll10 = np.maximum(0, 0.5 * np.log10(2 * np.pi * s**2)) + e**2 / (2 * s**2)
    assert code["table"]["tw"]["ll_fu"] == pytest.approx(ll10.mean(), rel=1e-12)
    n = len(s)
    kept = n - np.floor(np.round(np.arange(100) / 100 * n, 9)).astype(int)
    np.testing.assert_allclose(code["curves"]["tw"]["mwse"], paper["curves"]["tw"]["mwse"] * kept / n, rtol=1e-12)
    assert code["table"]["tw"]["mwse"] == paper["table"]["tw"]["mwse"]
    assert code["variants"]["ll_fu"] == "log10" and code["variants"]["mwse_curve"] == "total"


def test_default_synthetic_and_errors():
    res = lakara_retention(n_images=40, seed=1)
    assert res["params"]["synthetic"] and res["table"]["tx"]["n"] > 10
    with pytest.raises(DetcalInputError, match="source"):
        lakara_retention(n_images=40, source="thesis")
