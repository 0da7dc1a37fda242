"""The writers' shortcuts of issue 29's eleventh pass give what the plain loops gave.

- The confusion heat map of report.html and its most frequent confusions read the filled cells of the matrix
  (numpy) instead of every cell: the same SVG and table, byte for byte, as the cell-by-cell loops (kept here
  as the reference), for small, large, sparse, boolean and malformed matrices.
- The per-class figure's panels rank the classes by a table of the ids when the ids are small, and take each
  class's count from its curve's bins: the same curves and titles as a binary search and a pass per class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from detcal.reports.detections_csv import matched_gt_ids
from detcal.reports.html import diagnosis
from detcal.reports.html.fmt import esc, num_attr
from detcal.reports.per_class import class_reliability_curves, per_class_panels, reliability_curve


def _reference_svg(matrix: Sequence[Sequence[Any]], labels: Sequence[str], title: str) -> str:
    """The heat map as every cell was read before the pass."""
    n = len(matrix)
    if n == 0:
        return ""
    keep = [i for i in range(n) if any(matrix[i]) or any(matrix[r][i] for r in range(n)) or i == n - 1]
    vmax = max((v for r in matrix for v in r), default=1) or 1
    cs = max(4.0, min(16.0, 480 / max(len(keep), 1)))
    size = cs * len(keep)
    lab = 110 if cs >= 8 else 6
    out = [
        f'<svg class="fig" role="img" viewBox="0 0 {lab + size + 20} {lab + size + 20}" '
        f'width="{lab + size + 20}" height="{lab + size + 20}"><title>{esc(title)}</title>'
    ]
    for a, i in enumerate(keep):
        y = lab + a * cs
        if cs >= 8:
            out.append(
                f'<text x="{lab - 3}" y="{y + cs - 2:.1f}" class="tick" text-anchor="end">{esc(labels[i])}</text>'
            )
            xx = lab + a * cs + cs - 2
            out.append(
                f'<text x="{xx:.1f}" y="{lab - 3}" class="tick" transform="rotate(-90 {xx:.1f} {lab - 3})">'
                f"{esc(labels[i])}</text>"
            )
        for b, j in enumerate(keep):
            v = matrix[i][j]
            if not v:
                continue
            t = math.log1p(v) / math.log1p(vmax)
            fill = (
                f"rgb({int(255 * (1 - t))},{int(255 * (1 - 0.6 * t))},255)"
                if i != j
                else f"rgb(0,{int(90 + 80 * (1 - t))},0)"
            )
            out.append(
                f'<rect x="{lab + b * cs:.1f}" y="{y:.1f}" width="{cs:.1f}" height="{cs:.1f}" fill="{fill}" '
                f'class="cellr"{num_attr(v)}><title>true {esc(labels[i])}, predicted {esc(labels[j])}: {v}</title></rect>'
            )
    out.append(f'<rect x="{lab}" y="{lab}" width="{size:.1f}" height="{size:.1f}" class="frame nofill"/>')
    out.append("</svg>")
    return "".join(out)


def _matrix(n: int, fill: float, seed: int, empty: Sequence[int] = ()) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    m = np.where(rng.random((n, n)) < fill, rng.integers(1, 5000, (n, n)), 0)
    m[list(empty), :] = 0
    m[:, list(empty)] = 0
    return m.tolist()


@pytest.mark.parametrize(
    "n, fill, empty",
    [(1, 1.0, ()), (5, 0.5, (2,)), (9, 0.9, (0, 8)), (30, 0.1, (3, 4, 5)), (366, 0.06, (7, 100, 365)), (4, 0.0, ())],
)
def test_heat_map_equals_the_cell_by_cell_map(n: int, fill: float, empty: Sequence[int]) -> None:
    matrix = _matrix(n, fill, n, empty)
    labels = [f"class <{k}> & 'x'" for k in range(n - 1)] + ["background"]
    assert diagnosis.confusion_svg(matrix, labels, "t") == _reference_svg(matrix, labels, "t")


def test_heat_map_of_matrices_that_are_not_integer_arrays() -> None:
    labels = ["a", "b", "background"]
    for matrix in (
        [[True, False, False], [False, False, True], [False, False, False]],  # booleans: read as an array
        [[0.5, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 1.5, 0.0]],  # floats: read cell by cell
        [[1, 0, 0], [0, 2, 0], [0, 0, 0]],
    ):
        assert diagnosis.confusion_svg(matrix, labels, "t") == _reference_svg(matrix, labels, "t")
    ragged: list[list[Any]] = [[1, 0], [0, 2, 0], [0, 0, 3]]  # not square: read cell by cell, as before
    with pytest.raises(IndexError):
        _reference_svg(ragged, labels, "t")
    with pytest.raises(IndexError):
        diagnosis.confusion_svg(ragged, labels, "t")
    assert diagnosis.confusion_svg([], [], "t") == ""


@pytest.mark.parametrize("n, fill", [(3, 1.0), (12, 0.3), (366, 0.06), (5, 0.0)])
def test_most_frequent_confusions_equal_every_cell_read(n: int, fill: float) -> None:
    mat = _matrix(n, fill, 7 * n)
    k = n - 1
    want = sorted(((mat[i][j], i, j) for i in range(k) for j in range(k) if i != j and mat[i][j]), reverse=True)
    arr = diagnosis._count_matrix(mat)
    assert arr is not None
    assert diagnosis._confusions(mat, arr, k) == want
    assert diagnosis._confusions(mat, None, k) == want


def test_confusion_section_equals_the_reference_table() -> None:
    mat = _matrix(40, 0.2, 5)
    c = {
        "categories": list(range(1, 40)),
        "matrix": mat,
        "n_matched": 1,
        "n_matched_other_class": 2,
        "n_background_detections": 3,
        "n_missed_boxes": 4,
        "iou": 0.5,
        "score_threshold": 0.05,
    }
    got = diagnosis._confusion(c, {})
    labels = [str(k) for k in c["categories"]] + ["background"]
    assert _reference_svg(mat, labels, "confusion matrix") in got
    pairs = sorted(((mat[i][j], i, j) for i in range(39) for j in range(39) if i != j and mat[i][j]), reverse=True)
    first = pairs[0]
    assert f"<td>{labels[first[1]]}</td><td>{labels[first[2]]}</td>" in got


def _reference_curves(p: np.ndarray, y: np.ndarray, cat: np.ndarray, classes: np.ndarray, bins: int) -> list:
    """Each class's own curve, the definition the one-pass curves must meet."""
    return [reliability_curve(p[cat == c], y[cat == c], bins) for c in classes]


@pytest.mark.parametrize(
    "ids",
    [
        np.array([0, 1, 2, 3, 7, 364]),  # small ids: the table
        np.array([5, 10**9, 3]),  # one huge id: the binary search
        np.array([-4, 0, 6]),  # a negative id: the binary search
    ],
)
def test_class_ranks_by_table_and_by_search_give_the_same_curves(ids: np.ndarray) -> None:
    rng = np.random.default_rng(11)
    n = 4000
    cat = rng.choice(ids, n)
    p = rng.random(n)
    y = (rng.random(n) < p).astype(float)
    classes = np.concatenate([ids[::-1], [99_999_999, -1]])  # any order, two without a sample
    got = class_reliability_curves(p, y, cat, classes, 15)
    for curve, want in zip(got, _reference_curves(p, y, cat, classes, 15)):
        for key in want:
            np.testing.assert_array_equal(curve[key], want[key])


def test_repeated_class_ids_keep_the_first() -> None:
    cat = np.array([1, 2, 2, 3])
    p = np.array([0.1, 0.5, 0.9, 0.3])
    y = np.array([0.0, 1.0, 1.0, 0.0])
    got = class_reliability_curves(p, y, cat, np.array([2, 1, 2]), 4)
    assert got[0]["n"].sum() == 2 and got[1]["n"].sum() == 1 and got[2]["n"].sum() == 0


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_panel_titles_count_each_class() -> None:
    rng = np.random.default_rng(2)
    cat = rng.choice(np.array([1, 4, 9, 40]), 3000, p=[0.4, 0.3, 0.2, 0.1])
    p = rng.random(3000)
    p[:5] = np.nan  # a sample without a finite score still counts in its class (the first bin)
    y = rng.random(3000) < 0.5
    panels = per_class_panels({"a": (p, y, cat)}, {1: "one", 4: "four"}, top_n=3)
    assert panels.titles == [f"{name} (n={int((cat == c).sum())})" for c, name in [(1, "one"), (4, "four"), (9, "9")]]


def _reference_gt_ids(gi: np.ndarray, gt_ids: np.ndarray) -> np.ndarray:
    return np.where(gi >= 0, gt_ids[np.maximum(gi, 0)] if len(gt_ids) else -1, -1).astype(np.int64)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_matched_gt_ids_equal_the_masked_gather(dtype: type) -> None:
    rng = np.random.default_rng(4)
    gt_ids = rng.integers(1, 10**12, 100)
    gi = np.where(rng.random(5000) < 0.4, -1, rng.integers(0, 100, 5000)).astype(dtype)
    for case in (gi, gi[:0], np.full(7, -1, dtype), np.where(gi == 3, -5, gi).astype(dtype)):  # -5: the masked path
        got = matched_gt_ids(case, gt_ids)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, _reference_gt_ids(case, gt_ids))
    np.testing.assert_array_equal(matched_gt_ids(np.full(3, -1, dtype), gt_ids[:0]), [-1, -1, -1])
    with pytest.raises(IndexError):  # a row past the ground truths, as the masked gather
        matched_gt_ids(np.array([0, 100], dtype), gt_ids)
    with pytest.raises(IndexError):
        _reference_gt_ids(np.array([0, 100], dtype), gt_ids)


def test_the_figure_process_gets_what_the_figures_read(tmp_path) -> None:
    """The figures drawn from :func:`figure_inputs` (what a figure process is sent) are the figures of the
    whole metrics, byte for byte, and the inputs leave out the intervals' tables."""
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec
    from detcal.reports.evaluation_plots import evaluation_plots, figure_inputs

    res = detcal.evaluate(DataSpec(n_images=40), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)), workdir=tmp_path)
    m = res.plain()
    slim = figure_inputs(m)
    assert set(slim) <= {"confidence", "dece_maps", "regression"}
    assert all(set(b) <= {"ece", "dece"} for b in slim["confidence"].values())
    names = evaluation_plots(tmp_path / "full", m, res.spec)
    assert names and names == evaluation_plots(tmp_path / "slim", slim, res.spec)
    for name in names:
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "slim" / name).read_bytes(), name
