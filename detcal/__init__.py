"""detcal: object-detection calibration benchmark.

The Python API (Hydra-free, what every command calls)::

    import detcal
    result = detcal.evaluate("instances_val2017.json", "results.json")   # or (Dataset, Detections), DataSpec
    print(result.to_markdown())
    result.write("out/")

    cal = detcal.calibrate(detcal.DataSpec(), confidence="temperature", regression="std_scaling")
"""

import importlib
from typing import Any

from detcal._version import __version__

_API = {
    "evaluate": "detcal.pipeline.evaluation",
    "calibrate": "detcal.pipeline.calibration",
    "EvaluationResult": "detcal.pipeline.result",
    "CalibrationResult": "detcal.pipeline.calibration_result",
    "DetectionCalibration": "detcal.integrations.evaluator",
}
_SPECS = (
    "DataSpec",
    "EvaluationSpec",
    "MatchingSpec",
    "DeceBinningSpec",
    "SigmaBinningSpec",
    "ConfidenceSpec",
    "RegressionSpec",
    "BootstrapSpec",
    "CalibrationSpec",
    "SplitSpec",
    "ConfigError",
)

__all__ = ["__version__", *_API, *_SPECS]


def __getattr__(name: str) -> Any:  # lazy, so that `import detcal.metrics` stays light
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    if name in _SPECS:
        return getattr(importlib.import_module("detcal.pipeline.spec"), name)
    raise AttributeError(f"module 'detcal' has no attribute {name!r}")
