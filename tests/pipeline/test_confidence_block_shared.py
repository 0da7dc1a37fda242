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
