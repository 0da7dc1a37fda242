"""The format registry: every format is one adapter found by name, used by the loader, the
write-back and detcal-match, with its configs; a new format needs no edit elsewhere."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data.formats import FORMATS, LoadedData, MatchDefaults, get_format
from detcal.data.specs import DATA_SPECS
from detcal.pipeline.sources import load_data
from detcal.pipeline.spec import DataSpec, MatchingSpec
from detcal.pipeline.writeback import write_calibrated

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_has_an_adapter_and_configs(name: str) -> None:
    a = get_format(name)
    assert a.name == name and a.gt_field in a.fields and a.results_field in a.fields
    assert isinstance(a.matching, MatchDefaults)
    assert (REPO / "configs" / "data" / f"{name}.yaml").read_text().count(f"/data_{name}_schema@_here_") == 1
    matching = yaml.safe_load((REPO / "configs" / "matching" / f"{name}.yaml").read_text()) or {}
    assert MatchingSpec(**matching).mode == a.matching.mode
    spec = DataSpec(source=name)  # the format's own spec class, which holds every field its adapter reads
    assert type(spec) is DATA_SPECS[name] and spec.source == name
    assert set(a.fields) <= {f.name for f in dataclasses.fields(spec)}


def test_an_unknown_format_is_a_one_line_error() -> None:
    with pytest.raises(DetcalInputError, match="unknown data format 'csv'; choose one of coco, kitti, yolo, voc, lvis"):
        get_format("csv")


def test_the_stages_hold_no_chain_of_format_names() -> None:
    for rel in ("detcal/pipeline/sources.py", "detcal/pipeline/writeback.py", "detcal/apps/match.py"):
        text = (REPO / rel).read_text()
        assert not re.search(r"""(format|source)\s*==\s*["'](coco|kitti|yolo|voc)["']""", text), rel


@dataclasses.dataclass
class _ToySpec(DataSpec):
    """The toy format's ``data.*`` fields."""

    source: str = "toy"
    gt: str | None = None
    results: str | None = None


class _ToyAdapter:
    """A format of one image, for the test below: reading it returns fixed records; writing counts."""

    name = "toy"
    spec = _ToySpec
    gt_field = "gt"
    results_field = "results"
    fields = ("gt", "results")
    matching = MatchDefaults(mode="exclusive", iou=(0.5,), max_dets=100)
    written: list[int] = []

    def load(self, fields: Any, shard: Any = None) -> LoadedData:
        ds = Dataset(
            Images(id=[1], width=[10], height=[10]),
            GroundTruth(image_id=[1], box=[[0, 0, 5, 5]], category=[1]),
            {1: "thing"},
        )
        dets = Detections(image_id=[1, 1], box=[[0, 0, 5, 5], [5, 5, 9, 9]], score=[0.9, 0.4], category=[1, 1])
        return LoadedData(ds, dets, None, {"source": "toy", "gt": fields["gt"]})

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        self.written.append(len(dets))
        (out_dir / "toy.txt").write_text(str(len(dets)))
        return {"results": str(out_dir / "toy.txt")}


def test_a_new_format_is_one_module_and_one_registry_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    module = types.ModuleType("toy_format")
    module.ADAPTER = _ToyAdapter()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toy_format", module)
    monkeypatch.setitem(FORMATS, "toy", "toy_format")
    data = load_data(DataSpec(source="toy", gt="anything"))
    assert data.format == "toy" and len(data.detections) == 2
    from detcal.apps.match import main

    out = tmp_path / "m.csv"
    assert main(["--format", "toy", "--gt", "g", "--results", "r", "--out", str(out)]) == 0
    assert out.read_text().count("\n") == 3  # header + two detections
    paths = write_calibrated(tmp_path / "cal", "toy", data.detections, data.dataset, False)
    assert paths == {"format": "toy", "results": str(tmp_path / "cal" / "toy.txt")}


@pytest.mark.parametrize(
    ("fmt", "gt", "results", "extra", "rows"),
    [
        ("yolo", "labels", "detections", ["--names", "data.yaml", "--sizes", "sizes.txt"], 589),
        ("voc", "Annotations", "results", ["--names", "names.txt"], 589),
    ],
)
def test_detcal_match_reads_the_new_formats(
    tmp_path: Path, fmt: str, gt: str, results: str, extra: list[str], rows: int
) -> None:
    from detcal.apps.match import main

    root = REPO / "examples" / f"mini79_{fmt}"
    out = tmp_path / "m.csv"
    args = ["--format", fmt, "--gt", str(root / gt), "--results", str(root / results), "--out", str(out)]
    args += [str(root / a) if i % 2 else a for i, a in enumerate(extra)]
    assert main(args) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == rows + 1
    assert ("ignored@0.5" in lines[0]) and (fmt != "voc" or "matched@0.5" in lines[0])


def test_detcal_match_refuses_a_flag_the_format_does_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    from detcal.apps.match import main

    assert main(["--format", "coco", "--gt", "g.json", "--results", "r.json", "--sizes", "s", "--out", "x.csv"]) == 2
    assert "field '--sizes': is not read by --format coco" in capsys.readouterr().err


def test_calibrated_write_back_in_yolo_and_voc(tmp_path: Path) -> None:
    root = REPO / "examples" / "mini79_yolo"
    data = load_data(
        DataSpec(
            source="yolo",
            label_dir=str(root / "labels"),
            results_dir=str(root / "detections"),
            names=str(root / "data.yaml"),
            sizes=str(root / "sizes.txt"),
        )
    )
    for fmt in ("yolo", "voc"):
        p = write_calibrated(tmp_path / fmt, fmt, data.detections, data.dataset, True)
        back = get_format(fmt).load({**p, "label_dir": p["gt"], "results_dir": p["results"]})
        assert len(back.detections) == len(data.detections)
        np.testing.assert_allclose(np.sort(back.detections.score), np.sort(data.detections.score), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("fmt", "fields", "mode"),
    [
        ("voc", {"label_dir": "mini79_voc/Annotations", "results_dir": "mini79_voc/results"}, "voc"),
        ("lvis", {"gt": "mini79_lvis/instances.json", "results": "mini79_lvis/detections.json"}, "lvis"),
        (
            "openimages",
            {"gt": "mini79_openimages/instances.json", "results": "mini79_openimages/detections.json"},
            "openimages",
        ),
    ],
)
def test_protocol_matching_in_image_shards_is_the_whole_matching(fmt: str, fields: dict[str, str], mode: str) -> None:
    """The protocol rules are per image: matched in shards of about 50 detections (the large-set path) they give
    the same result as in one call."""
    from detcal.pipeline.matcher import run_match
    from detcal.pipeline.parallel import match_in_shards
    from detcal.pipeline.spec import MatchingSpec

    data = load_data(DataSpec(source=fmt, **{k: str(REPO / "examples" / v) for k, v in fields.items()}))
    m = MatchingSpec(mode=mode, iou_thresholds=[0.5, 0.75], max_dets=None)
    whole = run_match(m, data.detections, data)
    sharded = match_in_shards(m, data.detections, data, None, 50)
    for name in ("matched", "ignored", "gt_index", "iou", "considered"):
        np.testing.assert_array_equal(getattr(whole, name), getattr(sharded, name), err_msg=name)
    assert whole.ignored.any() or fmt == "voc"
