"""Strict KITTI text: BOM, ASCII-only separators, frame names, number syntax, writer leftovers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections
from detcal.data.kitti import load_kitti_labels, load_kitti_results, write_kitti_results
from detcal.data.kitti_write import remove_stale_temporaries

LABEL = "Car 0.00 0 -1.58 587.01 173.33 614.12 200.12 1.65 1.67 3.64 -0.65 1.71 46.70 -1.59"
RESULT = LABEL + " 0.87"


def _dir(tmp_path: Path, files: dict[str, bytes | str]) -> Path:
    d = tmp_path / "label_2"
    d.mkdir(exist_ok=True)
    for name, content in files.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return d


def _err(fn, *args, **kw) -> DetcalInputError:
    with pytest.raises(DetcalInputError) as info:
        fn(*args, **kw)
    return info.value


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"000000.txt": b"\xef\xbb\xbf" + (LABEL + "\n" + LABEL + "\n").encode()})
    ds = load_kitti_labels(d)
    np.testing.assert_array_equal(ds.gt.box, [[587.01, 173.33, 614.12, 200.12]] * 2)
    assert ds.gt.category.tolist() == [1, 1]


def test_crlf_and_tabs_are_ascii_whitespace(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"000003.txt": LABEL.replace(" ", "\t", 3) + "\r\n" + LABEL + "\r\n"})
    ds = load_kitti_labels(d)
    assert len(ds.gt) == 2 and ds.gt.image_id.tolist() == [3, 3]


@pytest.mark.parametrize(
    "sep, code, column",
    [("\u00a0", "U+00A0", "truncated"), ("\u2028", "U+2028", "truncated"), ("\u3000", "U+3000", "truncated")],
)
def test_non_ascii_whitespace_is_an_error(tmp_path: Path, sep: str, code: str, column: str) -> None:
    # the separator replaces the space after the truncation column: it ends the "truncated" token
    line = LABEL.replace(" ", sep, 2).replace(sep, " ", 1)
    d = _dir(tmp_path, {"000000.txt": LABEL + "\n" + line + "\n"})
    err = _err(load_kitti_labels, d)
    assert err.file == str(d / "000000.txt") and err.record == "line 2", str(err)
    assert code in str(err)
    assert err.field == column


def test_non_ascii_digit_is_an_error(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL.replace("587.01", "58\u0667.01") + "\n"})
    err = _err(load_kitti_labels, d)
    assert err.record == "line 1" and err.field == "left" and "U+0667" in str(err)


@pytest.mark.parametrize("name", ["99999999999999999999.txt", "\u00b2.txt", "\u0661\u0662.txt", "12a.txt"])
def test_bad_frame_names_are_errors(tmp_path: Path, name: str) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL + "\n", name: LABEL + "\n"})
    err = _err(load_kitti_labels, d)
    assert err.file == str(d / name) and err.field == "frame"


def test_largest_frame_number_loads(tmp_path: Path) -> None:
    d = _dir(tmp_path, {f"{2**63 - 1}.txt": LABEL + "\n"})
    assert load_kitti_labels(d).images.id.tolist() == [2**63 - 1]


@pytest.mark.parametrize(
    "token, field", [("1_0", "left"), ("0x10", "left"), ("1e31", "left"), ("nan", "left"), ("-inf", "left")]
)
def test_number_syntax_and_range(tmp_path: Path, token: str, field: str) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL + "\n" + LABEL.replace("587.01", token) + "\n"})
    err = _err(load_kitti_labels, d)
    assert err.record == "line 2" and err.field == field and token in str(err)


def test_underscore_in_type_names_is_fine(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL.replace("Car", "Person_sitting") + "\n"})
    assert load_kitti_labels(d).gt.category.tolist() == [5]


def test_sizes_file_and_frame_list_with_bom(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL + "\n", "000001.txt": ""})
    sizes = tmp_path / "sizes.txt"
    sizes.write_bytes(b"\xef\xbb\xbf000000 1242 375\n000001 1224 370\n")
    frames = tmp_path / "val.txt"
    frames.write_bytes(b"\xef\xbb\xbf000001\n")
    ds = load_kitti_labels(d, sizes=sizes)
    assert ds.images.width.tolist() == [1242, 1224]
    ds = load_kitti_labels(d, sizes=sizes, image_ids=frames)
    assert ds.images.id.tolist() == [1]
    sizes.write_text("\u00b2 1242 375\n")
    assert _err(load_kitti_labels, d, sizes=sizes).field == "frame"


def test_not_utf8_is_an_error(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL.encode() + b"\xff\n"})
    err = _err(load_kitti_labels, d)
    assert err.file == str(d / "000000.txt") and err.record == f"byte {len(LABEL)}"


def test_writer_removes_leftover_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "res"
    out.mkdir()
    left = [".000000.txt.abc123_x.tmp", ".000007.txt.k9q0.tmp"]
    for name in left:
        (out / name).write_text("half a line")
    keep = [".hidden", "notes.tmp", ".other.json.x.tmp"]
    for name in keep:
        (out / name).write_text("user file")
    dets = Detections(image_id=[0, 0], box=[[0, 0, 10, 10], [1, 1, 5, 5]], score=[0.5, 0.25], category=[1, 2])
    write_kitti_results(out, dets)
    names = sorted(os.listdir(out))
    assert names == sorted(keep + ["000000.txt"])
    back = load_kitti_results(out)
    np.testing.assert_array_equal(back.score, [0.5, 0.25])
    assert remove_stale_temporaries(out) == []
    assert remove_stale_temporaries(tmp_path / "missing") == []


@pytest.mark.parametrize(
    "line, field",
    [
        ("000000 1_242 375", "width"),
        ("000000 1242 nan", "height"),
        ("000000\u00a01242 375", "frame"),
        ("000000 0x10 375", "width"),
    ],
)
def test_sizes_file_numbers_are_strict(tmp_path: Path, line: str, field: str) -> None:
    d = _dir(tmp_path, {"000000.txt": LABEL + "\n"})
    sizes = tmp_path / "sizes.txt"
    sizes.write_text(line + "\n", encoding="utf-8")
    err = _err(load_kitti_labels, d, sizes=sizes)
    assert err.file == str(sizes) and err.record == "line 1" and err.field == field, str(err)
