"""Public alias of :mod:`detcal.core.types` (the typed records every stage shares).

Kept so that ``from detcal.types import Dataset, Detections`` keeps working; the
package itself imports :mod:`detcal.core.types`.
"""

from detcal.core.types import (
    Dataset,
    Detections,
    GroundTruth,
    Images,
    KittiRules,
    MatchResult,
    MetricResult,
    Skipped,
)

__all__ = ["Dataset", "Detections", "GroundTruth", "Images", "KittiRules", "MatchResult", "MetricResult", "Skipped"]
