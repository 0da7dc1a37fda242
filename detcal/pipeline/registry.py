"""Where the configs live, and the one calibrator registry: ``configs/calibrator/<name>.yaml``.

Each calibrator file names its class with ``_target_`` and holds its
parameters; the apps (through Hydra's config groups) and :func:`make_calibrator`
(for the Python API and the main job) read the same files.

Config directory, searched in this order: the environment variable
``DETCAL_CONFIG_DIR``; ``<repo>/configs`` beside the package (a source
checkout or an editable install); ``detcal/_configs`` inside an installed package.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detcal.pipeline.spec import ConfigError

if TYPE_CHECKING:
    from detcal.calibration.base import Calibrator

__all__ = ["CONFIG_ENV", "config_dir", "calibrator_names", "make_calibrator"]

CONFIG_ENV = "DETCAL_CONFIG_DIR"
_PRIMARY = "evaluate.yaml"


def _candidates() -> list[Path]:
    pkg = Path(__file__).resolve().parent.parent  # .../detcal
    out = []
    env = os.environ.get(CONFIG_ENV)
    if env:
        out.append(Path(env).expanduser().resolve())
    return out + [pkg.parent / "configs", pkg / "_configs"]


def config_dir() -> Path:
    """The configs directory; a clear error naming every place searched when there is none."""
    cands = _candidates()
    for c in cands:
        if (c / _PRIMARY).is_file():
            return c
    raise FileNotFoundError(
        f"detcal configs not found (looked for {_PRIMARY} in: {', '.join(map(str, cands))}); "
        f"set {CONFIG_ENV} to a copy of the repository's configs/ directory"
    )


def calibrator_names() -> list[str]:
    """Names of the registered calibrators (the files of configs/calibrator)."""
    return sorted(p.stem for p in (config_dir() / "calibrator").glob("*.yaml"))


def make_calibrator(name: str, **overrides: Any) -> Calibrator:
    """Instantiate the calibrator ``configs/calibrator/<name>.yaml`` (with parameter overrides)."""
    from hydra.utils import instantiate  # lazy: Hydra only where a command composes its config, kept out of start-up
    from omegaconf import OmegaConf  # lazy: Hydra only where a command composes its config, kept out of start-up

    path = config_dir() / "calibrator" / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError("calibrator", f"{name!r} is not one of {', '.join(calibrator_names())}")
    node = OmegaConf.load(path)
    unknown = [k for k in overrides if k not in node]
    if unknown:
        raise ConfigError(
            f"calibrator.{unknown[0]}",
            f"not a parameter of {name} ({', '.join(str(k) for k in node if k != '_target_') or 'it takes none'})",
        )
    node = OmegaConf.merge(node, overrides)
    # lazy: Hydra only where a command composes its config; _locate, as get_class would also log the failure
    from hydra._internal.utils import _locate

    # lazy: the calibration package imports scipy.optimize and friends (0.4 s); config_dir() runs in every command
    from detcal.calibration.base import Calibrator

    target = str(OmegaConf.select(node, "_target_"))
    cls = _locate(target)
    if not (isinstance(cls, type) and issubclass(cls, Calibrator)):
        raise ConfigError("calibrator._target_", f"{target!r} is not a calibrator")
    return instantiate(node, _recursive_=False)  # a nested _target_ in an override is never called
