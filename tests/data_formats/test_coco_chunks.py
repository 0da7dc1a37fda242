"""Chunked COCO results reading: the chunks concatenate to the whole-file load, errors keep their record index."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.data.coco import load_coco_results
from detcal.data.coco_chunks import iter_coco_results

FIELDS = (
    "image_id",
    "box",
    "score",
    "category",
    "box_std",
    "box_cov",
    "corner_cov",
    "proposal",
    "delta_mean",
    "delta_std",
)


def _records(n: int, seed: int = 0, **extra) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        r = {
            "image_id": int(rng.integers(1, 50)),
            "category_id": int(rng.integers(1, 5)),
            "bbox": [round(float(v), 2) for v in rng.uniform(0, 300, 4)],
            "score": float(rng.random()),
        }
        for k, v in extra.items():
            r[k] = v(i) if callable(v) else v
        out.append(r)
    return out


def _concat(chunks: list) -> dict:
    return {
        f: (None if getattr(chunks[0], f) is None else np.concatenate([getattr(c, f) for c in chunks])) for f in FIELDS
    }


@pytest.mark.parametrize("chunk_bytes", [1, 200, 1000, 5000, 1 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_chunks_concatenate_to_the_whole_file(tmp_path: Path, chunk_bytes: int, indent) -> None:
    recs = _records(
        300,
        bbox_std=lambda i: [1.0, 2.0, 3.0, 4.0 + i],
        note=lambda i: ["}, {", "{\"a\": [1, 2]}, ", "\\\"},", "true"][i % 4],
    )  # braces, commas and quotes in strings
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recs, indent=indent))
    whole = load_coco_results(path)
    chunks = list(iter_coco_results(path, chunk_bytes=chunk_bytes))
    if chunk_bytes <= 5000:
        assert len(chunks) > 1
    got = _concat(chunks)
    for f in FIELDS:
        want = getattr(whole, f)
        if want is None:
            assert got[f] is None, f
        else:
            np.testing.assert_array_equal(got[f], want, err_msg=f)


def test_bom_empty_list_and_dict_form(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b"\xef\xbb\xbf \n[ ]\n")
    assert list(iter_coco_results(path)) == []
    recs = _records(50, seed=3)
    path.write_text(json.dumps({"annotations": recs}))
    chunks = list(iter_coco_results(path, chunk_bytes=2000))
    assert len(chunks) > 1
    np.testing.assert_array_equal(np.concatenate([c.box for c in chunks]), load_coco_results(path).box)


def test_errors_name_the_record_counted_from_the_file_start(tmp_path: Path) -> None:
    recs = _records(200, seed=1)
    recs[157]["score"] = True
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recs))
    with pytest.raises(DetcalInputError) as info:
        list(iter_coco_results(path, chunk_bytes=500))
    assert info.value.record == 157 and info.value.field == "score" and info.value.file == str(path)
    with pytest.raises(DetcalInputError) as whole:
        load_coco_results(path)
    assert whole.value.record == 157


def test_uncertainty_must_not_change_between_chunks(tmp_path: Path) -> None:
    recs = _records(100, seed=2)
    for r in recs[60:]:
        r["bbox_std"] = [1.0, 1.0, 1.0, 1.0]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recs))
    with pytest.raises(DetcalInputError) as info:
        list(iter_coco_results(path, chunk_bytes=300))
    assert info.value.file == str(path)


def test_truncated_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_records(100))[:-40])
    with pytest.raises(DetcalInputError) as info:
        list(iter_coco_results(path, chunk_bytes=1000))
    assert info.value.file == str(path)


def test_memory_is_bounded_by_the_block(tmp_path: Path) -> None:
    """Peak Python allocation while iterating stays a small multiple of the block, far below a whole-file load."""
    import tracemalloc

    path = tmp_path / "r.json"
    path.write_text(json.dumps(_records(20000, seed=4, bbox_std=[1.0, 2.0, 3.0, 4.0])))
    size = path.stat().st_size
    block = 64 << 10

    def peak(fn) -> int:
        tracemalloc.start()
        try:
            fn()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    whole = peak(lambda: load_coco_results(path))
    chunked = peak(lambda: sum(len(c) for c in iter_coco_results(path, chunk_bytes=block)))
    assert size > 40 * block
    # the whole-file load decodes straight into columns (no dict per record), so it is lean too
    assert chunked < 50 * block and 4 * chunked < whole, (chunked, whole, size)
