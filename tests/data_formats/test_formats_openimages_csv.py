"""The official Open Images V7 CSVs: the CSV form of examples/mini79_openimages (written by
scripts/make_format_examples.py, checked byte for byte in tests/data_formats/test_formats_examples.py) reads to the
same numbers as its JSON form; a box CSV with scores reads as the submission; relative coordinates become
pixels with the sizes of a sizes file or of the images; bad rows are one-line errors naming file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import detcal
from detcal.core.errors import DetcalInputError
from detcal.data.openimages import load_openimages
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

REPO = Path(__file__).resolve().parents[2]
OI = REPO / "examples" / "mini79_openimages"
CSV = OI / "csv"
BOX_HEAD = (
    "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,IsGroupOf,IsDepiction,IsInside"
)


def _csv_spec(results: Path = CSV / "detections.csv") -> DataSpec:
    return DataSpec(
        source="openimages",
        gt=str(CSV / "boxes.csv"),
        results=str(results),
        labels=str(CSV / "labels.csv"),
        names=str(CSV / "classes.csv"),
        sizes=str(CSV / "sizes.txt"),
        hierarchy=str(CSV / "hierarchy.json"),
    )


_BY_CATEGORY = ("category", "categories", "per_class", "worst_detections", "timing_s", "params", "_areas")
_BY_CATEGORY += ("lrp_optimal_thresholds",)  # keyed by category id: the readings number the classes differently


def _numbers(d: Any, prefix: str = "") -> dict[str, float]:
    """Every number of a block by path, leaving out what is keyed by category id (ids differ by reading)."""
    out: dict[str, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if k not in _BY_CATEGORY:
                out |= _numbers(v, f"{prefix}/{k}")
    elif isinstance(d, list) and all(isinstance(x, (int, float)) or x is None for x in d):
        out |= {f"{prefix}[{i}]": float(x) for i, x in enumerate(d) if x is not None}
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        out[prefix] = float(d)
    return out


def test_the_csv_reading_of_the_example_equals_its_json_reading(tmp_path: Path) -> None:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    js = DataSpec(
        source="openimages",
        gt=str(OI / "instances.json"),
        results=str(OI / "detections.json"),
        hierarchy=str(OI / "hierarchy.json"),
    )
    a = detcal.evaluate(js, spec=spec, workdir=tmp_path / "json").to_dict()
    b = detcal.evaluate(_csv_spec(), spec=spec, workdir=tmp_path / "csv").to_dict()
    for block in ("confidence", "regression", "oce", "headline", "accuracy"):
        if set(a[block]) == {"skipped"}:  # not computed (no box uncertainty here): the same reason both ways
            assert a[block] == b[block], block
            continue
        want, got = _numbers(a[block]), _numbers(b[block])
        assert got.keys() == want.keys() and want, block
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (block, k)
    assert len(_numbers(a["confidence"])) > 100
    ap_a, ap_b = a["accuracy"]["openimages_ap"], b["accuracy"]["openimages_ap"]
    assert ap_b["mAP"] == pytest.approx(ap_a["mAP"], rel=1e-12) and 0.5 < ap_a["mAP"] < 0.6
    name_a, name_b = a["data"]["counts"]["categories"], b["data"]["counts"]["categories"]
    per_a = {name_a[k]: v for k, v in ap_a["per_class"].items()}
    per_b = {name_b[k]: v for k, v in ap_b["per_class"].items()}
    assert per_a.keys() == per_b.keys() and len(per_a) > 60
    assert {k for k, v in per_a.items() if v is None} == {k for k, v in per_b.items() if v is None}  # no boxes
    for k, v in per_a.items():
        assert v is None or per_b[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_the_records_match_and_a_box_csv_with_scores_reads_as_the_submission(tmp_path: Path) -> None:
    j = load_openimages(OI / "instances.json", OI / "detections.json", OI / "hierarchy.json")
    c = load_openimages(
        CSV / "boxes.csv",
        CSV / "detections.csv",
        CSV / "hierarchy.json",
        csv={"labels": CSV / "labels.csv", "names": CSV / "classes.csv", "sizes": CSV / "sizes.txt"},
    )
    assert sorted(c.dataset.images.id.tolist()) == sorted(j.dataset.images.id.tolist())  # COCO ids from the stems
    assert len(c.dataset.gt) == len(j.dataset.gt) and len(c.detections) == len(j.detections) == 1034
    rename = {n: i for i, n in j.dataset.categories.items()}
    to_json = np.array([rename[c.dataset.categories[k]] for k in c.dataset.categories.keys()])
    lut = dict(zip(c.dataset.categories.keys(), to_json.tolist()))
    key = lambda img, cat: sorted(zip(img.tolist(), cat.tolist()))  # noqa: E731
    pairs = c.protocol.evaluable
    assert key(pairs[:, 0], np.array([lut[x] for x in pairs[:, 1]])) == key(
        j.protocol.evaluable[:, 0], j.protocol.evaluable[:, 1]
    )
    assert c.protocol.group_of.sum() == j.protocol.group_of.sum() > 0
    np.testing.assert_allclose(np.sort(c.detections.box, axis=0), np.sort(j.detections.box, axis=0), rtol=1e-12)
    # the same detections as a box CSV with a Score column, one row per detection
    lines = (CSV / "detections.csv").read_text().splitlines()[1:]
    rows = ["ImageID,LabelName,Score,XMin,XMax,YMin,YMax"]
    for ln in lines:
        im, pred = ln.split(",")
        t = pred.split()
        for g in range(0, len(t), 6):
            lab, s, x0, y0, x1, y1 = t[g : g + 6]
            rows.append(",".join([im, lab, s, x0, x1, y0, y1]))
    (tmp_path / "dets.csv").write_text("\n".join(rows) + "\n")
    d = load_openimages(
        CSV / "boxes.csv",
        tmp_path / "dets.csv",
        csv={"labels": CSV / "labels.csv", "names": CSV / "classes.csv", "sizes": CSV / "sizes.txt"},
    ).detections
    np.testing.assert_array_equal(d.box, c.detections.box)
    np.testing.assert_array_equal(d.score, c.detections.score)
    np.testing.assert_array_equal(d.category, c.detections.category)


def _hand_set(tmp: Path, boxes: list[str], dets: str, labels: list[str] | None = None, sizes: bool = True) -> Any:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "boxes.csv").write_text("\n".join([BOX_HEAD, *boxes]) + "\n")
    (tmp / "classes.csv").write_text("/m/a,Apple\n/m/b,Banana\n")  # no header, as the V6 files
    (tmp / "labels.csv").write_text("\n".join(["ImageID,Source,LabelName,Confidence", *(labels or [])]) + "\n")
    (tmp / "dets.csv").write_text(dets)
    if sizes:
        (tmp / "sizes.txt").write_text("img_a 200 100\nimg_b 50 40\n")
    return load_openimages(
        tmp / "boxes.csv",
        tmp / "dets.csv",
        csv={
            "labels": tmp / "labels.csv",
            "names": tmp / "classes.csv",
            "sizes": (tmp / "sizes.txt") if sizes else None,
            "image_dir": None if sizes else tmp / "images",
        },
    )


def test_hand_worked_conversion_labels_and_sizes_from_images(tmp_path: Path) -> None:
    box = "img_a,xclick,/m/b,1,0.1,0.5,0.2,0.9,0,0,1,0,0"
    sub = "ImageId,PredictionString\nimg_b,/m/a 0.75 0.2 0.25 0.6 0.5 /m/b 0.5 0 0 1 1\nimg_a,\n"
    d = _hand_set(tmp_path / "s", [box], sub, ["img_b,verification,/m/a,1", "img_a,verification,/m/a,0"])
    ds = d.dataset
    assert ds.categories == {1: "Apple", 2: "Banana"} and ds.images.id.tolist() == [1, 2]  # img_a, img_b
    np.testing.assert_allclose(ds.gt.box, [[20.0, 20.0, 100.0, 90.0]])  # x * 200, y * 100
    assert ds.gt.category.tolist() == [2] and d.protocol.group_of.tolist() == [True]
    np.testing.assert_allclose(d.detections.box, [[10.0, 10.0, 30.0, 20.0], [0.0, 0.0, 50.0, 40.0]])
    assert d.detections.image_id.tolist() == [2, 2] and d.detections.score.tolist() == [0.75, 0.5]
    assert sorted(map(tuple, d.protocol.evaluable.tolist())) == [(1, 1), (1, 2), (2, 1)]
    from PIL import Image

    (tmp_path / "p" / "images").mkdir(parents=True)
    Image.new("RGB", (200, 100)).save(tmp_path / "p" / "images" / "img_a.png")
    Image.new("RGB", (50, 40)).save(tmp_path / "p" / "images" / "img_b.jpg")
    e = _hand_set(tmp_path / "p", [box], sub, sizes=False)
    np.testing.assert_array_equal(e.dataset.gt.box, ds.gt.box)
    np.testing.assert_array_equal(e.detections.box, d.detections.box)


@pytest.mark.parametrize(
    ("boxes", "dets", "match"),
    [
        (["img_a,x,/m/a,1,0.5,0.1,0,1,0,0,0,0,0"], "", r"boxes\.csv, record line 2, field 'XMin'.*breaks"),
        (["img_a,x,/m/a,1,0,1,0,1.5,0,0,0,0,0"], "", r"boxes\.csv, record line 2, field 'XMin'"),
        (["img_a,x,/m/a,1,0,1,0,1,0,0,0,0,0", "img_a,x,/m/z,1,0,1,0,1,0,0,0,0,0"], "", r"line 3.*'/m/z'"),
        (["img_a,x,/m/a,1,0,one,0,1,0,0,0,0,0"], "", r"line 2, field 'XMax'.*'one'"),
        (["img_a,x,/m/a,1,0,1,0,1,0,0,2,0,0"], "", r"line 2, field 'IsGroupOf'"),
        (["img_c,x,/m/a,1,0,1,0,1,0,0,0,0,0"], "", r"line 2, field 'ImageID'.*'img_c'"),
        (["img_a,x,/m/a,1,0,1"], "", r"line 2.*6 values where the header has 13"),
        ([], "ImageId,PredictionString\nimg_a,/m/a 0.5 0 0 1\n", r"dets\.csv, record line 2.*PredictionString"),
        ([], "ImageId,PredictionString\nimg_a,/m/a 0.5 0 0 1 1\nimg_b,/m/a x 0 0 1 1\n", r"dets\.csv, record line 3"),
        ([], "ImageID,LabelName,XMin,XMax,YMin,YMax\n", r"dets\.csv.*no column 'Score'"),
    ],
)
def test_bad_rows_are_one_line_errors_naming_file_and_line(
    tmp_path: Path, boxes: list[str], dets: str, match: str
) -> None:
    with pytest.raises(DetcalInputError, match=match) as e:
        _hand_set(tmp_path, boxes, dets or "ImageId,PredictionString\n")
    assert "\n" not in str(e.value)


def test_relative_coordinates_need_sizes(tmp_path: Path) -> None:
    with pytest.raises(DetcalInputError, match=r"data\.sizes"):
        load_openimages(
            CSV / "boxes.csv", CSV / "detections.csv", csv={"names": CSV / "classes.csv", "labels": CSV / "labels.csv"}
        )
