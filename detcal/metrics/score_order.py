"""The detections by descending score, ties in input order (``np.argsort(-score, kind="stable")``), computed
once per run and shared by the stages that need it (TIDE's scene, the operating points, OCE's post-processing
split).

The last order is kept with the address of the scores it sorted. A later call on the same scores checks it in
one linear pass before reusing it: every neighbour pair must descend, or tie with ascending rows; a
permutation passing that check is the stable sort, the only one (so a stale or foreign order is never
returned). A check that fails sorts again."""

from __future__ import annotations

import numpy as np

__all__ = ["descending_order", "stable_descending"]

_last: dict[str, object] = {}


def _key(score: np.ndarray) -> tuple[int, int, tuple[int, ...]]:
    return (int(score.__array_interface__["data"][0]), len(score), tuple(score.strides))


def _is_stable_descending(score: np.ndarray, order: np.ndarray) -> bool:
    s = score[order]
    down = s[1:] < s[:-1]
    tie = (s[1:] == s[:-1]) & (order[1:] > order[:-1])
    return bool(np.all(down | tie))


def stable_descending(score: np.ndarray) -> np.ndarray:
    """``np.argsort(-score, kind="stable")`` (the same permutation) from two unstable sorts, each far quicker
    than the stable sort of floats: the scores by descending value, then the keys ``run * D + row`` (``run``
    the place of the row's value among the distinct values): distinct integers, so their order is the one
    order by value, then row. Non-finite scores or more than 2**31 rows: the stable sort itself."""
    score = np.asarray(score).reshape(-1)
    n = len(score)
    if n < 2 or n >= 2**31 or score.dtype.kind != "f" or not np.isfinite(score).all():
        return np.argsort(-score, kind="stable")
    order = np.argsort(-score)
    sv = score[order]
    run = np.zeros(n, np.int64)
    np.cumsum(sv[1:] != sv[:-1], out=run[1:])  # 0.0 and -0.0 are one value, as in the sort
    del sv
    key = run * n + order
    del order
    key.sort()
    key -= run * n  # the runs keep their places (only rows of one run trade places): the rows
    return key


def descending_order(score: np.ndarray) -> np.ndarray:
    """Row order [D] of ``score`` by descending value, ties in input order (read-only; equal to
    ``np.argsort(-score, kind="stable")``, computed by :func:`stable_descending` when not reused)."""
    score = np.asarray(score).reshape(-1)
    order = _last.get("order")
    if (
        isinstance(order, np.ndarray)
        and _last.get("key") == _key(score)
        and len(order) == len(score)
        and _is_stable_descending(score, order)
    ):
        return order
    order = stable_descending(score)
    order.flags.writeable = False
    _last["order"], _last["key"] = order, _key(score)
    return order
