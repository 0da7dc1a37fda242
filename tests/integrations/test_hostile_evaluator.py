"""The streaming evaluator's input contract under hostile input (issue 33): the corpus of malformed batches
in tests/data/hostile/evaluator_updates.json, versioned state dicts, merges and amortised appends."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detcal.errors import DetcalInputError
from detcal.integrations.evaluator import STATE_SCHEMA_VERSION, DetectionCalibration
from detcal.pipeline import EvaluationSpec, MatchingSpec

CORPUS = json.loads((Path(__file__).parents[1] / "data" / "hostile" / "evaluator_updates.json").read_text())["cases"]


def _decode(v: Any) -> Any:
    if isinstance(v, dict) and "__array__" in v:
        vals = json.loads(json.dumps(v["__array__"]).replace('"nan"', "NaN"))
        return np.array(vals, dtype=v.get("dtype"))
    if isinstance(v, dict):
        return {k: _decode(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_decode(x) for x in v]
    return v


@pytest.mark.parametrize("case", CORPUS, ids=[c["name"] for c in CORPUS])
def test_every_hostile_batch_is_refused_naming_the_image_and_field(case: dict) -> None:
    ev = DetectionCalibration(categories={1: "a"})
    with pytest.raises(DetcalInputError) as e:
        ev.update(_decode(case["preds"]), _decode(case["targets"]))
    assert e.value.field == case["field"]
    assert case["message"] in str(e.value)
    assert "update 0" in str(e.value)
    assert len(ev) == 0 and ev.n_detections == 0  # nothing of the refused batch was kept


def _p(box: list, score: float = 0.9) -> dict:
    return {"boxes": np.array([box], float), "scores": np.array([score]), "labels": np.array([1])}


def _t(i: int, box: list) -> dict:
    return {"boxes": np.array([box], float), "labels": np.array([1]), "image_id": i, "width": 100, "height": 100}


def test_the_error_names_the_batch_position_and_the_image_id() -> None:
    ev = DetectionCalibration()
    ev.update([_p([0, 0, 5, 5])], [_t(7, [0, 0, 5, 5])])
    bad = {"boxes": np.zeros((2, 8)), "scores": np.ones(2), "labels": np.ones(2, int)}
    with pytest.raises(DetcalInputError, match=r"update 1, image 1 \(image_id 42\).*shape \[2, 8\], expected \[2, 4\]"):
        ev.update([_p([0, 0, 5, 5]), bad], [_t(8, [0, 0, 5, 5]), _t(42, [0, 0, 5, 5])])
    assert len(ev) == 1


def test_torch_tensors_are_checked_the_same_way() -> None:
    torch = pytest.importorskip("torch")
    ev = DetectionCalibration()
    p = {"boxes": torch.zeros(2, 8), "scores": torch.ones(2), "labels": torch.ones(2, dtype=torch.int64)}
    with pytest.raises(DetcalInputError, match=r"shape \[2, 8\]"):
        ev.update([p], [_t(1, [0, 0, 1, 1])])
    p = {"boxes": torch.zeros(1, 4, dtype=torch.complex64), "scores": torch.ones(1), "labels": torch.ones(1)}
    with pytest.raises(DetcalInputError, match="complex"):
        ev.update([p], [_t(1, [0, 0, 1, 1])])
    with pytest.raises(DetcalInputError, match="expected an integer, got 100.5"):
        ev.update([_p([0, 0, 1, 1])], [{**_t(1, [0, 0, 1, 1]), "image_id": torch.tensor([100.5])}])
    ev.update([_p([0, 0, 1, 1])], [{**_t(1, [0, 0, 1, 1]), "image_id": torch.tensor([100])}])
    assert len(ev) == 1


def test_both_empty_is_a_no_op() -> None:
    ev = DetectionCalibration()
    ev.update([], [])
    assert len(ev) == 0


def _filled(fmt: str = "xywh", **kw: Any) -> DetectionCalibration:
    ev = DetectionCalibration(box_format=fmt, categories={1: "a"}, **kw)
    ev.update([_p([0, 0, 5, 5]), _p([1, 1, 5, 5], 0.4)], [_t(1, [0, 0, 5, 5]), _t(2, [0, 0, 5, 5])])
    return ev


def test_state_dict_carries_its_version_and_settings_and_round_trips() -> None:
    ev = _filled()
    st = ev.state_dict()
    assert st["schema_version"] == STATE_SCHEMA_VERSION and st["box_format"] == "xywh"
    assert st["categories"] == {1: "a"} and len(st["spec_fingerprint"]) == 16
    back = DetectionCalibration(box_format="xywh", categories={1: "a"})
    back.load_state_dict(
        json.loads(json.dumps({k: v for k, v in st.items() if k != "columns"})) | {"columns": st["columns"]}
    )
    assert back.compute().to_markdown() == ev.compute().to_markdown()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"box_format": "xyxy", "categories": {1: "a"}}, "box_format"),
        ({"box_format": "xywh", "categories": {1: "a", 2: "b"}}, "categories"),
        ({"box_format": "xywh", "categories": {1: "a"}, "order": "arrival"}, "order"),
        (
            {
                "box_format": "xywh",
                "categories": {1: "a"},
                "spec": EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.75])),
            },
            "spec_fingerprint",
        ),
    ],
)
def test_a_state_made_under_other_settings_is_refused(kwargs: dict, field: str) -> None:
    st = _filled().state_dict()
    other = DetectionCalibration(**kwargs)
    with pytest.raises(DetcalInputError, match="cannot load this state") as e:
        other.load_state_dict(st)
    assert e.value.field == field and len(other) == 0


def test_unversioned_truncated_or_foreign_states_are_refused_with_a_sentence() -> None:
    ev = DetectionCalibration(box_format="xywh", categories={1: "a"})
    st = _filled().state_dict()
    with pytest.raises(DetcalInputError, match="schema_version None"):
        ev.load_state_dict({"columns": st["columns"]})
    cut = dict(st, columns={k: v for k, v in st["columns"].items() if k != "gt_box"})
    with pytest.raises(DetcalInputError, match="lacks the columns"):
        ev.load_state_dict(cut)
    short = dict(st, columns=dict(st["columns"], det_box=st["columns"]["det_box"][:1]))
    with pytest.raises(DetcalInputError, match=r"shape \[1, 4\], expected \[2, 4\]"):
        ev.load_state_dict(short)
    foreign = dict(st, columns=dict(st["columns"], det_label=np.array([1, 9])))
    with pytest.raises(DetcalInputError, match="label 9, not among"):
        ev.load_state_dict(foreign)
    with pytest.raises(DetcalInputError, match="a state is a mapping"):
        ev.load_state_dict([1, 2])  # type: ignore[arg-type]


def test_merge_refuses_evaluators_with_other_settings() -> None:
    with pytest.raises(DetcalInputError, match="cannot merge an evaluator: box_format 'xyxy' there, 'xywh' here"):
        _filled().merge(_filled("xyxy"))
    a, b = _filled(), DetectionCalibration(box_format="xywh", categories={1: "a"})
    b.update([_p([0, 0, 5, 5])], [_t(3, [0, 0, 5, 5])])
    assert len(a.merge(b)) == 3


def test_appends_are_amortised_few_chunks_and_the_same_state() -> None:
    ev, one = DetectionCalibration(categories={1: "a"}), DetectionCalibration(categories={1: "a"})
    batches = [([_p([0, 0, 5, 5], (i % 10) / 10)], [_t(i, [0, 0, 5, 5])]) for i in range(1000)]
    for p, t in batches:
        ev.update(p, t)
        assert len(ev._chunks) <= math.log2(len(ev)) + 2  # a binary counter of chunks: O(log n) of them
    one.update([b[0][0] for b in batches], [b[1][0] for b in batches])
    a, b = ev.state_dict()["columns"], one.state_dict()["columns"]
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a if k != "dropped")


def test_a_batch_whose_optional_columns_disagree_leaves_the_state_as_it_was() -> None:
    ev = DetectionCalibration(categories={1: "a"})
    ev.update([_p([0, 0, 5, 5])], [_t(1, [0, 0, 5, 5])])
    p = dict(_p([0, 0, 5, 5]), box_std=np.ones((1, 4)))
    with pytest.raises(DetcalInputError, match="give it always or never"):
        ev.update([p], [_t(2, [0, 0, 5, 5])])
    assert len(ev) == 1 and ev._n_updates == 1


def test_the_shift_of_the_issue_no_longer_changes_a_number() -> None:
    """Two images: the well-formed batch gives AP50 1.0; the [2, 8] boxes used to shift image 2's box."""
    good = DetectionCalibration(spec=EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5])))
    good.update([_p([0, 0, 10, 10]), _p([20, 20, 40, 40])], [_t(1, [0, 0, 10, 10]), _t(2, [20, 20, 40, 40])])
    ap = good.compute().to_dict()["accuracy"]["AP"]["value"]
    assert ap == pytest.approx(1.0)


def test_the_torchmetrics_adapter_inherits_the_contract() -> None:
    pytest.importorskip("torchmetrics")
    torch = pytest.importorskip("torch")
    from detcal.integrations.torchmetrics import DetectionCalibrationMetric

    m = DetectionCalibrationMetric(categories={1: "a"})
    bad = {"boxes": torch.zeros(2, 8), "scores": torch.ones(2), "labels": torch.ones(2, dtype=torch.int64)}
    t = {"boxes": torch.zeros(1, 4), "labels": torch.ones(1, dtype=torch.int64), "image_id": 1}
    with pytest.raises(DetcalInputError, match=r"image 0 \(image_id 1\).*shape \[2, 8\]"):
        m.update([bad], [t])
    with pytest.raises(DetcalInputError, match="no prediction dicts but 1 target dicts"):
        m.update([], [t])
