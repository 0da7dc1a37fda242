"""Row operations on delta-record detections (numpy only; shared by prediction and data parallelism)."""

from __future__ import annotations

import numpy as np

from detcal.core.types import Detections

__all__ = ["DETECTION_FIELDS", "empty_detections", "concat_detections"]

DETECTION_FIELDS: tuple[str, ...] = ("box", "score", "category", "proposal", "delta_mean", "delta_std")


def empty_detections() -> Detections:
    """A zero-row delta-record :class:`Detections`."""
    z4 = np.zeros((0, 4))
    return Detections(
        image_id=np.zeros(0, np.int64),
        box=z4,
        score=np.zeros(0),
        category=np.zeros(0, np.int64),
        proposal=z4,
        delta_mean=z4,
        delta_std=z4,
    )


def concat_detections(parts: list[Detections]) -> Detections:
    """Row-concatenation of delta-record :class:`Detections` (fields of :data:`DETECTION_FIELDS`)."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_detections()
    cols = {name: np.concatenate([getattr(p, name) for p in parts]) for name in ("image_id",) + DETECTION_FIELDS}
    return Detections(**cols)
