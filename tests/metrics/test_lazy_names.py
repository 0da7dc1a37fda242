"""detcal.metrics's names read on first use (the bootstrap and the regression metrics) resolve to their
modules' objects and are public."""

from __future__ import annotations

import importlib

import detcal.metrics as metrics


def test_every_lazy_name_resolves_to_its_module_object() -> None:
    assert metrics._LAZY  # the table is not empty
    for name, module in metrics._LAZY.items():
        assert name in metrics.__all__, name
        assert getattr(metrics, name) is getattr(importlib.import_module(module), name), name
