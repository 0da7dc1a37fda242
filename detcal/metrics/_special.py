"""scipy.special functions imported on first use, so that ``import detcal.metrics`` stays light."""

from __future__ import annotations

from typing import Any

from numpy.typing import ArrayLike

__all__ = ["ndtr", "ndtri", "gammaincinv"]


def ndtr(x: ArrayLike) -> Any:
    """Standard normal CDF (``scipy.special.ndtr``)."""
    from scipy.special import ndtr as f  # lazy: scipy kept out of start-up

    return f(x)


def ndtri(p: ArrayLike) -> Any:
    """Standard normal quantile (``scipy.special.ndtri``)."""
    from scipy.special import ndtri as f  # lazy: scipy kept out of start-up

    return f(p)


def gammaincinv(a: ArrayLike, y: ArrayLike) -> Any:
    """Inverse of the regularised lower incomplete gamma function (``scipy.special.gammaincinv``)."""
    from scipy.special import gammaincinv as f  # lazy: scipy kept out of start-up

    return f(a, y)
