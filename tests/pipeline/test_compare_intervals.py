"""One interval method everywhere: detcal-compare's intervals come from detcal.metrics.bootstrap.interval
(BCa by default), no interval leaves its own estimate out without a note, and the paired AP/AR
differences recompute COCO AP on each image resample, equal to pycocotools on the resampled files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detcal.data import bundled
from detcal.metrics.paired_ap import image_draws, resample_images
from detcal.pipeline.compare import compare


@pytest.fixture(scope="module")
def mini() -> tuple:
    ds = bundled.load_dataset("coco_mini79")
    runs = {d: bundled.load("coco_mini79", d)[1] for d in bundled.DETECTORS[:2]}
    return ds, runs


def _inside(v: float, ci: list | tuple) -> bool:
    return ci[0] is not None and np.isfinite(ci[0]) and ci[0] <= v <= ci[1]


def test_every_interval_contains_its_estimate_or_says_why(mini: tuple) -> None:
    ds, runs = mini
    c = compare(runs, ds, n_boot=200, seed=0, ap_n_boot=8, ap_jackknife_blocks=4)
    assert c.params["method"] == "bca"
    for row in c.table:
        for k in ("ece", "dece", "mce", "nll", "brier"):
            assert _inside(row[k], row[f"{k}_ci"]) or (row.get("ci_notes") or {}).get(k), (row["detector"], k)
    metrics = {d["metric"] for d in c.diffs}
    assert {"AP", "AP50", "AR100", "ece", "dece"} <= metrics
    for d in c.diffs:
        assert _inside(d["diff"], d["ci"]) or d["ci_note"], d
    ap = [d for d in c.diffs if d["metric"] == "AP"]
    assert ap and ap[0]["bootstrap"]["n_boot"] == 8 and ap[0]["bootstrap"]["recomputed"]


def test_percentile_method_is_the_plain_quantiles(mini: tuple) -> None:
    """With method=percentile compare's interval is the (2.5, 97.5) % quantile pair of its replicates: for a
    detector's own numbers those of evaluate's resamples (issue #34: one interval per number), for the paired
    differences those of the shared resamples over every image."""
    from detcal.metrics.bootstrap import bootstrap_many
    from detcal.pipeline.compare import calibration_sample, image_weights, metric_fns, replicate_metrics

    ds, runs = mini
    c = compare(runs, ds, n_boot=100, seed=3, method="percentile")
    names = list(runs)
    s = {n: calibration_sample(runs[n], ds, 0.5, "exclusive") for n in names}
    own = bootstrap_many(
        metric_fns(),
        ds.images.id[s[names[0]]["image"]],
        s[names[0]]["p"],
        s[names[0]]["y"],
        s[names[0]]["features"],
        n_boot=100,
        seed=3,
    )
    lo, hi = np.quantile(own["ece"][np.isfinite(own["ece"])], [0.025, 0.975])
    assert c.table[0]["ece_ci"] == pytest.approx((lo, hi), abs=1e-15)
    W = image_weights(len(ds.images), 100, 3)
    d = replicate_metrics(s[names[1]], W)["ece"] - replicate_metrics(s[names[0]], W)["ece"]
    lo, hi = np.quantile(d[np.isfinite(d)], [0.025, 0.975])
    diff = next(x for x in c.diffs if x["metric"] == "ece")
    assert diff["ci"] == pytest.approx((lo, hi), abs=1e-15)


def test_a_detectors_intervals_are_evaluates(mini: tuple) -> None:
    """The same detector, the same bootstrap settings: compare's interval of each number is evaluate's."""
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec

    ds, runs = mini
    name = next(iter(runs))
    c = compare({name: runs[name]}, ds, n_boot=60, seed=5)
    r = detcal.evaluate(
        DataSpec(source="bundled", bundle="coco_mini79", detector=name),
        spec=EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5]), bootstrap=BootstrapSpec(n=60, seed=5)),
    )
    blk = r.record["confidence"]["iou=0.50"]
    for k in ("ece", "dece", "mce", "nll", "brier"):
        assert c.table[0][k] == pytest.approx(blk[k].value, abs=1e-15), k
        assert c.table[0][f"{k}_ci"] == pytest.approx(tuple(blk[k].ci), abs=1e-15, nan_ok=True), k


def test_resampled_ap_equals_pycocotools_on_resampled_files(mini: tuple, tmp_path: Path) -> None:
    pytest.importorskip("pycocotools")
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from detcal.metrics.accuracy import coco_ap

    ds, runs = mini
    dets = next(iter(runs.values()))
    picks = image_draws(len(ds.images), 1, 7)[0]
    assert len(np.unique(picks)) < len(picks)  # images drawn more than once
    rd, rds, _ = resample_images(dets, ds, picks)
    ours = coco_ap(rd, rds)
    # the same resample written as files the way a user would copy images: new ids 0..I-1
    gt = json.loads(
        json.dumps(
            {
                "images": [
                    {"id": int(i), "width": float(w), "height": float(h)}
                    for i, w, h in zip(rds.images.id, rds.images.width, rds.images.height)
                ],
                "annotations": [
                    {
                        "id": j + 1,
                        "image_id": int(i),
                        "category_id": int(c),
                        "iscrowd": int(cr),
                        "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                        "area": (b[2] - b[0]) * (b[3] - b[1]),
                    }
                    for j, (i, c, cr, b) in enumerate(
                        zip(rds.gt.image_id, rds.gt.category, rds.gt.iscrowd, rds.gt.box.tolist())
                    )
                ],
                "categories": [{"id": int(k), "name": v} for k, v in rds.categories.items()],
            }
        )
    )
    res = [
        {"image_id": int(i), "category_id": int(c), "score": float(s), "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]}
        for i, c, s, b in zip(rd.image_id, rd.category, rd.score, rd.box.tolist())
    ]
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    with contextlib.redirect_stdout(io.StringIO()):
        g = COCO(str(tmp_path / "gt.json"))
        e = COCOeval(g, g.loadRes(res), "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    assert ours["AP"].value == pytest.approx(e.stats[0], abs=1e-12)
    assert ours["AP50"].value == pytest.approx(e.stats[1], abs=1e-12)
    assert ours["AR100"].value == pytest.approx(e.stats[8], abs=1e-12)


def test_few_resamples_never_mark_and_each_note_once(mini: tuple) -> None:
    """An AP difference from fewer than MIN_MARK_RESAMPLES resamples is not marked (its note says why when
    its interval excludes 0); the Markdown lists each distinct interval note once, with where it applies."""
    from detcal.metrics.paired_ap import MIN_MARK_RESAMPLES
    from detcal.pipeline.compare import markdown

    ds, runs = mini
    c = compare(runs, ds, n_boot=50, seed=0, ap_n_boot=6, ap_jackknife_blocks=3)
    assert MIN_MARK_RESAMPLES > 50
    for d in c.diffs:
        assert d["excludes_zero"] is False, d
        lo, hi = d["ci"]
        if np.isfinite(lo) and (lo > 0 or hi < 0):
            assert f"a mark needs >= {MIN_MARK_RESAMPLES}" in d["ci_note"], d
    md = markdown(c)
    notes = [ln for ln in md.splitlines() if ln.startswith("(")]
    texts = [ln.split(") ", 1)[1].rsplit(" [", 1)[0] for ln in notes]
    assert len(texts) == len(set(texts))
    assert "nan" not in md.split("## By object size")[0].lower().replace("no interval", "")
