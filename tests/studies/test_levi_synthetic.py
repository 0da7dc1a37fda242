"""The synthetic experiment of Levi et al. 2019 (section 4.1, Appendix A.1), reproduced.

The full protocol (T = 50,000 training, 6,000 recalibration, 50,000 test
samples) is run once; its results are checked against the paper's claims and
against closed forms of the data distribution, computed here with numpy from
the definitions (never copied from a run):

x ~ U[0.1, 1], y ~ N(x, x^2). With a (near-)perfect mean f(x) = x the residual
e has E[e^2] = E[x^2] = (1 - 0.1^3) / (3 * 0.9) = 0.37, so RMSE = sqrt(0.37) =
0.6083 in every sigma bin when sigma is independent of x.

(a) random sigma ~ U[1, 10]:
    * STD scaling s = sqrt(E[e^2 / sigma^2]) = sqrt(E[x^2] E[1/sigma^2]),
      E[1/sigma^2] = int_1^10 s^-2 ds / 9 = (1 - 1/10) / 9 = 0.1, so
      s = sqrt(0.037) = 0.1924 (the paper: "s about 0.19");
    * 10 equal-count bins of sigma are the deciles [1 + 0.9 b, 1 + 0.9 (b+1)];
      RMV_b = sqrt(mean sigma^2 over the bin) = sqrt((hi^3 - lo^3) / (3 (hi - lo)));
      ENCE = mean_b |RMV_b - RMSE| / RMV_b = 0.846 before ("about 0.85"), and
      with RMV_b -> s RMV_b after STD scaling about 0.50 ("about 0.5");
    * Kuleshov's isotonic recalibration makes the interval calibration error
      vanish ("about 0.0003") while ENCE stays large (Fig. 1): the random
      uncertainty remains uninformative.
(b) trained log-variance: ENCE small, s about 1 (Appendix A.1, Fig. 5).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from detcal.apps._hydra import register_schema
from detcal.pipeline.registry import config_dir
from detcal.pipeline.spec import ConfigError
from detcal.studies.levi_synthetic import LeviApp, LeviSpec, run_levi_synthetic

REPO = Path(__file__).resolve().parents[2]

E_X2 = (1.0 - 0.1**3) / (3 * 0.9)  # E[x^2], x ~ U[0.1, 1]
RMSE = float(np.sqrt(E_X2))  # 0.6083
S_RANDOM = float(np.sqrt(E_X2 * (1 - 1 / 10) / 9))  # 0.1924


def _ence_closed_form(scale: float = 1.0) -> float:
    lo = 1.0 + 0.9 * np.arange(10)
    hi = lo + 0.9
    rmv = scale * np.sqrt((hi**3 - lo**3) / (3 * (hi - lo)))
    return float(np.mean(np.abs(rmv - RMSE) / rmv))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("levi")
    return run_levi_synthetic(LeviSpec(seed=0), out), out


def _v(m: dict[str, Any], u: str, k: str, metric: str) -> float:
    return float(m["results"][u][k][metric]["value"])


def test_closed_forms_match_the_papers_numbers() -> None:
    # the paper's numbers follow from the data distribution alone
    assert S_RANDOM == pytest.approx(0.19, abs=0.005)
    assert _ence_closed_form() == pytest.approx(0.85, abs=0.01)
    assert _ence_closed_form(S_RANDOM) == pytest.approx(0.5, abs=0.03)


@pytest.mark.slow
def test_random_uncertainty_claims(full_run: tuple[dict[str, Any], Path]) -> None:
    m, _ = full_run
    assert m["config"]["n_train"] == 50_000 and m["config"]["n_recal"] == 6_000
    # ENCE near 0.85 before, near 0.5 after STD scaling with s near 0.19
    assert _v(m, "random", "before", "ence") == pytest.approx(_ence_closed_form(), abs=0.02)
    s = m["learned"]["random"]["s"]
    assert s == pytest.approx(S_RANDOM, abs=0.012)
    assert _v(m, "random", "std_scaling", "ence") == pytest.approx(_ence_closed_form(s), abs=0.03)
    assert 0.42 < _v(m, "random", "std_scaling", "ence") < 0.58
    # Kuleshov isotonic: interval calibration error near 0, ENCE still large (Fig. 1)
    ce_before = _v(m, "random", "before", "kuleshov_ce")
    ce_iso = _v(m, "random", "kuleshov_isotonic", "kuleshov_ce")
    assert ce_iso < 0.01 and ce_iso < ce_before / 100
    assert m["results"]["random"]["kuleshov_isotonic"]["kuleshov_ce"]["params"]["p_t"].startswith("recalibrated CDF")
    assert _v(m, "random", "kuleshov_isotonic", "ence") > 0.4
    # the random sigma stays uncorrelated with the real std (Fig. 4(a, b)); C_v unchanged by scaling
    for k in ("before", "std_scaling", "kuleshov_isotonic"):
        assert abs(_v(m, "random", k, "corr")) < 0.05
    # C_v of U[1, 10]: std / mean = (9 / sqrt(12)) / 5.5 = 0.4724
    assert _v(m, "random", "before", "cv") == pytest.approx(9 / np.sqrt(12) / 5.5, abs=0.01)
    assert _v(m, "random", "std_scaling", "cv") == pytest.approx(_v(m, "random", "before", "cv"), rel=1e-9)


@pytest.mark.slow
def test_trained_uncertainty_claims(full_run: tuple[dict[str, Any], Path]) -> None:
    m, _ = full_run
    assert _v(m, "trained", "before", "ence") < 0.05
    assert m["learned"]["trained"]["s"] == pytest.approx(1.0, abs=0.1)
    assert _v(m, "trained", "std_scaling", "ence") < 0.05
    assert _v(m, "trained", "before", "corr") > 0.95  # learns sigma = x (Fig. 5(a))
    # C_v of sigma = x, x ~ U[0.1, 1]: (0.9 / sqrt(12)) / 0.55 = 0.4724
    assert _v(m, "trained", "before", "cv") == pytest.approx(0.9 / np.sqrt(12) / 0.55, abs=0.02)
    # oracle sigma = x: calibrated up to the sampling error of 5,000 samples per bin
    assert _v(m, "oracle", "before", "ence") < 0.03
    assert m["learned"]["oracle"]["s"] == pytest.approx(1.0, abs=0.05)


@pytest.mark.slow
def test_outputs(full_run: tuple[dict[str, Any], Path]) -> None:
    m, out = full_run
    for u in ("random", "trained", "oracle"):
        for f in (f"{u}_std_vs_true.png", f"{u}_rmse_rmv.png", f"{u}_interval_reliability.png"):
            assert (out / f).is_file() and (out / f).stat().st_size > 1000, f
    md = (out / "summary.md").read_text()
    assert "| random | STD scaling |" in md and "| trained | Kuleshov isotonic |" in md and "s = " in md
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["headline"]["random/before/ence"]["value"] == pytest.approx(_v(m, "random", "before", "ence"))
    table = m["results"]["random"]["before"]["ence"]["table"]
    assert len(table["rmv"]) == 10 and sum(table["count"]) == 50_000


def test_seeded_and_validated(tmp_path: Path) -> None:
    small = dict(n_train=2000, n_recal=500, n_test=1000, steps=30, plots=False)
    a = run_levi_synthetic(LeviSpec(seed=3, **small), None)
    b = run_levi_synthetic(LeviSpec(seed=3, **small), None)
    c = run_levi_synthetic(LeviSpec(seed=4, **small), None)
    assert a["headline"] == b["headline"]
    assert a["headline"] != c["headline"]
    with pytest.raises(ConfigError, match="levi.optimizer"):
        LeviSpec(optimizer="rmsprop")
    with pytest.raises(ConfigError, match="levi.x_range"):
        LeviSpec(x_range=[1.0, 0.1])
    with pytest.raises(ConfigError, match="levi.n_test"):
        LeviSpec(n_test=5)
    with pytest.raises(ConfigError, match="levi.steps"):
        LeviSpec(steps=1.5)


def _compose(overrides: list[str]) -> Any:
    register_schema("levi_synthetic", LeviApp)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="levi_synthetic", overrides=overrides)


def test_config_is_a_typed_spec_and_names_bad_keys() -> None:
    app = OmegaConf.to_object(_compose(["experiment=levi2019_synthetic"]))
    assert isinstance(app, LeviApp) and app.name == "levi2019_synthetic"
    lc = app.levi
    assert (lc.n_train, lc.n_recal, lc.x_range, lc.random_sigma_range, lc.layers, lc.bins) == (
        50_000,
        6_000,
        [0.1, 1.0],
        [1.0, 10.0],
        4,
        10,
    )
    with pytest.raises(Exception, match="bogus"):
        _compose(["levi.bogus=1"])
    with pytest.raises(Exception) as e:
        OmegaConf.to_object(_compose(["levi.optimizer=rmsprop"]))
    chain, err = [], e.value
    while err is not None:
        chain.append(err)
        err = err.__cause__ or err.__context__
    assert any(isinstance(x, ConfigError) and x.key == "levi.optimizer" for x in chain)


@pytest.mark.slow
def test_hydra_app(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "detcal.apps.levi_synthetic",
        f"hydra.run.dir={run_dir}",
        "levi.n_train=2000",
        "levi.n_recal=500",
        "levi.n_test=1000",
        "levi.steps=20",
        "levi.plots=false",
        "levi.oracle=false",
        "print_summary=false",
    ]
    res = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert res.returncode == 0, res.stderr[-3000:]
    m = json.loads((run_dir / "metrics.json").read_text())
    assert set(m["results"]) == {"random", "trained"} and m["config"]["n_train"] == 2000
    bad = subprocess.run(
        [
            *cmd[:3],
            f"hydra.run.dir={tmp_path / 'bad'}",
            "levi.optimizer=rmsprop",
        ],  # a fresh directory: a used one is refused
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert bad.returncode == 2 and "levi.optimizer" in bad.stderr.strip().splitlines()[-1]
