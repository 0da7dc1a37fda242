"""Logistic-regression core of the confidence calibrators (numpy/scipy only).

:func:`fit_logistic_info` minimises the mean Bernoulli NLL (plus an optional
L2 penalty) and says whether it converged; :func:`fit_logistic` returns the
weights only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import minimize

from detcal.calibration.base import sigmoid

GRAD_TOL: float = 1e-10
"""Newton stops when the gradient's max norm is below this (the rounding floor of a mean over 1e5 samples)."""

CONVERGED_GRAD: float = 1e-6
"""A fit whose final gradient max norm exceeds this is reported as not converged."""


def _logistic_objective(w: np.ndarray, X: np.ndarray, y: np.ndarray, l2: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL + 0.5 sum(l2 w^2) and its gradient.

    NLL_i = softplus(x_i . w) - y_i x_i . w, gradient X^T (sigmoid(Xw) - y) / S.
    """
    z = X @ w
    nll = float(np.mean(np.logaddexp(0.0, z) - y * z))
    r = sigmoid(z) - y
    grad = X.T @ r / len(y) + l2 * w
    return nll + 0.5 * float(np.sum(l2 * w * w)), grad


def _projected_grad(w: np.ndarray, g: np.ndarray, bounds: Sequence[tuple[float | None, float | None]]) -> np.ndarray:
    """Gradient with the components that push into an active bound set to 0."""
    pg = g.copy()
    for j, (lo, hi) in enumerate(bounds):
        if lo is not None and w[j] <= lo and g[j] > 0:
            pg[j] = 0.0
        if hi is not None and w[j] >= hi and g[j] < 0:
            pg[j] = 0.0
    return pg


def fit_logistic_info(
    X: np.ndarray,
    y: np.ndarray,
    l2: np.ndarray | float = 0.0,
    bounds: Sequence[tuple[float | None, float | None]] | None = None,
    w0: np.ndarray | None = None,
    max_iter: int = 100,
) -> tuple[np.ndarray, dict[str, Any]]:
    """L2-regularised logistic regression; returns ``(w [P], info)``.

    Minimises ``mean_i [log(1 + exp(x_i.w)) - y_i x_i.w] + 0.5 sum_j l2_j w_j^2``
    over ``w [P]``; ``X [S,P]`` includes any intercept column. ``l2`` is a
    scalar or per-column ``[P]`` (0 leaves a column unpenalised).
    Unconstrained: Newton steps ``H^-1 g`` with ``H = X^T diag(q(1-q)) X / S +
    diag(l2)`` and Armijo backtracking (the objective is convex; P is small),
    until the gradient's max norm is below 1e-10, the Newton decrement
    ``g^T H^-1 g`` is below 1e-22, or no step decreases the objective.
    With ``bounds`` (as for ``scipy.optimize.minimize``): L-BFGS-B.

    ``info``: ``converged`` (a final projected gradient max norm below 1e-6,
    and, when some column is unpenalised, labels not completely separated by
    the fitted scores: on separable data the weights diverge and any stopping
    point is arbitrary), ``method``, ``n_iter``, ``message``, ``grad_max``,
    ``nll``.
    """
    n_col = X.shape[1]
    l2v = np.broadcast_to(np.asarray(l2, dtype=np.float64), (n_col,)).copy()
    w = np.zeros(n_col) if w0 is None else np.asarray(w0, dtype=np.float64).copy()
    if bounds is not None:
        return _fit_bounded(X, y, l2v, w, bounds)
    return _fit_newton(X, y, l2v, w, max_iter)


def _fit_bounded(
    X: np.ndarray,
    y: np.ndarray,
    l2v: np.ndarray,
    w: np.ndarray,
    bounds: Sequence[tuple[float | None, float | None]],
) -> tuple[np.ndarray, dict[str, Any]]:
    """:func:`fit_logistic_info` with bounds: L-BFGS-B from ``w``."""
    res = minimize(
        _logistic_objective,
        w,
        args=(X, y, l2v),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-11},
    )
    w = np.asarray(res.x, dtype=np.float64)
    f, g = _logistic_objective(w, X, y, l2v)
    gmax = float(np.max(np.abs(_projected_grad(w, g, bounds))))
    ok = bool(np.all(np.isfinite(w))) and gmax < CONVERGED_GRAD
    msg = str(res.message)
    if not ok and bool(res.success):
        msg = f"{msg}; but the projected gradient is still {gmax:.3g} (weights diverging: separable data?)"
    if ok and np.any(l2v == 0) and _separates(X @ w, y):
        ok = False
        msg = f"{msg}; but the fitted weights separate the labels completely: no finite maximiser"
    return w, {
        "converged": ok,
        "method": "L-BFGS-B",
        "n_iter": int(res.nit),
        "message": msg,
        "grad_max": gmax,
        "nll": float(f),
    }


def _fit_newton(
    X: np.ndarray,
    y: np.ndarray,
    l2v: np.ndarray,
    w: np.ndarray,
    max_iter: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:func:`fit_logistic_info` without bounds: damped Newton steps from ``w`` (Armijo backtracking)."""
    f, g = _logistic_objective(w, X, y, l2v)
    n_iter = 0
    reason = "iteration limit reached"
    for _ in range(max_iter):
        gmax = float(np.max(np.abs(g)))
        if gmax < GRAD_TOL:
            reason = "gradient below tolerance"
            break
        q = sigmoid(X @ w)
        H = X.T @ (X * (q * (1.0 - q))[:, None]) / len(y) + np.diag(l2v)
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(H, g, rcond=None)[0]
        if not np.all(np.isfinite(step)):
            reason = "non-finite Newton step"
            break
        slope = float(g @ step)  # Newton decrement^2 = g^T H^-1 g: twice the predicted decrease
        if slope < 1e-22:
            reason = "Newton decrement below tolerance"
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
            reason = "no step decreases the objective"
            break
        w, f, g = w_new, f_new, g_new
        n_iter += 1
    gmax = float(np.max(np.abs(g)))
    ok = bool(np.all(np.isfinite(w))) and gmax < CONVERGED_GRAD
    msg = reason if ok else f"{reason}; gradient max norm {gmax:.3g} (weights diverging: separable data?)"
    if ok and np.any(l2v == 0) and _separates(X @ w, y):
        ok = False
        msg = (
            f"{reason}, but the fitted weights separate the labels completely (every y=1 above every y=0): "
            "the likelihood has no finite maximiser and the weights grow until the gradient underflows"
        )
    return w, {"converged": ok, "method": "Newton", "n_iter": n_iter, "message": msg, "grad_max": gmax, "nll": float(f)}


def _separates(z: np.ndarray, y: np.ndarray) -> bool:
    """Whether the linear scores ``z [S]`` separate the labels completely: ``(2y - 1) z > 0`` for every sample.

    Then scaling the weights up lowers the NLL without end (Albert & Anderson
    1984): a maximum-likelihood "fit" is an artefact of the stopping rule.
    """
    return bool(len(y) > 0 and np.all((2.0 * y - 1.0) * z > 0.0))


def fit_logistic(
    X: np.ndarray,
    y: np.ndarray,
    l2: np.ndarray | float = 0.0,
    bounds: Sequence[tuple[float | None, float | None]] | None = None,
    w0: np.ndarray | None = None,
    max_iter: int = 100,
) -> np.ndarray:
    """The weights ``w [P]`` of :func:`fit_logistic_info`."""
    return fit_logistic_info(X, y, l2, bounds, w0, max_iter)[0]


__all__ = ["fit_logistic", "fit_logistic_info"]
