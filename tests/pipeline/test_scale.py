"""Bounded-memory and sharded evaluation (docs/scale.md) change no number: results read in
chunks (data.chunk_bytes), matching in image shards (parallel.shard_size), and each rank reading
only its image shard under torchrun give metrics.json bitwise equal to loading whole in one process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_parallel import THRESHOLDS, _text  # metrics.json text without timing and provenance

import detcal
from detcal.core.errors import DetcalInputError
from detcal.pipeline import sources
from detcal.pipeline.parallel import match_in_shards
from detcal.pipeline.sources import load_coco, shard_image_ids
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec, ParallelSpec


def _spec(n_boot: int = 0, **par: object) -> EvaluationSpec:
    return EvaluationSpec(
        matching=MatchingSpec(iou_thresholds=THRESHOLDS),
        bootstrap=BootstrapSpec(n=n_boot),
        parallel=ParallelSpec(**par),
    )


def _data(coco: DataSpec, **kw: object) -> DataSpec:
    return DataSpec(source="coco", gt=coco.gt, results=coco.results, **kw)


def _records(coco: DataSpec) -> list[dict]:
    return json.loads(Path(str(coco.results)).read_text())


def test_chunked_reading_and_shard_matching_equal_the_whole_load_bitwise(coco: DataSpec) -> None:
    whole = detcal.evaluate(_data(coco, chunk_bytes=0), spec=_spec(n_boot=10, shard_size=0))
    chunked = detcal.evaluate(_data(coco, chunk_bytes=3000), spec=_spec(n_boot=10, shard_size=300))
    assert len(whole.data.detections) > 700  # several chunks and several match shards
    assert _text(chunked) == _text(whole)
    for name in ("matched", "ignored", "gt_index", "iou", "considered"):
        assert np.array_equal(getattr(chunked.match, name), getattr(whole.match, name)), name
    assert chunked.match.gt_index.dtype == np.int32  # compact GT rows in the sharded matcher
    for f in ("image_id", "box", "score", "category", "delta_mean", "delta_std", "proposal"):
        assert np.array_equal(getattr(chunked.data.detections, f), getattr(whole.data.detections, f)), f


def test_two_workers_with_chunks_and_small_shards_equal_one_process_bitwise(coco: DataSpec) -> None:
    one = detcal.evaluate(_data(coco, chunk_bytes=0), spec=_spec(n_boot=10, shard_size=0))
    two = detcal.evaluate(_data(coco, chunk_bytes=2500), spec=_spec(n_boot=10, workers=2, shard_size=120))
    assert _text(two) == _text(one)
    assert np.array_equal(two.match.gt_index, one.match.gt_index)


def test_evaluate_app_with_tiny_chunks_writes_the_same_metrics_json(coco: DataSpec, tmp_path: Path) -> None:
    args = [
        "data=coco",
        f"data.gt={coco.gt}",
        f"data.results={coco.results}",
        "matching.iou_thresholds=[0.5,0.75]",
        "bootstrap.n=0",
        "output.plots=false",
        "output.print_summary=false",
        "output.detections_csv=false",
    ]
    for name, extra in (
        ("whole", ["data.chunk_bytes=0"]),
        ("chunked", ["data.chunk_bytes=700", "parallel.shard_size=50"]),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "detcal.apps.evaluate", *args, *extra, f"hydra.run.dir={tmp_path / name}"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("whole", "chunked"))
    numbers = (
        "data",
        "matching",
        "detections",
        "features",
        "headline",
        "confidence",
        "dece_maps",
        "regression",
        "accuracy",
        "localisation",
        "per_class",
        "warnings",
    )
    assert a["headline"]["ece"]["value"] is not None
    assert {k: a[k] for k in numbers} == {k: b[k] for k in numbers}


def test_large_files_are_read_in_chunks_automatically(coco: DataSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    import detcal.data.coco_chunks as cc

    calls = []
    real, real_columns = cc.iter_coco_results, cc.read_result_columns

    def spy(*a: object, **k: object):
        calls.append(a[2] if len(a) > 2 else k.get("chunk_bytes"))
        return real(*a, **k)

    def spy_columns(path: object, chunk_bytes: int):  # the usual file's block reader (issue 29r)
        calls.append(chunk_bytes)
        return real_columns(path, chunk_bytes)

    monkeypatch.setattr(cc, "iter_coco_results", spy)
    monkeypatch.setattr(cc, "read_result_columns", spy_columns)
    load_coco(coco.gt, coco.results)
    assert calls == []  # a small file is read whole
    from detcal.data import coco_source  # the COCO adapter owns the threshold (sources re-exports it)

    monkeypatch.setattr(coco_source, "AUTO_CHUNK_ABOVE", 1000)
    chunked = load_coco(coco.gt, coco.results)
    assert calls == [sources.AUTO_CHUNK_BYTES]
    whole = load_coco(coco.gt, coco.results, chunk_bytes=0)
    assert len(calls) == 1 and np.array_equal(chunked.detections.box, whole.detections.box)


def test_each_shard_holds_its_images_and_the_shards_make_the_whole(coco: DataSpec) -> None:
    whole = load_coco(coco.gt, coco.results, chunk_bytes=0)
    seen = []
    for rank in range(3):
        part = load_coco(coco.gt, coco.results, chunk_bytes=2000, shard=(rank, 3))
        mine = shard_image_ids(part.dataset, rank, 3)
        assert np.isin(part.detections.image_id, mine).all()
        assert np.array_equal(part.detections.score, whole.detections.score[part.shard])
        assert np.array_equal(part.detections.box, whole.detections.box[part.shard])
        seen.append(part.shard)
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(len(whole.detections)))


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


def test_errors_and_dropped_counts_are_those_of_the_whole_load(coco: DataSpec, tmp_path: Path) -> None:
    recs = _records(coco)
    cats = recs[5]["category_id"]
    bad_cat = [dict(r, category_id=999) if i in (40, 300) else r for i, r in enumerate(recs)]
    p = _write(tmp_path / "cat.json", bad_cat)
    whole = load_coco(coco.gt, p, chunk_bytes=0)
    for kw in ({"chunk_bytes": 1500}, {"chunk_bytes": 1500, "shard": (1, 2)}):
        got = load_coco(coco.gt, p, **kw)
        assert got.dropped == whole.dropped == {"unknown_category": 2}
    for kw in ({"chunk_bytes": 0}, {"chunk_bytes": 1500}, {"chunk_bytes": 1500, "shard": (0, 2)}):
        with pytest.raises(DetcalInputError) as e:
            load_coco(coco.gt, p, "error", **kw)
        assert e.value.record == 40 and e.value.field == "category_id"
    # an unknown image id after an unknown category: the image id is reported, as when loading whole
    both = [dict(r, image_id=10**9) if i == 600 else r for i, r in enumerate(bad_cat)]
    q = _write(tmp_path / "img.json", both)
    for kw in ({"chunk_bytes": 0}, {"chunk_bytes": 1500}, {"chunk_bytes": 1500, "shard": (1, 2)}):
        with pytest.raises(DetcalInputError) as e:
            load_coco(coco.gt, q, "error", **kw)
        assert e.value.record == 600 and e.value.field == "image_id", kw
    assert cats is not None


def test_match_in_shards_equals_one_call(coco: DataSpec) -> None:
    from detcal.pipeline.matcher import run_match

    data = load_coco(coco.gt, coco.results)
    m = MatchingSpec(iou_thresholds=THRESHOLDS)
    one = run_match(m, data.detections, data)
    for size in (1, 97, 10**9):
        got = match_in_shards(m, data.detections, data, None, size)
        for name in ("matched", "ignored", "gt_index", "iou", "considered"):
            assert np.array_equal(getattr(got, name), getattr(one, name)), (size, name)


def test_match_in_shards_equals_one_call_in_any_row_order(coco: DataSpec) -> None:
    """Shards are contiguous row runs when the results list the images in order (selected and put back as
    slices) and scattered rows otherwise: both give the one-call match."""
    from detcal.pipeline.matcher import run_match
    from detcal.pipeline.parallel import image_shards

    data = load_coco(coco.gt, coco.results)
    m = MatchingSpec(iou_thresholds=THRESHOLDS)
    shuffled = data.detections.select(np.random.default_rng(0).permutation(len(data.detections)))
    for dets in (data.detections, shuffled):
        one = run_match(m, dets, data)
        for size in (1, 97):
            got = match_in_shards(m, dets, data, None, size)
            for name in ("matched", "ignored", "gt_index", "iou", "considered"):
                assert np.array_equal(getattr(got, name), getattr(one, name)), (size, name)
    runs = [bool(np.all(np.diff(r) == 1)) for r in image_shards(data.detections.image_id, 5)]
    assert all(runs)  # the bundled results list the images in order: the slice path is taken
    assert not any(bool(np.all(np.diff(r) == 1)) for r in image_shards(shuffled.image_id, 5))


def test_config_keys_are_checked() -> None:
    from detcal.pipeline.spec import ConfigError

    with pytest.raises(ConfigError, match="data.chunk_bytes"):
        DataSpec(source="coco", chunk_bytes=-1)
    with pytest.raises(ConfigError, match="parallel.shard_size"):
        ParallelSpec(shard_size=-5)


SCRIPT = """
import sys, json
import numpy as np
import detcal
from detcal.pipeline.evaluation import as_loaded
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec, ParallelSpec
from detcal.pipeline.parallel import distributed_rank, distributed_world
from detcal.reports import results_json
rank, world = distributed_rank(), distributed_world()
data = DataSpec(source="coco", gt=sys.argv[1], results=sys.argv[3], chunk_bytes=int(sys.argv[4]))
mine = as_loaded(data, shard=(rank, world))
open(sys.argv[2] + f".rank{rank}", "w").write(json.dumps({"rows": mine.shard.tolist(),
                                                          "images": np.unique(mine.detections.image_id).tolist()}))
spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=%r), bootstrap=BootstrapSpec(n=15),
                      parallel=ParallelSpec(distributed=True, shard_size=int(sys.argv[5])))
res = detcal.evaluate(data, spec=spec)
if rank == 0:
    d = res.to_dict()
    for k in ("created", "timing_s", "spec"):
        d.pop(k, None)
    open(sys.argv[2], "w").write(results_json.dumps(d))
""" % (THRESHOLDS,)  # noqa: UP031  (a script text with braces of its own)


@pytest.mark.slow
@pytest.mark.parametrize("empty_rank", [False, True])
def test_two_gloo_ranks_each_reading_its_shard_equal_one_process_bitwise(
    coco: DataSpec, tmp_path: Path, empty_rank: bool
) -> None:
    """Each rank keeps only its image shard of the results; bootstrap intervals and every number of
    metrics.json equal one process loading whole (also when one rank's shard holds no detection)."""
    pytest.importorskip("torch")
    results = Path(str(coco.results))
    if empty_rank:  # only the first half of the images have detections: rank 1 reads none
        recs = _records(coco)
        results = _write(tmp_path / "half.json", [r for r in recs if r["image_id"] <= 70])
    data = _data(coco, chunk_bytes=0)
    data.results = str(results)
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "rank0.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={29541 + empty_rank}",
            str(script),
            str(coco.gt),
            str(out),
            str(results),
            "4000",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = detcal.evaluate(data, spec=_spec(n_boot=15, shard_size=0))
    assert out.read_text() == _text(one)
    assert '"ci"' in out.read_text() and one.headline["ece"]["ci"] is not None  # bootstrap intervals present
    parts = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(2)]
    assert not set(parts[0]["images"]) & set(parts[1]["images"])
    assert 0 < len(parts[0]["rows"]) <= len(one.data.detections)
    assert (len(parts[1]["rows"]) == 0) == empty_rank
    assert sorted(parts[0]["rows"] + parts[1]["rows"]) == list(range(len(one.data.detections)))
