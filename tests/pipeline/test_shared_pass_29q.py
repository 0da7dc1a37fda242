"""The accuracy/localisation pair with COCO AP's layout and LRP's matching made in one pass
(detcal.matching.engine.layout_and_match): the same records as the two blocks computed apart, at any
tau, in image chunks, and with a max-dets of its own (then LRP matches apart)."""

from __future__ import annotations

import pytest
from test_chunked_stages import _same

import detcal.matching.chunks as chunks_mod
from detcal.pipeline.accuracy_block import accuracy_and_localisation, accuracy_block, localisation_block
from detcal.pipeline.evaluation import as_loaded
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import DataSpec, EvaluationSpec, LocalisationSpec, MatchingSpec


@pytest.fixture(scope="module")
def loaded(coco: DataSpec) -> LoadedData:
    return as_loaded(str(coco.gt), str(coco.results))


@pytest.mark.parametrize("tau", [0.0, 0.5])
@pytest.mark.parametrize("chunk", [None, 23])
@pytest.mark.parametrize("max_dets", [100, 5])
def test_shared_pass_gives_the_blocks_computed_apart(
    loaded: LoadedData, tau: float, chunk: int | None, max_dets: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk is not None:
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", chunk)
    spec = EvaluationSpec(localisation=LocalisationSpec(tau=tau), matching=MatchingSpec(max_dets=max_dets))
    acc, loc = accuracy_and_localisation(spec, loaded)
    assert _same(acc, accuracy_block(spec, loaded))
    assert _same(loc, localisation_block(spec, loaded))
