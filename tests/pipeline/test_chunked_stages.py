"""The pipeline's matching shards and its accuracy/localisation pair, with image chunks
(detcal.matching.chunks): the same arrays and records as one pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import detcal.matching.chunks as chunks_mod
from detcal.pipeline.accuracy_block import accuracy_and_localisation, accuracy_block, localisation_block
from detcal.pipeline.evaluation import as_loaded
from detcal.pipeline.parallel import match_in_shards
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import DataSpec, EvaluationSpec, LocalisationSpec, MatchingSpec


@pytest.fixture(scope="module")
def loaded(coco: DataSpec) -> LoadedData:
    return as_loaded(str(coco.gt), str(coco.results))


def _same(a: object, b: object) -> bool:
    """Equal records: MetricResults field by field, arrays by value (NaN equal to NaN)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, float)) or isinstance(b, (np.ndarray, float)):
        x, y = np.asarray(a), np.asarray(b)
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=True))
        return bool(np.array_equal(x, y))
    return bool(a == b)


def test_accuracy_and_localisation_share_one_order_with_the_same_records(loaded: LoadedData) -> None:
    spec = EvaluationSpec()
    acc, loc = accuracy_and_localisation(spec, loaded)
    assert "AP" in acc.entries and "lrp" in loc.entries  # both computed on COCO rules
    assert _same(acc, accuracy_block(spec, loaded))
    assert _same(loc, localisation_block(spec, loaded))
    off = EvaluationSpec(localisation=LocalisationSpec(enabled=False))
    acc_only, skipped = accuracy_and_localisation(off, loaded)
    assert _same(acc_only, acc) and not hasattr(skipped, "entries")


@pytest.mark.parametrize("chunk", [1, 37])
def test_shards_cut_to_engine_chunks_equal_one_pass(
    loaded: LoadedData, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = MatchingSpec(iou_thresholds=[0.5, 0.75])
    whole = match_in_shards(m, loaded.detections, loaded, None, 0)
    monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", chunk)
    for shard_size in (100, 10**6 if chunk == 1 else 150):
        part = match_in_shards(m, loaded.detections, loaded, None, shard_size)
        for name in ("matched", "ignored", "gt_index", "iou", "considered"):
            assert np.array_equal(getattr(part, name), getattr(whole, name)), name
