"""detcal's Python API: typed specs in, typed results out, no Hydra.

    import detcal
    result = detcal.evaluate("instances.json", "results.json")
    print(result.to_markdown())

See :func:`detcal.pipeline.evaluation.evaluate` and
:func:`detcal.pipeline.calibration.calibrate`.
"""

from __future__ import annotations

from typing import Any

from detcal.pipeline.sources import LoadedData, load_data
from detcal.pipeline.spec import (
    FEATURES,
    BootstrapSpec,
    CalibrationSpec,
    ConfidenceSpec,
    ConfigError,
    DataSpec,
    DeceBinningSpec,
    EvaluationSpec,
    MatchingSpec,
    ParallelSpec,
    RegressionSpec,
    SigmaBinningSpec,
    SplitSpec,
)

__all__ = [
    "FEATURES",
    "BootstrapSpec",
    "CalibrationSpec",
    "ConfidenceSpec",
    "ConfigError",
    "DataSpec",
    "DeceBinningSpec",
    "EvaluationSpec",
    "MatchingSpec",
    "ParallelSpec",
    "RegressionSpec",
    "SigmaBinningSpec",
    "SplitSpec",
    "LoadedData",
    "load_data",
    "evaluate",
    "calibrate",
    "EvaluationResult",
    "CalibrationResult",
]


def __getattr__(name: str) -> Any:  # lazy: importing the specs stays cheap
    if name == "evaluate":
        from detcal.pipeline.evaluation import evaluate  # lazy: the package attribute loads on first use

        return evaluate
    if name == "calibrate":
        from detcal.pipeline.calibration import calibrate  # lazy: the package attribute loads on first use

        return calibrate
    if name == "EvaluationResult":
        from detcal.pipeline.result import EvaluationResult  # lazy: the package attribute loads on first use

        return EvaluationResult
    if name == "CalibrationResult":
        from detcal.pipeline.calibration_result import (
            CalibrationResult,  # lazy: the package attribute loads on first use
        )

        return CalibrationResult
    raise AttributeError(name)
