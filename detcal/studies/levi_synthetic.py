"""The synthetic regression experiment of Levi et al. 2019 (section 4.1, Appendix A.1).

"Evaluating and calibrating uncertainty prediction in regression tasks"
(Levi, Gispan, Giladi, Fetaya 2019). Protocol:

* data: ``x ~ U[0.1, 1]``, ``y ~ N(x, x^2)`` (the true std of sample t is x_t);
  a training set of T = 50,000 samples, a separate recalibration set of
  6,000 samples and a held-out test set (default 50,000; the paper does not
  say on which set its figures are drawn: we evaluate on unseen data, the
  recalibration-set numbers are reported as in-sample);
* mean: a four-layer fully connected ReLU network (4 linear layers,
  ``1 -> h -> h -> h -> 1``) trained with the L1 loss;
* uncertainty, one of
  (a) ``random``: ``sigma ~ U[1, 10]`` per sample, independent of everything;
  (b) ``trained``: a second network of the same shape outputs the log-variance
      ``u = log sigma^2`` and is trained with the Gaussian NLL
      ``0.5 u + 0.5 (y - mu)^2 exp(-u)``. ``variance_training="detached"``
      (default) trains it on the residuals of the already trained mean network
      (mean detached: the mean stays the L1 median); ``"joint"`` trains both
      networks together on ``L1 + NLL`` with the NLL's gradient reaching the mean;
  (c) ``oracle``: ``sigma = x`` (the true std; optional);
* recalibration on the recalibration set: STD scaling (:class:`StdScaling`,
  closed form ``s = sqrt(mean(e^2 / sigma^2))``, Levi et al. Eq. 11-12) and the
  isotonic recalibration of Kuleshov et al. 2018 (:class:`KuleshovIsotonic`,
  new mean/std of the recalibrated CDF ``R(Phi(z))``, Levi et al. Eq. 13);
* metrics on the test set (:mod:`detcal.metrics.regression`): ENCE with 10
  equal-count bins over sigma (Eq. 8) and its per-bin (RMV, RMSE) table, C_v
  (Eq. 9), the Kuleshov calibration error ``CE = mean_j (p_j - P_hat(p_j))^2``
  over m = 100 levels ``p_j = linspace(0, 1, m)`` (the grid-independent
  ``mean`` reduction by default; the ``sum`` of Kuleshov et al. is in
  ``extra``), where for the isotonic recalibration ``p_t`` is the recalibrated
  CDF ``R(Phi((y - mu)/sigma))`` itself, the Gaussian NLL (of N(mu', sigma'^2)),
  and the correlation of the predicted std with the real std x.

Deviations from the paper (documented, configurable): the paper trains every
stage with SGD (lr 0.001, momentum 0.9); to run the full T = 50,000 protocol in
seconds on a CPU we use Adam on minibatches of 1,024 with a cosine
learning-rate decay from 0.01, 2,000 steps per stage (``optimizer="sgd"``
gives the paper's optimiser; it needs many more steps). The hidden width is not
given in the paper (default 64). A full-batch step over 50,000 samples costs
~90 ms on a shared 2-core CPU, a minibatch step ~2 ms; one torch thread is the
fastest setting there (``threads``).

Figures (PNG), per uncertainty u in (random, trained, oracle):

* ``{u}_std_vs_true.png``: predicted std against the real std x, before, after
  STD scaling and after Kuleshov isotonic (Fig. 1(a), 4(a, b), 5(a));
* ``{u}_rmse_rmv.png``: ENCE reliability diagrams, RMSE against RMV per bin,
  same three panels (Fig. 1(c), 4(c, d), 5(b));
* ``{u}_interval_reliability.png``: Kuleshov reliability diagram, observed
  confidence level P_hat(p) against the expected level p (Fig. 1(b), 5(c)).

Tables: ``summary.md`` (Markdown, printed) and ``metrics.json`` (every
number with its parameters; a flat ``headline`` section for detcal-gather).

Usage::

    detcal-levi-synthetic                              # or python -m detcal.apps.levi_synthetic
    detcal-levi-synthetic experiment=levi2019_synthetic levi.seed=1
    detcal-levi-synthetic levi.variance_training=joint levi.optimizer=sgd levi.steps=20000

Python API (no Hydra)::

    from detcal.studies.levi_synthetic import LeviSpec, run_levi_synthetic
    metrics = run_levi_synthetic(LeviSpec(n_train=5000, steps=300), "out/levi", progress=False)

torch is imported inside the training functions only (the ``train`` extra);
without it :func:`run_levi_synthetic` raises a one-line error saying so.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detcal._version import __version__
from detcal.calibration.regression import KuleshovIsotonic, StdScaling
from detcal.core.types import MetricResult
from detcal.metrics.regression import coefficient_of_variation, ence, gaussian_nll, interval_calibration_error
from detcal.pipeline.spec import ConfigError
from detcal.training.torch_check import require_torch
from detcal.utils.io import to_jsonable, write_text

__all__ = [
    "LeviSpec",
    "sample_data",
    "train_mean_and_variance",
    "evaluate_uncertainty",
    "run_levi_synthetic",
    "UNCERTAINTIES",
    "RECALIBRATIONS",
]

from detcal.studies.levi_figures import RECALIBRATIONS, UNCERTAINTIES, figures, summary_markdown


@dataclass
class LeviSpec:
    """Parameters of the experiment (defaults: the paper's protocol; module docstring for deviations).

    ``n_train`` (T), ``n_recal``, ``n_test`` samples; ``x_range`` [low, high]
    of the uniform input; ``random_sigma_range`` of the random uncertainty;
    network ``hidden`` width and ``layers`` (linear layers); ``optimizer``
    ``adam`` (cosine decay from ``lr`` to lr/100) or ``sgd`` (``lr``,
    ``momentum``; the paper's 0.001 / 0.9); ``steps`` per training stage;
    ``batch_size`` (None = full batch); ``variance_training`` ``detached`` or
    ``joint``; ``oracle`` adds sigma = x; ``bins`` of ENCE (equal count);
    ``kuleshov_m`` levels and ``kuleshov_reduction`` (``mean`` or ``sum``) of
    the Kuleshov CE; ``seed``; ``threads`` for torch; ``plots``;
    ``scatter_points`` drawn in the std scatter plots. Validated on
    construction (:class:`~detcal.pipeline.spec.ConfigError` naming ``levi.<field>``).
    """

    n_train: int = 50_000
    n_recal: int = 6_000
    n_test: int = 50_000
    x_range: list[float] = field(default_factory=lambda: [0.1, 1.0])
    random_sigma_range: list[float] = field(default_factory=lambda: [1.0, 10.0])
    hidden: int = 64
    layers: int = 4
    optimizer: str = "adam"
    lr: float = 0.01
    momentum: float = 0.9
    steps: int = 2000
    batch_size: int | None = 1024
    variance_training: str = "detached"
    oracle: bool = True
    bins: int = 10
    kuleshov_m: int = 100
    kuleshov_reduction: str = "mean"
    seed: int = 0
    threads: int = 1
    plots: bool = True
    scatter_points: int = 3000

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str, name: str) -> None:
            if not cond:
                raise ConfigError(f"levi.{name}", msg)

        for name in (
            "n_train",
            "n_recal",
            "n_test",
            "hidden",
            "layers",
            "steps",
            "bins",
            "kuleshov_m",
            "seed",
            "threads",
            "scatter_points",
        ):
            v = getattr(self, name)
            need(isinstance(v, int) and not isinstance(v, bool), f"must be an integer, got {v!r}", name)
        for name in ("x_range", "random_sigma_range"):
            v = getattr(self, name)
            need(isinstance(v, (list, tuple)) and len(v) == 2, f"must be [low, high], got {v!r}", name)
            setattr(self, name, [float(t) for t in v])
        for name in ("n_train", "n_recal", "n_test"):
            need(int(getattr(self, name)) >= 2 * self.bins, f"must be >= 2 * bins = {2 * self.bins}", name)
        lo, hi = self.x_range
        need(0 < lo < hi, f"expected 0 < low < high, got {self.x_range}", "x_range")
        a, b = self.random_sigma_range
        need(0 < a < b, f"expected 0 < low < high, got {self.random_sigma_range}", "random_sigma_range")
        need(self.layers >= 2 and self.hidden >= 1, "need layers >= 2 and hidden >= 1", "layers")
        need(self.optimizer in ("adam", "sgd"), f"expected 'adam' or 'sgd', got {self.optimizer!r}", "optimizer")
        need(
            self.variance_training in ("detached", "joint"),
            f"expected 'detached' or 'joint', got {self.variance_training!r}",
            "variance_training",
        )
        need(float(self.lr) > 0, f"must be > 0, got {self.lr}", "lr")
        need(0 <= float(self.momentum) < 1, f"must be in [0, 1), got {self.momentum}", "momentum")
        need(self.steps >= 1, "must be >= 1", "steps")
        need(self.batch_size is None or int(self.batch_size) >= 1, "must be None or >= 1", "batch_size")
        need(self.bins >= 1, "must be >= 1", "bins")
        need(self.kuleshov_m >= 2, "must be >= 2", "kuleshov_m")
        need(self.kuleshov_reduction in ("mean", "sum"), "expected 'mean' or 'sum'", "kuleshov_reduction")
        need(self.threads >= 1, "must be >= 1", "threads")
        need(self.scatter_points >= 1, "must be >= 1", "scatter_points")


log = logging.getLogger("detcal.levi_synthetic")


# ----------------------------------------------------------------------------- data and networks


def sample_data(
    n: int, rng: np.random.Generator, x_range: tuple[float, float] = (0.1, 1.0)
) -> tuple[np.ndarray, np.ndarray]:
    """``x [n] ~ U[x_range]``, ``y [n] ~ N(x, x^2)`` (Levi et al. 2019, section 4.1)."""
    lo, hi = (float(v) for v in x_range)
    x = rng.uniform(lo, hi, size=int(n))
    return x, x + x * rng.standard_normal(int(n))


def _mlp(hidden: int, layers: int) -> Any:
    import torch.nn as nn  # lazy: torch is optional (the [train] extra)

    mods: list[Any] = []
    width_in = 1
    for _ in range(layers - 1):
        mods += [nn.Linear(width_in, hidden), nn.ReLU()]
        width_in = hidden
    mods.append(nn.Linear(width_in, 1))
    return nn.Sequential(*mods)


def _optimiser(params: Any, cfg: LeviSpec) -> tuple[Any, Any]:
    import torch  # lazy: torch is optional (the [train] extra)

    if cfg.optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=float(cfg.lr))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(cfg.steps), eta_min=float(cfg.lr) * 0.01)
    else:
        opt = torch.optim.SGD(params, lr=float(cfg.lr), momentum=float(cfg.momentum))
        sched = None
    return opt, sched


def _batches(n: int, cfg: LeviSpec, gen: Any) -> Any:
    import torch  # lazy: torch is optional (the [train] extra)

    if cfg.batch_size is None or int(cfg.batch_size) >= n:
        while True:
            yield None
    while True:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n - int(cfg.batch_size) + 1, int(cfg.batch_size)):
            yield perm[i : i + int(cfg.batch_size)]


def train_mean_and_variance(x: np.ndarray, y: np.ndarray, cfg: LeviSpec) -> tuple[Any, Any, dict[str, Any]]:
    """Train the mean network (L1) and the log-variance network (Gaussian NLL).

    ``detached``: stage 1 minimises ``mean |y - f(x)|`` over the mean network;
    stage 2 minimises ``mean 0.5 u(x) + 0.5 (y - f(x))^2 exp(-u(x))`` over the
    variance network with f fixed. ``joint``: one stage on the sum of both
    losses, the NLL's gradient reaching f. Returns ``(mean_net, logvar_net,
    info)`` (final losses, steps, seconds).
    """
    import torch  # lazy: torch is optional (the [train] extra)

    torch.manual_seed(int(cfg.seed))
    gen = torch.Generator().manual_seed(int(cfg.seed))
    xt = torch.as_tensor(x, dtype=torch.float32).reshape(-1, 1)
    yt = torch.as_tensor(y, dtype=torch.float32).reshape(-1, 1)
    f = _mlp(int(cfg.hidden), int(cfg.layers))
    u = _mlp(int(cfg.hidden), int(cfg.layers))
    info: dict[str, Any] = {
        "variance_training": cfg.variance_training,
        "optimizer": cfg.optimizer,
        "steps": int(cfg.steps),
        "batch_size": cfg.batch_size,
    }
    t0 = time.perf_counter()

    def nll(uu: Any, resid: Any) -> Any:
        return (0.5 * uu + 0.5 * resid.pow(2) * torch.exp(-uu)).mean()

    if cfg.variance_training == "detached":
        opt, sched = _optimiser(f.parameters(), cfg)
        it = _batches(len(x), cfg, gen)
        for _ in range(int(cfg.steps)):
            idx = next(it)
            xb, yb = (xt, yt) if idx is None else (xt[idx], yt[idx])
            loss = (yb - f(xb)).abs().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
        with torch.no_grad():
            resid_all = yt - f(xt)
            info["l1_final"] = float(resid_all.abs().mean())
        opt, sched = _optimiser(u.parameters(), cfg)
        it = _batches(len(x), cfg, gen)
        for _ in range(int(cfg.steps)):
            idx = next(it)
            xb, rb = (xt, resid_all) if idx is None else (xt[idx], resid_all[idx])
            loss = nll(u(xb), rb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
        info["nll_final"] = float(loss.detach())
    else:
        opt, sched = _optimiser(list(f.parameters()) + list(u.parameters()), cfg)
        it = _batches(len(x), cfg, gen)
        for _ in range(int(cfg.steps)):
            idx = next(it)
            xb, yb = (xt, yt) if idx is None else (xt[idx], yt[idx])
            resid = yb - f(xb)
            l1 = resid.abs().mean()
            loss = l1 + nll(u(xb), resid)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
        info["l1_final"] = float(l1.detach())
        info["nll_final"] = float((loss - l1).detach())
    info["seconds"] = round(time.perf_counter() - t0, 3)
    return f, u, info


def _predict(net: Any, x: np.ndarray) -> np.ndarray:
    import torch  # lazy: torch is optional (the [train] extra)

    with torch.no_grad():
        return net(torch.as_tensor(x, dtype=torch.float32).reshape(-1, 1)).double().numpy().reshape(-1)


# ----------------------------------------------------------------------------- metrics


def _interval_ce_from_p(p_t: np.ndarray, cfg: LeviSpec) -> MetricResult:
    """Kuleshov CE of given CDF values p_t (interval_calibration_error on z = Phi^-1(p_t), mu = 0, sigma = 1)."""
    from scipy.special import ndtri  # lazy: scipy kept out of start-up

    z = ndtri(np.clip(p_t, 1e-12, 1.0 - 1e-12))
    return interval_calibration_error(
        np.zeros(len(z)), np.ones(len(z)), z, m=int(cfg.kuleshov_m), reduction=cfg.kuleshov_reduction
    )


def evaluate_uncertainty(
    mu: np.ndarray,
    sigma: np.ndarray,
    y: np.ndarray,
    true_std: np.ndarray,
    cfg: LeviSpec,
    cdf_values: np.ndarray | None = None,
) -> dict[str, MetricResult]:
    """ENCE (equal-count bins), C_v, Kuleshov CE, Gaussian NLL and corr(sigma, true std) on one sample.

    ``cdf_values [S]``: the forecast CDF at y when it is not the Gaussian
    N(mu, sigma^2) (Kuleshov isotonic recalibration: R(Phi(z))); the Kuleshov
    CE then uses them. Both CE reductions are kept (``extra``).
    """
    from scipy.special import ndtr  # lazy: scipy kept out of start-up
    from scipy.stats import pearsonr, spearmanr  # lazy: scipy kept out of start-up

    p_t = ndtr((y - mu) / sigma) if cdf_values is None else np.asarray(cdf_values, dtype=np.float64)
    ce = _interval_ce_from_p(p_t, cfg)
    other = "sum" if cfg.kuleshov_reduction == "mean" else "mean"
    ce_other = dataclasses.replace(cfg, kuleshov_reduction=other)
    ce.extra[f"value_{other}"] = float(_interval_ce_from_p(p_t, ce_other).value)
    ce.params["p_t"] = "Phi((y - mu) / sigma)" if cdf_values is None else "recalibrated CDF R(Phi((y - mu) / sigma))"
    corr = MetricResult(
        name="corr_sigma_true_std",
        value=float(pearsonr(sigma, true_std).statistic),
        variant="pearson",
        extra={"spearman": float(spearmanr(sigma, true_std).statistic)},
    )
    return {
        "ence": ence(mu, sigma, y, bins=int(cfg.bins), binning="equal_count"),
        "cv": coefficient_of_variation(mu, sigma, y),
        "kuleshov_ce": ce,
        "nll": gaussian_nll(mu, sigma, y),
        "corr": corr,
    }


# ----------------------------------------------------------------------------- the experiment


def _recalibrate(
    sigmas: dict[str, tuple[np.ndarray, np.ndarray]],
    recal: tuple[np.ndarray, np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray, np.ndarray],
    cfg: LeviSpec,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Per uncertainty (random, trained, oracle): STD scaling and Kuleshov's isotonic recalibration fitted on the
    recalibration set (mu, y, x), evaluated on the test set and in sample; the learned maps and the curves."""
    mu_rc, y_rc, x_rc = recal
    mu_te, y_te, x_te = test
    results: dict[str, Any] = {}
    in_sample: dict[str, Any] = {}
    learned: dict[str, Any] = {}
    curves: dict[str, Any] = {}
    for name, (s_rc, s_te) in sigmas.items():
        std: Any = StdScaling().fit(mu_rc, s_rc, y_rc)
        kul: Any = KuleshovIsotonic().fit(mu_rc, s_rc, y_rc)
        preds = {
            "before": (mu_te, s_te, None),
            "std_scaling": (*std.transform(mu_te, s_te), None),
            "kuleshov_isotonic": (*kul.transform(mu_te, s_te), kul.cdf(y_te, mu_te, s_te)),
        }
        results[name] = {k: evaluate_uncertainty(m, s, y_te, x_te, cfg, c) for k, (m, s, c) in preds.items()}
        preds_in = {
            "before": (mu_rc, s_rc, None),
            "std_scaling": (*std.transform(mu_rc, s_rc), None),
            "kuleshov_isotonic": (*kul.transform(mu_rc, s_rc), kul.cdf(y_rc, mu_rc, s_rc)),
        }
        in_sample[name] = {
            k: {m: r.value for m, r in evaluate_uncertainty(mm, s, y_rc, x_rc, cfg, c).items()}
            for k, (mm, s, c) in preds_in.items()
        }
        learned[name] = {
            "std_scaling": std.describe(),
            "kuleshov_isotonic": {
                "mean_z": float(kul.mean_z_[0]),
                "std_z": float(kul.std_z_[0]),
                "n_thresholds": int(len(kul.x_thresholds_[0])),
            },
            "s": float(std.scale_[0]),
        }
        curves[name] = {k: (preds[k][1], x_te) for k in preds}
    return results, in_sample, learned, curves


def _levi_record(
    cfg: LeviSpec,
    train_info: dict[str, Any],
    learned: dict[str, Any],
    results: dict[str, Any],
    in_sample: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    """The metrics.json content of the experiment (before the headline's s entries and the files)."""
    return {
        "detcal_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "detcal-levi-synthetic",
        "reference": "Levi et al. 2019, section 4.1 and Appendix A.1 (Figures 1, 4, 5)",
        "config": {k: v for k, v in dataclasses.asdict(cfg).items()},
        "protocol": {
            "data": "x ~ U[x_range], y ~ N(x, x^2); train / recalibration / test drawn independently "
            "(numpy SeedSequence(seed).spawn(4): train, recal, test, random sigma)",
            "evaluated_on": "test set (held out); in_sample = the recalibration set",
            "ence": f"{cfg.bins} equal-count bins over sigma (docs/metrics.md, ENCE)",
            "kuleshov_ce": f"{cfg.kuleshov_reduction} over m={cfg.kuleshov_m} levels linspace(0, 1, m), one-sided; "
            "isotonic: p_t from the recalibrated CDF",
            "deviation": "Adam (minibatch, cosine decay) instead of SGD(0.001, 0.9), for speed; optimizer=sgd available",
        },
        "training": train_info,
        "learned": learned,
        "results": {
            n: {k: {m: r.to_dict() for m, r in per.items()} for k, per in res.items()} for n, res in results.items()
        },
        "in_sample": in_sample,
        "headline": {
            f"{n}/{k}/{m}": {"value": float(results[n][k][m].value)}
            for n in results
            for k in RECALIBRATIONS
            for m in ("ence", "cv", "kuleshov_ce")
        },
        "timing_s": {"total": round(seconds, 3), "training": train_info["seconds"]},
        "files": ["metrics.json", "summary.md"],
    }


def run_levi_synthetic(
    spec: LeviSpec, out_dir: str | Path | None = None, *, progress: bool = False, echo: bool = False
) -> dict[str, Any]:
    """Run the whole experiment; write figures and tables under ``out_dir`` (when given).

    ``progress``: log each phase (training, recalibration, figures) at INFO;
    ``echo``: print summary.md.

    Returns the metrics.json content: ``results[u][recalibration][metric]``
    (MetricResult dicts), ``learned[u]`` (s of STD scaling, mean/std of the
    standardised recalibrated CDF of Kuleshov), ``in_sample`` (same on the
    recalibration set), ``training`` info, ``headline`` and the config.
    """
    require_torch("detcal-levi-synthetic")
    import torch  # lazy: torch is optional (the [train] extra)

    cfg = spec
    say = log.info if progress else log.debug
    say("levi: training the mean and variance networks (%s, %d steps)", cfg.optimizer, cfg.steps)
    torch.set_num_threads(max(1, int(cfg.threads)))
    t_start = time.perf_counter()
    ss = np.random.SeedSequence(int(cfg.seed))
    r_train, r_recal, r_test, r_sig = (np.random.default_rng(s) for s in ss.spawn(4))
    x_tr, y_tr = sample_data(cfg.n_train, r_train, (cfg.x_range[0], cfg.x_range[1]))
    x_rc, y_rc = sample_data(cfg.n_recal, r_recal, (cfg.x_range[0], cfg.x_range[1]))
    x_te, y_te = sample_data(cfg.n_test, r_test, (cfg.x_range[0], cfg.x_range[1]))
    f, u, train_info = train_mean_and_variance(x_tr, y_tr, cfg)
    mu_rc, mu_te = _predict(f, x_rc), _predict(f, x_te)
    lo, hi = (float(v) for v in cfg.random_sigma_range)
    sigmas: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "random": (r_sig.uniform(lo, hi, size=len(x_rc)), r_sig.uniform(lo, hi, size=len(x_te))),
        "trained": (np.exp(0.5 * _predict(u, x_rc)), np.exp(0.5 * _predict(u, x_te))),
    }
    if cfg.oracle:
        sigmas["oracle"] = (x_rc.copy(), x_te.copy())

    results, in_sample, learned, curves = _recalibrate(sigmas, (mu_rc, y_rc, x_rc), (mu_te, y_te, x_te), cfg)
    seconds = time.perf_counter() - t_start
    metrics = _levi_record(cfg, train_info, learned, results, in_sample, seconds)
    for n in results:
        metrics["headline"][f"{n}/s"] = {"value": learned[n]["s"]}
    metrics = to_jsonable(metrics)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if cfg.plots:
            say("levi: figures")
            metrics["files"] += figures(out, metrics, curves, cfg.seed, cfg.scatter_points, cfg.bins)
        write_text(out / "metrics.json", json.dumps(metrics, indent=1, allow_nan=True) + "\n")
        md = summary_markdown(metrics)
        write_text(out / "summary.md", md)
        if echo:
            print(md)
    return metrics


@dataclass
class LeviApp:
    """``detcal-levi-synthetic`` (configs/levi_synthetic.yaml): the run ``name``, ``print_summary`` and the ``levi`` spec."""

    name: str = "levi_synthetic"
    print_summary: bool = True
    progress: bool = True
    levi: LeviSpec = field(default_factory=LeviSpec)
