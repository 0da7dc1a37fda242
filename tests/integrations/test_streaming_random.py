"""Random small sets (hypothesis): the streaming evaluator fed in random batches and orders equals
``detcal.evaluate`` on the same records; and bad input is refused with an error naming the update,
the image and the field."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from support.streaming_common import assert_same_numbers, text

import detcal
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.integrations.evaluator import DetectionCalibration
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

SPEC = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.7]), bootstrap=BootstrapSpec(n=0))
CATS = {1: "a", 2: "b", 3: "c"}


def _boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    xy = rng.integers(0, 80, (n, 2)).astype(np.float64)  # integers: exact ties of IoU and of coordinates
    return np.concatenate([xy, xy + rng.integers(1, 40, (n, 2))], axis=1)


def _image(rng: np.random.Generator, img: int, with_std: bool) -> tuple[dict, dict]:
    g, d = int(rng.integers(0, 5)), int(rng.integers(0, 9))
    gt = _boxes(rng, g)
    near = gt[rng.integers(0, g, d)] + rng.integers(-6, 7, (d, 4)) if g else _boxes(rng, d)
    near = np.concatenate([np.minimum(near[:, :2], near[:, 2:]), np.maximum(near[:, :2], near[:, 2:])], axis=1)
    pred = {"boxes": near, "scores": rng.choice([0.2, 0.5, 0.9, 0.55, 0.1], d), "labels": rng.integers(1, 4, d)}
    if with_std:
        pred["box_std"] = rng.uniform(0.5, 5, (d, 4))
    tgt = {
        "boxes": gt,
        "labels": rng.integers(1, 4, g),
        "iscrowd": rng.random(g) < 0.15,
        "image_id": img,
        "width": 130.0,
        "height": 120.0,
    }
    return pred, tgt


def _records(images: list[tuple[dict, dict]]) -> tuple[Dataset, Detections]:
    ids = [t["image_id"] for _, t in images]
    cat = lambda key, src, tail=(): np.concatenate([np.reshape(x[key], (-1, *tail)) for x in src])  # noqa: E731
    preds, tgts = [p for p, _ in images], [t for _, t in images]
    gt = GroundTruth(
        image_id=np.repeat(ids, [len(t["labels"]) for t in tgts]),
        box=cat("boxes", tgts, (4,)),
        category=cat("labels", tgts),
        iscrowd=cat("iscrowd", tgts),
    )
    n = [len(p["scores"]) for p in preds]
    dets = Detections(
        image_id=np.repeat(ids, n),
        box=cat("boxes", preds, (4,)),
        score=cat("scores", preds),
        category=cat("labels", preds),
        box_std=cat("box_std", preds, (4,)) if "box_std" in preds[0] else None,
    )
    images_rec = Images(id=ids, width=[t["width"] for t in tgts], height=[t["height"] for t in tgts])
    return Dataset(images_rec, gt, dict(CATS)), dets


SETS = {
    "seed": st.integers(0, 2**31),
    "n_images": st.integers(2, 9),
    "with_std": st.booleans(),
    "batch": st.integers(1, 4),
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SETS)
def test_random_sets_equal_detcal_evaluate(seed: int, n_images: int, with_std: bool, batch: int) -> None:
    _check_random_set(seed, n_images, with_std, batch)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SETS)
def test_random_sets_equal_detcal_evaluate_many(seed: int, n_images: int, with_std: bool, batch: int) -> None:
    _check_random_set(seed, n_images, with_std, batch)


def _check_random_set(seed: int, n_images: int, with_std: bool, batch: int) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(1000)[:n_images]
    images = [_image(rng, int(i), with_std) for i in ids]
    ds, dets = _records(images)
    try:
        offline = detcal.evaluate(ds, dets, spec=SPEC)
    except DetcalInputError as e:  # e.g. no detection at all: the stream refuses it the same way
        m = DetectionCalibration(SPEC, categories=CATS)
        m.update(*zip(*images))
        with pytest.raises(DetcalInputError, match=re.escape(str(e.message)[:30])):
            m.compute()
        return
    arrival = DetectionCalibration(SPEC, categories=CATS, order="arrival")
    by_id = DetectionCalibration(SPEC, categories=CATS)
    for lo in range(0, n_images, batch):
        arrival.update(*map(list, zip(*images[lo : lo + batch])))
    shuffled = [images[i] for i in rng.permutation(n_images)]
    for lo in range(0, n_images, batch):
        by_id.update(*map(list, zip(*shuffled[lo : lo + batch])))
    assert text(arrival.compute()) == text(offline)
    assert_same_numbers(by_id.compute(), offline)


def _one(**over) -> tuple[list[dict], list[dict]]:
    p = {"boxes": np.array([[0.0, 0, 10, 10]]), "scores": np.array([0.5]), "labels": np.array([1])}
    t = {"boxes": np.array([[0.0, 0, 10, 10]]), "labels": np.array([1]), "image_id": 7}
    p.update({k: v for k, v in over.items() if k in ("boxes", "scores", "labels", "box_std")})
    t.update({k[2:]: v for k, v in over.items() if k.startswith("t_")})
    return [p], [t]


@pytest.mark.parametrize(
    "over, field",
    [
        ({"boxes": np.array([[0.0, 0, np.nan, 10]])}, "boxes"),
        ({"boxes": np.array([[5.0, 0, 1, 10]])}, "boxes"),
        ({"scores": np.array([np.inf])}, "scores"),
        ({"labels": np.array([1, 2])}, "labels"),
        ({"box_std": np.ones((2, 4))}, "box_std"),
        ({"t_labels": np.array([9])}, "labels"),
    ],
)
def test_bad_input_names_update_image_and_field(over: dict, field: str) -> None:
    m = DetectionCalibration(SPEC, categories=CATS)
    with pytest.raises(DetcalInputError) as e:
        m.update(*_one(**over))
    assert e.value.field == field
    assert "update 0" in str(e.value.record)


def test_missing_keys_counts_duplicates_and_unknown_labels() -> None:
    m = DetectionCalibration(SPEC, categories=CATS)
    with pytest.raises(DetcalInputError, match="missing"):
        m.update([{"boxes": np.zeros((0, 4)), "labels": np.zeros(0)}], _one()[1])
    with pytest.raises(DetcalInputError, match="target dicts"):
        m.update(_one()[0] * 2, _one()[1])
    m.update(*_one())
    m.update(*_one())
    with pytest.raises(DetcalInputError, match="given twice"):
        m.compute()
    unknown = DetectionCalibration(SPEC, categories=CATS)
    p, t = _one()
    p[0] = {
        **p[0],
        "boxes": np.array([[0.0, 0, 10, 10], [1, 1, 9, 9]]),
        "scores": np.array([0.5, 0.4]),
        "labels": np.array([1, 42]),
    }
    unknown.update(p, t)
    r = unknown.compute()
    assert r.record["detections"]["left_out_at_loading"] == {"unknown_category": 1}
    assert r.record["data"]["counts"]["detections"] == 1
    with pytest.raises(DetcalInputError, match="never called"):
        DetectionCalibration().compute()
    with pytest.raises(DetcalInputError, match="box_format"):
        DetectionCalibration(box_format="yxyx")


@pytest.mark.parametrize("fmt", ["cxcywh", "xywh"])
def test_other_box_formats_are_the_documented_conversions(fmt: str) -> None:
    """cxcywh (DETR) and xywh (COCO) input: the offline records of boxes converted as documented
    (x1 = cx - w/2, x2 = cx + w/2; x2 = x + w, matching areas from the given w * h)."""
    from detcal.core.boxes import cxcywh_to_xyxy, xyxy_to_cxcywh, xyxy_to_xywh

    rng = np.random.default_rng(11)
    images = [_image(rng, int(i), False) for i in (5, 3, 9, 1)]
    to_fmt = xyxy_to_cxcywh if fmt == "cxcywh" else xyxy_to_xywh
    given = [({**p, "boxes": to_fmt(p["boxes"])}, {**t, "boxes": to_fmt(t["boxes"])}) for p, t in images]
    back = []
    for p, t in given:
        pb, tb = (
            (cxcywh_to_xyxy(p["boxes"]), cxcywh_to_xyxy(t["boxes"]))
            if fmt == "cxcywh"
            else (
                np.concatenate([p["boxes"][:, :2], p["boxes"][:, :2] + p["boxes"][:, 2:]], axis=1),
                np.concatenate([t["boxes"][:, :2], t["boxes"][:, :2] + t["boxes"][:, 2:]], axis=1),
            )
        )
        back.append(({**p, "boxes": pb}, {**t, "boxes": tb}))
    ds, dets = _records(back)
    if fmt == "xywh":  # the input's w, h, from which matching takes the areas (as the COCO loader keeps them)
        dets.wh = np.concatenate([p["boxes"][:, 2:] for p, _ in given])
        ds.gt.wh = np.concatenate([t["boxes"][:, 2:] for _, t in given])
    m = DetectionCalibration(SPEC, categories=CATS, box_format=fmt, order="arrival")
    m.update(*map(list, zip(*given)))
    assert text(m.compute()) == text(detcal.evaluate(ds, dets, spec=SPEC))
