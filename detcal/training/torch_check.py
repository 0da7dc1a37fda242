"""A clear message instead of an ImportError traceback when torch is missing."""

from __future__ import annotations

from detcal.core.errors import DetcalError

__all__ = ["TorchMissingError", "require_torch"]


class TorchMissingError(DetcalError, ImportError):
    """torch (or torchvision) is not installed but a training feature needs it."""


def require_torch(what: str) -> None:
    """Import torch and torchvision, or raise :class:`TorchMissingError` naming ``what`` and the fix."""
    missing = []
    for name in ("torch", "torchvision"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise TorchMissingError(
            f"{what} needs {' and '.join(missing)}, which is not installed; "
            "install detcal with the train extra: pip install 'detcal[train]'"
        )
