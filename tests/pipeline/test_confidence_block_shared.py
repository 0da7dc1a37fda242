"""The confidence block with the shared cells (narrow integer cells, no gathered box features) gives the numbers
of the path that bins each threshold's sample anew from its gathered features (issue 29, seventh pass)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.binning.cells import validate_sample
from detcal.core.errors import DetcalInputError
from detcal.data.synthetic import write_synthetic
from detcal.pipeline import confidence_block
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec


def _confidence(tmp: Path, name: str) -> tuple[dict, dict]:
    p = write_synthetic(tmp / "s", n_images=60, seed=4, render=False)
    data = DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"]))
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=40, seed=2))
    m = detcal.evaluate(data, spec=spec, workdir=tmp / name).to_dict()
    return m["confidence"], m["dece_maps"]


def test_shared_cells_give_the_numbers_of_binning_each_threshold(tmp_path: Path, monkeypatch) -> None:
    seen: list[object] = []
    real = confidence_block._shared_cells

    def spy(*a: object) -> object:
        out = real(*a)  # type: ignore[arg-type]
        seen.append(out)
        return out

    monkeypatch.setattr(confidence_block, "_shared_cells", spy)
    shared = _confidence(tmp_path, "shared")
    assert seen and seen[0] is not None
    cells, maps = seen[0][1], seen[0][2]  # type: ignore[index]
    assert all(v.dtype.kind == "u" and v.dtype.itemsize <= 2 for v in [*cells.values(), *maps.values()])
    monkeypatch.setattr(confidence_block, "_shared_cells", lambda *a: None)  # each threshold bins its sample
    fresh = _confidence(tmp_path, "fresh")
    assert shared == fresh
    assert shared[0]["iou=0.50"]["ece"]["ci"][0] is not None  # intervals were computed


def test_narrow_cells_keep_the_integers() -> None:
    for top, size in ((14, 1), (255, 1), (3124, 2), (70000, 4)):
        cell = np.array([0, top, top // 2], dtype=np.int64)
        got = confidence_block.narrow_cells(cell)
        assert got.dtype.itemsize == size and got.dtype.kind == "u" and got.tolist() == cell.tolist()
    empty = np.zeros(0, dtype=np.int64)
    assert confidence_block.narrow_cells(empty) is empty


def test_unread_features_fail_loudly_when_read() -> None:
    f = confidence_block.unread_features(5, 4)
    assert f.shape == (5, 4) and f.strides == (0, 0)
    with pytest.raises(DetcalInputError, match="relative box feature 0 must be finite"):
        validate_sample(np.full(5, 0.5), np.zeros(5, bool), f)


def test_the_features_are_let_go_before_the_thresholds(tmp_path: Path, monkeypatch) -> None:
    """Handed over in a list, the box features are freed once every grid's cells are made: no threshold's
    sample or interval holds them (issue 29, fourteenth pass; 38 MB off the peak at 20,000 images), and the
    numbers are those of the features handed over as an array (held by the caller throughout)."""
    import weakref

    from detcal.pipeline import evaluation

    alive: list[bool] = []
    real_threshold, real_blocks = confidence_block._one_threshold, confidence_block.confidence_blocks
    ref: list[weakref.ref] = []

    def threshold(*a: object) -> object:
        alive.append(ref[0]() is not None)
        return real_threshold(*a)  # type: ignore[arg-type]

    def blocks(spec, data, mr, feats, *rest):  # type: ignore[no-untyped-def]
        held = feats if isinstance(feats, list) else [feats]
        ref[:] = [weakref.ref(held[0])]
        return real_blocks(spec, data, mr, feats, *rest)

    monkeypatch.setattr(confidence_block, "_one_threshold", threshold)
    monkeypatch.setattr(evaluation, "confidence_blocks", blocks)
    handed = _confidence(tmp_path, "handed")
    assert alive and not any(alive)  # gone before the first threshold
    alive.clear()

    def held_by_caller(spec, data, mr, feats, *rest):  # type: ignore[no-untyped-def]
        arr = feats.pop() if isinstance(feats, list) else feats
        ref[:] = [weakref.ref(arr)]
        return real_blocks(spec, data, mr, arr, *rest)  # the caller's reference lives through the call

    monkeypatch.setattr(evaluation, "confidence_blocks", held_by_caller)
    kept = _confidence(tmp_path, "kept")
    assert alive and all(alive)
    assert handed == kept
