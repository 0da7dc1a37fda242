"""Checks every configuration spec runs on construction, and the error they raise.

Each check names the dotted config key (``matching.mode``, ``data.gt``) and says
what is allowed, so a mistake on the command line or in a notebook ends with one
line the user can act on. The specs of every layer (:mod:`detcal.data.specs`,
:mod:`detcal.pipeline.spec`, :mod:`detcal.training.spec`, the app schemas) use
these, so a rule is written once.
"""

from __future__ import annotations

import math
from typing import Any

from detcal.core.errors import DetcalError

__all__ = ["REQUIRED", "ConfigError", "check_choice", "check_int", "check_number", "check_prob"]

REQUIRED: Any = "???"
"""The default of a field the composed config must set (OmegaConf's ``MISSING``, spelled without
importing it): the app schemas' ``data``, which a config group always fills."""


class ConfigError(DetcalError, ValueError):
    """A configuration value is missing, of the wrong type or not an allowed choice.

    ``key`` is the dotted config key (``matching.mode``); the message says what is allowed.
    """

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"config key '{key}': {message}")


def check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    """``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(allowed)}")


def check_int(key: str, value: Any, lo: int | None = None) -> None:
    """``value`` is an integer (not a bool), at least ``lo`` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise ConfigError(key, f"must be >= {lo}, got {value}")


def check_number(key: str, value: Any, *, lo: float | None = None, positive: bool = False) -> None:
    """``value`` is a finite number, > 0 when ``positive``, at least ``lo`` when given."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    if positive and not float(value) > 0:
        raise ConfigError(key, f"must be > 0, got {value}")
    if lo is not None and float(value) < lo:
        raise ConfigError(key, f"must be >= {lo}, got {value}")


def check_prob(key: str, value: Any, *, open_lo: bool = False, open_hi: bool = False) -> None:
    """``value`` is a number in [0, 1] (``open_lo`` / ``open_hi``: the end excluded)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ConfigError(key, f"must be a number, got {value!r}")
    v = float(value)
    if (v < 0 or (open_lo and v == 0)) or (v > 1 or (open_hi and v == 1)):
        lo, hi = "(" if open_lo else "[", ")" if open_hi else "]"
        raise ConfigError(key, f"must be in {lo}0, 1{hi}, got {value}")
