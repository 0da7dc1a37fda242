"""A package's public names read from their modules on first use (PEP 562), so importing the package costs
only what its caller reads.

A package maps each name to its module (``{"name": "pkg.module"}``) and defines
``__getattr__ = lazy_getattr(__name__, globals(), names)``: the first read of a name imports its module and
keeps the value in the package's namespace, so later reads are plain lookups."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, namespace: MutableMapping[str, Any], names: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` (its ``globals()`` as ``namespace``) for ``names`` (name ->
    module)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
