"""The narrowest integer types the diagnostics hold their codes, rows and counts in (TIDE's scene and fixes,
the class-agnostic matching, the operating points, the post-processing split): one home for the choices.

Every choice keeps the values (a code or row that does not fit takes the wider type), so a number computed from
them is the same whichever type holds them; the narrow types only read less memory (gathers stay in the
processor's cache) and let numpy sort 16-bit codes by its radix sort."""

from __future__ import annotations

import numpy as np

__all__ = ["index_type", "narrow_codes", "sort_code_type", "small_sort", "radix_sort"]


def narrow_codes(codes: np.ndarray, bound: int) -> np.ndarray:
    """Integer codes in ``[-1, bound)`` as int16, int32 or int64, the narrowest that holds them (no copy when
    they already have that type)."""
    return codes.astype(np.int16 if bound < 2**15 else np.int32 if bound < 2**31 else np.int64, copy=False)


def index_type(n: int) -> type[np.signedinteger]:
    """int32 for row positions, ranks or counts below ``n`` when they fit, else int64."""
    return np.int32 if n < 2**31 else np.int64


def sort_code_type(bound: int) -> type[np.signedinteger]:
    """int16 for codes in ``[-1, bound)`` when they fit (numpy sorts them stably by radix), else int64."""
    return np.int16 if bound < 2**15 else np.int64


def small_sort(codes: np.ndarray, bound: int) -> np.ndarray:
    """Stable argsort of non-negative integer codes below ``bound`` (numpy's radix sort when they fit 16 bits)."""
    return np.argsort(codes.astype(sort_code_type(bound)), kind="stable")


def radix_sort(codes: np.ndarray, bound: int) -> np.ndarray:
    """Stable argsort of non-negative integer codes below ``bound`` in any order: the same permutation as
    :func:`small_sort`, by two stable 16-bit radix passes (the low half, then the high half) when the codes
    fit 32 bits. For codes far from sorted, several times quicker than the stable sort of wide integers, which
    is quicker only on codes nearly in order (use :func:`small_sort` there)."""
    if bound <= 2**16 or bound > 2**32:
        return small_sort(codes, bound) if bound > 2**16 else np.argsort(codes.astype(np.uint16), kind="stable")
    low = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
    high = (codes >> 16).astype(np.uint16)[low]
    return low[np.argsort(high, kind="stable")]
