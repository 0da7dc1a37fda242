"""Independent pieces of work in forked processes, in order (no pickling of the inputs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["map_in_processes"]

_STATE: dict[str, Any] = {}


def _call(item: Any) -> Any:
    return _STATE["fn"](item, *_STATE["args"])


def map_in_processes(fn: Callable[..., Any], items: Sequence[Any], args: tuple, workers: int) -> list[Any]:
    """``[fn(item, *args) for item in items]`` in ``workers`` forked processes, in order.

    ``args`` reach the workers through fork (no pickling of the large arrays); the results come back pickled."""
    if workers <= 1 or len(items) <= 1:
        return [fn(i, *args) for i in items]
    import multiprocessing as mp  # lazy: it imports socket and more; only a run with workers needs it

    _STATE.update(fn=fn, args=args)
    try:
        with mp.get_context("fork").Pool(min(workers, len(items))) as pool:
            return pool.map(_call, list(items), chunksize=1)
    finally:
        _STATE.clear()
