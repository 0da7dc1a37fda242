"""The three input mistakes that used to pass in silence (issue #34): boxes in the other convention, an
empty ground truth, most detections of categories the ground truth lacks. Each stops with one line (exit 2
on the command line) naming the file and the option that proceeds; below the threshold, a warning that
reaches the console summary. Hand counts: the synthetic set's boxes lie inside their images, so the shares
below are those of the records edited here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.core.errors import DetcalInputError
from detcal.pipeline import EvaluationSpec
from detcal.pipeline.input_checks import OUTSIDE_TOLERANCE, outside_share
from detcal.pipeline.sources import load_coco
from detcal.pipeline.spec import BootstrapSpec, DataSpec

QUIET = {"bootstrap": BootstrapSpec(n=0)}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from detcal.data.synthetic import write_synthetic

    return write_synthetic(tmp_path_factory.mktemp("set"), n_images=30, seed=1, render=False)


def _records(files: dict[str, Path]) -> list[dict]:
    return json.loads(Path(files["coco_results"]).read_text())


def _write(path: Path, obj: object) -> Path:
    path.write_text(json.dumps(obj))
    return path


def _xyxy(recs: list[dict], every: int = 1) -> list[dict]:
    """The boxes of every ``every``-th record written [x1, y1, x2, y2] (the mistake)."""
    out = []
    for i, r in enumerate(recs):
        x, y, w, h = r["bbox"]
        out.append(dict(r, bbox=[x, y, x + w, y + h]) if i % every == 0 else dict(r))
    return out


def _spec(files: dict[str, Path], res: Path, **kw: object) -> DataSpec:
    return DataSpec(source="coco", gt=str(files["coco_instances"]), results=str(res), **kw)  # type: ignore[arg-type]


def test_outside_share_counts_by_hand(files: dict[str, Path], tmp_path: Path) -> None:
    recs = _records(files)[:4]
    gt = json.loads(Path(files["coco_instances"]).read_text())
    size = {im["id"]: (im["width"], im["height"]) for im in gt["images"]}
    w0, h0 = size[recs[0]["image_id"]]
    w2, _ = size[recs[2]["image_id"]]
    recs[0]["bbox"] = [w0 * 0.5, 10, w0 * (0.5 + OUTSIDE_TOLERANCE) + 2, 10]  # right edge past by more than 5%
    recs[1]["bbox"] = [-1.0, 0, 5, 5]  # 1 px past the left edge: within the tolerance
    recs[2]["bbox"] = [w2 * 0.5, 1, w2 * 0.5, 1]  # right edge exactly on the image's
    recs[3]["bbox"] = [0, 0, 1, 1]  # inside
    data = load_coco(files["coco_instances"], _write(tmp_path / "r.json", recs))
    assert outside_share(data) == (1, 4)


def test_boxes_in_the_other_convention_stop_with_the_override(files: dict[str, Path], tmp_path: Path) -> None:
    res = _write(tmp_path / "xyxy.json", _xyxy(_records(files)))
    data = load_coco(files["coco_instances"], res)
    n, total = outside_share(data)
    assert total == len(_records(files)) and n > 0.2 * total
    with pytest.raises(DetcalInputError) as e:
        detcal.evaluate(_spec(files, res), spec=EvaluationSpec(**QUIET))
    msg = str(e.value)
    assert "\n" not in msg and str(res) in msg and f"{n} of {total} detections" in msg
    assert "[x1, y1, x2, y2]" in msg and "data.max_outside_share=1 to proceed" in msg
    with pytest.raises(DetcalInputError, match="max_outside_share"):  # the path API checks with the defaults
        detcal.evaluate(str(files["coco_instances"]), str(res), EvaluationSpec(**QUIET))
    out = detcal.evaluate(_spec(files, res, max_outside_share=1.0), spec=EvaluationSpec(**QUIET))
    assert out.record["detections"]["input"] == total


def test_a_few_boxes_outside_are_a_warning(files: dict[str, Path], tmp_path: Path) -> None:
    recs = _records(files)
    res = _write(tmp_path / "few.json", _xyxy(recs, every=10))  # every tenth record: under the 20% threshold
    data = load_coco(files["coco_instances"], res)
    n, total = outside_share(data)
    assert 0.01 * total <= n <= 0.2 * total
    from detcal.utils.warn import capture, collected

    with capture():
        detcal.evaluate(_spec(files, res), spec=EvaluationSpec(**QUIET))
        warns = collected()
    assert any(f"{n} of {total} detections" in w and "box convention" in w for w in warns)


def test_empty_ground_truth_stops_with_the_override(files: dict[str, Path], tmp_path: Path) -> None:
    gt = json.loads(Path(files["coco_instances"]).read_text())
    gt["annotations"] = []
    g = _write(tmp_path / "empty.json", gt)
    spec = DataSpec(source="coco", gt=str(g), results=str(files["coco_results"]))
    with pytest.raises(DetcalInputError) as e:
        detcal.evaluate(spec, spec=EvaluationSpec(**QUIET))
    msg = str(e.value)
    assert "\n" not in msg and str(g) in msg and f"no annotations on its {len(gt['images'])} images" in msg
    assert "data.allow_empty_gt=true to proceed" in msg
    spec.allow_empty_gt = True
    out = detcal.evaluate(spec, spec=EvaluationSpec(**QUIET))
    assert out.record["data"]["counts"]["gt"] == 0


def test_unknown_categories_above_the_share_stop(files: dict[str, Path], tmp_path: Path) -> None:
    recs = _records(files)
    half = [dict(r, category_id=999) if i % 2 == 0 else r for i, r in enumerate(recs)]
    res = _write(tmp_path / "half.json", half)
    n = len(recs[::2])
    with pytest.raises(DetcalInputError) as e:
        detcal.evaluate(_spec(files, res), spec=EvaluationSpec(**QUIET))
    msg = str(e.value)
    assert "\n" not in msg and str(res) in msg and f"{n} of {len(recs)} detections" in msg
    assert "data.max_unknown_category_share=1 to proceed" in msg
    out = detcal.evaluate(_spec(files, res, max_unknown_category_share=1.0), spec=EvaluationSpec(**QUIET))
    assert out.record["detections"]["left_out_at_loading"] == {"unknown_category": n}
    # 10% exactly is not more than 10%: a warning, not a stop
    k = len(recs) // 10
    some = [dict(r, category_id=999) if i < k else r for i, r in enumerate(recs)]
    out = detcal.evaluate(_spec(files, _write(tmp_path / "some.json", some)), spec=EvaluationSpec(**QUIET))
    assert out.record["detections"]["left_out_at_loading"] == {"unknown_category": k}
    assert any(f"left out {k} detections" in w for w in out.record["warnings"])


def test_command_line_exit_2_one_line_and_warning_in_console(files: dict[str, Path], tmp_path: Path) -> None:
    res = _write(tmp_path / "xyxy.json", _xyxy(_records(files)))
    few = _write(tmp_path / "few.json", _xyxy(_records(files), every=10))

    def run(results: Path, name: str) -> subprocess.CompletedProcess[str]:
        args = ["data=coco", f"data.gt={files['coco_instances']}", f"data.results={results}", "bootstrap.n=0"]
        args += [
            "output.plots=false",
            "output.progress=false",
            "report.enabled=false",
            f"hydra.run.dir={tmp_path / name}",
        ]
        return subprocess.run(
            [sys.executable, "-m", "detcal.apps.evaluate", *args], cwd=tmp_path, capture_output=True, text=True
        )

    bad = run(res, "bad")
    assert bad.returncode == 2, bad.stderr[-2000:]
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "data.max_outside_share=1 to proceed" in lines[0]
    ok = run(few, "ok")
    assert ok.returncode == 0, ok.stderr[-2000:]
    warn_block = ok.stdout.split("warnings (", 1)[1]
    assert "box convention" in warn_block.split("run directory:")[0]
    assert np.isfinite(json.loads((tmp_path / "ok" / "metrics.json").read_text())["headline"]["ece"]["value"])


def test_one_iou_threshold_reads_as_a_list() -> None:
    from detcal.pipeline.spec import ConfigError, MatchingSpec

    assert MatchingSpec(iou_thresholds=0.5).iou_thresholds == [0.5]
    assert MatchingSpec(iou_thresholds=[0.5, 0.75]).iou_thresholds == [0.5, 0.75]
    with pytest.raises(ConfigError):
        MatchingSpec(iou_thresholds=1.5)
    with pytest.raises(ConfigError):
        MatchingSpec(iou_thresholds=True)


def test_misspelt_config_key_suggests_the_right_one(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "detcal.apps.evaluate",
            "data=coco_tfzoo",
            "data.detectr=x",
            f"hydra.run.dir={tmp_path}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    line = out.stderr.strip().splitlines()[-1]
    assert "did you mean 'data.detector'?" in line and ".:" not in line
