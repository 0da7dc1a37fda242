"""The bundled example in three formats: examples/mini79_yolo and examples/mini79_voc are what
scripts/make_format_examples.py writes from the bundled COCO val2017 detections, and COCO, YOLO
and VOC readings of the same boxes give the same numbers."""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.scripts import load_script

import detcal
from detcal.data.formats import get_format
from detcal.matching.voc import match_voc
from detcal.metrics.voc_ap import voc_ap
from detcal.pipeline.sources import load_data
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "examples"


def _script() -> Any:
    return load_script("scripts/make_format_examples.py")


def _same_tree(a: Path, b: Path) -> None:
    cmp = filecmp.dircmp(a, b)
    assert not (cmp.left_only or cmp.right_only or cmp.diff_files), (a, cmp.left_only, cmp.right_only, cmp.diff_files)
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    assert not mismatch and not errors, mismatch
    for sub in cmp.common_dirs:
        _same_tree(a / sub, b / sub)


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DataSpec]:
    tmp = tmp_path_factory.mktemp("formats")
    mod = _script()
    mod.write_examples(tmp / "regen")
    for fmt in ("yolo", "voc", "lvis", "openimages"):
        _same_tree(EX / f"mini79_{fmt}", tmp / "regen" / f"mini79_{fmt}")
    ds, dets = mod.example_set()
    coco = get_format("coco").write(tmp, dets, ds, True)
    y, v = EX / "mini79_yolo", EX / "mini79_voc"
    return {
        "coco": DataSpec(source="coco", gt=coco["gt"], results=coco["results"]),
        "yolo": DataSpec(
            source="yolo",
            label_dir=str(y / "labels"),
            results_dir=str(y / "detections"),
            names=str(y / "data.yaml"),
            sizes=str(y / "sizes.txt"),
        ),
        "voc": DataSpec(
            source="voc", label_dir=str(v / "Annotations"), results_dir=str(v / "results"), names=str(v / "names.txt")
        ),
    }


_BY_CATEGORY = ("category", "categories", "per_class", "worst_detections", "timing_s", "params", "_areas")
_BY_CATEGORY += ("lrp_optimal_thresholds",)  # keyed by category id, which differs across formats


def _numbers(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every float of a metrics.json block by path (ids and categories differ across formats: left out)."""
    out: dict[str, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if k in _BY_CATEGORY:
                continue
            out |= _numbers(v, f"{prefix}/{k}")
    elif isinstance(d, list) and all(isinstance(x, (int, float)) or x is None for x in d):
        out |= {f"{prefix}[{i}]": float(x) for i, x in enumerate(d) if x is not None}
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        out[prefix] = float(d)
    return out


def test_the_examples_are_the_bundled_detections(specs: dict[str, DataSpec]) -> None:
    """Checked in the fixture: the committed files are byte for byte what the script writes now."""
    loaded = {k: load_data(s) for k, s in specs.items()}
    assert {len(x.detections) for x in loaded.values()} == {589}
    assert {len(x.dataset.gt) for x in loaded.values()} == {619}
    assert {len(x.dataset.images) for x in loaded.values()} == {79}


def test_equal_numbers_across_formats(specs: dict[str, DataSpec], tmp_path: Path) -> None:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), matching=MatchingSpec())  # COCO rules for all three
    res = {k: detcal.evaluate(s, spec=spec, workdir=tmp_path / k).to_dict() for k, s in specs.items()}
    blocks = ("confidence", "regression", "oce", "headline", "localisation")
    base = {b: _numbers(res["coco"][b]) for b in blocks}
    assert len(base["confidence"]) > 100
    for fmt in ("yolo", "voc"):
        for b in blocks:
            got = _numbers(res[fmt][b])
            assert got.keys() == base[b].keys(), (fmt, b)
            for k, v in base[b].items():
                assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (fmt, b, k)
    acc_c, acc_y = _numbers(res["coco"]["accuracy"]), _numbers(res["yolo"]["accuracy"])
    assert acc_c.keys() == acc_y.keys() and len(acc_c) >= 12
    for k, v in acc_c.items():
        assert acc_y[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    # VOC AP: the VOC reading's accuracy block equals VOC AP computed on the COCO reading's records
    c = load_data(specs["coco"])
    mr = match_voc(c.detections, c.dataset.gt, (0.5,))
    cats = sorted(c.dataset.categories)
    for variant, entry in res["voc"]["accuracy"]["voc_ap"].items():
        (want,) = voc_ap(c.detections, c.dataset.gt, mr, cats, variant)
        assert entry["mAP"] == pytest.approx(want.mean, rel=1e-12), variant
        got = [np.nan if x is None else x for x in entry["per_class"].values()]
        np.testing.assert_allclose(got, list(want.per_class.values()), rtol=1e-12, atol=0)


def test_the_lvis_example_equals_lviseval() -> None:
    """The bundled detections in LVIS terms: detcal's AP summary is the official LVISEval's."""
    lvis = pytest.importorskip("lvis")
    import logging

    if not hasattr(np, "float"):  # lvis 0.5.3 calls np.float, removed in numpy 1.24
        np.float = float  # type: ignore[attr-defined]
    logging.getLogger("lvis").setLevel(logging.WARNING)
    from detcal.data.lvis import load_lvis
    from detcal.metrics.lvis_ap import lvis_ap

    gt, dt = EX / "mini79_lvis" / "instances.json", EX / "mini79_lvis" / "detections.json"
    ev = lvis.LVISEval(str(gt), str(dt), iou_type="bbox")
    ev.run()
    data = load_lvis(gt, dt)
    got = lvis_ap(data.detections, data.dataset, data.protocol)
    for k, v in ev.get_results().items():
        assert abs(got[k] - float(v)) <= 1e-12, k
    assert min(got[k] for k in ("APr", "APc", "APf")) > 0


def test_the_open_images_example_against_hotcoco(capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled detections in Open Images terms (every class verified in every image): hotcoco's numbers
    are detcal's with hotcoco's greedy rule for duplicates, per class; with the TF rule (the default) only
    the classes where a duplicate falls back to a second box (book and its parent, indoor) differ."""
    hotcoco = pytest.importorskip("hotcoco")
    import warnings

    from detcal.data.openimages import load_openimages
    from detcal.matching.openimages import match_openimages

    root = EX / "mini79_openimages"
    data = load_openimages(root / "instances.json", root / "detections.json", root / "hierarchy.json")
    g = hotcoco.COCO(str(root / "instances.json"))
    h = hotcoco.Hierarchy.from_parent_map(data.protocol.parent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev = hotcoco.COCOeval(g, g.load_res(str(root / "detections.json")), "bbox", oid_style=True, hierarchy=h)
        ev.run()
    want = ev.get_results(per_class=True)
    capsys.readouterr()
    ds, dets = data.dataset, data.detections
    differ = {}
    for single in ("greedy", "tf"):
        mr = match_openimages(dets, ds.gt, (0.5,), data.protocol, single=single)
        (got,) = voc_ap(dets, ds.gt, mr, sorted(ds.categories), "area")
        ref = {c: want.get(f"AP/{ds.categories[c]}", np.nan) for c in got.per_class}  # no boxes: no AP
        differ[single] = sorted(
            ds.categories[c]
            for c, v in got.per_class.items()
            if not (np.isnan(v) and np.isnan(ref[c])) and not abs(v - ref[c]) <= 1e-12
        )
        if single == "greedy":
            assert got.mean == pytest.approx(want["AP"], abs=1e-12)
    assert differ == {"greedy": [], "tf": ["book", "indoor"]}
