"""Confidence (precision) recalibration (METRICS.md section 5), numpy/scipy only.

Every calibrator maps detection scores ``p [S]`` in [0, 1] to calibrated
precision estimates ``p' [S]``; the target is ``y [S]`` = 1 for a matched
(true-positive) detection at the chosen IoU threshold, 0 otherwise.
Position-aware methods also take ``features [S,F]``: relative box features in
[0, 1], by default F = 4 (cx/W, cy/H, w/W, h/H).

``p`` is clipped to ``[1e-12, 1 - 1e-12]`` before ``logit`` and ``log``.

Methods
-------
TemperatureScaling   p' = sigmoid(logit(p) / T)                        Guo et al. 2017
PlattScaling         p' = sigmoid(a logit(p) + b)                      Platt 1999
PositionLogistic     p' = sigmoid(w . phi(logit p, cx, cy, w, h))      Kueppers et al. 2020
HistogramBinning     p' = frequency of y in the sample's bin/cell      Zadrozny & Elkan 2001
IsotonicCalibration  p' = R(p), R non-decreasing (PAV)                 Zadrozny & Elkan 2002
BBQ                  Bayesian average of equal-frequency binnings      Naeini et al. 2015
BetaCalibration      p' = sigmoid(a ln p - b ln(1 - p) + c), a,b >= 0  Kull et al. 2017

All fit by maximum likelihood (mean Bernoulli NLL) unless stated; the
logistic models use exact gradients and Hessians vectorised over samples:
damped Newton without constraints, scipy's L-BFGS-B with bounds.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.special import gammaln

from detcal.binning import cell_index, feature_bin_index
from detcal.calibration.base import ConfidenceCalibrator, clip_p, logit, sigmoid
from detcal.errors import DetcalInputError

# --------------------------------------------------------------------------- logistic core


def _logistic_objective(w: np.ndarray, X: np.ndarray, y: np.ndarray, l2: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL + 0.5 sum(l2 w^2) and its gradient.

    NLL_i = softplus(x_i . w) - y_i x_i . w, gradient X^T (sigmoid(Xw) - y) / S.
    """
    z = X @ w
    nll = float(np.mean(np.logaddexp(0.0, z) - y * z))
    r = sigmoid(z) - y
    grad = X.T @ r / len(y) + l2 * w
    return nll + 0.5 * float(np.sum(l2 * w * w)), grad


def fit_logistic(
    X: np.ndarray,
    y: np.ndarray,
    l2: np.ndarray | float = 0.0,
    bounds: Sequence[tuple[float | None, float | None]] | None = None,
    w0: np.ndarray | None = None,
    max_iter: int = 100,
) -> np.ndarray:
    """L2-regularised logistic regression: damped Newton, or L-BFGS-B under bounds.

    Minimises ``mean_i [log(1 + exp(x_i.w)) - y_i x_i.w] + 0.5 sum_j l2_j w_j^2``
    over ``w [P]``; ``X [S,P]`` includes any intercept column. ``l2`` is a
    scalar or per-column ``[P]`` (0 leaves a column unpenalised).
    Unconstrained: Newton steps ``H^-1 g`` with ``H = X^T diag(q(1-q)) X / S +
    diag(l2)`` and Armijo backtracking (the objective is convex; P is small),
    until the gradient's max norm is below 1e-10 (the rounding floor of a
    mean over 1e5 samples), the Newton decrement ``g^T H^-1 g`` is below 1e-22,
    or no step decreases the objective.
    With ``bounds`` (as for ``scipy.optimize.minimize``): L-BFGS-B.
    """
    n_col = X.shape[1]
    l2v = np.broadcast_to(np.asarray(l2, dtype=np.float64), (n_col,)).copy()
    w = np.zeros(n_col) if w0 is None else np.asarray(w0, dtype=np.float64).copy()
    if bounds is not None:
        res = minimize(
            _logistic_objective,
            w,
            args=(X, y, l2v),
            jac=True,
            method="L-BFGS-B",
            bounds=bounds,
            options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-11},
        )
        return np.asarray(res.x, dtype=np.float64)
    f, g = _logistic_objective(w, X, y, l2v)
    for _ in range(max_iter):
        gmax = float(np.max(np.abs(g)))
        if gmax < 1e-10:
            break
        q = sigmoid(X @ w)
        H = X.T @ (X * (q * (1.0 - q))[:, None]) / len(y) + np.diag(l2v)
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(H, g, rcond=None)[0]
        if not np.all(np.isfinite(step)):
            break
        slope = float(g @ step)  # Newton decrement^2 = g^T H^-1 g: twice the predicted decrease
        if slope < 1e-22:
            break
        t, accepted = 1.0, False
        while t > 1e-10:
            w_new = w - t * step
            f_new, g_new = _logistic_objective(w_new, X, y, l2v)
            # Armijo, or (at the rounding floor of f) a step that still shrinks the gradient
            if f_new <= f - 1e-4 * t * slope or (
                f_new <= f + 1e-13 * max(1.0, abs(f)) and float(np.max(np.abs(g_new))) < gmax
            ):
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        w, f, g = w_new, f_new, g_new
    return w


# --------------------------------------------------------------------------- isotonic core


def pav(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pool adjacent violators: the non-decreasing least-squares fit of ``y [M]`` with weights ``w [M]``.

    ``argmin_f sum_i w_i (y_i - f_i)^2  s.t.  f_1 <= ... <= f_M`` (Barlow et
    al. 1972; Ayer et al. 1955). Vectorised form: each pass merges every
    maximal run of strictly decreasing adjacent block means at once (merging a
    violating run is a valid PAV pooling sequence, and PAV's result does not
    depend on the pooling order), until no violation is left. Each pass is
    O(blocks); the number of passes is data dependent (a few thousand for
    300k binary labels, worst case O(M)).
    """
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if len(y) == 0:
        return y.copy()
    s = y * w
    c = w.copy()
    start = np.arange(len(y))
    while len(s) > 1:
        m = s / c
        viol = m[:-1] > m[1:]
        if not viol.any():
            break
        new_block = np.concatenate(([True], ~viol))
        gid = np.cumsum(new_block) - 1
        s = np.bincount(gid, weights=s)
        c = np.bincount(gid, weights=c)
        start = start[new_block]
    lens = np.diff(np.append(start, len(y)))
    return np.repeat(s / c, lens)


def isotonic_thresholds(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds ``(X [M], Y [M])`` of the non-decreasing isotonic fit of ``y`` on ``x``.

    As scikit-learn's ``IsotonicRegression``: ties in ``x`` are first merged
    (weighted mean of ``y``, summed weights), PAV runs on the unique ``x``,
    and only the first and last point of each constant block are kept. The
    fitted function is ``np.interp(clip(x, X[0], X[-1]), X, Y)``.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones_like(x) if w is None else np.asarray(w, dtype=np.float64)
    ux, inv = np.unique(x, return_inverse=True)
    sw = np.bincount(inv, weights=w, minlength=len(ux))
    sy = np.bincount(inv, weights=w * y, minlength=len(ux))
    fy = pav(sy / sw, sw)
    if len(fy) > 2:
        keep = np.ones(len(fy), dtype=bool)
        keep[1:-1] = (fy[:-2] != fy[1:-1]) | (fy[1:-1] != fy[2:])
        ux, fy = ux[keep], fy[keep]
    return ux, fy


# --------------------------------------------------------------------------- calibrators


class TemperatureScaling(ConfidenceCalibrator):
    """Temperature scaling (Guo et al. 2017, "On calibration of modern neural networks").

    ``p' = sigmoid(logit(p) / T)``; ``T > 0`` minimises the mean Bernoulli NLL
    ``mean_i [softplus(u_i) - y_i u_i]``, ``u_i = logit(p_i) / T``, optimised
    over ``log T`` by L-BFGS-B (bounds ``T in [1e-4, 1e4]``) with the exact
    gradient ``d NLL / d log T = -mean_i (sigmoid(u_i) - y_i) u_i``.
    ``T > 1`` softens over-confident scores. Learned: ``temperature_``.
    (netcal's ``TemperatureScaling.temperature`` is the multiplier ``1/T``.)
    """

    def __init__(self, max_log_temperature: float = float(np.log(1e4))) -> None:
        self.max_log_temperature = max_log_temperature

    @staticmethod
    def _objective(theta: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        u = z * np.exp(-theta[0])
        nll = float(np.mean(np.logaddexp(0.0, u) - y * u))
        grad = -float(np.mean((sigmoid(u) - y) * u))
        return nll, np.array([grad])

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        z = logit(p)
        b = float(self.max_log_temperature)
        res = minimize(
            self._objective,
            np.zeros(1),
            args=(z, y),
            jac=True,
            method="L-BFGS-B",
            bounds=[(-b, b)],
            options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 1000},
        )
        self.temperature_ = float(np.exp(res.x[0]))
        self.nll_ = float(res.fun)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return sigmoid(logit(p) / self.temperature_)


class PlattScaling(ConfidenceCalibrator):
    """Platt / logistic scaling on the logit (Platt 1999).

    ``p' = sigmoid(a logit(p) + b)``, ``(a, b)`` maximum likelihood
    (unregularised logistic regression of ``y`` on ``logit p``, damped
    Newton). Learned: ``a_``, ``b_``.
    """

    def __init__(self) -> None:
        pass

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        z = logit(p)
        X = np.column_stack([z, np.ones_like(z)])
        w = fit_logistic(X, y, 0.0, w0=np.array([1.0, 0.0]))
        self.a_ = float(w[0])
        self.b_ = float(w[1])

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return sigmoid(self.a_ * logit(p) + self.b_)


class PositionLogistic(ConfidenceCalibrator):
    """Position-dependent logistic calibration (Kueppers et al. 2020, "Multivariate
    confidence calibration for object detection", logistic variant).

    ``p' = sigmoid(w . phi)`` with ``z = logit p`` and centred features
    ``g = f - 0.5`` (f = cx, cy, w, h relative, in [0, 1]):

    * ``degree="linear"``:    ``phi = (1, z, g_1..g_F)``;
    * ``degree="quadratic"`` (default): ``phi = (1, z, g, g^2, g_i g_j (i<j),
      z g, z g^2)``. The ``z g^2`` terms let the logit *slope* grow towards
      both image borders (a temperature that depends on position), which a
      linear model cannot express; ``g^2`` and ``g_i g_j`` shift the bias.

    Fit: mean Bernoulli NLL ``+ 0.5 l2 ||w_pos||^2`` where ``w_pos`` are all
    weights except the intercept and the coefficient of ``z`` (unpenalised),
    by damped Newton. Learned: ``coef_ [P]`` and ``columns_`` (the
    names of the columns of phi).
    """

    uses_features = True
    requires_features = True

    def __init__(self, degree: str = "quadratic", l2: float = 1e-4) -> None:
        self.degree = degree
        self.l2 = l2

    def _design(self, p: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, list[str]]:
        z = logit(p)
        g = f - 0.5
        n_f = g.shape[1]
        cols = [np.ones_like(z), z]
        names = ["1", "z"] + [f"g{i}" for i in range(n_f)]
        cols += [g[:, i] for i in range(n_f)]
        if self.degree == "quadratic":
            cols += [g[:, i] ** 2 for i in range(n_f)]
            names += [f"g{i}^2" for i in range(n_f)]
            for i in range(n_f):
                for j in range(i + 1, n_f):
                    cols.append(g[:, i] * g[:, j])
                    names.append(f"g{i}*g{j}")
            cols += [z * g[:, i] for i in range(n_f)]
            names += [f"z*g{i}" for i in range(n_f)]
            cols += [z * g[:, i] ** 2 for i in range(n_f)]
            names += [f"z*g{i}^2" for i in range(n_f)]
        return np.column_stack(cols), names

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if self.degree not in ("linear", "quadratic"):
            raise DetcalInputError(f"degree must be 'linear' or 'quadratic', got {self.degree!r}", field="degree")
        if not self.l2 >= 0:
            raise DetcalInputError(f"l2 must be >= 0, got {self.l2}", field="l2")
        assert features is not None
        X, names = self._design(p, features)
        pen = np.full(X.shape[1], float(self.l2))
        pen[:2] = 0.0
        w0 = np.zeros(X.shape[1])
        w0[1] = 1.0
        self.coef_ = fit_logistic(X, y, pen, w0=w0)
        self.columns_ = names

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        assert features is not None
        X, _ = self._design(p, features)
        return sigmoid(X @ self.coef_)


class HistogramBinning(ConfidenceCalibrator):
    """Histogram binning (Zadrozny & Elkan 2001), 1-D or over the D-ECE grid.

    * Without features: equal-width bins over p in [0, 1] (``bins``, half-open
      ``[a, b)``, last closed, as :func:`detcal.binning.feature_bin_index`);
      ``p' = mean y`` of the calibration samples in p's bin.
    * With features ``[S,F]``: the D-ECE cells over (p, f_1..f_F)
      (:func:`detcal.binning.cell_index` with ``grid_bins``, default 5 per
      feature, Kueppers et al. 2020); ``p' = mean y`` in the sample's cell.

    Sparse/empty cells fall back, in order: a cell with fewer than
    ``min_samples`` calibration samples uses the 1-D confidence bin of the
    sample; a 1-D bin with fewer than ``min_samples`` uses the global
    frequency ``mean y``. Learned: ``bin_freq_ [B]`` (NaN where sparse),
    ``cell_freq_ [C]`` (NaN where sparse; empty array without features),
    ``global_freq_``, ``bin_count_``, ``cell_count_``.
    """

    uses_features = True

    def __init__(self, bins: int = 15, grid_bins: int | list[int] = 5, min_samples: int = 1) -> None:
        self.bins = bins
        self.grid_bins = grid_bins
        self.min_samples = min_samples

    def _grid(self, n_features: int) -> int | list[int]:
        gb = self.grid_bins
        return int(gb) if np.ndim(gb) == 0 else [int(b) for b in gb]  # type: ignore[union-attr]

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if int(self.bins) < 1:
            raise DetcalInputError(f"bins must be >= 1, got {self.bins}", field="bins")
        if int(self.min_samples) < 1:
            raise DetcalInputError(f"min_samples must be >= 1, got {self.min_samples}", field="min_samples")
        nb = int(self.bins)
        b = feature_bin_index(p, nb)
        cnt = np.bincount(b, minlength=nb).astype(np.float64)
        pos = np.bincount(b, weights=y, minlength=nb)
        with np.errstate(invalid="ignore", divide="ignore"):
            freq = np.where(cnt >= self.min_samples, pos / np.maximum(cnt, 1), np.nan)
        self.bin_freq_ = freq
        self.bin_count_ = cnt.astype(np.int64)
        self.global_freq_ = float(np.mean(y))
        if features is not None:
            try:
                c, n_cells = cell_index(np.column_stack([p, features]), self._grid(features.shape[1] + 1))
            except ValueError as exc:
                raise DetcalInputError(str(exc), field="grid_bins") from exc
            ccnt = np.bincount(c, minlength=n_cells).astype(np.float64)
            cpos = np.bincount(c, weights=y, minlength=n_cells)
            self.cell_freq_ = np.where(ccnt >= self.min_samples, cpos / np.maximum(ccnt, 1), np.nan)
            self.cell_count_ = ccnt.astype(np.int64)
        else:
            self.cell_freq_ = np.zeros(0)
            self.cell_count_ = np.zeros(0, dtype=np.int64)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        out = self.bin_freq_[feature_bin_index(p, len(self.bin_freq_))]
        out = np.where(np.isnan(out), self.global_freq_, out)
        if features is not None:
            c, _ = cell_index(np.column_stack([p, features]), self._grid(features.shape[1] + 1))
            cell = self.cell_freq_[c]
            out = np.where(np.isnan(cell), out, cell)
        return out


class IsotonicCalibration(ConfidenceCalibrator):
    """Isotonic regression calibration (Zadrozny & Elkan 2002).

    ``R = argmin_{R non-decreasing} sum_i (y_i - R(p_i))^2`` by pool adjacent
    violators (:func:`pav`, own vectorised implementation). Ties in p are
    merged first; the fit is stored as thresholds ``x_thresholds_ [M]``,
    ``y_thresholds_ [M]`` (first and last point of each constant block), and
    ``p' = np.interp(clip(p, x_0, x_M), x_thresholds_, y_thresholds_)``
    (linear between blocks, constant outside: scikit-learn's
    ``IsotonicRegression(out_of_bounds="clip")``).
    """

    def __init__(self) -> None:
        pass

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        self.x_thresholds_, self.y_thresholds_ = isotonic_thresholds(p, y)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return np.interp(p, self.x_thresholds_, self.y_thresholds_)


class BBQ(ConfidenceCalibrator):
    """Bayesian Binning into Quantiles (Naeini, Cooper & Hauskrecht, AAAI 2015).

    Models: equal-frequency binnings M_B of the calibration scores (sort p,
    split into B consecutive groups, first ``S mod B`` one larger; the edge
    between two groups is the midpoint of the adjacent scores; outer edges 0
    and 1; bins half-open ``[a, b)``), for every
    ``B in [max(1, floor(S^(1/3) / C)), min(S, ceil(C S^(1/3)))]`` (paper:
    C = 10).

    Score (BDeu-style marginal likelihood, uniform prior P(M)):

        P(D | M) = prod_b  Gamma(N'/B) / Gamma(N_b + N'/B)
                           * Gamma(m_b + alpha_b) / Gamma(alpha_b)
                           * Gamma(n_b + beta_b)  / Gamma(beta_b),

    ``N_b`` samples in bin b, ``m_b`` positives, ``n_b`` negatives, prior
    ``Beta(alpha_b, beta_b)`` with ``alpha_b = N'/B * p_b``,
    ``beta_b = N'/B * (1 - p_b)``, ``p_b`` the midpoint of bin b's interval,
    and equivalent sample size ``N' = prior_strength`` (paper: 2).

    Prediction: ``p' = sum_M w_M P(y=1 | p, M)`` with ``w_M = P(D|M) /
    sum P(D|M')`` (softmax of the log scores) and, within a bin, the
    posterior mean ``(m_b + alpha_b) / (N_b + N'/B)``. Models whose weight
    is below ``weight_floor`` times the largest are dropped (weights
    renormalised; changes p' by less than ``n_models * weight_floor``). The
    averaged map is piecewise constant on the union of the kept models'
    edges and is stored as ``edges_ [U]`` and ``values_ [U+1]``.
    Learned also: ``n_bins_ [M]``, ``log_scores_ [M]``, ``weights_ [M]``.
    """

    def __init__(self, prior_strength: float = 2.0, c: float = 10.0, weight_floor: float = 1e-12) -> None:
        self.prior_strength = prior_strength
        self.c = c
        self.weight_floor = weight_floor

    def bin_range(self, n_samples: int) -> tuple[int, int]:
        """``(B_min, B_max)`` for ``n_samples`` calibration samples."""
        root = n_samples ** (1.0 / 3.0)
        lo = max(1, int(np.floor(root / self.c)))
        hi = max(lo, min(n_samples, int(np.ceil(root * self.c))))
        return lo, hi

    @staticmethod
    def _edges(sp: np.ndarray, n_bins: int) -> np.ndarray:
        """Inner edges [B-1] of the equal-frequency binning of sorted scores ``sp``."""
        q, r = divmod(len(sp), n_bins)
        sizes = np.full(n_bins, q, dtype=np.int64)
        sizes[:r] += 1
        ends = np.cumsum(sizes)[:-1]
        return 0.5 * (sp[ends - 1] + sp[ends])

    def _model(self, sp: np.ndarray, cum_y: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Inner edges, per-bin posterior means and the log marginal likelihood of one binning."""
        inner = self._edges(sp, n_bins)
        idx = np.concatenate(([0], np.searchsorted(sp, inner, side="left"), [len(sp)]))
        n_b = np.diff(idx).astype(np.float64)
        m_b = np.diff(cum_y[idx])
        full = np.concatenate(([0.0], inner, [1.0]))
        mid = 0.5 * (full[:-1] + full[1:])
        a0 = self.prior_strength / n_bins
        alpha = a0 * mid
        beta = a0 * (1.0 - mid)
        log_ml = float(
            np.sum(
                gammaln(a0)
                - gammaln(n_b + a0)
                + gammaln(m_b + alpha)
                - gammaln(alpha)
                + gammaln(n_b - m_b + beta)
                - gammaln(beta)
            )
        )
        return inner, (m_b + alpha) / (n_b + a0), log_ml

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if not self.prior_strength > 0 or not self.c > 0:
            raise DetcalInputError("prior_strength and c must be > 0", field="prior_strength")
        order = np.argsort(p, kind="stable")
        sp = p[order]
        cum_y = np.concatenate(([0.0], np.cumsum(y[order])))
        lo, hi = self.bin_range(len(p))
        n_bins = np.arange(lo, hi + 1)
        models = [self._model(sp, cum_y, int(b)) for b in n_bins]
        log_scores = np.array([m[2] for m in models])
        w = np.exp(log_scores - log_scores.max())
        keep = w >= self.weight_floor
        w = np.where(keep, w, 0.0)
        w /= w.sum()
        # Union of the kept models' edges; the average map is constant between them.
        edges = np.unique(np.concatenate([models[i][0] for i in np.flatnonzero(keep)] + [np.zeros(0)]))
        reps = np.concatenate(([0.0], edges))  # left end of each union interval: a point inside it
        values = np.zeros(len(reps))
        for i in np.flatnonzero(keep):
            inner, vals, _ = models[i]
            values += w[i] * vals[np.searchsorted(inner, reps, side="right")]
        self.n_bins_ = n_bins
        self.log_scores_ = log_scores
        self.weights_ = w
        self.edges_ = edges
        self.values_ = values

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return self.values_[np.searchsorted(self.edges_, p, side="right")]


class BetaCalibration(ConfidenceCalibrator):
    """Beta calibration (Kull, Silva Filho & Flach, AISTATS 2017).

    ``p' = sigmoid(a ln p - b ln(1 - p) + c)``, the logistic regression of y
    on ``(ln p, -ln(1 - p))`` with the constraint ``a, b >= 0`` (which keeps
    the map monotone), fitted by bound-constrained L-BFGS-B on the mean NLL
    (the paper refits without a negative coefficient; the constrained
    optimum is the same). ``parameters``:

    * ``"abm"`` (default): the full three-parameter family (the paper's
      ``a, b, m`` with ``c = b ln(1 - m) - a ln m``; we store ``c``);
    * ``"am"``: ``a = b``, i.e. ``sigmoid(a logit p + c)`` with ``a >= 0``.

    Learned: ``a_``, ``b_``, ``c_``.
    """

    def __init__(self, parameters: str = "abm") -> None:
        self.parameters = parameters

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        q = clip_p(p)
        if self.parameters == "abm":
            X = np.column_stack([np.log(q), -np.log1p(-q), np.ones_like(q)])
            w = fit_logistic(X, y, 0.0, bounds=[(0.0, None), (0.0, None), (None, None)], w0=np.array([1.0, 1.0, 0.0]))
            a, b, c = w
        elif self.parameters == "am":
            X = np.column_stack([logit(q), np.ones_like(q)])
            w = fit_logistic(X, y, 0.0, bounds=[(0.0, None), (None, None)], w0=np.array([1.0, 0.0]))
            a, b, c = w[0], w[0], w[1]
        else:
            raise DetcalInputError(f"parameters must be 'abm' or 'am', got {self.parameters!r}", field="parameters")
        self.a_, self.b_, self.c_ = float(a), float(b), float(c)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        q = clip_p(p)
        return sigmoid(self.a_ * np.log(q) - self.b_ * np.log1p(-q) + self.c_)


__all__ = [
    "BBQ",
    "BetaCalibration",
    "HistogramBinning",
    "IsotonicCalibration",
    "PlattScaling",
    "PositionLogistic",
    "TemperatureScaling",
    "fit_logistic",
    "isotonic_thresholds",
    "pav",
]
