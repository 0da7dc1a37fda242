"""The writers' fast paths (issue 29, sixth pass) write what the general paths wrote.

* metrics.json: a scalar token is the one ``json.dumps`` writes; a list of numbers with nulls that is already
  strict comes back as it is (``finish_run`` reads back content ``Result.to_dict`` made strict);
* summary.md: a metrics table reads a metric without its per-bin table and extras, and prints the same row.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from detcal.core.types import MetricResult
from detcal.reports import results_json
from detcal.reports.summary_md import table_row
from detcal.reports.tables import metrics_table

SCALARS = [
    "plain",
    "caf\u00e9 \u2013 \U0001f600",
    'quote " backslash \\ tab \t newline \n nul \x00',
    "",
    0,
    -7,
    10**30,
    -(10**40),
    0.0,
    -0.0,
    0.1,
    1e300,
    -1e-320,
    5e-324,
    2.0**53 + 2,
    True,
    False,
    None,
]


@pytest.mark.parametrize("value", SCALARS, ids=repr)
def test_a_scalar_token_is_json_dumps(value: object) -> None:
    assert results_json._scalar(value) == json.dumps(value, allow_nan=False)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_scalar_is_refused_as_before(value: float) -> None:
    with pytest.raises(ValueError):
        results_json._scalar(value)


def test_the_text_of_a_record_is_json_with_the_layout() -> None:
    record = {"a": [1, 2.5, None], "b": {"c": "\u00e9", "d": [[1, None], [2, 3]]}, "e": True, "f": None, "g": []}
    text = results_json._text(record)
    assert json.loads(text) == record
    assert text.splitlines()[1] == '  "a": [1, 2.5, null],'


def test_a_strict_list_with_nulls_comes_back_as_it_is() -> None:
    rows = [0.25, None, 3, None, 1e-300]
    assert results_json._strict(rows) == (rows, False)
    record = {"table": {"gap": rows, "count": [4, 0, 2]}, "value": 0.5}
    once = results_json.strict(record)
    assert once == record  # no "skipped" map for nulls already written
    assert results_json.strict(once) == once


def test_non_finite_numbers_still_become_nulls_with_their_reason() -> None:
    out = results_json.strict({"table": {"gap": [0.5, float("nan"), None]}, "ratio": [1.0, float("inf")]})
    assert out["table"] == {"gap": [0.5, None, None], "skipped": {"gap": results_json._NAN_LIST}}
    assert out["ratio"] == [1.0, None]
    assert out["skipped"] == {"ratio": results_json._NAN_LIST}
    assert results_json.strict([True, None, 1]) == [True, None, 1]  # bools keep the general path


def test_a_table_row_prints_as_the_whole_metric() -> None:
    metrics = {
        "ece": MetricResult(
            "ece",
            0.0312,
            variant="equal_width",
            params={"n_bins": 15, "edges": [0.0, 0.5, 1.0], "norm": "l1"},
            table={"gap": np.array([0.1, np.nan]), "count": np.array([3, 0])},
            extra={"per_class": {"1": 0.2}, "reason": "x"},
            ci=(0.02, 0.04),
            ci_level=0.95,
        ),
        "mce": MetricResult("mce", float("nan"), extra={"note": "empty sample"}),
        "nested": {"brier": MetricResult("brier", np.float64(0.17), params={"k": np.int64(3)})},
    }
    rows = {k: table_row(v) for k, v in metrics.items()}
    assert rows["ece"].table == {} and rows["ece"].extra == {}
    assert metrics_table(rows, title="t") == metrics_table(metrics, title="t")
    assert metrics["ece"].table  # the metric itself is untouched
