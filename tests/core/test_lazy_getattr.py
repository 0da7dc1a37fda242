"""detcal.utils.lazy_names: a package's names read from their modules on first use, kept afterwards."""

from __future__ import annotations

import pytest

from detcal.utils.lazy_names import lazy_getattr


def test_first_read_imports_and_keeps_the_value() -> None:
    namespace: dict[str, object] = {}
    get = lazy_getattr("pkg", namespace, {"sqrt": "math", "dumps": "json"})
    import json
    import math

    assert get("sqrt") is math.sqrt and get("dumps") is json.dumps
    assert namespace == {"sqrt": math.sqrt, "dumps": json.dumps}  # later reads are plain lookups


def test_an_unknown_name_is_an_attribute_error_naming_the_package() -> None:
    get = lazy_getattr("detcal.example", {}, {"sqrt": "math"})
    with pytest.raises(AttributeError, match=r"module 'detcal.example' has no attribute 'cos'"):
        get("cos")
    import detcal.data
    import detcal.metrics

    for pkg in (detcal.data, detcal.metrics):
        with pytest.raises(AttributeError, match=pkg.__name__):
            getattr(pkg, "no_such_name")  # noqa: B009
