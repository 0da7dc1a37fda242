"""detcal.data's package names are read on first use (PEP 562): each resolves to its module's object, every
public name is in the table, and importing the package (or detcal.data.specs, every command's start-up)
loads neither the class-map nor the KITTI module."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import detcal.data as data

REPO = Path(__file__).resolve().parents[2]


def test_every_lazy_name_resolves_to_its_module_object() -> None:
    assert sorted(data._LAZY) == sorted(data.__all__)
    for name, module in data._LAZY.items():
        assert getattr(data, name) is getattr(importlib.import_module(module), name), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'load_nothing'"):
        data.load_nothing  # noqa: B018


def test_importing_the_specs_leaves_the_adapters_unloaded() -> None:
    code = (
        "import sys, detcal.data, detcal.data.specs; "
        "print(sorted(m for m in ('detcal.data.classmap', 'detcal.data.kitti', 'detcal.data.coco') if m in sys.modules)); "
        "from detcal.data import ClassMap, load_kitti_labels; "
        "print(ClassMap.__module__, load_kitti_labels.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "detcal.data.classmap detcal.data.kitti"], out.stdout
