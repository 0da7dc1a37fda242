"""The detections by descending score, ties in input order (``np.argsort(-score, kind="stable")``), computed
once per run and shared by the stages that need it (TIDE's scene, the operating points, OCE's post-processing
split).

The last order is kept with the address of the scores it sorted. A later call on the same scores checks it in
one linear pass before reusing it: every neighbour pair must descend, or tie with ascending rows; a
permutation passing that check is the stable sort, the only one (so a stale or foreign order is never
returned). A check that fails sorts again."""

from __future__ import annotations

import numpy as np

__all__ = ["descending_order"]

_last: dict[str, object] = {}


def _key(score: np.ndarray) -> tuple[int, int, tuple[int, ...]]:
    return (int(score.__array_interface__["data"][0]), len(score), tuple(score.strides))


def _is_stable_descending(score: np.ndarray, order: np.ndarray) -> bool:
    s = score[order]
    down = s[1:] < s[:-1]
    tie = (s[1:] == s[:-1]) & (order[1:] > order[:-1])
    return bool(np.all(down | tie))


def descending_order(score: np.ndarray) -> np.ndarray:
    """Row order [D] of ``score`` by descending value, ties in input order (read-only; equal to
    ``np.argsort(-score, kind="stable")`` for finite scores, and computed that way when not reused)."""
    score = np.asarray(score).reshape(-1)
    order = _last.get("order")
    if (
        isinstance(order, np.ndarray)
        and _last.get("key") == _key(score)
        and len(order) == len(score)
        and _is_stable_descending(score, order)
    ):
        return order
    order = np.argsort(-score, kind="stable")
    order.flags.writeable = False
    _last["order"], _last["key"] = order, _key(score)
    return order
