"""scipy.special functions imported on first use, so that ``import detcal.metrics`` stays light."""

from __future__ import annotations

from typing import Any

__all__ = ["ndtr", "ndtri", "gammaincinv"]


def ndtr(x: Any) -> Any:
    """Standard normal CDF (``scipy.special.ndtr``)."""
    from scipy.special import ndtr as f

    return f(x)


def ndtri(p: Any) -> Any:
    """Standard normal quantile (``scipy.special.ndtri``)."""
    from scipy.special import ndtri as f

    return f(p)


def gammaincinv(a: Any, y: Any) -> Any:
    """Inverse of the regularised lower incomplete gamma function (``scipy.special.gammaincinv``)."""
    from scipy.special import gammaincinv as f

    return f(a, y)
