"""Calibrator configs of the commands: the class a ``_target_`` names, checked before anything is called."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra._internal.utils import _locate  # get_class would also log the failure
from hydra.utils import instantiate as hydra_instantiate

from detcal.apps._errors import first_line
from detcal.core.errors import DetcalError
from detcal.pipeline.spec import ConfigError

__all__ = ["instantiate_checked", "target_class"]


def target_class(node: Mapping[str, Any], key: str) -> type:
    """The class a calibrator config's ``_target_`` names, checked without calling anything: a subclass of
    :class:`detcal.calibration.base.Calibrator` (``builtins.open`` and the like are refused), no
    ``_partial_``/``_args_``."""

    from detcal.calibration.base import Calibrator  # lazy: the calibration package imports scipy (kept out of start-up)

    target = str(node["_target_"])
    extra = [k for k in ("_partial_", "_args_", "_convert_", "_recursive_") if k in node]
    if extra:
        raise ConfigError(f"{key}.{extra[0]}", "not allowed in a calibrator config")
    try:
        cls = _locate(target)
    except Exception as exc:  # noqa: BLE001 - not importable, or not a class
        raise ConfigError(f"{key}._target_", f"{target!r} is not a calibrator class ({first_line(exc)})") from None
    if not (isinstance(cls, type) and issubclass(cls, Calibrator)):
        raise ConfigError(
            f"{key}._target_", f"{target!r} is not a calibrator (a subclass of detcal.calibration.base.Calibrator)"
        )
    return cls


def instantiate_checked(node: Any, key: str) -> Any:
    """Build a ``_target_`` node (a calibrator) with a clear error naming ``key``; the target must be a
    subclass of :class:`detcal.calibration.base.Calibrator`, checked before it is called."""
    if node is None:
        return None
    if not isinstance(node, Mapping) or "_target_" not in node:
        raise ConfigError(key, f"expected a config with _target_ (one of configs/{key.split('.')[0]}/), got {node!r}")
    target_class(node, key)  # checked before anything is called
    try:
        return hydra_instantiate(dict(node), _recursive_=False)  # a nested _target_ is never called
    except Exception as exc:  # noqa: BLE001 - reported with the key
        cause = exc.__cause__ or exc
        field = getattr(cause, "field", None)
        if isinstance(cause, DetcalError) and field:
            raise ConfigError(f"{key}.{field}", getattr(cause, "message", str(cause))) from exc
        raise ConfigError(key, f"cannot build {node['_target_']}: {first_line(cause)}") from exc
