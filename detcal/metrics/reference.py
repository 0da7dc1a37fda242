"""The binned metrics written as their formulas in docs/metrics.md (and docs/newest_measures.md): the definitions.

Read this module to learn what a number means. The package computes the same
numbers with fast paths built for millions of detections (chunked passes,
fixed-point cell sums, reused workspaces: :mod:`detcal.binning.cells`,
:mod:`detcal.binning.kernels`, :mod:`detcal.metrics.regression`); each fast
path names in its docstring the function here that it must equal, and
``tests/metrics/test_metrics_reference.py`` checks that it does, on random and
adversarial inputs (ties, values on bin edges, 0 and 1, empty and sparse
cells, single samples, equal sigmas).

Everything here is plain numpy, one pass per cell or bin, no chunking; it is
slow (O(samples x cells)) and meant for reading and testing, not for use.
Functions return a float (NaN where the metric is undefined) and take the
arguments of the public function of the same name, without its input checks.

Sums over a cell or bin use :func:`math.fsum` (the exactly rounded sum): the
fixed-point cell sums of the confidence fast path are exact too, so a cell's
mean is the same float in both. The box-uncertainty fast paths add floats in
input order; there the agreement is to rounding (the tests allow 1e-12
relative or 1e-14 absolute, the latter for a difference that cancels, e.g.
RMV(b) = RMSE(b) in ENCE).

Axis letters: S samples, F features, B bins, L quantile levels, K coordinates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

EPS: float = float(np.finfo(np.float64).eps)
QUANTILE_LEVELS: np.ndarray = np.linspace(0.05, 0.95, 19)
"""tau = 0.05, 0.10, ..., 0.95 (the default levels of M-QCE and C-QCE)."""


def _mean(values: np.ndarray) -> float:
    """Exactly rounded sum divided by the count (NaN when empty)."""
    return math.fsum(values) / len(values) if len(values) else float("nan")


# ----------------------------------------------------------------------------- confidence cells


def bin_of(v: np.ndarray, n_bins: int, edges: str = "floor") -> np.ndarray:
    """Equal-width bin [S] over [0, 1] of each value under an edge rule ("Confidence cells and edge rules")."""
    v = np.asarray(v, dtype=np.float64)
    if edges == "floor":  # [a, b), the last bin closed: floor(v B)
        b = np.floor(v * n_bins)
    elif edges == "guo":  # ((m-1)/M, m/M], 0 in the first bin: ceil(v M) - 1
        b = np.ceil(v * n_bins) - 1
    elif edges == "netcal":  # netcal 1.4.0: clip to [eps, 1-eps], linspace edges, searchsorted(side="right")
        b = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1), np.clip(v, EPS, 1.0 - EPS), side="right") - 1
    else:
        raise ValueError(f"unknown edge rule {edges!r}")
    return np.clip(b, 0, n_bins - 1).astype(np.int64)


def cells(p: np.ndarray, features: np.ndarray | None, bins: int | Sequence[int], edges: str) -> np.ndarray:
    """Cell [S] of each sample in the product grid over (p, features...), confidence first, C order."""
    columns = [np.asarray(p, dtype=np.float64)]
    if features is not None:
        f = np.asarray(features, dtype=np.float64)
        columns += list((f[:, None] if f.ndim == 1 else f).T)
    b = [int(bins)] * len(columns) if np.ndim(bins) == 0 else [int(x) for x in bins]  # type: ignore[arg-type,union-attr]
    return np.ravel_multi_index([bin_of(c, k, edges) for c, k in zip(columns, b)], b)


def cell_gaps(p: np.ndarray, y: np.ndarray, cell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """N_c and gap(c) = |prec(c) - conf(c)| [C'] of the occupied cells, prec = mean y, conf = mean p."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n_c, gap = [], []
    for c in np.unique(cell):
        inside = cell == c
        n_c.append(int(inside.sum()))
        gap.append(abs(_mean(y[inside]) - _mean(p[inside])))
    return np.array(n_c, dtype=np.float64), np.array(gap)


def _edge_rule(edges: str | None, policy: str) -> str:
    """The default edge rule: netcal's under the netcal policy, else floor."""
    return edges if edges is not None else ("netcal" if policy == "netcal" else "floor")


def confidence_gaps(
    p: np.ndarray,
    y: np.ndarray,
    features: np.ndarray | None,
    bins: int | Sequence[int],
    edges: str,
) -> tuple[np.ndarray, np.ndarray]:
    """N_c and gap(c) of the occupied cells; netcal's rule also averages the clipped p (as netcal 1.4.0)."""
    p_used = np.clip(p, EPS, 1.0 - EPS) if edges == "netcal" else p
    return cell_gaps(p_used, y, cells(p, features, bins, edges))


def dece(
    p: np.ndarray,
    y: np.ndarray,
    features: np.ndarray | None = None,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
    policy: str = "drop",
    *,
    edges: str | None = None,
    q: float = 1.0,
) -> float:
    """D-ECE = sum_c N_c / N' gap(c) over kept cells (N_c >= sample_threshold) of the (p, features) grid.

    ``drop``: N' = N_kept; ``netcal``: sparse cells count gap 0 and N' = N. With ``q``:
    ``(sum_c N_c / N' gap(c)^q)^(1/q)`` (ECE_q).
    """
    n_c, gap = confidence_gaps(p, y, features, bins, _edge_rule(edges, policy))
    kept = n_c >= sample_threshold
    denominator = n_c[kept].sum() if policy == "drop" else n_c.sum()
    if denominator == 0:
        return float("nan")
    return float(np.sum(n_c[kept] / denominator * gap[kept] ** q) ** (1.0 / q))


def ece(
    p: np.ndarray,
    y: np.ndarray,
    bins: int = 15,
    *,
    sample_threshold: int = 1,
    policy: str = "drop",
    edges: str | None = None,
) -> float:
    """ECE = sum_c N_c / N' gap(c) over confidence bins (D-ECE without box features)."""
    return dece(p, y, None, bins, sample_threshold, policy, edges=edges)


def ece_q(
    p: np.ndarray,
    y: np.ndarray,
    q: float = 2,
    bins: int = 15,
    *,
    sample_threshold: int = 1,
    policy: str = "drop",
    edges: str | None = None,
) -> float:
    """ECE_q = (sum_c N_c / N' gap(c)^q)^(1/q) (Kumar et al. 2019's l_q calibration error)."""
    return dece(p, y, None, bins, sample_threshold, policy, edges=edges, q=q)


def mce(
    p: np.ndarray,
    y: np.ndarray,
    bins: int = 15,
    sample_threshold: int = 1,
    *,
    policy: str = "drop",
    edges: str | None = None,
) -> float:
    """MCE = max gap(c) over the kept cells (NaN when none is kept)."""
    n_c, gap = confidence_gaps(p, y, None, bins, _edge_rule(edges, policy))
    kept = n_c >= sample_threshold
    return float(gap[kept].max()) if kept.any() else float("nan")


def _kept_gap_moments(
    p: np.ndarray,
    y: np.ndarray,
    features: np.ndarray | None,
    bins: int | Sequence[int],
    sample_threshold: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Over the kept cells: N_c, gap(c), w_c = N_c / N_kept, the weighted mean gap and its weighted std."""
    n_c, gap = cell_gaps(p, y, cells(p, features, bins, "floor"))
    kept = n_c >= sample_threshold
    n_c, gap = n_c[kept], gap[kept]
    if len(n_c) == 0:
        return n_c, gap, n_c, float("nan"), float("nan")
    w = n_c / n_c.sum()
    mean = float(np.sum(w * gap))
    return n_c, gap, w, mean, float(np.sqrt(np.sum(w * (gap - mean) ** 2)))


def homogeneity(
    p: np.ndarray,
    y: np.ndarray,
    features: np.ndarray | None = None,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
    *,
    spread: str = "std",
) -> float:
    """sqrt(sum_c w_c (gap(c) - mean)^2), w_c = N_c / N_kept over kept cells; ``variance``: no square root."""
    n_c, _, _, _, std = _kept_gap_moments(p, y, features, bins, sample_threshold)
    if len(n_c) == 0:
        return float("nan")
    return std * std if spread == "variance" else std


def outliers(
    p: np.ndarray,
    y: np.ndarray,
    features: np.ndarray | None = None,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
) -> float:
    """sum N_c / N_kept over kept cells with gap(c) > mean + 2 std (tolerance 1e-12), moments of homogeneity."""
    n_c, gap, _, mean, std = _kept_gap_moments(p, y, features, bins, sample_threshold)
    if len(n_c) == 0:
        return float("nan")
    outlier = gap - mean > 2.0 * std + 1e-12
    return float(n_c[outlier].sum() / n_c.sum())


def dece_by_class(
    p: np.ndarray,
    y: np.ndarray,
    features: np.ndarray | None,
    category: np.ndarray,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
    policy: str = "drop",
    *,
    mode: str = "dimension",
) -> float:
    """D-ECE with the class: one more bin dimension (``dimension``) or the N_g / N weighted class mean."""
    category = np.asarray(category)
    if mode == "weighted_mean":
        values, weights = [], []
        for g in np.unique(category):
            f = None if features is None else np.asarray(features)[category == g]
            values.append(dece(p[category == g], y[category == g], f, bins, sample_threshold, policy))
            weights.append(np.sum(category == g))
        ok = np.isfinite(values)
        if not ok.any():
            return float("nan")
        return float(np.sum(np.array(weights)[ok] * np.array(values)[ok]) / np.sum(np.array(weights)[ok]))
    edges = _edge_rule(None, policy)
    cell = cells(p, features, bins, edges)
    cell = np.unique(category, return_inverse=True)[1].reshape(-1) * (int(cell.max(initial=0)) + 1) + cell
    n_c, gap = cell_gaps(np.clip(p, EPS, 1.0 - EPS) if edges == "netcal" else p, y, cell)
    kept = n_c >= sample_threshold
    denominator = n_c[kept].sum() if policy == "drop" else n_c.sum()
    return float(np.sum(n_c[kept] * gap[kept]) / denominator) if denominator else float("nan")


# ----------------------------------------------------------------------------- cell-free confidence measures


def nll(p: np.ndarray, y: np.ndarray) -> float:
    """mean -[y log p + (1 - y) log(1 - p)], p clipped to [1e-12, 1 - 1e-12] at each end."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y).astype(bool)
    terms = np.where(y, -np.log(np.maximum(p, 1e-12)), -np.log(np.maximum(1.0 - p, 1e-12)))
    return _mean(terms)


def brier(p: np.ndarray, y: np.ndarray) -> float:
    """mean (p - y)^2."""
    return _mean((np.asarray(p, dtype=np.float64) - np.asarray(y, dtype=np.float64)) ** 2)


def sharpness(p: np.ndarray, y: np.ndarray | None = None) -> float:
    """Var(p) = mean p^2 - (mean p)^2 (population variance; y is not used)."""
    p = np.asarray(p, dtype=np.float64)
    return max(_mean(p * p) - _mean(p) ** 2, 0.0) if len(p) else float("nan")


def overconfidence(p: np.ndarray, y: np.ndarray) -> float:
    """E[p | y = 0]: the mean score of the unmatched detections (NaN when there are none)."""
    return _mean(np.asarray(p, dtype=np.float64)[~np.asarray(y).astype(bool)])


def underconfidence(p: np.ndarray, y: np.ndarray) -> float:
    """E[1 - p | y = 1]: the mean missing score of the matched detections (NaN when there are none)."""
    return _mean(1.0 - np.asarray(p, dtype=np.float64)[np.asarray(y).astype(bool)])


# ----------------------------------------------------------------------------- bins over sigma


def tie_means(u: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Every value replaced by the mean over the samples with the same u ("Ties of the uncertainty")."""
    out = np.empty(len(values))
    for level in np.unique(u):
        out[u == level] = _mean(values[u == level])
    return out


def sigma_bins(u: np.ndarray, bins: int, binning: str) -> list[np.ndarray]:
    """The samples of each bin over u ("Bins over sigma").

    ``equal_count``: ranks of the stable sort by u split into B consecutive groups, the first S mod B one
    larger (returned as positions in that order: use with :func:`sorted_with_ties`); ``equal_width``: bin
    floor((u - lo) / (hi - lo) B) over [lo, hi] = [min u, max u], the last bin closed (indices into u).
    """
    u = np.asarray(u, dtype=np.float64)
    if binning == "equal_count":
        return np.array_split(np.arange(len(u)), bins)
    lo, hi = (float(u.min()), float(u.max())) if len(u) else (0.0, 0.0)
    b = np.zeros(len(u), np.int64) if hi <= lo else np.clip(np.floor((u - lo) / (hi - lo) * bins), 0, bins - 1)
    return [np.flatnonzero(b == k) for k in range(bins)]


def sorted_with_ties(u: np.ndarray, *values: np.ndarray) -> list[np.ndarray]:
    """Per-sample values in the stable order of u, each tie group carrying its mean (equal-count bins)."""
    order = np.argsort(u, kind="stable")
    return [tie_means(u[order], np.asarray(v, dtype=np.float64)[order]) for v in values]


def _bin_values(u: np.ndarray, bins: int, binning: str, *values: np.ndarray) -> list[list[np.ndarray]]:
    """For each value array, its members in each bin over u (tie groups shared for equal_count)."""
    if binning == "equal_count":
        values = tuple(sorted_with_ties(u, *values))
    return [[v[members] for members in sigma_bins(u, bins, binning)] for v in values]


def ence(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, *, bins: int = 10, binning: str = "equal_count") -> float:
    """ENCE = (1/B') sum_b |RMV(b) - RMSE(b)| / RMV(b) over the B' non-empty bins over sigma (Levi et al. 2019)."""
    var_b, e2_b = _bin_values(sigma, bins, binning, np.square(sigma), np.square(y - mu))
    terms = []
    for var, e2 in zip(var_b, e2_b):
        if len(var):
            rmv, rmse = math.sqrt(_mean(var)), math.sqrt(_mean(e2))
            terms.append(abs(rmv - rmse) / rmv)
    return float(np.mean(terms)) if terms else float("nan")


def coefficient_of_variation(sigma: np.ndarray) -> float:
    """C_v = sqrt(sum (sigma_t - mean)^2 / (T - 1)) / mean (Levi et al. 2019, Eq. 9); 0 when all are equal."""
    sigma = np.asarray(sigma, dtype=np.float64)
    if len(sigma) < 2:
        return float("nan")
    if np.all(sigma == sigma[0]):
        return 0.0
    return float(np.std(sigma, ddof=1) / np.mean(sigma))


def lence(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, *, bins: int = 10, binning: str = "equal_count") -> float:
    """LENCE = ln|ENCE + 1 / C_v| (Lakara et al. 2022, Eq. 5); infinite when C_v = 0."""
    cv = coefficient_of_variation(sigma)
    if cv == 0:
        return float("inf")
    return float(np.log(abs(ence(mu, sigma, y, bins=bins, binning=binning) + 1.0 / cv)))


def uce(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, *, bins: int = 10, binning: str = "equal_width") -> float:
    """UCE = sum_b N_b / N |MSE(b) - MV(b)| over bins of sigma^2 (Laves et al. 2020; netcal 1.4.0)."""
    var = np.square(sigma)
    var_b, e2_b = _bin_values(var, bins, binning, var, np.square(y - mu))
    if len(var) == 0:
        return float("nan")
    return float(sum(len(v) / len(var) * abs(_mean(e2) - _mean(v)) for v, e2 in zip(var_b, e2_b) if len(v)))


# ----------------------------------------------------------------------------- quantile calibration


def _covered(eps: np.ndarray, d: int, levels: np.ndarray) -> list[np.ndarray]:
    """Per level tau: 1(eps <= chi2_d.ppf(tau)) [S] as floats."""
    from scipy import stats  # lazy: the measures registry imports this module at start-up, scipy costs ~0.2 s

    return [(eps <= stats.chi2.ppf(tau, d)).astype(np.float64) for tau in levels]


def m_qce(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, *, levels: np.ndarray = QUANTILE_LEVELS) -> float:
    """M-QCE = mean_tau |coverage(tau) - tau|, coverage(tau) = mean 1(e^2 / sigma^2 <= chi2_1.ppf(tau))."""
    eps = np.square(y - mu) / np.square(sigma)
    return qce_from_nees(eps, None, 1, levels)


def qce_from_nees(
    eps: np.ndarray,
    u: np.ndarray | None,
    d: int,
    levels: np.ndarray,
    *,
    bins: int = 10,
    binning: str = "equal_width",
    sample_threshold: int = 1,
    policy: str = "drop",
) -> float:
    """M-QCE (``u`` None) or C-QCE = mean_tau sum_b w_b |coverage_b(tau) - tau| over bins of u.

    ``drop``: bins with N_b < sample_threshold leave, w_b = N_b / N_kept; ``netcal``: they count with
    coverage 0 and w_b = N_b / N.
    """
    levels = np.asarray(levels, dtype=np.float64)
    if len(eps) == 0:
        return float("nan")
    if u is None:
        return float(np.mean([abs(_mean(c) - tau) for c, tau in zip(_covered(eps, d, levels), levels)]))
    per_level = _bin_values(u, bins, binning, *_covered(eps, d, levels))
    n_b = np.array([len(m) for m in per_level[0]], dtype=np.float64)
    kept = (n_b >= max(sample_threshold, 1)) & (n_b > 0)
    if policy == "drop" and not kept.any():
        return float("nan")
    total = n_b[kept].sum() if policy == "drop" else n_b.sum()
    deviations = []
    for tau, covered_b in zip(levels, per_level):
        cov = np.array([_mean(c) if k else 0.0 for c, k in zip(covered_b, kept)])
        use = kept if policy == "drop" else n_b > 0
        deviations.append(np.sum(n_b[use] / total * np.abs(cov[use] - tau)))
    return float(np.mean(deviations))


def c_qce(
    mu: np.ndarray,
    sigma: np.ndarray,
    y: np.ndarray,
    *,
    levels: np.ndarray = QUANTILE_LEVELS,
    bins: int = 10,
    binning: str = "equal_width",
    sample_threshold: int = 1,
    policy: str = "drop",
) -> float:
    """C-QCE over B bins of sigma (Kueppers et al. 2022), NEES e^2 / sigma^2, d = 1."""
    eps = np.square(y - mu) / np.square(sigma)
    return qce_from_nees(
        eps, sigma, 1, levels, bins=bins, binning=binning, sample_threshold=sample_threshold, policy=policy
    )


def joint_nees(
    mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, cov: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """eps = e^T Sigma^-1 e [S] and sigma_G = det(Sigma)^(1/(2d)) [S]; Sigma = cov or diag(sigma^2)."""
    e = np.asarray(y, dtype=np.float64) - mu
    d = e.shape[1]
    c = np.asarray(cov, dtype=np.float64) if cov is not None else np.stack([np.diag(s * s) for s in sigma])
    eps = np.array([e_i @ np.linalg.solve(c_i, e_i) for e_i, c_i in zip(e, c)])
    return eps, np.array([np.linalg.det(c_i) ** (1.0 / (2 * d)) for c_i in c])


# ----------------------------------------------------------------------------- interval calibration


def interval_calibration_error(
    mu: np.ndarray,
    sigma: np.ndarray,
    y: np.ndarray,
    *,
    m: int = 100,
    reduction: str = "sum",
    kind: str = "one_sided",
) -> float:
    """Kuleshov et al. 2018: CE = sum_j (p_j - P_hat(p_j))^2 over p_j = linspace(0, 1, m).

    ``one_sided``: P_hat(p) = share of Phi(e / sigma) <= p; ``interval``: share with |2 Phi(e / sigma) - 1| <= p
    (inside the central p interval). ``reduction="mean"``: divided by m.
    """
    from scipy import special  # lazy: the measures registry imports this module at start-up, scipy costs ~0.2 s

    z = (np.asarray(y, dtype=np.float64) - mu) / sigma
    p_t = special.ndtr(z) if kind == "one_sided" else np.abs(2.0 * special.ndtr(z) - 1.0)
    if len(p_t) == 0:
        return float("nan")
    levels = np.linspace(0.0, 1.0, m)
    squares = [(p - np.mean(p_t <= p)) ** 2 for p in levels]
    return float(np.sum(squares) if reduction == "sum" else np.mean(squares))


# ----------------------------------------------------------------------------- localisation-aware (Kuzucu et al. 2024)


def right_closed_bins(score: np.ndarray, bins: int, closed: str = "right") -> list[np.ndarray]:
    """Members of each equal-width score bin with edges e = linspace(0, 1, B + 1) (docs/newest_measures.md).

    ``right``: [e_0, e_1], then (e_b, e_b+1]; ``left``: [e_b, e_b+1), the last bin closed.
    """
    e = np.linspace(0.0, 1.0, bins + 1)
    if closed == "right":
        return [np.flatnonzero((score > e[b] if b else score >= e[0]) & (score <= e[b + 1])) for b in range(bins)]
    return [
        np.flatnonzero((score >= e[b]) & ((score < e[b + 1]) if b < bins - 1 else (score <= 1))) for b in range(bins)
    ]


def _binned_class_error(score: np.ndarray, target: np.ndarray, members: list[np.ndarray]) -> float:
    """sum_b N_b / N |mean score in b - mean target in b| over the non-empty bins."""
    n = sum(len(m) for m in members)
    return float(sum(len(m) / n * abs(_mean(score[m]) - _mean(target[m])) for m in members if len(m)))


def _class_average(errors: list[float], variant: str) -> float:
    """Mean over the classes with detections; ``fiveai`` also leaves out a class whose error is exactly 0."""
    kept = [e for e in errors if not (variant == "fiveai" and e == 0.0)]
    return float(np.mean(kept)) if kept else float("nan")


def laece(
    score: np.ndarray,
    target: np.ndarray,
    category: np.ndarray,
    *,
    bins: int = 25,
    closed: str = "right",
    variant: str = "kuzucu2024",
) -> float:
    """LaECE = mean over classes of sum_b N_cb / N_c |mean score in b - mean IoU target in b| (target 0 for a FP)."""
    errors = []
    for c in np.unique(category):
        s, t = score[category == c], target[category == c]
        errors.append(_binned_class_error(s, t, right_closed_bins(s, bins, closed)))
    return _class_average(errors, variant)


def laace(
    score: np.ndarray,
    target: np.ndarray,
    category: np.ndarray,
    *,
    bins: int | None = None,
    variant: str = "kuzucu2024",
) -> float:
    """LaACE: per class, ``bins=None`` mean |score - target| (every detection its own bin), else B equal-count bins
    of the class's detections in ascending score (ties in input order): bin of rank r = floor(r B / N_c)."""
    errors = []
    for c in np.unique(category):
        s, t = score[category == c], target[category == c]
        if bins is None:
            errors.append(_mean(np.abs(s - t)))
            continue
        rank = np.empty(len(s), np.int64)
        rank[np.argsort(s, kind="stable")] = np.arange(len(s))
        members = [np.flatnonzero(rank * bins // len(s) == b) for b in range(bins)]
        errors.append(_binned_class_error(s, t, members))
    return _class_average(errors, variant)


def dece_pooled(score: np.ndarray, tp: np.ndarray, *, bins: int = 10, closed: str = "right") -> float:
    """The benchmark's class-agnostic D-ECE: sum_b N_b / N |precision_b - mean score_b|, right-closed bins."""
    if len(score) == 0:
        return float("nan")
    return _binned_class_error(score, np.asarray(tp, dtype=np.float64), right_closed_bins(score, bins, closed))
