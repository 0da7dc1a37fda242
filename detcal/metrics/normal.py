"""The standard normal CDF and quantile in plain Python, equal bit for bit to ``scipy.special.ndtr`` / ``ndtri``.

The BCa interval (:mod:`detcal.metrics.bootstrap`) reads the normal CDF and
quantile at a few points per metric. ``import scipy.special`` costs about
0.05 s of CPU after ``scipy.sparse`` (0.13 s on its own; its array-API wrappers
are built at import) for those few values, so these two functions are written
out here with the Cephes rational approximations that scipy evaluates (the
same coefficients, the same order of operations, ``math.exp``/``math.log``/
``math.sqrt`` from the same C library): the results are the same doubles, which
``tests/metrics/test_normal.py`` checks against scipy on a million points and
on the branch boundaries. Each call loops in Python over its input, so they
are meant for a handful of values, not for columns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["ndtr", "ndtri"]

_MAXLOG = 7.09782712893383996843e2  # log of the largest double (Cephes)
_SQRT1_2 = 7.07106781186547524401e-1
_SQRT2PI = 2.50662827463100050242e0
_EXP_M2 = 0.13533528323661269189  # exp(-2)

# erfc for 1 <= |x| < 8: P(x) / Q(x), Q monic
_ERFC_P = (
    2.46196981473530512524e-10,
    5.64189564831068821977e-1,
    7.46321056442269912687e0,
    4.86371970985681366614e1,
    1.96520832956077098242e2,
    5.26445194995477358631e2,
    9.34528527171957607540e2,
    1.02755188689515710272e3,
    5.57535335369399327526e2,
)
_ERFC_Q = (
    1.32281951154744992508e1,
    8.67072140885989742329e1,
    3.54937778887819891062e2,
    9.75708501743205489753e2,
    1.82390916687909736289e3,
    2.24633760818710981792e3,
    1.65666309194161350182e3,
    5.57535340817727675546e2,
)
# erfc for |x| >= 8
_ERFC_R = (
    5.64189583547755073984e-1,
    1.27536670759978104416e0,
    5.01905042251180477414e0,
    6.16021097993053585195e0,
    7.40974269950448939160e0,
    2.97886665372100240670e0,
)
_ERFC_S = (
    2.26052863220117276590e0,
    9.39603524938001434673e0,
    1.20489539808096656605e1,
    1.70814450747565897222e1,
    9.60896809063285878198e0,
    3.36907645100081516050e0,
)
# erf for |x| <= 1: x T(x^2) / U(x^2)
_ERF_T = (
    9.60497373987051638749e0,
    9.00260197203842689217e1,
    2.23200534594684319226e3,
    7.00332514112805075473e3,
    5.55923013010394962768e4,
)
_ERF_U = (
    3.35617141647503099647e1,
    5.21357949780152679795e2,
    4.59432382970980127987e3,
    2.26290000613890934246e4,
    4.92673942608635921086e4,
)
# ndtri for |y - 0.5| <= 3/8
_Q_P0 = (
    -5.99633501014107895267e1,
    9.80010754185999661536e1,
    -5.66762857469070293439e1,
    1.39312609387279679503e1,
    -1.23916583867381258016e0,
)
_Q_Q0 = (
    1.95448858338141759834e0,
    4.67627912898881538453e0,
    8.63602421390890590575e1,
    -2.25462687854119370527e2,
    2.00260212380060660359e2,
    -8.20372256168333339912e1,
    1.59056225126211695515e1,
    -1.18331621121330003142e0,
)
# ndtri tails, z = sqrt(-2 log y) in [2, 8)
_Q_P1 = (
    4.05544892305962419923e0,
    3.15251094599893866154e1,
    5.71628192246421288162e1,
    4.40805073893200834700e1,
    1.46849561928858024014e1,
    2.18663306850790267539e0,
    -1.40256079171354495875e-1,
    -3.50424626827848203418e-2,
    -8.57456785154685413611e-4,
)
_Q_Q1 = (
    1.57799883256466749731e1,
    4.53907635128879210584e1,
    4.13172038254672030440e1,
    1.50425385692907503408e1,
    2.50464946208309415979e0,
    -1.42182922854787788574e-1,
    -3.80806407691578277194e-2,
    -9.33259480895457427372e-4,
)
# ndtri tails, z >= 8
_Q_P2 = (
    3.23774891776946035970e0,
    6.91522889068984211695e0,
    3.93881025292474443415e0,
    1.33303460815807542389e0,
    2.01485389549179081538e-1,
    1.23716634817820021358e-2,
    3.01581553508235416007e-4,
    2.65806974686737550832e-6,
    6.23974539184983293730e-9,
)
_Q_Q2 = (
    6.02427039364742014255e0,
    3.67983563856160859403e0,
    1.37702099489081330271e0,
    2.16236993594496635890e-1,
    1.34204006088543189037e-2,
    3.28014464682127739104e-4,
    2.89247864745380683936e-6,
    6.79019408009981274425e-9,
)


def _poly(x: float, coef: Sequence[float]) -> float:
    """Horner's rule from the highest coefficient (``polevl``)."""
    acc = coef[0]
    for c in coef[1:]:
        acc = acc * x + c
    return acc


def _monic(x: float, coef: Sequence[float]) -> float:
    """Horner's rule with an implicit leading 1 (``p1evl``)."""
    acc = x + coef[0]
    for c in coef[1:]:
        acc = acc * x + c
    return acc


def _erf(x: float) -> float:
    if x != x:
        return x
    if x < 0.0:
        return -_erf(-x)
    if abs(x) > 1.0:
        return 1.0 - _erfc(x)
    z = x * x
    return x * _poly(z, _ERF_T) / _monic(z, _ERF_U)


def _erfc(a: float) -> float:
    if a != a:
        return a
    x = -a if a < 0.0 else a
    if x < 1.0:
        return 1.0 - _erf(a)
    z = -a * a
    if z < -_MAXLOG:
        return 2.0 if a < 0 else 0.0
    z = math.exp(z)
    if x < 8.0:
        p, q = _poly(x, _ERFC_P), _monic(x, _ERFC_Q)
    else:
        p, q = _poly(x, _ERFC_R), _monic(x, _ERFC_S)
    y = (z * p) / q
    if a < 0:
        y = 2.0 - y
    if y != 0.0:
        return y
    return 2.0 if a < 0 else 0.0


def _ndtr(a: float) -> float:
    if a != a:
        return a
    x = a * _SQRT1_2
    z = abs(x)
    if z < 1.0:
        return 0.5 + 0.5 * _erf(x)
    y = 0.5 * _erfc(z)
    return 1.0 - y if x > 0 else y


def _ndtri(y0: float) -> float:
    if y0 == 0.0:
        return -math.inf
    if y0 == 1.0:
        return math.inf
    if y0 != y0 or y0 < 0.0 or y0 > 1.0:
        return math.nan
    negate = True
    y = y0
    if y > 1.0 - _EXP_M2:
        y = 1.0 - y
        negate = False
    if y > _EXP_M2:
        y = y - 0.5
        y2 = y * y
        x = y + y * (y2 * _poly(y2, _Q_P0) / _monic(y2, _Q_Q0))
        return x * _SQRT2PI
    x = math.sqrt(-2.0 * math.log(y))
    x0 = x - math.log(x) / x
    z = 1.0 / x
    if x < 8.0:
        x1 = z * _poly(z, _Q_P1) / _monic(z, _Q_Q1)
    else:
        x1 = z * _poly(z, _Q_P2) / _monic(z, _Q_Q2)
    x = x0 - x1
    return -x if negate else x


def _elementwise(f: Callable[[float], float], x: ArrayLike) -> Any:
    """``f`` over ``x`` as a ufunc would: a float64 array of ``x``'s shape, a numpy scalar for a scalar."""
    arr = np.asarray(x, dtype=np.float64)
    out = np.array([f(v) for v in arr.ravel().tolist()], dtype=np.float64).reshape(arr.shape)
    return out[()] if out.ndim == 0 else out


def ndtr(x: ArrayLike) -> Any:
    """Standard normal CDF, the same doubles as ``scipy.special.ndtr`` (for a few values: a Python loop)."""
    return _elementwise(_ndtr, x)


def ndtri(p: ArrayLike) -> Any:
    """Standard normal quantile, the same doubles as ``scipy.special.ndtri`` (for a few values: a Python loop)."""
    return _elementwise(_ndtri, p)
