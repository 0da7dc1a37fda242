"""Pascal VOC: the reader and writer, the devkit's matching and the two AP variants, against an
independent reference of the devkit's algorithm (tests/support/voc_reference.py) on generated sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import voc_reference as ref

from detcal.core.errors import DetcalInputError
from detcal.data.voc import load_voc, write_voc
from detcal.matching.voc import match_voc
from detcal.metrics.voc_ap import voc_ap, voc_ap_from_curve

CLASSES = ("cat", "dog", "person")


def _write_set(root: Path, seed: int, n_images: int = 12) -> tuple[Path, Path]:
    """A random VOC set written with plain f-strings (not detcal's writer): integer one-based boxes,
    some difficult, detections near the boxes (duplicates, shifted copies) and random ones."""
    rng = np.random.default_rng(seed)
    ann, res = root / "Annotations", root / "results"
    ann.mkdir(parents=True)
    res.mkdir()
    lines: dict[str, list[str]] = {c: [] for c in CLASSES}
    scores = iter(rng.permutation(10_000) / 10_000 + 1e-5)  # distinct scores: no ties
    for i in range(n_images):
        stem = f"{2007 + i % 3}_{i:06d}"
        w, h = int(rng.integers(200, 500)), int(rng.integers(200, 500))
        objs = []
        for _ in range(int(rng.integers(0, 6))):
            x0, y0 = int(rng.integers(1, w - 60)), int(rng.integers(1, h - 60))
            x1, y1 = x0 + int(rng.integers(8, 60)), y0 + int(rng.integers(8, 60))
            c, diff = CLASSES[int(rng.integers(0, 3))], int(rng.random() < 0.25)
            objs.append(
                f"<object><name>{c}</name><difficult>{diff}</difficult><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
                f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            )
            for _ in range(int(rng.integers(0, 4))):  # shifted copies: TPs, duplicates, misses
                dx, dy = rng.integers(-6, 7, size=2)
                cc = c if rng.random() < 0.85 else CLASSES[int(rng.integers(0, 3))]
                lines[cc].append(f"{stem} {next(scores):.6f} {x0 + dx} {y0 + dy} {x1 + dx} {y1 + dy}")
        for _ in range(int(rng.integers(0, 3))):  # background detections
            x0, y0 = int(rng.integers(1, w - 40)), int(rng.integers(1, h - 40))
            c = CLASSES[int(rng.integers(0, 3))]
            lines[c].append(f"{stem} {next(scores):.6f} {x0} {y0} {x0 + 30} {y0 + 30}")
        (ann / f"{stem}.xml").write_text(
            f"<annotation><filename>{stem}.jpg</filename><size><width>{w}</width><height>{h}</height>"
            f"<depth>3</depth></size>{''.join(objs)}</annotation>"
        )
    for c, ls in lines.items():
        (res / f"comp4_det_test_{c}.txt").write_text("\n".join(ls) + "\n")
    return ann, res


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("thresh", [0.5, 0.7])
def test_voc_ap_equals_the_devkit_reference(tmp_path: Path, seed: int, thresh: float) -> None:
    ann, res = _write_set(tmp_path, seed)
    data = load_voc(ann, res)
    ds, dets = data.dataset, data.detections
    mr = match_voc(dets, ds.gt, (thresh,), images=ds.images)
    cats = sorted(ds.categories)
    annotations = ref.read_annotations(ann)
    for variant, use_07 in (("voc07_11pt", True), ("area", False)):
        (got,) = voc_ap(dets, ds.gt, mr, cats, variant)
        for c in cats:
            name = ds.categories[c]
            want = ref.voc_eval(res / f"comp4_det_test_{name}.txt", annotations, name, thresh, use_07)
            if want is None:
                assert np.isnan(got.per_class[c])
            else:
                assert abs(got.per_class[c] - want) <= 1e-12, (variant, name, got.per_class[c], want)


def test_hand_worked_case(tmp_path: Path) -> None:
    """One image, two dog boxes (the second difficult), four detections:

    0.9 on box A (IoU 1): TP; 0.8 on box A again: duplicate FP; 0.7 on the difficult box B: ignored;
    0.6 far away: FP. npos = 1: precision 1, 1/2, (ignored), 1/3 at recall 1, 1, 1.
    Area AP = 1 (envelope 1 up to recall 1); 11-point AP = 1. IoU exactly 0.5 is not a match (strict)."""
    ann, res = tmp_path / "A", tmp_path / "R"
    ann.mkdir()
    res.mkdir()
    box = "<bndbox><xmin>{}</xmin><ymin>1</ymin><xmax>{}</xmax><ymax>10</ymax></bndbox>"
    (ann / "1.xml").write_text(
        "<annotation><size><width>100</width><height>100</height></size>"
        f"<object><name>dog</name>{box.format(1, 10)}</object>"
        f"<object><name>dog</name><difficult>1</difficult>{box.format(51, 60)}</object></annotation>"
    )
    (res / "dog.txt").write_text("1 0.9 1 1 10 10\n1 0.8 1 1 10 10\n1 0.7 51 1 60 10\n1 0.6 80 80 90 90\n")
    data = load_voc(ann, res)
    ds, dets = data.dataset, data.detections
    assert ds.gt.box[0].tolist() == [0.0, 0.0, 10.0, 10.0]  # one-based inclusive -> continuous
    mr = match_voc(dets, ds.gt, (0.5,))
    assert mr.matched[0].tolist() == [True, False, False, False]
    assert mr.ignored[0].tolist() == [False, False, True, False]
    dog = ds.category_id("dog")
    for v in ("area", "voc07_11pt"):
        assert voc_ap(dets, ds.gt, mr, [dog], v)[0].mean == pytest.approx(1.0, abs=1e-15)
    half = dets.select(np.array([0]))
    half.box[0] = [0.0, 0.0, 10.0, 5.0]  # inter 50, union 100: IoU exactly 0.5 is not a match (strict)
    assert not match_voc(half, ds.gt, (0.5,)).matched[0, 0]
    assert match_voc(half, ds.gt, (0.49,)).matched[0, 0]


def test_ap_variants_on_a_curve() -> None:
    rec = np.array([0.25, 0.5, 0.5, 0.75])
    prec = np.array([1.0, 1.0, 2 / 3, 0.75])
    # area: 0.25*1 + 0.25*1 + 0.25*0.75 = 0.6875; 11-point: r=0..0.5 -> 1 (6 points), 0.6, 0.7 -> 0.75, rest 0
    assert voc_ap_from_curve(rec, prec, "area") == pytest.approx(0.6875, abs=1e-15)
    assert voc_ap_from_curve(rec, prec, "voc07_11pt") == pytest.approx((6 + 2 * 0.75) / 11, abs=1e-15)
    with pytest.raises(ValueError, match="variant"):
        voc_ap_from_curve(rec, prec, "voc12")


def test_write_then_read_gives_the_same_records(tmp_path: Path) -> None:
    ann, res = _write_set(tmp_path / "in", 3)
    a = load_voc(ann, res)
    paths = write_voc(tmp_path / "out", a.detections, a.dataset, True)
    b = load_voc(paths["gt"], paths["results"], paths["names"])
    assert a.dataset.categories == b.dataset.categories
    np.testing.assert_array_equal(a.dataset.images.id, b.dataset.images.id)
    np.testing.assert_array_equal(a.dataset.gt.box, b.dataset.gt.box)  # whole pixels: exact
    np.testing.assert_array_equal(a.dataset.gt.ignore, b.dataset.gt.ignore)
    oa = np.lexsort((a.detections.score, a.detections.category))
    ob = np.lexsort((b.detections.score, b.detections.category))
    np.testing.assert_array_equal(a.detections.box[oa], b.detections.box[ob])
    np.testing.assert_array_equal(a.detections.score[oa], b.detections.score[ob])


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "..", ""])
def test_a_class_name_that_is_a_path_writes_nothing_outside(tmp_path: Path, name: str) -> None:
    """The devkit names each result file by its class: a class name with a path in it is refused, in one line,
    before any file of the class is written (a hostile categories list never writes outside the folder)."""
    import dataclasses

    ann, res = _write_set(tmp_path / "in", 3)
    a = load_voc(ann, res)
    cats = dict(a.dataset.categories)
    cats[next(iter(cats))] = name
    with pytest.raises(DetcalInputError, match="cannot name a VOC result file"):
        write_voc(tmp_path / "out" / "x", a.detections, dataclasses.replace(a.dataset, categories=cats), True)
    assert not (tmp_path / "escaped.txt").exists() and not list(tmp_path.glob("**/comp4_det_test_escaped.txt"))


def _one(tmp_path: Path, xml: str, results: str = "") -> tuple[Path, Path]:
    ann, res = tmp_path / "Annotations", tmp_path / "results"
    ann.mkdir(exist_ok=True)
    res.mkdir(exist_ok=True)
    (ann / "img1.xml").write_text(xml)
    (res / "comp4_det_val_dog.txt").write_text(results)
    return ann, res


GOOD = (
    "<annotation><size><width>50</width><height>40</height></size><object><name>dog</name>"
    "<bndbox><xmin>1</xmin><ymin>2</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>"
)


@pytest.mark.parametrize(
    ("xml", "results", "message"),
    [
        ("<annotation><size>", "", "img1.xml.*not valid XML"),
        ("<annotation><object/></annotation>", "", "img1.xml.*size/width"),
        (GOOD.replace("<xmin>1</xmin>", "<xmin>one</xmin>"), "", "img1.xml, record object 1, field 'bndbox/xmin'"),
        (GOOD.replace("<name>dog</name>", "<name>dog</name><difficult>yes</difficult>"), "", "difficult"),
        (GOOD, "img1 0.5 1 2 9\n", "comp4_det_val_dog.txt, record line 1"),
        (GOOD, "img1 0.5 1 2 9 9\nimg7 0.4 1 2 9 9\n", "comp4_det_val_dog.txt, record line 2.*'img7'"),
    ],
)
def test_bad_files_are_named_in_one_line(tmp_path: Path, xml: str, results: str, message: str) -> None:
    ann, res = _one(tmp_path, xml, results)
    with pytest.raises(DetcalInputError, match=message) as e:
        load_voc(ann, res)
    assert "\n" not in str(e.value)


def test_result_files_of_unknown_classes_are_dropped_or_an_error(tmp_path: Path) -> None:
    ann, res = _one(tmp_path, GOOD.replace("dog", "unicorn"), "")
    (res / "comp4_det_val_dog.txt").unlink()
    (res / "comp4_det_val_unicorn.txt").write_text("img1 0.5 1 2 9 9\n")
    (res / "comp4_det_val_cat.txt").write_text("img1 0.5 1 2 9 9\nimg1 0.4 1 2 9 9\n")
    assert load_voc(ann, res).dropped == {"unknown_category": 2}
    with pytest.raises(DetcalInputError, match="not in the annotations"):
        load_voc(ann, res, unknown_category="error")


def test_voc_class_order_and_numeric_ids(tmp_path: Path) -> None:
    ann, res = _one(tmp_path, GOOD.replace("dog", "person"), "")
    ds = load_voc(ann, res).dataset
    assert ds.categories[15] == "person" and len(ds.categories) == 20  # the devkit's 20 classes, in order
    (ann / "img1.xml").rename(ann / "000005.xml")
    assert load_voc(ann, res).dataset.images.id.tolist() == [5]
